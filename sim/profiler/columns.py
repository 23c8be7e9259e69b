"""One rank's trace file as columns: every complete event of the kept categories (GPU
kernels, memcpy, memset and sync; CPU ops, runtime and driver calls, annotations) with its
times, stream, correlation, External id, message arguments, shapes and launch dimensions, and
each row's kind (sim.profiler.kernels).

Two parsers give the same columns from the regions sim.profiler.scan finds: orjson, an event
at a time (the reference, which also names what is wrong in a bad event), and, past a
file's first COLUMNAR_AFTER_BYTES, pyarrow's JSON reader over the region made one event a
line, which parses in C++ into typed columns; a region whose layout or types it cannot take
goes to orjson. Times stay in the file's microseconds, after its first event, as exact as the
file gives them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from sim.errors import RingsimError
from sim.profiler.kernels import classify_cpu, classify_gpu
from sim.profiler.scan import Region, parse_region, stream_events

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
            sarg.append(_int_arg(args, "stream") if "stream" in args else -1)
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
    p["ts"].append(np.array(ts, dtype=np.float64))
    p["dur"].append(np.array(dur, dtype=np.float64))
    p["correlation"].append(np.array(corr, dtype=np.int64))
    p["external_id"].append(np.array(ext, dtype=np.int64))
    p["msg_nelems"].append(np.array(nel, dtype=np.int64))
    p["dtype"].append(objects(dt))
    p["group_size"].append(np.array(grp, dtype=np.int64))
    p["collective"].append(objects(coll))
    p["input_dims"].append(objects(dims))
    p["grid"].append(objects(grid))
    p["block"].append(objects(block))


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
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@dataclass
class RankFile:
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
    cols = _Columns()
    meta: dict = {}
    seen_bytes = 0
    for item in stream_events(path):
        if isinstance(item, dict):
            meta = item
            continue
        seen_bytes += len(item.data)
        columnar = FAST_PATH and seen_bytes > COLUMNAR_AFTER_BYTES
        if not (columnar and _add_region_columnar(path, item, cols)):
            _add_batch(path, parse_region(path, item), cols)
    if cols.base_us is None:
        raise RingsimError(f"{path}: no kernels, operators or runtime calls: not a torch.profiler trace "
                           "(or recorded with no activities)")
    base_ns = meta.get("baseTimeNanoseconds", 0)
    if isinstance(base_ns, bool) or not isinstance(base_ns, int) or not 0 <= base_ns < 1 << 63:
        base_ns = 0
    columns = {}
    for c in list(cols.parts):
        parts = cols.parts.pop(c)  # each column's parts freed as it is joined
        columns[c] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        del parts
    return RankFile(path, meta, base_ns // 1000 + cols.base_us, columns, cols.skipped, cols.device)


FAST_PATH = True
"""Parse regions with pyarrow's JSON reader when their layout allows (the orjson path is the
reference and the fallback)."""

COLUMNAR_AFTER_BYTES = 16 * 1024 * 1024
"""pyarrow parses a file's regions once this much of it is read: below it, orjson is as
quick and pyarrow's first use (it loads pandas) would cost more than it saves."""

_KEPT_CATS = tuple(GPU_CATS) + tuple(CPU_CATS)
_GPU_NORMAL = tuple(sorted(set(GPU_CATS.values())))
_ARGS_FIELDS = (("stream", "int64"), ("correlation", "int64"), ("External id", "int64"),
                ("In msg nelems", "int64"), ("Out msg nelems", "int64"), ("Group size", "int64"),
                ("dtype", "string"), ("Collective name", "string"), ("device", "int64"),
                ("grid", "ints"), ("block", "ints"))
# as Kineto and json.dumps space them ("key": value) and as compact writers do; an event
# written otherwise is parsed all the same (the reader's type check sends its region to orjson)
_STACK_TEXTS = (b'"cat": "python_function"', b'"cat":"python_function"')
_STRING_ID_TEXTS = (b'"tid": "', b'"pid": "', b'"tid":"', b'"pid":"')


def _blank(a: np.ndarray, starts: np.ndarray, ends: np.ndarray, at: list[int]) -> None:
    """Make each event holding a position of `at` an empty object, {} and spaces."""
    if not at:
        return
    i = np.unique(np.searchsorted(starts, np.array(at, dtype=np.int64), side="right") - 1)
    i = i[i >= 0]
    edge = np.zeros(len(a) + 1, dtype=np.int8)
    edge[starts[i] + 2] += 1  # the events are disjoint: no index twice
    edge[ends[i] + 1] -= 1
    a[np.cumsum(edge[:-1], dtype=np.int8) > 0] = 32
    a[starts[i] + 1] = 125


def _read_lines(a: np.ndarray):
    """pyarrow's JSON reader over one event a line, the kept fields typed; None where a value
    does not fit its type."""
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        # the system allocator gives freed memory back; pyarrow's default pool (mimalloc)
        # keeps it, and a long read's peak would hold every region's
        return pj.read_json(pa.BufferReader(a.tobytes()), memory_pool=pa.system_memory_pool(),
                            read_options=pj.ReadOptions(block_size=1 << 20, use_threads=True),
                            parse_options=pj.ParseOptions(explicit_schema=_schema(),
                                                          unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None


def _find_all(data: bytes, texts: tuple[bytes, ...]) -> list[int]:
    """Where each of `texts` occurs in `data` (bytes.find: a C search, far faster than a regex)."""
    out = []
    for text in texts:
        at = data.find(text)
        while at >= 0:
            out.append(at)
            at = data.find(text, at + 1)
    return out
_NESTED = rb"\[(?:[^\[\]\"]|\[(?:[^\[\]\"]|\[(?:[^\[\]\"]|\[[^\[\]\"]*\])*\])*\])*\]"
_INPUT_DIMS = re.compile(rb'"Input Dims"\s*:\s*(' + _NESTED + rb")")
_INPUT_TYPE = re.compile(rb'"Input type"\s*:\s*\[\s*"([^"\\]{0,64})"')
_schema_cache: list = []


def _schema():
    if not _schema_cache:
        import pyarrow as pa

        types = {"int64": pa.int64(), "string": pa.string(), "ints": pa.list_(pa.int64())}
        _schema_cache.append(pa.schema([
            ("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()), ("ts", pa.float64()),
            ("dur", pa.float64()), ("tid", pa.int64()),
            ("args", pa.struct([(n, types[t]) for n, t in _ARGS_FIELDS]))]))
    return _schema_cache[0]


def _add_region_columnar(path: Path, region: Region, cols: _Columns) -> bool:
    """Add a region's events through pyarrow's JSON reader: the events become one line each
    (a raw newline is only ever whitespace in JSON, so every one becomes a space, and the comma
    after each event a newline), and the reader parses them in C++ into columns. False (and
    nothing added) where the layout or a value's type does not allow it: the caller parses the
    region with orjson instead, which also names what is wrong."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return False
    starts, ends = region.starts, region.ends
    if len(starts) != len(ends) or not len(ends) or (starts > ends).any():
        return False
    a = np.frombuffer(region.data, dtype=np.uint8).copy()
    a[(a == 10) | (a == 13)] = 32
    a[:starts[0]] = 32  # the comma after the previous region's last event
    between = ends[:-1] + 1
    if len(between) and not (a[between] == 44).all():
        return False
    a[between] = 10
    # events with a string pid or tid (Kineto's own spans and instant events) would change a
    # column's type, and flows and python stacks are many and never kept: each becomes {}
    # python stacks (with_stack: most of such a trace's events) are never kept, and an event
    # with a string pid or tid (Kineto's own spans and instant events, none of the kept ones)
    # would change a column's type: each becomes {}, which the reader skips through
    _blank(a, starts, ends, _find_all(region.data, _STACK_TEXTS + _STRING_ID_TEXTS))
    table = _read_lines(a)
    if table is None:
        return False
    if table.num_rows != len(starts):
        return False
    ph, cat = table.column("ph"), table.column("cat")
    keep = pc.fill_null(pc.and_(pc.equal(ph, "X"), pc.is_in(cat, value_set=pa.array(_KEPT_CATS))), False)
    skipped = pc.value_counts(pc.filter(cat, pc.and_(pc.equal(ph, "X"), pc.invert(keep)))).to_pylist()
    for item in skipped:
        if item["values"] is not None:
            cols.skipped[item["values"]] = cols.skipped.get(item["values"], 0) + item["counts"]
    rows = np.flatnonzero(keep.to_numpy(zero_copy_only=False))
    if not len(rows):
        return True
    t = pc.take(table, pa.array(rows), memory_pool=pa.system_memory_pool())
    del table
    ts = t.column("ts").to_numpy(zero_copy_only=False)
    dur = t.column("dur").to_numpy(zero_copy_only=False)
    if t.column("ts").null_count or t.column("dur").null_count or t.column("name").null_count:
        return False  # the orjson path names the event
    if (np.abs(ts) > MAX_TIME_US).any() or (dur > MAX_DUR_US).any() or (dur < 0).any():
        return False
    cat_np = _interned(t.column("cat"), cols)
    for raw, norm in {**GPU_CATS, **CPU_CATS}.items():
        if raw != norm:
            cat_np[cat_np == raw] = norm
    on_gpu = np.isin(cat_np, _GPU_NORMAL)
    args = t.column("args").combine_chunks()

    def arg(name: str, fill: int = -1) -> np.ndarray:
        col = pc.fill_null(args.field(name), fill) if args.null_count == 0 else \
            pc.fill_null(pc.struct_field(args, name), fill)
        return col.to_numpy(zero_copy_only=False).astype(np.int64)

    def arg_text(name: str) -> np.ndarray:
        col = pc.struct_field(args, name)
        return _interned(col, cols)

    stream_arg = arg("stream")
    tid = pc.fill_null(t.column("tid"), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    stream = np.where(on_gpu, np.where(stream_arg >= 0, stream_arg, tid), tid)
    sarg = stream_arg
    has_msg = pc.or_(pc.is_valid(pc.struct_field(args, "In msg nelems")),
                     pc.is_valid(pc.struct_field(args, "Out msg nelems"))).to_numpy(zero_copy_only=False)
    has_msg = has_msg & pc.is_valid(args).to_numpy(zero_copy_only=False)
    nel = np.where(has_msg, np.maximum(arg("In msg nelems"), arg("Out msg nelems")), -1)
    dtype = np.where(has_msg, arg_text("dtype"), "")
    group = np.where(has_msg, arg("Group size"), -1)
    coll = np.where(has_msg, arg_text("Collective name"), "")
    grid = _dims_column(pc.struct_field(args, "grid"), on_gpu, cols)
    block = _dims_column(pc.struct_field(args, "block"), on_gpu, cols)
    name_values, name_codes = _encoded(t.column("name"), cols)
    names = name_values[name_codes]
    dims = np.full(len(rows), "", dtype=object)
    # Input Dims (nested lists of any depth) and the first Input type of each CPU op, read
    # from the bytes: a JSON type no column could hold
    row_of_event = np.full(len(starts), -1, dtype=np.int64)
    row_of_event[rows] = np.arange(len(rows))
    comm_rows = np.zeros(len(rows), dtype=bool)
    if not has_msg.all():
        comm_name = np.array([v.startswith(_COMM_OP_PREFIXES) for v in name_values.tolist()], dtype=bool)
        comm_rows = ~has_msg & ~on_gpu & comm_name[name_codes]
    first_type = {}
    found = [(m.start(), m.group(1)) for m in _INPUT_DIMS.finditer(region.data)]
    if found:
        at = np.fromiter((f[0] for f in found), dtype=np.int64, count=len(found))
        i = np.searchsorted(starts, at, side="right") - 1
        inside = (i >= 0) & (at < ends[np.maximum(i, 0)])
        r_of = np.where(inside, row_of_event[np.maximum(i, 0)], -1)
        intern = cols.intern
        for (_, text), r in zip(found, r_of.tolist()):
            if r >= 0 and not on_gpu[r]:
                # dims hold only digits, brackets, commas and whitespace: without the whitespace, the
                # text is orjson's (the other path's) to the byte
                dims[r] = intern(text.translate(None, b" \t\r\n").decode())
    if comm_rows.any():
        for m in _INPUT_TYPE.finditer(region.data):
            i = int(np.searchsorted(starts, m.start(), side="right")) - 1
            r = row_of_event[i] if i >= 0 and m.start() < ends[i] else -1
            if r >= 0 and comm_rows[r]:
                first_type[r] = m.group(1).decode()
        for r in np.flatnonzero(comm_rows).tolist():
            d = dims[r]
            nel[r] = _elements(orjson.loads(d)) if d else -1
            dtype[r] = _C10_DTYPES.get(first_type.get(r, ""), "")
            nm = names[r]
            coll[r] = nm.split(":", 1)[-1] if nm.startswith(("nccl:", "gloo:")) else ""
    if cols.device is None and on_gpu.any():
        dev = arg("device")[on_gpu]
        dev = dev[dev >= 0]
        if len(dev):
            cols.device = int(dev[0])
    if cols.base_us is None:
        cols.base_us = int(math.floor(ts[0]))
    p = cols.parts
    p["on_gpu"].append(on_gpu)
    p["stream"].append(stream)
    p["stream_arg"].append(sarg)
    p["name"].append(names)
    p["cat"].append(cat_np)
    # one classification per distinct (category, name, device) of the region
    _, cat_codes = _small_codes(cat_np)
    key = (cat_codes.astype(np.int64) * (len(name_values) + 1) + name_codes) * 2 + on_gpu
    uniq, inverse = np.unique(key, return_inverse=True)
    first = np.zeros(len(uniq), dtype=np.int64)
    first[inverse[::-1]] = np.arange(len(key))[::-1]
    kinds_u = objects([kind_of(cat_np[i], names[i], bool(on_gpu[i])) for i in first.tolist()])
    p["kind"].append(kinds_u[inverse.reshape(-1)])
    p["ts"].append(ts - cols.base_us)
    p["dur"].append(dur.astype(np.float64))
    p["correlation"].append(arg("correlation"))
    p["external_id"].append(arg("External id"))
    p["msg_nelems"].append(nel.astype(np.int64))
    p["dtype"].append(dtype.astype(object))
    p["group_size"].append(group.astype(np.int64))
    p["collective"].append(coll.astype(object))
    p["input_dims"].append(dims)
    p["grid"].append(grid.astype(object))
    p["block"].append(block.astype(object))
    return True


def _encoded(col, cols: _Columns) -> tuple[np.ndarray, np.ndarray]:
    """A string column as (its distinct values, interned; each row's index into them), null
    as ""; each distinct value decoded once."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(col)
    if hasattr(enc, "combine_chunks"):
        enc = enc.combine_chunks()
    values = [cols.intern(v) if v is not None else "" for v in enc.dictionary.to_pylist()]
    lookup = objects(values + [""])
    idx = pc.fill_null(enc.indices, len(values)).to_numpy(zero_copy_only=False).astype(np.int64)
    return lookup, idx


def _interned(col, cols: _Columns) -> np.ndarray:
    """A string column as an object array of interned str ("" for null)."""
    values, idx = _encoded(col, cols)
    return values[idx]


def _small_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of an object array with few distinct values (the categories)."""
    distinct = list(dict.fromkeys(values.tolist()))
    codes = np.zeros(len(values), dtype=np.int64)
    for i, v in enumerate(distinct[1:], start=1):
        codes[values == v] = i
    return objects(distinct), codes


def _dims_column(col, rows: np.ndarray, cols: _Columns) -> np.ndarray:
    """A list-of-ints column as the JSON text of each value on `rows` ("" elsewhere and for null)."""
    import pyarrow as pa

    out = np.full(len(col), "", dtype=object)
    seen: dict[tuple, str] = {}
    where = np.flatnonzero(rows)
    if not len(where):
        return out
    for i, v in zip(where.tolist(), col.take(pa.array(where)).to_pylist()):
        if v is not None:
            key = tuple(v)
            text = seen.get(key)
            if text is None:
                text = seen[key] = cols.intern(orjson.dumps(v).decode())
            out[i] = text
    return out
