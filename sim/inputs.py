"""Files a user gives, checked for size and shape before they are parsed, so that a hostile or
damaged file costs a few milliseconds and one line, never gigabytes or a traceback.

- JSON (`parse_json`, `read_json`): at most the caller's byte limit, and at most
  MAX_JSON_NESTING levels of arrays and objects, both checked on the raw bytes before
  `json.loads` builds anything. Every JSON reader of ringsim goes through it: profiles, GPU
  profiles, bench results, validation reports, traces and their archives' headers.
- NumPy archives (`checked_npz_members`): the zip directory is read first (no member is
  inflated), each member's claimed size held against the archive's size (deflate cannot
  inflate more than about 1032:1) and an absolute cap, then each `.npy` header against the
  bytes its member really holds: a header that claims 10^11 entries is refused before
  NumPy allocates them.
- Sweep specs (`parse_spec_text`): a size cap, and YAML or TOML nesting bounded as JSON's.

docs/reliability.md lists the limits and why each is what it is.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from typing import Any

import numpy as np

from sim.errors import RingsimError
from sim.files import read_bytes

MAX_JSON_NESTING = 64
"""Arrays and objects nested deeper than this are refused: ringsim's own files nest at most
about 8 levels (a calibration report's fits), and Python's parser recurses once per level."""
MAX_ZIP_RATIO = 1100
"""The largest uncompressed / compressed size a member of an archive may claim: deflate's
own limit is about 1032:1 (a run of one byte repeated), so a larger claim is a lie about the
size or not deflate; stored members are 1:1."""
MAX_SPEC_BYTES = 1 << 20
"""A sweep spec is a page of options: a megabyte is thousands of lines."""
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPENS, _CLOSES = b"[{", b"]}"
_BRACKETS = bytes(range(256)).translate(None, _OPENS + _CLOSES)


def nesting_depth(data: bytes, *, strings: re.Pattern[bytes] = _JSON_STRING) -> int:
    """The deepest nesting of brackets ([ and {) in `data` outside its string literals, in
    C-speed passes (strings removed, every other byte removed, a running sum in NumPy)."""
    brackets = strings.sub(b"", data).translate(None, _BRACKETS)
    if not brackets:
        return 0
    steps = np.frombuffer(brackets, dtype=np.uint8)
    depth = np.cumsum(np.where((steps == ord("[")) | (steps == ord("{")), 1, -1), dtype=np.int64)
    return int(depth.max())


def parse_json(data: bytes | str, *, what: str = "file", max_bytes: int | None = None) -> Any:
    """JSON from bytes or text, after the size and nesting checks; RingsimError on any flaw."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if max_bytes is not None and len(raw) > max_bytes:
        raise RingsimError(f"{what}: {len(raw):,} bytes is over the {max_bytes:,}-byte limit")
    depth = nesting_depth(raw)
    if depth > MAX_JSON_NESTING:
        raise RingsimError(f"{what}: not valid JSON for ringsim: nested {depth} levels deep, more than the "
                           f"{MAX_JSON_NESTING} a ringsim file has")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise RingsimError(f"{what}: not valid JSON ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None


def read_json(path: str | os.PathLike, *, what: str = "file", max_bytes: int) -> Any:
    """A JSON file read within `max_bytes` and parsed by parse_json; RingsimError naming the
    file on any flaw."""
    data = read_bytes(path, what=what, max_bytes=max_bytes)
    try:
        return parse_json(data, what=f"{what} {path}")
    except RingsimError as e:
        raise RingsimError(f"cannot read {e}") from None


def checked_npz_members(z: zipfile.ZipFile, archive_bytes: int, *, max_bytes: int,
                        max_members: int = 64) -> dict[str, zipfile.ZipInfo]:
    """The members of an open archive by name, once its directory passes: at most
    `max_members` members, their claimed sizes summing to at most `max_bytes`, none
    claiming more than MAX_ZIP_RATIO times its compressed size, and the compressed sizes
    together no larger than the archive. Nothing is inflated."""
    infos = z.infolist()
    if len(infos) > max_members:
        raise RingsimError(f"archive has {len(infos):,} members, more than {max_members}")
    total = 0
    packed = 0
    for i in infos:
        total += i.file_size
        packed += i.compress_size
        if i.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise RingsimError(f"archive member {i.filename}: compression {i.compress_type} is not deflate")
        if i.file_size > MAX_ZIP_RATIO * max(i.compress_size, 1):
            raise RingsimError(f"archive member {i.filename} claims {i.file_size:,} bytes from {i.compress_size:,}: "
                               f"more than deflate's {MAX_ZIP_RATIO}:1 (a zip bomb or a damaged archive)")
    if total > max_bytes:
        raise RingsimError(f"archive unpacks to more than {max_bytes:,} bytes ({total:,} claimed)")
    if packed > archive_bytes:
        raise RingsimError(f"archive members claim {packed:,} compressed bytes in a {archive_bytes:,}-byte file")
    return {i.filename: i for i in infos}


def read_npy_member(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One `.npy` member: its header read first and the array it claims (shape x item size)
    held against the bytes the member holds after the header; only then the data."""
    with z.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"npy version {version}")
        except (ValueError, EOFError, OSError) as e:
            raise RingsimError(f"archive member {info.filename}: not a readable .npy header ({e})") from None
        if dtype.hasobject:
            raise RingsimError(f"archive member {info.filename}: damaged: Object arrays cannot be loaded (Python objects)")
        claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
        header = f.tell()
        if claimed != info.file_size - header:
            raise RingsimError(f"archive member {info.filename}: its header claims {claimed:,} bytes of data, "
                               f"the member holds {info.file_size - header:,}")
        data = bytearray(claimed)          # writable, as np.load's arrays are
        got = 0
        view = memoryview(data)
        while got < claimed:
            n = f.readinto(view[got:])
            if not n:
                break
            got += n
    if got != claimed:
        raise RingsimError(f"archive member {info.filename}: ends after {got:,} of {claimed:,} bytes")
    arr = np.frombuffer(data, dtype=dtype)
    return arr.reshape(shape, order="F" if fortran else "C")


_YAML_FLOW = re.compile(rb"'(?:[^']|'')*'|\"(?:[^\"\\]|\\.)*\"|#[^\n]*", re.DOTALL)


def parse_spec_text(data: bytes, ext: str, path: str) -> Any:
    """A sweep spec's mapping from its file's bytes (.toml, or .yaml / .yml): at most
    MAX_SPEC_BYTES, its brackets nested at most MAX_JSON_NESTING deep, and its indentation
    (YAML's block nesting) at most that many levels, before the parser runs."""
    if len(data) > MAX_SPEC_BYTES:
        raise RingsimError(f"sweep spec {path}: {len(data):,} bytes is over the {MAX_SPEC_BYTES:,}-byte limit")
    depth = nesting_depth(data, strings=_YAML_FLOW)
    indents = {len(line) - len(line.lstrip(b" -")) for line in data.splitlines() if line.strip()}
    if depth > MAX_JSON_NESTING or len(indents) > MAX_JSON_NESTING:
        raise RingsimError(f"sweep spec {path}: nested more than {MAX_JSON_NESTING} levels deep")
    if ext == ".toml":
        try:
            import tomllib
        except ModuleNotFoundError:     # Python 3.10
            try:
                import tomli as tomllib  # type: ignore[no-redef]
            except ModuleNotFoundError:
                raise RingsimError("TOML specs need Python 3.11 or the tomli package") from None
        try:
            return tomllib.loads(data.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise RingsimError(f"{path} is not valid TOML: {str(e).splitlines()[0] if str(e) else 'too deep'}") \
                from None
    try:
        import yaml
    except ModuleNotFoundError:
        raise RingsimError("YAML specs need PyYAML: pip install 'ringsim[sweep]' (or write the spec in TOML)") from None
    try:
        return yaml.safe_load(data)
    except (yaml.YAMLError, RecursionError, ValueError) as e:
        raise RingsimError(f"{path} is not valid YAML: {str(e).splitlines()[0] if str(e) else 'too deep'}") from None
