"""Files a user gives or asks for: read whole within a size limit, written whole and
published without a race, and never replaced without being asked. Every failure becomes
one RingsimError.

An output is written to a temporary file in its own folder, then published: without
--force by a hard link to the name (which fails, atomically, when the name exists: of
several processes writing one path exactly one wins, the others are refused), with
--force by a rename over it, only where the name is absent or a regular file (never a
folder, a device, a fifo or a socket, nor a link to one). A command checks its outputs
with `check_output` when it reads its arguments, before any work (docs/design.md,
"Files").
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from contextlib import contextmanager
from typing import IO, Any, Iterator

from sim.errors import RingsimError

MAX_FILE_BYTES = 512 * 1024 * 1024
"""The largest file read whole unless the caller sets its own limit."""

SYSTEM_FOLDERS = ("/dev", "/proc", "/sys")
"""Folders of the kernel's own files: never written into, whatever the permissions say
(root may create a regular file in /dev, and replace a device node by renaming over it)."""

_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS}
"""What link(2) says on a file system without hard links (FAT, some network mounts)."""


def read_bytes(path: str | os.PathLike, *, what: str = "file",
               max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """Read a file whole, turning every I/O failure or an oversized file into one RingsimError."""
    try:
        size = os.path.getsize(path)
        if size > max_bytes:
            raise RingsimError(f"{what} {path}: {size} bytes is over the {max_bytes}-byte limit")
        with open(path, "rb") as f:
            return f.read()
    except RingsimError:
        raise
    except OSError as e:
        raise RingsimError(f"cannot read {what} {path}: {e}") from None


def read_json(path: str | os.PathLike, *, what: str = "file",
              max_bytes: int = MAX_FILE_BYTES) -> Any:
    """Read a JSON file, turning every I/O or parse failure into one RingsimError."""
    data = read_bytes(path, what=what, max_bytes=max_bytes)
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise RingsimError(f"cannot read {what} {path}: {e}") from None


def _not_replaceable(path: str) -> str | None:
    """Why an existing `path` may not be replaced by a regular file (a folder, a device,
    a fifo, a socket, or a link to one), or None (absent, a regular file, a link to one
    or to nothing)."""
    try:
        st = os.stat(path)          # through a link: what it points to
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot write {path}: {e.strerror}"
    if stat.S_ISDIR(st.st_mode):
        return f"{path} is a folder; name a file to write"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file (a device, fifo or socket); ringsim writes only regular files"
    return None


def _in_system_folder(folder: str) -> bool:
    real = os.path.realpath(folder)
    return any(real == d or real.startswith(d + os.sep) for d in SYSTEM_FOLDERS)


def _new_temporary(folder: str, name: str) -> tuple[int, str]:
    """A new file of our own in `folder` (created exclusively, mode as the umask lets a
    new file be), its name ending as `name` does (writers that pick a format by the
    extension, as torch's trace export gzips a .gz): its descriptor and path."""
    for _ in range(100):
        tmp = os.path.join(folder, f".tmp-{os.getpid()}-{secrets.token_hex(4)}-{name}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", folder)


def output_problem(path: str | os.PathLike | None, overwrite: bool = False, *,
                   resumes: bool = False) -> str | None:
    """Why writing `path` would fail or be refused, or None: its folder missing, not
    writable or the kernel's own; the name a folder, a device, a fifo or a socket; or the
    file there without `overwrite` (a command that `resumes` an existing file reads and
    rewrites it, and needs no --force). The folder is tried by creating a file in it."""
    if path is None:
        return None
    p = os.fspath(path)
    if not p.strip():
        return "an output file's name is empty"
    if p.endswith(os.sep):
        return f"{p} names a folder; name a file to write"
    folder = os.path.dirname(os.path.abspath(p))
    if _in_system_folder(folder):
        return f"cannot write {p}: {os.path.realpath(folder)} holds the system's own files"
    if not os.path.isdir(folder):
        return f"cannot write {p}: the folder {folder} does not exist"
    why = _not_replaceable(p)
    if why:
        return why
    if os.path.lexists(p) and not (overwrite or resumes):
        return f"{p} exists; pass --force to overwrite it"
    try:
        fd, tmp = _new_temporary(folder, os.path.basename(p))
    except OSError as e:
        return f"cannot write {p}: {folder} is not writable ({e.strerror})"
    os.close(fd)
    os.unlink(tmp)
    return None


def check_output(path: str | os.PathLike | None, overwrite: bool = False, *, resumes: bool = False) -> None:
    """Refuse, before any work, an output that could not be written (`output_problem`)."""
    why = output_problem(path, overwrite, resumes=resumes)
    if why:
        raise RingsimError(why)


def kept_file(path: str | os.PathLike | None, overwrite: bool) -> str | None:
    """Why writing `path` would be refused, or None (`output_problem`); a command checks
    it before its work, as the write does again at the end."""
    return output_problem(path, overwrite)


def _publish(tmp: str, path: str, overwrite: bool) -> None:
    """Give the whole file `tmp` the name `path`: exclusively, or over a regular file
    with `overwrite`. `tmp` stays for the caller to remove."""
    try:
        os.link(tmp, path)
        return
    except FileExistsError:
        if not overwrite:
            raise RingsimError(f"{path} exists; pass --force to overwrite it") from None
    except OSError as e:
        if e.errno not in _NO_HARD_LINKS:
            raise
        if not overwrite:
            # no hard links here: claim the name exclusively, then move the whole file
            # onto the claim (a reader sees the empty claim or the whole file)
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            except FileExistsError:
                raise RingsimError(f"{path} exists; pass --force to overwrite it") from None
    why = _not_replaceable(path)
    if why:
        raise RingsimError(why)
    os.replace(tmp, path)


@contextmanager
def output_path(path: str | os.PathLike, *, overwrite: bool = False) -> Iterator[str]:
    """A temporary path beside `path` for a writer that takes a path (pyarrow); once the
    block ends without an error the file written there is published as `path`
    (exclusively, or over a regular file with `overwrite`); the temporary file is
    removed whatever happens."""
    p = os.fspath(path)
    check_output(p, overwrite)
    folder = os.path.dirname(os.path.abspath(p))
    try:
        fd, tmp = _new_temporary(folder, os.path.basename(p))
        os.close(fd)
    except OSError as e:
        raise RingsimError(f"cannot write {p}: {e.strerror}") from None
    try:
        yield tmp
        _publish(tmp, p, overwrite)
    except OSError as e:
        raise RingsimError(f"cannot write {p}: {e.strerror or e}") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


@contextmanager
def output_file(path: str | os.PathLike, *, overwrite: bool = False, text: bool = False) -> Iterator[IO]:
    """An open file to write `path` through (binary, or text with `text`), published
    whole when the block ends without an error (`output_path`)."""
    with output_path(path, overwrite=overwrite) as tmp:
        with open(tmp, "w" if text else "wb", **({"newline": ""} if text else {})) as f:
            yield f


def write_bytes(path: str | os.PathLike, data: bytes, *, overwrite: bool = False) -> None:
    """Write a file whole; refuse to replace an existing file unless asked to, and then
    only a regular file."""
    with output_file(path, overwrite=overwrite) as f:
        f.write(data)


def write_text(path: str | os.PathLike, text: str, *, overwrite: bool = False) -> None:
    """Write a text file whole (UTF-8), as `write_bytes`."""
    write_bytes(path, text.encode(), overwrite=overwrite)


def write_json(path: str | os.PathLike, obj: Any, *, overwrite: bool = False) -> None:
    """Write JSON whole; refuse to replace an existing file unless asked to."""
    write_bytes(path, json.dumps(obj, separators=(",", ":"), allow_nan=False).encode(),
                overwrite=overwrite)
