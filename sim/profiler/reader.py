"""A run as torch.profiler recorded it: Kineto Chrome-trace JSON, one file per rank, read into
one normalized table of events (Events) with the run's ranks, devices and iterations (Run).

Kineto writes one JSON object per rank: `deviceProperties`, `distributedInfo` (rank, world
size, process groups), then `traceEvents`, a list of complete events (`ph` "X") whose `cat`
says what each is: `kernel`, `gpu_memcpy`, `gpu_memset` on a GPU stream (`args.stream`, also
the `tid`), `cpu_op`, `user_annotation` (ProfilerStep#N among them), `cuda_runtime` and
`cuda_driver` on a host thread; `args.correlation` links a launch to its kernel (the `ac2g`
flow says the same), `args["External id"]` a kernel to the operator that issued it. Times are
microseconds after `baseTimeNanoseconds` (absent: after the Unix epoch).

The file is read as a stream (docs/traces.md): gzip is inflated a chunk at a time, a numpy
scan of the chunk's quotes and brackets finds where each event of `traceEvents` ends, and
orjson parses the whole events of the chunk at once; only the columns kept grow with the file.
Ranks' clocks are aligned on their collective kernels (NCCL ends a collective on every rank at
once) and every time is given in seconds from the run's first event.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import orjson

from sim.errors import RingsimError
from sim.profiler.kernels import COMM_KINDS, classify_cpu, classify_gpu, collective_kind, step_number

CHUNK_BYTES = 4 * 1024 * 1024
"""Uncompressed bytes scanned at a time."""

MAX_EVENT_BYTES = 64 * 1024 * 1024
"""The largest single event (or run of header bytes) accepted: a hostile file stops here."""

MAX_HEADER_BYTES = 64 * 1024 * 1024
"""The most bytes kept of what lies outside traceEvents (device properties, distributed info)."""

MAX_WORLD_SIZE = 1 << 20
MAX_TIME_US = 1e17
"""Timestamps beyond this (3,000 years in microseconds) are not a clock's."""

MAX_DUR_US = 1e13
"""Durations beyond this (116 days) are not an event's."""

ALIGN_MIN_S = 1e-3
"""A clock offset estimated from collective kernels is removed when larger than this: below
it, it is within how unevenly a collective ends across ranks."""

ALIGN_STEP_MIN_S = 1.0
"""An offset estimated from ProfilerStep starts (no collective kernels) is removed only above
this: processes of one run start a step milliseconds apart, clocks of two hosts can differ more."""

MIXED_RUN_S = 600.0
"""Ranks whose clocks differ by more than this were not recorded together (different runs)."""

# Kineto's categories, and the older names (Kernel, Memcpy, Runtime, Operator) of torch < 1.10
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "gpu_memset": "gpu_memset",
            "Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
CPU_CATS = {"cpu_op": "cpu_op", "user_annotation": "user_annotation", "cuda_runtime": "cuda_runtime",
            "cuda_driver": "cuda_driver", "Operator": "cpu_op", "Runtime": "cuda_runtime"}

# element sizes of the dtype names record_param_comms writes (c10's ScalarType names)
DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2, "Char": 1,
               "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1,
               "Float8_e5m2fnuz": 1, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4, "UInt16": 2,
               "UInt32": 4, "UInt64": 8}

EVENT_COLUMNS = ("rank", "iteration", "on_gpu", "stream", "name", "cat", "kind", "start_s", "dur_s",
                 "correlation", "external_id", "msg_bytes", "group_size", "dtype", "input_dims", "grid",
                 "block", "launch_start_s", "stream_arg")
_DTYPES = {"rank": np.int32, "iteration": np.int32, "on_gpu": np.bool_, "stream": np.int64, "name": object,
           "cat": object, "kind": object, "start_s": np.float64, "dur_s": np.float64, "correlation": np.int64,
           "external_id": np.int64, "msg_bytes": np.int64, "group_size": np.int32, "dtype": object,
           "input_dims": object, "grid": object, "block": object, "launch_start_s": np.float64,
           "stream_arg": np.int64}


@dataclass(frozen=True)
class Events:
    """The events of a run, one row each, as numpy columns of one length (EVENT_COLUMNS):
    GPU kernels, memcpy and memset (on_gpu, stream the CUDA stream), CPU ops, CUDA runtime and
    driver calls and user annotations (stream the host thread id). Times in seconds from the
    run's aligned origin; -1, "" or NaN where a trace does not say."""

    rank: np.ndarray
    iteration: np.ndarray
    """ProfilerStep number the row belongs to (HTA's rule: a CPU row by its start inside the
    step, a GPU row by its launch's), -1 outside every step."""
    on_gpu: np.ndarray
    stream: np.ndarray
    name: np.ndarray
    cat: np.ndarray
    kind: np.ndarray
    """sim.profiler.kernels.GPU_KINDS for GPU rows, CPU_KINDS for CPU rows."""
    start_s: np.ndarray
    dur_s: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    msg_bytes: np.ndarray
    """Bytes of a communication's buffer: max(In, Out msg nelems) x the dtype's size, from
    record_param_comms or the kernel's own args (a GPU collective without its own takes its
    operator's, by External id); -1 unknown."""
    group_size: np.ndarray
    dtype: np.ndarray
    input_dims: np.ndarray
    """JSON of the op's "Input Dims" (record_shapes=True), else ""."""
    grid: np.ndarray
    block: np.ndarray
    launch_start_s: np.ndarray
    """For a GPU row, the start of the runtime call that launched it (by correlation), else NaN."""
    stream_arg: np.ndarray
    """The row's `stream` argument: a GPU row's stream, or on a host operator the stream
    Inductor's Triton launch records (which HTA counts as a GPU event), else -1."""

    def __len__(self) -> int:
        return len(self.start_s)

    def take(self, rows) -> "Events":
        """The rows `rows` (a boolean mask or indices) as Events."""
        return Events(**{c: getattr(self, c)[rows] for c in EVENT_COLUMNS})

    def launch_of(self, rows) -> np.ndarray:
        """Each given row's CPU launch start (seconds; NaN when none)."""
        return self.launch_start_s[rows]

    @property
    def end_s(self) -> np.ndarray:
        return self.start_s + self.dur_s


@dataclass(frozen=True)
class Run:
    """One recorded run: its ranks, devices, iterations and events (times in seconds from the
    first event after the ranks' clocks are aligned)."""

    ranks: tuple[int, ...]
    world_size: int
    devices: dict[int, dict]
    """Per rank, the deviceProperties entry of its GPU (name, numSms, totalGlobalMem, ...); {}
    for a CPU-only trace."""
    clock_offsets_s: dict[int, float]
    """Per rank, what alignment subtracted from its clock (0.0 when nothing)."""
    iterations: dict[int, list[tuple[int, float, float]]]
    """Per rank, (ProfilerStep number, start_s, end_s) of each step, in order."""
    events: Events
    unknown_kernels: dict[str, int]
    """GPU kernel names no pattern of sim.profiler.kernels matched, with their counts."""
    sources: dict[int, str]
    """Per rank, the file it was read from."""
    notes: tuple[str, ...] = field(default=())
    """What a person should know about the reading: clocks aligned, ranks partial, ..."""

    def rank_events(self, rank: int) -> Events:
        return self.events.take(self.events.rank == rank)


# --------------------------------------------------------------------------- streaming


def _open(path: Path):
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
    except OSError as e:
        raise RingsimError(f"cannot read trace {path}: {e}") from None
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return open(path, "rb")


def _read_chunks(path: Path) -> Iterator[bytes]:
    f = _open(path)
    try:
        with f:
            while True:
                chunk = f.read(CHUNK_BYTES)
                if not chunk:
                    return
                yield chunk
    except EOFError:
        raise RingsimError(f"{path}: the gzip stream ends early (a truncated or partly copied file)") from None
    except (gzip.BadGzipFile, zlib.error) as e:
        raise RingsimError(f"{path}: not a readable gzip file ({e})") from None
    except OSError as e:
        raise RingsimError(f"cannot read trace {path}: {e}") from None


_QUOTE, _BACKSLASH = 34, 92
_OPEN = (123, 91)  # { [
_CLOSE = (125, 93)  # } ]


def _structure(buf: bytes, depth0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of the brackets of `buf` outside strings, their bytes and the nesting depth
    after each; `buf` starts outside a string at depth `depth0`. Only the quotes and brackets
    are looked at, so a chunk costs a few vector passes."""
    a = np.frombuffer(buf, dtype=np.uint8)
    special = np.flatnonzero((a == _QUOTE) | (a == 123) | (a == 125) | (a == 91) | (a == 93))
    chars = a[special]
    is_quote = chars == _QUOTE
    if buf.find(b"\\") >= 0:
        # a quote after an odd run of backslashes is inside its string
        qpos = special[is_quote]
        maybe = qpos[(qpos > 0) & (a[np.maximum(qpos - 1, 0)] == _BACKSLASH)]
        for p in maybe.tolist():
            run = 0
            while p - 1 - run >= 0 and a[p - 1 - run] == _BACKSLASH:
                run += 1
            if run % 2:
                is_quote[np.searchsorted(special, p)] = False
    # a bracket is structural where an even number of (real) quotes precede it
    quotes_before = np.cumsum(is_quote)
    structural = ~is_quote & (quotes_before % 2 == 0)
    if not structural.any():
        return special[:0], chars[:0], np.zeros(0, np.int64)
    pos = special[structural]
    ch = chars[structural]
    delta = np.where((ch == 123) | (ch == 91), 1, -1)
    depth = depth0 + np.cumsum(delta)
    return pos, ch, depth


def _stream_events(path: Path) -> Iterator[list | dict]:
    """The events of `traceEvents`, a list per chunk, then the rest of the document (its
    header without the events) as a dict, last."""
    head = bytearray()
    tail = bytearray()
    carry = b""
    depth = 0
    phase = "head"
    for chunk in _read_chunks(path):
        buf = carry + chunk if carry else chunk
        carry = b""
        if phase == "tail":
            tail += buf
            if len(tail) > MAX_HEADER_BYTES:
                raise RingsimError(f"{path}: over {MAX_HEADER_BYTES} bytes after traceEvents: not a Kineto trace")
            continue
        pos, ch, dep = _structure(buf, depth)
        start = 0
        if phase == "head":
            found = _find_events_key(buf, pos, dep, depth)
            if found is None:
                # keep up to the last bracket: the key cannot straddle it
                if len(pos):
                    cut = int(pos[-1]) + 1
                    head += buf[:cut]
                    depth = int(dep[-1])
                    carry = buf[cut:]
                else:
                    carry = buf
                if len(head) > MAX_HEADER_BYTES or len(carry) > MAX_EVENT_BYTES:
                    raise RingsimError(f"{path}: no traceEvents in its first {len(head) + len(carry)} bytes: "
                                       "not a Kineto trace")
                continue
            key_at, bracket_at = found
            head += buf[:key_at]
            start = bracket_at + 1
            phase = "events"
        # events: each ends with a } back at depth 2 (document 1, traceEvents 2)
        after = pos >= start
        closes = np.flatnonzero(after & (ch == 93) & (dep == 1))
        end_of_array = int(pos[closes[0]]) if len(closes) else None
        ends = after & (ch == 125) & (dep == 2)
        if end_of_array is not None:
            ends &= pos < end_of_array
        ends_at = pos[ends]
        if len(ends_at) and int(ends_at[0]) - start > MAX_EVENT_BYTES:
            raise RingsimError(f"{path}: an event over {MAX_EVENT_BYTES} bytes: not a trace torch.profiler wrote")
        if len(ends_at):
            last = int(ends_at[-1])
            yield _parse_events(path, buf, start, last + 1)
            start = last + 1
        if end_of_array is not None:
            if buf[start:end_of_array].strip(b" \t\r\n,"):
                raise RingsimError(f"{path}: traceEvents holds something that is not an event")
            tail += buf[end_of_array + 1:]
            phase = "tail"
            continue
        carry = buf[start:]
        depth = 2
        if len(carry) > MAX_EVENT_BYTES:
            raise RingsimError(f"{path}: an event over {MAX_EVENT_BYTES} bytes: not a trace torch.profiler wrote")
    if phase == "head":
        raise RingsimError(f"{path}: no traceEvents: not a Kineto (torch.profiler) trace")
    if phase == "events":
        raise RingsimError(f"{path}: the file ends inside traceEvents (truncated?)")
    try:
        meta = orjson.loads(bytes(head) + b'"traceEvents":[]' + bytes(tail))
    except orjson.JSONDecodeError as e:
        raise RingsimError(f"{path}: not valid JSON after traceEvents (truncated?): {e}") from None
    if not isinstance(meta, dict):
        raise RingsimError(f"{path}: not a Kineto trace (its JSON is not an object)")
    yield meta


def _find_events_key(buf: bytes, pos: np.ndarray, dep: np.ndarray, depth0: int) -> tuple[int, int] | None:
    """(position of the `"traceEvents"` key at the document's top level, position of its `[`)."""
    at = 0
    while True:
        p = buf.find(b'"traceEvents"', at)
        if p < 0:
            return None
        at = p + 1
        i = int(np.searchsorted(pos, p))
        level = int(dep[i - 1]) if i > 0 else depth0
        if level != 1 or not _outside_string(buf, p, pos, i):
            continue
        q = p + len(b'"traceEvents"')
        rest = buf[q:q + 64].lstrip()
        if not rest.startswith(b":"):
            continue
        rest2 = rest[1:].lstrip()
        if not rest2:
            return None  # the value lies in the next chunk: read on
        if not rest2.startswith(b"["):
            raise RingsimError("traceEvents is not a list: not a Kineto trace")
        return p, q + (len(buf[q:q + 64]) - len(rest2))


def _outside_string(buf: bytes, p: int, pos: np.ndarray, i: int) -> bool:
    """Whether the quote at p opens a string (an even number of real quotes since the last
    structural bracket before it)."""
    since = int(pos[i - 1]) + 1 if i > 0 else 0
    seg = buf[since:p]
    n = seg.count(b'"') - seg.count(b'\\"') + seg.count(b'\\\\"')
    return n % 2 == 0


def _parse_events(path: Path, buf: bytes, start: int, end: int) -> list:
    body = buf[start:end].lstrip(b" \t\r\n,")
    try:
        events = orjson.loads(b"[" + body + b"]")
    except orjson.JSONDecodeError as e:
        raise RingsimError(f"{path}: an event is not valid JSON: {e}") from None
    return events


# --------------------------------------------------------------------------- one file


class _Columns:
    """One rank's kept events as growing columns (raw microseconds after the file's first
    event, as exact as the file gives them)."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {c: [] for c in _RAW}
        self.base_us: int | None = None
        self.strings: dict[str, str] = {}
        self.skipped: dict[str, int] = {}
        self.device: int | None = None

    def intern(self, s: str) -> str:
        return self.strings.setdefault(s, s)


_RAW = ("on_gpu", "stream", "stream_arg", "name", "cat", "ts", "dur", "correlation", "external_id", "msg_nelems", "dtype",
        "group_size", "collective", "input_dims", "grid", "block")


def _number(path: Path, e: dict, key: str, limit: float) -> float:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > limit:
        raise RingsimError(f"{path}: an event's {key} is {str(v)[:40]!r}, not a time in microseconds")
    return v


def _int_arg(args: dict, key: str) -> int:
    v = args.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 62) < v < (1 << 62):
        if isinstance(v, str) and v.lstrip("-").isdigit() and len(v) < 19:
            return int(v)
        return -1
    return v


def _dims_text(v: Any, cols: _Columns) -> str:
    if v is None:
        return ""
    try:
        return cols.intern(orjson.dumps(v).decode())
    except TypeError:
        return ""


def _add_batch(path: Path, events: list, cols: _Columns) -> None:
    on_gpu, stream, name, cat, ts, dur, corr, ext, nel, dt, grp, coll, dims, grid, block, sarg = (
        [] for _ in range(16))
    skipped = cols.skipped
    intern = cols.intern
    base = cols.base_us
    for e in events:
        if not isinstance(e, dict):
            raise RingsimError(f"{path}: traceEvents holds a {type(e).__name__}, not an event")
        if e.get("ph") != "X":
            continue
        c = e.get("cat")
        gpu_cat = GPU_CATS.get(c)
        cpu_cat = None if gpu_cat else CPU_CATS.get(c)
        if gpu_cat is None and cpu_cat is None:
            if isinstance(c, str):
                skipped[c] = skipped.get(c, 0) + 1
            continue
        t = _number(path, e, "ts", MAX_TIME_US)
        d = _number(path, e, "dur", MAX_DUR_US)
        if d < 0:
            raise RingsimError(f"{path}: an event lasts {d} microseconds")
        if base is None:
            base = cols.base_us = int(math.floor(t))
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        n = e.get("name")
        name.append(intern(n if isinstance(n, str) else str(n)[:1000]))
        ts.append(t - base)
        dur.append(d)
        corr.append(_int_arg(args, "correlation"))
        ext.append(_int_arg(args, "External id"))
        if gpu_cat:
            on_gpu.append(True)
            cat.append(gpu_cat)
            if cols.device is None and isinstance(args.get("device"), int):
                cols.device = args["device"]
            s = _int_arg(args, "stream")
            if s < 0:
                s = _int_arg(e, "tid")
            stream.append(s)
            sarg.append(s)
            g = args.get("grid")
            grid.append(_dims_text(g, cols) if g is not None else "")
            b = args.get("block")
            block.append(_dims_text(b, cols) if b is not None else "")
            dims.append("")
        else:
            on_gpu.append(False)
            cat.append(cpu_cat)
            stream.append(_int_arg(e, "tid"))
            sarg.append(_int_arg(args, "stream") if "stream" in args else -1)
            grid.append("")
            block.append("")
            dims.append(_dims_text(args.get("Input Dims"), cols) if "Input Dims" in args else "")
        if "In msg nelems" in args or "Out msg nelems" in args:
            nel.append(max(_int_arg(args, "In msg nelems"), _int_arg(args, "Out msg nelems")))
            v = args.get("dtype")
            dt.append(intern(v) if isinstance(v, str) else "")
            grp.append(_int_arg(args, "Group size"))
            v = args.get("Collective name")
            coll.append(intern(v) if isinstance(v, str) else "")
        elif not gpu_cat and name[-1].startswith(_COMM_OP_PREFIXES) and "Input Dims" in args:
            # torch before 2.1 records no message args: the op's first input gives them
            nel.append(_elements(args.get("Input Dims")))
            types = args.get("Input type")
            first = types[0] if isinstance(types, list) and types and isinstance(types[0], str) else ""
            dt.append(_C10_DTYPES.get(first, ""))
            grp.append(-1)
            coll.append(name[-1].split(":", 1)[-1] if name[-1].startswith(("nccl:", "gloo:")) else "")
        else:
            nel.append(-1)
            dt.append("")
            grp.append(-1)
            coll.append("")
    if not ts:
        return
    p = cols.parts
    p["on_gpu"].append(np.array(on_gpu, dtype=np.bool_))
    p["stream"].append(np.array(stream, dtype=np.int64))
    p["stream_arg"].append(np.array(sarg, dtype=np.int64))
    p["name"].append(_objects(name))
    p["cat"].append(_objects(cat))
    p["ts"].append(np.array(ts, dtype=np.float64))
    p["dur"].append(np.array(dur, dtype=np.float64))
    p["correlation"].append(np.array(corr, dtype=np.int64))
    p["external_id"].append(np.array(ext, dtype=np.int64))
    p["msg_nelems"].append(np.array(nel, dtype=np.int64))
    p["dtype"].append(_objects(dt))
    p["group_size"].append(np.array(grp, dtype=np.int64))
    p["collective"].append(_objects(coll))
    p["input_dims"].append(_objects(dims))
    p["grid"].append(_objects(grid))
    p["block"].append(_objects(block))


_COMM_OP_PREFIXES = ("nccl:", "gloo:", "c10d::")

# the element types torch's record_shapes writes ("Input type"), as c10's ScalarType names
_C10_DTYPES = {"float": "Float", "double": "Double", "c10::Half": "Half", "c10::BFloat16": "BFloat16",
               "int": "Int", "long int": "Long", "short int": "Short", "signed char": "Char",
               "unsigned char": "Byte", "bool": "Bool", "c10::Float8_e4m3fn": "Float8_e4m3fn",
               "c10::Float8_e5m2": "Float8_e5m2"}


def _elements(dims: Any) -> int:
    """Elements of an op's first input (a tensor's dims, or a tensor list's), -1 if unknown."""
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        return -1
    first = dims[0]
    shapes = first if first and all(isinstance(x, list) for x in first) else [first]
    total = 0
    for shape in shapes:
        if not shape or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < (1 << 40) for x in shape):
            return -1
        total += math.prod(shape)
    return total if total < (1 << 62) else -1


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@dataclass
class _RankFile:
    path: Path
    meta: dict
    base_us: int  # the file's clock origin: baseTimeNanoseconds in us + its first event's ts
    columns: dict[str, np.ndarray]
    skipped: dict[str, int]
    device: int | None

    @property
    def dist(self) -> dict:
        d = self.meta.get("distributedInfo")
        return d if isinstance(d, dict) else {}


def _read_file(path: Path) -> _RankFile:
    cols = _Columns()
    meta: dict = {}
    for item in _stream_events(path):
        if isinstance(item, dict):
            meta = item
        else:
            _add_batch(path, item, cols)
    if cols.base_us is None:
        raise RingsimError(f"{path}: no kernels, operators or runtime calls: not a torch.profiler trace "
                           "(or recorded with no activities)")
    base_ns = meta.get("baseTimeNanoseconds", 0)
    if isinstance(base_ns, bool) or not isinstance(base_ns, int) or not 0 <= base_ns < 1 << 63:
        base_ns = 0
    columns = {c: np.concatenate(parts) for c, parts in cols.parts.items()}
    return _RankFile(path, meta, base_ns // 1000 + cols.base_us, columns, cols.skipped, cols.device)


# --------------------------------------------------------------------------- a run


def trace_files(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """The trace files named: each path a .json / .json.gz file or a folder of them."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file() and (q.name.endswith(".json")
                                                                     or q.name.endswith(".json.gz")))
            if not found:
                raise RingsimError(f"{p}: no .json or .json.gz trace files in this folder")
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise RingsimError(f"{p}: no such file or folder")
    if not files:
        raise RingsimError("no trace files given")
    return files


_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.I)


def _rank_of(rf: _RankFile, n_files: int) -> tuple[int, int | None]:
    """(rank, world size or None) from distributedInfo, else the file's name."""
    d = rf.dist
    rank, world = d.get("rank"), d.get("world_size")
    if isinstance(world, bool) or not isinstance(world, int):
        world = None
    elif not 1 <= world <= MAX_WORLD_SIZE:
        raise RingsimError(f"{rf.path}: distributedInfo gives world size {world}")
    if isinstance(rank, int) and not isinstance(rank, bool):
        if rank < 0 or (world is not None and rank >= world):
            raise RingsimError(f"{rf.path}: distributedInfo gives rank {rank} of a world of {world}")
        return rank, world
    if n_files == 1:
        return 0, world
    m = _RANK_IN_NAME.search(rf.path.name)
    if m and int(m.group(1)) <= MAX_WORLD_SIZE:
        return int(m.group(1)), world
    raise RingsimError(f"{rf.path}: no distributedInfo rank and none in the file's name: cannot tell the "
                       "ranks apart")


def _group_signature(rf: _RankFile) -> Any:
    """What every rank of one run agrees on: its process groups' ranks and backends."""
    d = rf.dist
    groups = d.get("pg_config")
    if not isinstance(groups, list):
        return None
    sig = []
    for g in groups:
        if isinstance(g, dict):
            ranks = g.get("ranks")
            sig.append((str(g.get("pg_name")), g.get("pg_size"),
                        tuple(ranks) if isinstance(ranks, list) and len(ranks) < 100_000 else None))
    return tuple(sorted(sig, key=str))


def read_run(paths: Sequence[str | os.PathLike] | str | os.PathLike, *, partial: bool = False) -> Run:
    """Read the run recorded in `paths` (trace files or folders of one file per rank).

    RingsimError, one line, on a file that is not a whole Kineto trace, two files of one rank,
    ranks of different runs, or (unless `partial`) a rank missing from several."""
    files = trace_files(paths)
    read = [_read_file(f) for f in files]
    by_rank: dict[int, _RankFile] = {}
    worlds: dict[int, int | None] = {}
    given = [(rf, *_rank_of(rf, len(read))) for rf in read]
    known = {w for _, _, w in given if w is not None}
    if len(known) > 1:
        raise RingsimError("ranks of different runs mixed: world sizes "
                           + ", ".join(f"{w} ({rf.path.name})" for rf, _, w in given))
    for rf, rank, world in given:
        if rank in by_rank:
            raise RingsimError(f"two files of rank {rank}: {by_rank[rank].path} and {rf.path}")
        by_rank[rank] = rf
        worlds[rank] = world
    ranks = tuple(sorted(by_rank))
    sigs = {r: _group_signature(by_rank[r]) for r in ranks}
    distinct = {s for s in sigs.values() if s is not None}
    if len(distinct) > 1:
        raise RingsimError("ranks of different runs mixed: their process groups differ (distributedInfo pg_config)")
    world = known.pop() if known else max(ranks) + 1
    notes: list[str] = []
    missing = [r for r in range(world) if r not in by_rank]
    if missing and len(ranks) > 1 and not partial:
        raise RingsimError(f"rank{'s' if len(missing) > 1 else ''} {_listing(missing)} of {world} missing "
                           f"(given {_listing(list(ranks))}); pass --partial to read only these")
    if missing:
        notes.append(f"rank{'s' if len(ranks) > 1 else ''} {_listing(list(ranks))} of {world} read, "
                     f"{len(missing)} not given")
    events, iterations, offsets, more = _assemble(by_rank)
    notes.extend(more)
    unknown = _unknown_kernels(events)
    devices = {r: _device(by_rank[r]) for r in ranks}
    return Run(ranks=ranks, world_size=world, devices=devices, clock_offsets_s=offsets, iterations=iterations,
               events=events, unknown_kernels=unknown, sources={r: str(by_rank[r].path) for r in ranks},
               notes=tuple(notes))


def _listing(xs: list[int]) -> str:
    return ", ".join(str(x) for x in xs) if len(xs) <= 8 else f"{', '.join(str(x) for x in xs[:8])}, ..."


def _device(rf: _RankFile) -> dict:
    """The deviceProperties entry of the GPU the rank's kernels ran on (their args' device)."""
    props = [p for p in rf.meta.get("deviceProperties") or () if isinstance(p, dict)]
    if not props or rf.device is None:
        return {}
    for p in props:
        if p.get("id") == rf.device:
            return dict(p)
    return dict(props[0]) if len(props) == 1 else {}


def _assemble(by_rank: dict[int, _RankFile]):
    """Every rank's rows on one clock, iterations, launches and kinds."""
    ranks = sorted(by_rank)
    # each rank's events on an absolute clock (us), kept as exact offsets from one origin
    origin_us = min(by_rank[r].base_us for r in ranks)
    rel_us = {r: by_rank[r].columns["ts"] + float(by_rank[r].base_us - origin_us) for r in ranks}
    kinds: dict[int, np.ndarray] = {}
    for r in ranks:
        c = by_rank[r].columns
        kinds[r] = _kinds(c)
    offsets_us, notes = _clock_offsets(ranks, by_rank, rel_us, kinds)
    for r in ranks:
        rel_us[r] = rel_us[r] - offsets_us[r]
    start_us = min(float(rel_us[r].min()) for r in ranks)
    parts: dict[str, list[np.ndarray]] = {c: [] for c in EVENT_COLUMNS}
    iterations: dict[int, list[tuple[int, float, float]]] = {}
    for r in ranks:
        c = by_rank[r].columns
        n = len(c["ts"])
        t_s = (rel_us[r] - start_us) * 1e-6
        d_s = c["dur"] * 1e-6
        kind = kinds[r]
        steps = _steps(c, kind, t_s, d_s)
        iterations[r] = steps
        iteration = _iteration_of(c, kind, t_s, steps)
        launch = _launch_starts(c, t_s)
        msg_bytes, group, dtype = _messages(c, kind)
        parts["rank"].append(np.full(n, r, dtype=np.int32))
        parts["iteration"].append(iteration)
        parts["on_gpu"].append(c["on_gpu"])
        parts["stream"].append(c["stream"])
        parts["name"].append(c["name"])
        parts["cat"].append(c["cat"])
        parts["kind"].append(kind)
        parts["start_s"].append(t_s)
        parts["dur_s"].append(d_s)
        parts["correlation"].append(c["correlation"])
        parts["external_id"].append(c["external_id"])
        parts["msg_bytes"].append(msg_bytes)
        parts["group_size"].append(group)
        parts["dtype"].append(dtype)
        parts["input_dims"].append(c["input_dims"])
        parts["grid"].append(c["grid"])
        parts["block"].append(c["block"])
        parts["launch_start_s"].append(launch)
        parts["stream_arg"].append(c["stream_arg"])
    cols = {k: np.concatenate(v).astype(_DTYPES[k], copy=False) for k, v in parts.items()}
    offsets_s = {r: float(offsets_us[r]) * 1e-6 for r in ranks}
    return Events(**cols), iterations, offsets_s, notes


def _kinds(c: dict[str, np.ndarray]) -> np.ndarray:
    """The kind of each row (sim.profiler.kernels), from the unique (cat, name) pairs."""
    names, cats, gpu = c["name"], c["cat"], c["on_gpu"]
    out = np.empty(len(names), dtype=object)
    cache: dict[tuple[str, str, bool], str] = {}
    coll = c["collective"]
    for i in range(len(names)):
        key = (cats[i], names[i], bool(gpu[i]))
        k = cache.get(key)
        if k is None:
            k = classify_gpu(cats[i], names[i])[0] if gpu[i] else classify_cpu(cats[i], names[i])
            cache[key] = k
        if k == "collective_other" and coll[i]:
            k = collective_kind(coll[i]) or k
        out[i] = k
    return out


def _unknown_kernels(events: Events) -> dict[str, int]:
    gpu = events.on_gpu & (events.cat == "kernel")
    names, counts = np.unique(events.name[gpu].astype(str), return_counts=True)
    out = {}
    for n, k in zip(names.tolist(), counts.tolist()):
        if not classify_gpu("kernel", n)[1]:
            out[n] = int(k)
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def _steps(c, kind, t_s, d_s) -> list[tuple[int, float, float]]:
    """ProfilerStep#N annotations on the host (GPU-side copies are not read)."""
    rows = np.flatnonzero(kind == "step")
    steps = {}
    for i in rows.tolist():
        n = step_number(c["name"][i])
        if n is not None:
            start, end = float(t_s[i]), float(t_s[i] + d_s[i])
            if n not in steps or start < steps[n][0]:
                steps[n] = (start, end)
    return sorted(((n, s, e) for n, (s, e) in steps.items()), key=lambda x: x[1])


def _iteration_of(c, kind, t_s, steps) -> np.ndarray:
    """HTA's rule (hta/common/trace.py add_iteration): a CPU row belongs to the step whose
    [start, end) holds its start; a GPU row to its launch's step, by correlation."""
    n = len(t_s)
    it = np.full(n, -1, dtype=np.int32)
    cpu = ~c["on_gpu"]
    for number, s, e in steps:
        it[cpu & (t_s >= s) & (t_s < e)] = number
    gpu = c["on_gpu"]
    corr = c["correlation"]
    launchers = np.flatnonzero(cpu & (corr >= 0) & (kind == "runtime"))
    if len(launchers) and gpu.any():
        order = np.argsort(corr[launchers], kind="stable")
        keys = corr[launchers][order]
        g = np.flatnonzero(gpu & (corr >= 0))
        j = np.searchsorted(keys, corr[g])
        j = np.minimum(j, len(keys) - 1)
        hit = keys[j] == corr[g]
        it[g[hit]] = it[launchers[order][j[hit]]]
    return it


def _launch_starts(c, t_s) -> np.ndarray:
    out = np.full(len(t_s), np.nan)
    gpu = c["on_gpu"]
    corr = c["correlation"]
    launchers = np.flatnonzero(~gpu & (corr >= 0) & np.isin(c["cat"], ("cuda_runtime", "cuda_driver")))
    g = np.flatnonzero(gpu & (corr >= 0))
    if len(launchers) and len(g):
        order = np.argsort(corr[launchers], kind="stable")
        keys = corr[launchers][order]
        j = np.minimum(np.searchsorted(keys, corr[g]), len(keys) - 1)
        hit = keys[j] == corr[g]
        out[g[hit]] = t_s[launchers[order][j[hit]]]
    return out


def _messages(c, kind) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bytes, group size and dtype of each communication: its own args, else (a GPU
    collective) those of the operator with its External id (record_param_comms)."""
    nel = c["msg_nelems"]
    dtype = c["dtype"]
    size = np.array([DTYPE_BYTES.get(d, -1) if d else -1 for d in dtype.tolist()], dtype=np.int64)
    msg = np.where((nel >= 0) & (size > 0), nel * np.maximum(size, 1), -1)
    group = c["group_size"].astype(np.int32)
    dtype = dtype.copy()
    gpu_comm = c["on_gpu"] & np.isin(kind, COMM_KINDS) & (msg < 0) & (c["external_id"] >= 0)
    donors = np.flatnonzero(~c["on_gpu"] & (msg >= 0) & (c["external_id"] >= 0))
    if gpu_comm.any() and len(donors):
        ext = c["external_id"]
        order = np.argsort(ext[donors], kind="stable")
        keys = ext[donors][order]
        g = np.flatnonzero(gpu_comm)
        j = np.minimum(np.searchsorted(keys, ext[g]), len(keys) - 1)
        hit = keys[j] == ext[g]
        src = donors[order][j[hit]]
        msg[g[hit]] = msg[src]
        group[g[hit]] = group[src]
        dtype[g[hit]] = dtype[src]
    _messages_from_launch(c, kind, msg, group, dtype)
    return msg, group, dtype


def _messages_from_launch(c, kind, msg, group, dtype) -> None:
    """A GPU collective still without a size takes that of the innermost communication op
    around its launch on the launching thread (older Kineto links a kernel to no operator)."""
    gpu = c["on_gpu"]
    todo = np.flatnonzero(gpu & np.isin(kind, COMM_KINDS) & (msg < 0) & (c["correlation"] >= 0))
    if not len(todo):
        return
    cpu = ~gpu
    corr, ts, dur, thread = c["correlation"], c["ts"], c["dur"], c["stream"]
    launchers = np.flatnonzero(cpu & (corr >= 0) & (kind == "runtime"))
    ops = np.flatnonzero(cpu & (kind == "cpu_comm") & (msg >= 0))
    if not len(launchers) or not len(ops):
        return
    by_corr = dict(zip(corr[launchers].tolist(), launchers.tolist()))
    ops = ops[np.argsort(ts[ops], kind="stable")]
    op_start = ts[ops]
    for g in todo.tolist():
        li = by_corr.get(int(corr[g]))
        if li is None:
            continue
        t = ts[li]
        j = int(np.searchsorted(op_start, t, side="right"))
        # the innermost: the latest-starting op on the thread that still holds the launch
        for k in range(j - 1, max(j - 64, -1), -1):
            o = ops[k]
            if thread[o] == thread[li] and ts[o] + dur[o] >= t:
                msg[g], group[g], dtype[g] = msg[o], group[o], dtype[o]
                break


def _clock_offsets(ranks, by_rank, rel_us, kinds) -> tuple[dict[int, float], list[str]]:
    """Each rank's clock minus the first rank's, in microseconds, where it is larger than
    collectives or steps allow. A collective kernel ends on every rank at nearly the same
    moment (the last rank's data completes it everywhere): the median difference of the k-th
    collective's end on each rank estimates the offset. Without collectives, the start of the
    first ProfilerStep all ranks recorded."""
    ref = ranks[0]
    offsets = {r: 0.0 for r in ranks}
    notes: list[str] = []
    if len(ranks) == 1:
        return offsets, notes

    def collective_ends(r):
        c = by_rank[r].columns
        rows = np.flatnonzero(c["on_gpu"] & np.isin(kinds[r], ("all_reduce", "all_gather", "reduce_scatter",
                                                                 "all_to_all", "broadcast")))
        rows = rows[np.argsort(rel_us[r][rows], kind="stable")]
        return rel_us[r][rows] + c["dur"][rows], kinds[r][rows]

    ends = {r: collective_ends(r) for r in ranks}
    for r in ranks[1:]:
        a, ka = ends[ref]
        b, kb = ends[r]
        n = min(len(a), len(b))
        estimate, threshold_us, how = None, ALIGN_MIN_S * 1e6, "collective kernels' ends"
        if n >= 3 and (ka[:n] == kb[:n]).mean() > 0.9:
            estimate = float(np.median(b[:n] - a[:n]))
        else:
            sa = _first_steps(by_rank[ref], kinds[ref], rel_us[ref])
            sb = _first_steps(by_rank[r], kinds[r], rel_us[r])
            common = sorted(set(sa) & set(sb))
            if common:
                estimate = sb[common[0]] - sa[common[0]]
                threshold_us, how = ALIGN_STEP_MIN_S * 1e6, f"ProfilerStep#{common[0]}'s start"
        if estimate is None:
            # nothing to align on: only the files' clocks, which must at least be of one run
            estimate = float(rel_us[r].min() - rel_us[ref].min())
            if abs(estimate) > MIXED_RUN_S * 1e6:
                raise RingsimError(f"ranks of different runs mixed: rank {r}'s trace starts "
                                   f"{estimate * 1e-6:+.0f} s from rank {ref}'s")
            continue
        if abs(estimate) > MIXED_RUN_S * 1e6:
            raise RingsimError(f"ranks of different runs mixed: rank {r}'s clock is {estimate * 1e-6:+.0f} s from "
                               f"rank {ref}'s by their {how}")
        if abs(estimate) > threshold_us:
            offsets[r] = estimate
            notes.append(f"rank {r}'s clock aligned to rank {ref}'s by {-estimate * 1e-3:+.3f} ms ({how})")
    return offsets, notes


def _first_steps(rf: _RankFile, kind, rel_us) -> dict[int, float]:
    out: dict[int, float] = {}
    names = rf.columns["name"]
    for i in np.flatnonzero(kind == "step").tolist():
        n = step_number(names[i])
        if n is not None and (n not in out or rel_us[i] < out[n]):
            out[n] = float(rel_us[i])
    return out


# --------------------------------------------------------------------------- Parquet

_TABLE_VERSION = 1


def write_table(run: Run, path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Write the run as one Parquet table (one row per event, EVENT_COLUMNS) with the run's
    ranks, devices, iterations, offsets, unknown kernels and sources in its metadata; refuse
    to replace an existing file unless `overwrite`."""
    from sim.files import kept_file, write_bytes

    why = kept_file(path, overwrite)
    if why:
        raise RingsimError(why)
    # pyarrow is optional (the sweep extra): it loads when a table is written
    import pyarrow as pa
    import pyarrow.parquet as pq

    ev = run.events
    arrays = {}
    for c in EVENT_COLUMNS:
        v = getattr(ev, c)
        arrays[c] = pa.array(v.tolist() if v.dtype == object else v,
                             type=pa.string() if v.dtype == object else None)
    meta = {"ringsim_profiler_run": json.dumps({
        "version": _TABLE_VERSION, "ranks": list(run.ranks), "world_size": run.world_size,
        "devices": {str(k): v for k, v in run.devices.items()},
        "clock_offsets_s": {str(k): v for k, v in run.clock_offsets_s.items()},
        "iterations": {str(k): [list(x) for x in v] for k, v in run.iterations.items()},
        "unknown_kernels": run.unknown_kernels, "sources": {str(k): v for k, v in run.sources.items()},
        "notes": list(run.notes)})}
    table = pa.table(arrays).replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    write_bytes(path, sink.getvalue().to_pybytes(), overwrite=overwrite)


def read_table(path: str | os.PathLike) -> Run:
    """A run written by write_table."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as e:
        raise RingsimError(f"cannot read {path} as a Parquet table: {e}") from None
    raw = (table.schema.metadata or {}).get(b"ringsim_profiler_run")
    if raw is None:
        raise RingsimError(f"{path}: not a table written by `ringsim trace import --out`")
    m = json.loads(raw)
    missing = [c for c in EVENT_COLUMNS if c not in table.column_names]
    if missing:
        raise RingsimError(f"{path}: columns {', '.join(missing)} missing")
    cols = {}
    for c in EVENT_COLUMNS:
        col = table.column(c)
        if _DTYPES[c] is object:
            cols[c] = _objects(col.to_pylist())
        else:
            cols[c] = col.to_numpy().astype(_DTYPES[c], copy=False)
    return Run(ranks=tuple(m["ranks"]), world_size=int(m["world_size"]),
               devices={int(k): v for k, v in m["devices"].items()},
               clock_offsets_s={int(k): float(v) for k, v in m["clock_offsets_s"].items()},
               iterations={int(k): [(int(a), float(b), float(c)) for a, b, c in v]
                           for k, v in m["iterations"].items()},
               events=Events(**cols), unknown_kernels=dict(m["unknown_kernels"]),
               sources={int(k): v for k, v in m["sources"].items()}, notes=tuple(m.get("notes", ())))
