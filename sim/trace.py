"""The trace record shared by the simulator and the real kernel.

A trace is a header (configuration, source, hardware profile, free-form metadata) and a
list of spans `{rank, stream, kind, step, start_s, end_s, flops, bytes, q_chunks,
kv_chunks}` as defined in DESIGN.md ("One trace for simulation and measurement").
Everything downstream (metrics, comparison, figures, export) reads this record.

Streams and kinds:
- compute: kind "fwd" or "bwd"; flops is the work done.
- send / recv: kind "kv" (K and V of a shard) or "dkv" (the dK/dV accumulators);
  a send and its matching recv share (kind, step, kv_chunks) and the pair of ranks.
  `peer` names the other end.
- wait: the compute stream blocked. kind "kv"/"dkv" while a transfer it needs is in
  flight (exposed communication), kind "idle" for anything else (a late peer, the end
  of the run).

Files are versioned JSON, validated field by field on load, so that a hostile or
truncated file gives one clear error instead of garbage downstream.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from sim.errors import RingsimError

FORMAT = "ringsim-trace"
VERSION = 1
STREAMS = ("compute", "send", "recv", "wait")
KINDS = {
    "compute": ("fwd", "bwd"),
    "send": ("kv", "dkv"),
    "recv": ("kv", "dkv"),
    "wait": ("kv", "dkv", "idle"),
}
SOURCES = ("simulated", "measured")
# A trace file larger than this is refused rather than parsed into memory.
MAX_TRACE_FILE_BYTES = 512 * 1024 * 1024


@dataclass(slots=True)
class Span:
    """One interval on one rank's stream."""

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


@dataclass
class Trace:
    """A header and the spans of one run (simulated or measured)."""

    source: str
    world_size: int
    spans: list[Span]
    config: dict[str, Any] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise RingsimError(f"trace source must be one of {SOURCES}, got {self.source!r}")

    @property
    def makespan_s(self) -> float:
        """Time from the first event to the last on any rank."""
        if not self.spans:
            return 0.0
        return max(s.end_s for s in self.spans) - min(s.start_s for s in self.spans)

    def by_rank(self, stream: str | None = None) -> list[list[Span]]:
        out: list[list[Span]] = [[] for _ in range(self.world_size)]
        for s in self.spans:
            if stream is None or s.stream == stream:
                out[s.rank].append(s)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "source": self.source,
            "world_size": self.world_size,
            "config": self.config,
            "hardware": self.hardware,
            "meta": self.meta,
            "spans": [s.to_dict() for s in self.spans],
        }

    @classmethod
    def from_dict(cls, data: Any) -> "Trace":
        """Validate a decoded JSON object and build the trace; RingsimError on any flaw."""
        if not isinstance(data, dict):
            raise RingsimError("trace: top level must be a JSON object")
        if data.get("format") != FORMAT:
            raise RingsimError(f"trace: not a ringsim trace (format is {data.get('format')!r})")
        if data.get("version") != VERSION:
            raise RingsimError(f"trace: unsupported version {data.get('version')!r} (this ringsim reads {VERSION})")
        world = data.get("world_size")
        if not _is_int(world) or not 1 <= world <= 1 << 20:
            raise RingsimError(f"trace: world_size must be a positive integer, got {world!r}")
        source = data.get("source")
        if source not in SOURCES:
            raise RingsimError(f"trace: source must be one of {SOURCES}, got {source!r}")
        for key in ("config", "hardware", "meta"):
            if not isinstance(data.get(key, {}), dict):
                raise RingsimError(f"trace: {key} must be a JSON object")
        raw = data.get("spans")
        if not isinstance(raw, list):
            raise RingsimError("trace: spans must be a list")
        spans = [_span_from_dict(i, d, world) for i, d in enumerate(raw)]
        return cls(source, world, spans, data.get("config", {}), data.get("hardware", {}),
                   data.get("meta", {}))

    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> None:
        write_json(path, self.to_dict(), overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Trace":
        return cls.from_dict(read_json(path, what="trace"))

    @classmethod
    def loads(cls, text: str | bytes) -> "Trace":
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise RingsimError(f"trace: not valid JSON ({e})") from None
        return cls.from_dict(data)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) and math.isfinite(x)


def _span_from_dict(i: int, d: Any, world: int) -> Span:
    where = f"trace: span {i}"
    if not isinstance(d, dict):
        raise RingsimError(f"{where} is not an object")
    rank, stream, kind, step = d.get("rank"), d.get("stream"), d.get("kind"), d.get("step")
    if not _is_int(rank) or not 0 <= rank < world:
        raise RingsimError(f"{where}: rank must be an integer in [0, {world}), got {rank!r}")
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
    if not _is_int(peer) or not -1 <= peer < world:
        raise RingsimError(f"{where}: peer must be -1 or a rank, got {peer!r}")
    return Span(rank, stream, kind, step, vals["start_s"], vals["end_s"], vals["flops"],
                vals["bytes"], chunks[0], chunks[1], peer)


def read_json(path: str | os.PathLike, *, what: str = "file",
              max_bytes: int = MAX_TRACE_FILE_BYTES) -> Any:
    """Read a JSON file, turning every I/O or parse failure into one RingsimError."""
    try:
        size = os.path.getsize(path)
        if size > max_bytes:
            raise RingsimError(f"{what} {path}: {size} bytes is over the {max_bytes}-byte limit")
        with open(path, "rb") as f:
            return json.loads(f.read())
    except RingsimError:
        raise
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
        raise RingsimError(f"cannot read {what} {path}: {e}") from None


def write_json(path: str | os.PathLike, obj: Any, *, overwrite: bool = False) -> None:
    """Write JSON atomically; refuse to replace an existing file unless asked to."""
    if os.path.exists(path) and not overwrite:
        raise RingsimError(f"{path} exists; pass --force to overwrite it")
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, separators=(",", ":"), allow_nan=False)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise RingsimError(f"cannot write {path}: {e}") from None


def to_chrome_trace(trace: Trace) -> dict[str, Any]:
    """Chrome trace event format: one process per rank, one thread per stream, µs."""
    events: list[dict[str, Any]] = []
    tids = {name: i for i, name in enumerate(STREAMS)}
    for rank in range(trace.world_size):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                       "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
        for name, tid in tids.items():
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                           "args": {"name": name}})
    t0 = min((s.start_s for s in trace.spans), default=0.0)
    for s in trace.spans:
        args: dict[str, Any] = {"step": s.step, "q_chunks": list(s.q_chunks),
                                "kv_chunks": list(s.kv_chunks)}
        if s.flops:
            args["flops"] = s.flops
        if s.bytes:
            args["bytes"] = s.bytes
        if s.peer >= 0:
            args["peer"] = s.peer
        events.append({
            "name": f"{s.kind} step {s.step}",
            "cat": s.stream,
            "ph": "X",
            "pid": s.rank,
            "tid": tids[s.stream],
            "ts": (s.start_s - t0) * 1e6,
            "dur": (s.end_s - s.start_s) * 1e6,
            "args": args,
        })
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": trace.source, "config": trace.config,
                          "hardware": trace.hardware}}
