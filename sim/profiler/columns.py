"""One rank's trace file as columns: every complete event of the kept categories (GPU
kernels, memcpy, memset and sync; CPU ops, runtime and driver calls, annotations) with its
times, stream, correlation, External id, message arguments, shapes and launch dimensions, and
each row's kind (sim.profiler.kernels).

orjson parses each region of whole events sim.profiler.scan finds (a megabyte at a time), and
one pass over the region's dicts appends the kept fields to lists that become numpy arrays:
the dicts live as long as their region. Times stay in the file's microseconds, after its
first event, as exact as the file gives them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from sim.profiler.kernels import classify_cpu, classify_gpu
from sim.profiler.scan import parse_region, stream_events
from sim.reasons import refusal

MAX_TIME_US = 1e17
"""Timestamps beyond this (3,000 years in microseconds) are not a clock's."""

MAX_DUR_US = 1e13
"""Durations beyond this (116 days) are not an event's."""

# Kineto's categories, and the older names (Kernel, Memcpy, Runtime, Operator) of torch < 1.10
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "gpu_memset": "gpu_memset",
            "Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
            # a stream's or event's synchronization as the GPU saw it (Kineto records them
            # when asked: enable_cuda_sync_events); HTA counts those with a stream
            "cuda_sync": "cuda_sync"}
CPU_CATS = {"cpu_op": "cpu_op", "user_annotation": "user_annotation", "cuda_runtime": "cuda_runtime",
            "cuda_driver": "cuda_driver", "Operator": "cpu_op", "Runtime": "cuda_runtime"}


def kind_of(cat: str, name: str, on_gpu: bool) -> str:
    """The kind of a row (sim.profiler.kernels) from its category, name and side."""
    return classify_gpu(cat, name)[0] if on_gpu else classify_cpu(cat, name)


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


_RAW = ("on_gpu", "stream", "stream_arg", "name", "cat", "kind", "ts", "dur", "correlation", "external_id",
        "msg_nelems", "dtype", "group_size", "collective", "input_dims", "grid", "block")


def _int_arg(args: dict, key: str) -> int:
    """A whole-number argument (or its digits as text), else -1."""
    v = args.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 62) < v < (1 << 62):
        if isinstance(v, str) and v.lstrip("-").isdigit() and len(v) < 19:
            return int(v)
        return -1
    return v


def _dims_text(v: Any, cols: _Columns) -> str:
    """A list argument (dims, grid, block) as compact JSON, one str per distinct text."""
    if v is None:
        return ""
    try:
        return cols.intern(orjson.dumps(v).decode())
    except TypeError:
        return ""


def _add_batch(path: Path, events: list, cols: _Columns) -> None:
    """Append a region's kept events to the columns. The loop only picks values out of the
    dicts; numbers are checked and converted a column at a time (_times, _ints), falling back
    to a value at a time to name a bad one."""
    on_gpu, stream, tid, name, cat, ts, dur, corr, ext, nel, dt, grp, coll, dims, grid, block = (
        [] for _ in range(16))
    skipped = cols.skipped
    intern = cols.intern
    empty: dict = {}
    for e in events:
        if not isinstance(e, dict):
            raise refusal("profiler.event-type", path=str(path), detail=type(e).__name__)
        if e.get("ph") != "X":
            continue
        c = e.get("cat")
        gpu_cat = GPU_CATS.get(c)
        cpu_cat = None if gpu_cat else CPU_CATS.get(c)
        if gpu_cat is None and cpu_cat is None:
            if isinstance(c, str):
                skipped[c] = skipped.get(c, 0) + 1
            continue
        args = e.get("args", empty)
        if not isinstance(args, dict):
            args = empty
        n = e.get("name")
        name.append(intern(n) if type(n) is str else intern(str(n)[:1000]))
        ts.append(e.get("ts"))
        dur.append(e.get("dur"))
        corr.append(args.get("correlation", -1))
        ext.append(args.get("External id", -1))
        stream.append(args.get("stream", -1))
        tid.append(e.get("tid", -1))
        if gpu_cat:
            on_gpu.append(True)
            cat.append(gpu_cat)
            if cols.device is None and isinstance(args.get("device"), int):
                cols.device = args["device"]
            g = args.get("grid")
            grid.append(_dims_text(g, cols) if g is not None else "")
            g = args.get("block")
            block.append(_dims_text(g, cols) if g is not None else "")
            dims.append("")
        else:
            on_gpu.append(False)
            cat.append(cpu_cat)
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
    t = _times(path, ts, "ts", MAX_TIME_US)
    d = _times(path, dur, "dur", MAX_DUR_US)
    if (d < 0).any():
        raise refusal("profiler.negative-duration", path=str(path), duration_us=float(d[d < 0][0]))
    if cols.base_us is None:
        cols.base_us = int(math.floor(t[0]))
    gpu = np.array(on_gpu, dtype=np.bool_)
    stream_arg = _ints(stream)
    thread = _ints(tid)
    p = cols.parts
    p["on_gpu"].append(gpu)
    # a GPU row's stream is its args' (Kineto also puts it in tid); a CPU row's, its thread
    p["stream"].append(np.where(gpu & (stream_arg >= 0), stream_arg, thread))
    p["stream_arg"].append(stream_arg)
    p["name"].append(objects(name))
    p["cat"].append(objects(cat))
    cache: dict[tuple[str, str, bool], str] = {}
    kinds = []
    for c_, n_, g_ in zip(cat, name, on_gpu):
        k = cache.get((c_, n_, g_))
        if k is None:
            k = cache[(c_, n_, g_)] = kind_of(c_, n_, g_)
        kinds.append(k)
    p["kind"].append(objects(kinds))
    p["ts"].append(t - cols.base_us)
    p["dur"].append(d)
    p["correlation"].append(_ints(corr))
    p["external_id"].append(_ints(ext))
    p["msg_nelems"].append(np.array(nel, dtype=np.int64))
    p["dtype"].append(objects(dt))
    p["group_size"].append(np.array(grp, dtype=np.int64))
    p["collective"].append(objects(coll))
    p["input_dims"].append(objects(dims))
    p["grid"].append(objects(grid))
    p["block"].append(objects(block))


def _times(path: Path, values: list, key: str, limit: float) -> np.ndarray:
    """Microsecond times as float64, each a finite number within `limit`; else one line."""
    try:
        out = np.array(values, dtype=np.float64)
        ok = bool(np.isfinite(out).all() and (np.abs(out) <= limit).all())
    except (TypeError, ValueError, OverflowError):
        ok = False
    if ok:
        return out
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > limit:
            raise refusal("profiler.bad-time", path=str(path), entry=key, detail=repr(str(v)[:40]))
    return np.array(values, dtype=np.float64)


def _ints(values: list) -> np.ndarray:
    """Whole-number arguments as int64; anything else (text, floats, beyond 62 bits) -1."""
    out = np.array(values)  # Python ints become int64; anything else another dtype
    if out.dtype.kind == "i" and (np.abs(out) < (1 << 62)).all():
        return out.astype(np.int64, copy=False)
    return np.array([_int_arg({"v": v}, "v") for v in values], dtype=np.int64)


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


def objects(values: list) -> np.ndarray:
    """A list as a numpy object array (its items kept as they are, lists included)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@dataclass
class RankFile:
    """One file's columns (times in its own microseconds after base_us) and its header."""

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


def read_file(path: Path) -> RankFile:
    """Read one rank's trace file into columns; RingsimError, one line, if it is not one."""
    cols = _Columns()
    meta: dict = {}
    for item in stream_events(path):
        if isinstance(item, dict):
            meta = item
        else:
            _add_batch(path, parse_region(path, item), cols)
    if cols.base_us is None:
        raise refusal("profiler.no-activities", path=str(path))
    base_ns = meta.get("baseTimeNanoseconds", 0)
    if isinstance(base_ns, bool) or not isinstance(base_ns, int) or not 0 <= base_ns < 1 << 63:
        base_ns = 0
    columns = {}
    for c in list(cols.parts):
        parts = cols.parts.pop(c)  # each column's parts freed as it is joined
        columns[c] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        del parts
    return RankFile(path, meta, base_ns // 1000 + cols.base_us, columns, cols.skipped, cols.device)
