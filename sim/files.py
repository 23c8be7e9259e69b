"""Files a user gives or asks for: read whole within a size limit, written atomically, and
never replaced without being asked. Every failure becomes one RingsimError."""

from __future__ import annotations

import json
import os
from typing import Any

from sim.errors import RingsimError

MAX_FILE_BYTES = 512 * 1024 * 1024
"""The largest file read whole unless the caller sets its own limit."""


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


def kept_file(path: str | os.PathLike | None, overwrite: bool) -> str | None:
    """Why writing `path` would be refused (it exists and replacing it was not asked
    for), or None; a command checks it before its work, as write_bytes does at the end."""
    if path is not None and os.path.exists(path) and not overwrite:
        return f"{path} exists; pass --force to overwrite it"
    return None


def write_bytes(path: str | os.PathLike, data: bytes, *, overwrite: bool = False) -> None:
    """Write a file atomically; refuse to replace an existing file unless asked to."""
    why = kept_file(path, overwrite)
    if why:
        raise RingsimError(why)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise RingsimError(f"cannot write {path}: {e}") from None


def write_json(path: str | os.PathLike, obj: Any, *, overwrite: bool = False) -> None:
    """Write JSON atomically; refuse to replace an existing file unless asked to."""
    write_bytes(path, json.dumps(obj, separators=(",", ":"), allow_nan=False).encode(),
                overwrite=overwrite)
