"""The trace record shared by the simulator and the real kernels.

A trace is a header (configuration, source, hardware profile, free-form metadata) and a
table of spans held as columns, one numpy array per field (`SpanTable`): rank, stream,
kind, step, start_s, end_s, flops, bytes, peer, q_chunks, kv_chunks, as defined in
docs/design.md ("One trace for simulation and measurement"). Everything downstream
(metrics, comparison, figures, export) reads the columns; `Span` objects are made only
where a person needs one record at a time (`Trace.spans`, made on first use).

Streams and kinds:
- compute: kind "fwd" or "bwd"; flops is the work done.
- send / recv: kind "kv" (K and V of a shard) or "dkv" (the dK/dV accumulators) on a
  ring; "ag", "rs", "a2a" for a flow of an all-gather, a reduce-scatter or an
  all-to-all; a send and its matching recv share (kind, step, kv_chunks) and the pair
  of ranks. `peer` names the other end.
- wait: the compute stream blocked. kind "kv"/"dkv"/"ag"/"rs"/"a2a" while a transfer it
  needs is in flight (exposed communication), kind "idle" for anything else (a late
  peer, the end of the run). Both producers split a wait the same way
  (sim.engine.record.wait_pieces).

Files. Version 3 stores the columns: a `.json` file holds them as JSON arrays; any other
name (`.npz` is the usual one) a zip of NumPy arrays, several times smaller and faster
to load. The header's `n_gpus` is the number of GPUs (ranks) in the run. Version 2 files
(the same, with that count under `world_size`) and version 1 files (a JSON list of span
objects, also `world_size`) are still read. Every file is validated field by field on
load, so that a hostile or truncated file gives one clear error instead of garbage
downstream.
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from sim.errors import RingsimError
from sim.files import read_bytes, write_bytes, write_json
from sim.inputs import checked_npz_members, parse_json, read_npy_member

FORMAT = "ringsim-trace"
VERSION = 3
READS = (1, 2, 3)
ARRAY_VERSIONS = (2, 3)
"""Versions whose columns are arrays (JSON or a NumPy zip); version 1 is a list of spans."""
STREAMS = ("compute", "send", "recv", "wait")
"""Stream names by code (the `stream` column)."""
COMPUTE, SEND, RECV, WAIT = range(4)
KIND_NAMES = ("fwd", "bwd", "kv", "dkv", "idle", "ag", "rs", "a2a", "pp")
"""Span kind names by code (the `kind` column); the collectives' kinds come after
"idle", and a training step's sends between pipeline stages (`pp`) after them, so that
the codes of older files' kinds never changed."""
FWD, BWD, KV, DKV, IDLE, AG, RS, A2A, PP = range(9)
TRANSFER_KINDS = ("kv", "dkv", "ag", "rs", "a2a", "pp")
KINDS = {
    "compute": ("fwd", "bwd"),
    "send": TRANSFER_KINDS,
    "recv": TRANSFER_KINDS,
    "wait": TRANSFER_KINDS + ("idle",),
}
SOURCES = ("simulated", "measured")
_INT = {int}
"""The one element type a chunk set is kept as it comes with (SpanTable)."""
# A trace file larger than this is refused rather than parsed into memory; so is an
# archive whose members would unpack to more than MAX_TRACE_ARRAY_BYTES.
MAX_TRACE_ARRAY_BYTES = 2 * 1024 ** 3
MAX_TRACE_FILE_BYTES = 512 * 1024 ** 2
"""The largest trace file read (an archive holds a 1,024-GPU forward-backward ring, 9.4M spans,
in about 200 MB)."""
MAX_TRACE_JSON_BYTES = 256 * 1024 ** 2
"""The largest JSON trace parsed: its numbers become Python objects, several times the
text's size in memory; a larger run is saved and read as an archive (`.npz`)."""
MAX_TRACE_HEADER_BYTES = 64 * 1024 ** 2
"""An archive's header.json: the configuration, the hardware and the chunk sets."""
COLUMN_TYPES = {
    "rank": np.int32, "stream": np.int8, "kind": np.int8, "step": np.int32,
    "start_s": np.float64, "end_s": np.float64, "flops": np.float64, "bytes": np.float64,
    "peer": np.int32, "q_chunks": np.int32, "kv_chunks": np.int32,
}
"""The columns of a span table and their types. q_chunks and kv_chunks index
`chunk_sets` (-1: no chunks)."""
_ZIP_MAGIC = b"PK\x03\x04"
_VALID_KIND = np.zeros((len(STREAMS), len(KIND_NAMES)), dtype=bool)
for _s, _names in KINDS.items():
    for _k in _names:
        _VALID_KIND[STREAMS.index(_s), KIND_NAMES.index(_k)] = True


@dataclass(slots=True)
class Span:
    """One interval on one rank's stream (one row of a SpanTable)."""

    rank: int
    stream: str
    kind: str
    step: int
    start_s: float
    end_s: float
    flops: float = 0.0
    bytes: float = 0.0
    q_chunks: tuple[int, ...] = ()
    kv_chunks: tuple[int, ...] = ()
    peer: int = -1
    """The other end of a send or recv; -1 for compute and wait."""

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["q_chunks"] = list(self.q_chunks)
        d["kv_chunks"] = list(self.kv_chunks)
        return d


class SpanTable:
    """Spans as columns: entry i of every array describes span i (see COLUMN_TYPES)."""

    __slots__ = (*COLUMN_TYPES, "chunk_sets")

    def __init__(self, *, chunk_sets: Sequence[tuple[int, ...]] = (), **columns: Any):
        if set(columns) != set(COLUMN_TYPES):
            raise ValueError(f"a span table needs the columns {sorted(COLUMN_TYPES)}")
        n = None
        for name, dtype in COLUMN_TYPES.items():
            col = np.asarray(columns[name], dtype=dtype)
            if col.ndim != 1 or (n is not None and len(col) != n):
                raise ValueError(f"column {name} must be one-dimensional, one entry per span")
            n = len(col)
            setattr(self, name, col)
        # a tuple of ints as it is (the engine's sets: up to thousands of chunks each), others made so
        self.chunk_sets = tuple(s if type(s) is tuple and set(map(type, s)) <= _INT else tuple(map(int, s))
                                for s in chunk_sets)

    def __len__(self) -> int:
        return len(self.rank)

    @property
    def duration_s(self) -> np.ndarray:
        return self.end_s - self.start_s

    @classmethod
    def empty(cls) -> "SpanTable":
        return cls(**{name: [] for name in COLUMN_TYPES})

    @classmethod
    def from_spans(cls, spans: Iterable[Span]) -> "SpanTable":
        """The columns of Span records (in their order)."""
        spans = list(spans)
        sets: dict[tuple[int, ...], int] = {}

        def index(chunks: tuple[int, ...]) -> int:
            return sets.setdefault(tuple(chunks), len(sets)) if chunks else -1

        stream = {name: i for i, name in enumerate(STREAMS)}
        kind = {name: i for i, name in enumerate(KIND_NAMES)}
        cols = {
            "rank": [s.rank for s in spans], "stream": [stream[s.stream] for s in spans],
            "kind": [kind[s.kind] for s in spans], "step": [s.step for s in spans],
            "start_s": [s.start_s for s in spans], "end_s": [s.end_s for s in spans],
            "flops": [s.flops for s in spans], "bytes": [s.bytes for s in spans],
            "peer": [s.peer for s in spans], "q_chunks": [index(s.q_chunks) for s in spans],
            "kv_chunks": [index(s.kv_chunks) for s in spans],
        }
        return cls(**cols, chunk_sets=list(sets))

    def to_spans(self) -> list[Span]:
        """One Span per row (for a person or a test reading records one at a time)."""
        sets = np.empty(len(self.chunk_sets) + 1, dtype=object)
        for i, chunks in enumerate(self.chunk_sets):
            sets[i] = chunks
        sets[-1] = ()
        return list(map(Span, self.rank.tolist(), np.array(STREAMS, dtype=object)[self.stream].tolist(),
                        np.array(KIND_NAMES, dtype=object)[self.kind].tolist(), self.step.tolist(),
                        self.start_s.tolist(), self.end_s.tolist(), self.flops.tolist(),
                        self.bytes.tolist(), sets[self.q_chunks].tolist(), sets[self.kv_chunks].tolist(),
                        self.peer.tolist()))

    def take(self, index: np.ndarray) -> "SpanTable":
        """The rows `index` selects (a boolean mask or positions), in that order."""
        return SpanTable(**{name: getattr(self, name)[index] for name in COLUMN_TYPES},
                         chunk_sets=self.chunk_sets)

    @classmethod
    def concat(cls, tables: Sequence["SpanTable"]) -> "SpanTable":
        """Rows of every table in turn; chunk sets merged."""
        sets: dict[tuple[int, ...], int] = {}
        remapped = []
        for t in tables:
            ids = np.array([sets.setdefault(s, len(sets)) for s in t.chunk_sets] + [-1], dtype=np.int32)
            remapped.append((ids[t.q_chunks], ids[t.kv_chunks]))
        cols = {name: np.concatenate([getattr(t, name) for t in tables]) if tables else []
                for name in COLUMN_TYPES}
        if tables:
            cols["q_chunks"] = np.concatenate([q for q, _ in remapped])
            cols["kv_chunks"] = np.concatenate([k for _, k in remapped])
        return cls(**cols, chunk_sets=list(sets))

    def chunk_matrix(self, column: str, rows: np.ndarray | None = None) -> np.ndarray:
        """(spans, widest) chunk ids of `column` ('q_chunks' or 'kv_chunks'), -1 padded: of
        every span, or of the spans `rows` (indices or a mask) alone."""
        width = max((len(s) for s in self.chunk_sets), default=0)
        table = np.full((len(self.chunk_sets) + 1, width), -1, dtype=np.int32)
        for i, chunks in enumerate(self.chunk_sets):
            table[i, :len(chunks)] = chunks
        ids = getattr(self, column)
        return table[ids if rows is None else ids[rows]]


class Trace:
    """A header and the spans of one run (simulated or measured)."""

    def __init__(self, source: str, n_gpus: int, spans: SpanTable | Iterable[Span],
                 config: dict[str, Any] | None = None, hardware: dict[str, Any] | None = None,
                 meta: dict[str, Any] | None = None):
        if source not in SOURCES:
            raise RingsimError(f"trace source must be one of {SOURCES}, got {source!r}")
        self.source = source
        self.n_gpus = n_gpus
        self.columns = spans if isinstance(spans, SpanTable) else SpanTable.from_spans(spans)
        self.config = config if config is not None else {}
        self.hardware = hardware if hardware is not None else {}
        self.meta = meta if meta is not None else {}
        self._spans: list[Span] | None = None

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def spans(self) -> list[Span]:
        """The spans as records, made from the columns on first use."""
        if self._spans is None:
            self._spans = self.columns.to_spans()
        return self._spans

    @property
    def makespan_s(self) -> float:
        """Time from the first event to the last on any rank."""
        c = self.columns
        if not len(c):
            return 0.0
        return float(c.end_s.max()) - float(c.start_s.min())

    def by_rank(self, stream: str | None = None) -> list[list[Span]]:
        out: list[list[Span]] = [[] for _ in range(self.n_gpus)]
        for s in self.spans:
            if stream is None or s.stream == stream:
                out[s.rank].append(s)
        return out

    def header(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "source": self.source,
                "n_gpus": self.n_gpus, "config": self.config,
                "hardware": self.hardware, "meta": self.meta}

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the header, the name tables and the columns."""
        c = self.columns
        return {**self.header(), "streams": list(STREAMS), "kinds": list(KIND_NAMES),
                "chunk_sets": [list(s) for s in c.chunk_sets],
                "columns": {name: getattr(c, name).tolist() for name in COLUMN_TYPES}}

    @classmethod
    def from_dict(cls, data: Any) -> "Trace":
        """Validate a decoded JSON object (any version in READS) and build the trace;
        RingsimError on any flaw."""
        n_gpus, source = _check_header(data)
        if data["version"] == 1:
            raw = data.get("spans")
            if not isinstance(raw, list):
                raise RingsimError("trace: spans must be a list")
            table = SpanTable.from_spans(_span_from_dict(i, d, n_gpus) for i, d in enumerate(raw))
        else:
            table = _table_from_json(data)
            _check_table(table, n_gpus)
        return cls(source, n_gpus, table, data.get("config", {}), data.get("hardware", {}),
                   data.get("meta", {}))

    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> None:
        """Write the current version: JSON arrays for a `.json` name, a NumPy zip otherwise."""
        if str(path).endswith(".json"):
            write_json(path, self.to_dict(), overwrite=overwrite)
        else:
            write_bytes(path, self.to_bytes(), overwrite=overwrite)

    def to_bytes(self) -> bytes:
        """The archive: header.json and one .npy member per column."""
        c = self.columns
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            head = {**self.header(), "streams": list(STREAMS), "kinds": list(KIND_NAMES),
                    "chunk_sets": [list(s) for s in c.chunk_sets], "n_spans": len(c)}
            z.writestr("header.json", json.dumps(head, separators=(",", ":"), allow_nan=False))
            for name in COLUMN_TYPES:
                member = io.BytesIO()
                np.lib.format.write_array(member, getattr(c, name), allow_pickle=False)
                z.writestr(f"{name}.npy", member.getvalue())
        return buf.getvalue()

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Trace":
        data = read_bytes(path, what="trace", max_bytes=MAX_TRACE_FILE_BYTES)
        try:
            return cls.loads(data)
        except RingsimError as e:
            raise RingsimError(f"cannot read trace {path}: {e}") from None

    @classmethod
    def loads(cls, data: str | bytes) -> "Trace":
        """A trace from a file's contents: an archive or JSON (any version in READS)."""
        if isinstance(data, bytes) and data.startswith(_ZIP_MAGIC):
            return _from_archive(data)
        if data.lstrip()[:1] not in (b"{", b"[", "{", "["):
            # not a JSON document either: say what a trace file is, not how JSON failed
            raise RingsimError("trace: not a ringsim trace: neither an archive (.npz, a zip of arrays) "
                               "nor a JSON document")
        return cls.from_dict(parse_json(data, what="trace", max_bytes=MAX_TRACE_JSON_BYTES))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) and math.isfinite(x)


def _check_header(data: Any) -> tuple[int, str]:
    if not isinstance(data, dict):
        raise RingsimError("trace: top level must be a JSON object")
    if data.get("format") != FORMAT:
        raise RingsimError(f"trace: not a ringsim trace (format is {data.get('format')!r})")
    if data.get("version") not in READS:
        raise RingsimError(f"trace: unsupported version {data.get('version')!r} "
                           f"(this ringsim reads {', '.join(map(str, READS))})")
    key = "n_gpus" if data["version"] >= 3 else "world_size"
    n_gpus = data.get(key)
    if not _is_int(n_gpus) or not 1 <= n_gpus <= 1 << 20:
        raise RingsimError(f"trace: {key} must be a positive integer, got {n_gpus!r}")
    source = data.get("source")
    if source not in SOURCES:
        raise RingsimError(f"trace: source must be one of {SOURCES}, got {source!r}")
    for key in ("config", "hardware", "meta"):
        if not isinstance(data.get(key, {}), dict):
            raise RingsimError(f"trace: {key} must be a JSON object")
    return n_gpus, source


def _name_codes(data: dict[str, Any], key: str, known: tuple[str, ...]) -> np.ndarray:
    """Map a file's name table onto ours: file code -> our code."""
    names = data.get(key)
    if not isinstance(names, list) or not all(isinstance(x, str) for x in names) or len(names) > 256:
        raise RingsimError(f"trace: {key} must be a list of names")
    unknown = [x for x in names if x not in known]
    if unknown:
        raise RingsimError(f"trace: unknown {key[:-1]} {unknown[0]!r}")
    return np.array([known.index(x) for x in names], dtype=np.int8)


def _chunk_sets(data: dict[str, Any]) -> list[tuple[int, ...]]:
    sets = data.get("chunk_sets", [])
    if not isinstance(sets, list) or not all(
            isinstance(s, list) and all(_is_int(x) and x >= 0 for x in s) for s in sets):
        raise RingsimError("trace: chunk_sets must be a list of lists of non-negative integers")
    return [tuple(s) for s in sets]


def _recode(table: dict[str, np.ndarray], data: dict[str, Any]) -> None:
    """Turn the file's stream and kind codes into ours, refusing codes out of range."""
    for col, key, known in (("stream", "streams", STREAMS), ("kind", "kinds", KIND_NAMES)):
        codes = _name_codes(data, key, known)
        raw = table[col]
        if raw.size and (raw.min() < 0 or raw.max() >= len(codes)):
            raise RingsimError(f"trace: {col} codes must index {key}")
        table[col] = codes[raw]


def _table_from_json(data: dict[str, Any]) -> SpanTable:
    cols = data.get("columns")
    if not isinstance(cols, dict):
        raise RingsimError("trace: columns must be a JSON object")
    table: dict[str, np.ndarray] = {}
    for name, dtype in COLUMN_TYPES.items():
        raw = cols.get(name)
        if not isinstance(raw, list):
            raise RingsimError(f"trace: column {name} must be a list")
        floats = np.dtype(dtype).kind == "f"
        ok = all(_is_num(x) for x in raw) if floats else all(_is_int(x) for x in raw)
        if not ok:
            what = "finite numbers" if floats else "integers"
            raise RingsimError(f"trace: column {name} must hold {what}")
        arr = np.array(raw, dtype=np.float64 if floats else np.int64)
        if not floats and arr.size and (arr.min() < -(1 << 31) or arr.max() >= 1 << 31):
            raise RingsimError(f"trace: column {name} is out of range")
        table[name] = arr
    _recode(table, data)
    return _make_table(table, _chunk_sets(data))


def _make_table(table: dict[str, np.ndarray], sets: list[tuple[int, ...]]) -> SpanTable:
    try:
        out = SpanTable(**table, chunk_sets=sets)
    except ValueError as e:
        raise RingsimError(f"trace: {e}") from None
    for name in ("q_chunks", "kv_chunks"):
        col = getattr(out, name)
        if col.size and (col.min() < -1 or col.max() >= len(sets)):
            raise RingsimError(f"trace: {name} must index chunk_sets or be -1")
    return out


def _from_archive(data: bytes) -> Trace:
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        try:
            infos = checked_npz_members(z, len(data), max_bytes=MAX_TRACE_ARRAY_BYTES)
        except RingsimError as e:
            raise RingsimError(f"trace: {e}") from None
        if "header.json" not in infos:
            raise RingsimError("trace: archive has no header.json")
        head = parse_json(z.read("header.json"), what="trace: header.json", max_bytes=MAX_TRACE_HEADER_BYTES)
        n_gpus, source = _check_header(head)
        if head["version"] not in ARRAY_VERSIONS:
            raise RingsimError(f"trace: an archive must be version {' or '.join(map(str, ARRAY_VERSIONS))}")
        table: dict[str, np.ndarray] = {}
        for name, dtype in COLUMN_TYPES.items():
            member = f"{name}.npy"
            if member not in infos:
                raise RingsimError(f"trace: archive has no column {name}")
            try:
                arr = read_npy_member(z, infos[member])
            except RingsimError as e:
                raise RingsimError(f"trace: {e}") from None
            if arr.dtype != np.dtype(dtype) or arr.ndim != 1:
                raise RingsimError(f"trace: column {name} must be a 1-d {np.dtype(dtype).name} array")
            table[name] = arr
        if not np.isfinite(np.concatenate([table[k] for k in ("start_s", "end_s", "flops", "bytes")])).all():
            raise RingsimError("trace: times, flops and bytes must be finite numbers")
        _recode(table, head)
        out = _make_table(table, _chunk_sets(head))
    except RingsimError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError) as e:
        raise RingsimError(f"trace: damaged archive ({e})") from None
    _check_table(out, n_gpus)
    return Trace(source, n_gpus, out, head.get("config", {}), head.get("hardware", {}), head.get("meta", {}))


def _check_table(c: SpanTable, n_gpus: int) -> None:
    """What the version-1 reader checks span by span, over whole columns."""
    def first(bad: np.ndarray) -> int:
        return int(np.flatnonzero(bad)[0])

    checks = [
        ((c.rank < 0) | (c.rank >= n_gpus), f"rank must be an integer in [0, {n_gpus})"),
        (~_VALID_KIND[c.stream, c.kind], "kind is not valid on its stream"),
        (c.step < 0, "step must be a non-negative integer"),
        (c.end_s < c.start_s, "end_s is before start_s"),
        ((c.flops < 0) | (c.bytes < 0), "flops and bytes must be non-negative"),
        ((c.peer < -1) | (c.peer >= n_gpus), "peer must be -1 or a rank"),
    ]
    for bad, what in checks:
        if bad.any():
            raise RingsimError(f"trace: span {first(bad)}: {what}")


def _span_from_dict(i: int, d: Any, n_gpus: int) -> Span:
    where = f"trace: span {i}"
    if not isinstance(d, dict):
        raise RingsimError(f"{where} is not an object")
    rank, stream, kind, step = d.get("rank"), d.get("stream"), d.get("kind"), d.get("step")
    if not _is_int(rank) or not 0 <= rank < n_gpus:
        raise RingsimError(f"{where}: rank must be an integer in [0, {n_gpus}), got {rank!r}")
    if stream not in STREAMS:
        raise RingsimError(f"{where}: stream must be one of {STREAMS}, got {stream!r}")
    if kind not in KINDS[stream]:
        raise RingsimError(f"{where}: kind {kind!r} is not valid on stream {stream!r}")
    if not _is_int(step) or step < 0:
        raise RingsimError(f"{where}: step must be a non-negative integer, got {step!r}")
    vals = {}
    for key in ("start_s", "end_s", "flops", "bytes"):
        v = d.get(key, 0.0 if key in ("flops", "bytes") else None)
        if not _is_num(v):
            raise RingsimError(f"{where}: {key} must be a finite number, got {v!r}")
        vals[key] = float(v)
    if vals["end_s"] < vals["start_s"]:
        raise RingsimError(f"{where}: end_s is before start_s")
    if vals["flops"] < 0 or vals["bytes"] < 0:
        raise RingsimError(f"{where}: flops and bytes must be non-negative")
    chunks = []
    for key in ("q_chunks", "kv_chunks"):
        c = d.get(key, [])
        if not isinstance(c, list) or not all(_is_int(x) and x >= 0 for x in c):
            raise RingsimError(f"{where}: {key} must be a list of non-negative integers")
        chunks.append(tuple(c))
    peer = d.get("peer", -1)
    if not _is_int(peer) or not -1 <= peer < n_gpus:
        raise RingsimError(f"{where}: peer must be -1 or a rank, got {peer!r}")
    return Span(rank, stream, kind, step, vals["start_s"], vals["end_s"], vals["flops"],
                vals["bytes"], chunks[0], chunks[1], peer)


def to_chrome_trace(trace: Trace) -> dict[str, Any]:
    """Chrome trace event format: one process per rank, one thread per stream, µs."""
    events: list[dict[str, Any]] = []
    for rank in range(trace.n_gpus):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                       "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
        for tid, name in enumerate(STREAMS):
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                           "args": {"name": name}})
    c = trace.columns
    t0 = float(c.start_s.min()) if len(c) else 0.0
    sets = [list(s) for s in c.chunk_sets] + [[]]
    kinds, streams = np.array(KIND_NAMES), np.array(STREAMS)
    rows = zip(c.rank.tolist(), c.stream.tolist(), streams[c.stream].tolist(), kinds[c.kind].tolist(),
               c.step.tolist(), ((c.start_s - t0) * 1e6).tolist(), (c.duration_s * 1e6).tolist(),
               c.flops.tolist(), c.bytes.tolist(), c.peer.tolist(), c.q_chunks.tolist(), c.kv_chunks.tolist())
    for rank, tid, stream, kind, step, ts, dur, flops, nbytes, peer, q, kv in rows:
        args: dict[str, Any] = {"step": step, "q_chunks": sets[q], "kv_chunks": sets[kv]}
        if flops:
            args["flops"] = flops
        if nbytes:
            args["bytes"] = nbytes
        if peer >= 0:
            args["peer"] = peer
        events.append({"name": f"{kind} step {step}", "cat": stream, "ph": "X", "pid": rank,
                       "tid": tid, "ts": ts, "dur": dur, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": trace.source, "config": trace.config,
                          "hardware": trace.hardware}}
