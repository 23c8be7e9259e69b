"""A run as torch.profiler recorded it: Kineto Chrome-trace JSON, one file per rank, read into
one normalized table of events (Events) with the run's ranks, devices and iterations (Run).

Kineto writes one JSON object per rank: `deviceProperties`, `distributedInfo` (rank, world
size, process groups), then `traceEvents`, a list of complete events (`ph` "X") whose `cat`
says what each is: `kernel`, `gpu_memcpy`, `gpu_memset` on a GPU stream (`args.stream`, also
the `tid`), `cpu_op`, `user_annotation` (ProfilerStep#N among them), `cuda_runtime` and
`cuda_driver` on a host thread; `args.correlation` links a launch to its kernel (the `ac2g`
flow says the same), `args["External id"]` a kernel to the operator that issued it. Times are
microseconds after `baseTimeNanoseconds` (absent: after the Unix epoch).

Each file is read as a stream into columns (sim.profiler.scan, sim.profiler.columns:
docs/traces.md); this module puts the ranks of one run together and checks that they are
one run. Ranks' clocks are aligned on their collective kernels (NCCL ends a collective on
every rank at once) and every time is given in seconds from the run's first event.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sim.files import check_output, write_bytes
from sim.profiler.columns import RankFile, objects, read_file
from sim.profiler.kernels import COMM_KINDS, classify_gpu, collective_kind, step_number
from sim.reasons import Clause, clause, english, refusal

MAX_WORLD_SIZE = 1 << 20
ALIGN_MIN_S = 1e-3
"""A clock offset estimated from collective kernels is removed when larger than this: below
it, it is within how unevenly a collective ends across ranks."""

ALIGN_STEP_MIN_S = 1.0
"""An offset estimated from ProfilerStep starts (no collective kernels) is removed only above
this: processes of one run start a step milliseconds apart, clocks of two hosts can differ more."""

SUSPECT_OFFSET_S = 10.0
"""An offset this large is removed but called out: hosts kept in step by NTP or PTP differ by
milliseconds."""

MIXED_RUN_S = 600.0
"""Ranks whose clocks differ by more than this were not recorded together (different runs)."""

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
    """The row's `stream` argument as recorded: a GPU row's stream, on a host operator the
    stream Inductor's Triton launch records (which HTA counts as a GPU event), else -1."""

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
    note_clauses: tuple[Clause, ...] = field(default=())
    """What a person should know about the reading (clocks aligned, ranks partial, ...), as
    sim.reasons clauses."""

    @property
    def notes(self) -> tuple[str, ...]:
        """The notes in English, as the command line prints them."""
        return tuple(english(c) for c in self.note_clauses)

    def rank_events(self, rank: int) -> Events:
        return self.events.take(self.events.rank == rank)


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
                raise refusal("profiler.empty-folder", path=str(p))
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise refusal("profiler.no-such-path", path=str(p))
    if not files:
        raise refusal("profiler.no-files")
    return files


_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.I)


def _rank_of(rf: RankFile, n_files: int) -> tuple[int, int | None]:
    """(rank, world size or None) from distributedInfo, else the file's name."""
    d = rf.dist
    rank, world = d.get("rank"), d.get("world_size")
    if isinstance(world, bool) or not isinstance(world, int):
        world = None
    elif not 1 <= world <= MAX_WORLD_SIZE:
        raise refusal("profiler.world-size", path=str(rf.path), world=world)
    if isinstance(rank, int) and not isinstance(rank, bool):
        if rank < 0 or (world is not None and rank >= world):
            # a world the file does not give is written as Python writes None
            raise refusal("profiler.rank-of-world", path=str(rf.path), rank=rank, world=str(world))
        return rank, world
    if n_files == 1:
        return 0, world
    m = _RANK_IN_NAME.search(rf.path.name)
    if m and int(m.group(1)) <= MAX_WORLD_SIZE:
        return int(m.group(1)), world
    raise refusal("profiler.no-rank", path=str(rf.path))


def _group_signature(rf: RankFile) -> Any:
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
    read = [read_file(f) for f in files]
    by_rank: dict[int, RankFile] = {}
    worlds: dict[int, int | None] = {}
    given = [(rf, *_rank_of(rf, len(read))) for rf in read]
    known = {w for _, _, w in given if w is not None}
    if len(known) > 1:
        raise refusal("profiler.mixed-worlds",
                      worlds=[clause("profiler.world-of", world=w, path=rf.path.name) for rf, _, w in given])
    for rf, rank, world in given:
        if rank in by_rank:
            raise refusal("profiler.rank-twice", rank=rank, path=str(by_rank[rank].path), other_path=str(rf.path))
        by_rank[rank] = rf
        worlds[rank] = world
    ranks = tuple(sorted(by_rank))
    sigs = {r: _group_signature(by_rank[r]) for r in ranks}
    distinct = {s for s in sigs.values() if s is not None}
    if len(distinct) > 1:
        raise refusal("profiler.mixed-groups", code="distributedInfo pg_config")
    world = known.pop() if known else max(ranks) + 1
    notes: list[Clause] = []
    missing = [r for r in range(world) if r not in by_rank]
    if missing and len(ranks) > 1 and not partial:
        raise refusal("profiler.ranks-missing" if len(missing) > 1 else "profiler.rank-missing",
                      rank_list=_listing(missing), world=world, given_list=_listing(list(ranks)), code="--partial")
    if missing:
        notes.append(clause("profiler.ranks-read" if len(ranks) > 1 else "profiler.rank-read",
                            rank_list=_listing(list(ranks)), world=world, missing=len(missing)))
    events, iterations, offsets, more = _assemble(by_rank)
    notes.extend(more)
    unknown = _unknown_kernels(events)
    devices = {r: _device(by_rank[r]) for r in ranks}
    return Run(ranks=ranks, world_size=world, devices=devices, clock_offsets_s=offsets, iterations=iterations,
               events=events, unknown_kernels=unknown, sources={r: str(by_rank[r].path) for r in ranks},
               note_clauses=tuple(notes))


def _listing(xs: list[int]) -> str:
    return ", ".join(str(x) for x in xs) if len(xs) <= 8 else f"{', '.join(str(x) for x in xs[:8])}, ..."


def _device(rf: RankFile) -> dict:
    """The deviceProperties entry of the GPU the rank's kernels ran on (their args' device)."""
    props = [p for p in rf.meta.get("deviceProperties") or () if isinstance(p, dict)]
    if not props or rf.device is None:
        return {}
    for p in props:
        if p.get("id") == rf.device:
            return dict(p)
    return dict(props[0]) if len(props) == 1 else {}


def _assemble(by_rank: dict[int, RankFile]):
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
    cols = {k: (v[0] if len(v) == 1 else np.concatenate(v)).astype(_DTYPES[k], copy=False)
            for k, v in parts.items()}
    offsets_s = {r: float(offsets_us[r]) * 1e-6 for r in ranks}
    return Events(**cols), iterations, offsets_s, notes


def _kinds(c: dict[str, np.ndarray]) -> np.ndarray:
    """The kind of each row (sim.profiler.kernels, classified as the rows were read), a
    collective the name leaves open refined by its "Collective name" argument."""
    out = c["kind"].copy()
    open_ = np.flatnonzero((out == "collective_other") & (c["collective"] != ""))
    for i in open_.tolist():
        out[i] = collective_kind(c["collective"][i]) or out[i]
    return out


def _unknown_kernels(events: Events) -> dict[str, int]:
    gpu = events.on_gpu & (events.cat == "kernel")
    out = {}
    for n, k in Counter(events.name[gpu].tolist()).items():
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


def _clock_offsets(ranks, by_rank, rel_us, kinds) -> tuple[dict[int, float], list[Clause]]:
    """Each rank's clock minus the first rank's, in microseconds, where it is larger than
    collectives or steps allow. A collective kernel ends on every rank at nearly the same
    moment (the last rank's data completes it everywhere): the median difference of the k-th
    collective's end on each rank estimates the offset. Without collectives, the start of the
    first ProfilerStep all ranks recorded."""
    ref = ranks[0]
    offsets = {r: 0.0 for r in ranks}
    notes: list[Clause] = []
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
        estimate, threshold_us, how = None, ALIGN_MIN_S * 1e6, clause("profiler.by-collectives")
        if n >= 3 and (ka[:n] == kb[:n]).mean() > 0.9:
            estimate = float(np.median(b[:n] - a[:n]))
        else:
            sa = _first_steps(by_rank[ref], kinds[ref], rel_us[ref])
            sb = _first_steps(by_rank[r], kinds[r], rel_us[r])
            common = sorted(set(sa) & set(sb))
            if common:
                estimate = sb[common[0]] - sa[common[0]]
                threshold_us, how = ALIGN_STEP_MIN_S * 1e6, clause("profiler.by-step", step=common[0])
        if estimate is None:
            # nothing to align on: only the files' clocks, which must at least be of one run
            estimate = float(rel_us[r].min() - rel_us[ref].min())
            if abs(estimate) > MIXED_RUN_S * 1e6:
                raise refusal("profiler.mixed-start", rank=r, lead=estimate * 1e-6, ref=ref)
            continue
        if abs(estimate) > MIXED_RUN_S * 1e6:
            raise refusal("profiler.mixed-clock", rank=r, lead=estimate * 1e-6, ref=ref, how=how)
        if abs(estimate) > threshold_us:
            offsets[r] = estimate
            notes.append(clause("profiler.clock-aligned", rank=r, ref=ref, shift=-estimate * 1e-3, how=how,
                                drift=clause("profiler.clock-drift") if abs(estimate) > SUSPECT_OFFSET_S * 1e6
                                else None))
    return offsets, notes


def _first_steps(rf: RankFile, kind, rel_us) -> dict[int, float]:
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
    check_output(path, overwrite)
    pa, pq = _pyarrow()

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
        "notes": list(run.notes), "note_clauses": list(run.note_clauses)})}
    table = pa.table(arrays).replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    write_bytes(path, sink.getvalue().to_pybytes(), overwrite=overwrite)


def _pyarrow():
    """pyarrow and its Parquet module: optional (the sweep extra), loaded when a table is
    written or read."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise refusal("profiler.needs-pyarrow", code="pip install 'ringsim[sweep]'") from None
    return pa, pq


def read_table(path: str | os.PathLike) -> Run:
    """A run written by write_table."""
    _, pq = _pyarrow()
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as e:
        raise refusal("profiler.not-parquet", path=str(path), detail=str(e)) from None
    raw = (table.schema.metadata or {}).get(b"ringsim_profiler_run")
    if raw is None:
        raise refusal("profiler.not-our-table", path=str(path), code="`ringsim trace import --out`")
    try:
        m = json.loads(raw)
        return _run_from_table(table, m, path)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise refusal("profiler.bad-metadata", path=str(path), detail=f"{type(e).__name__}: {e}") from None


def _run_from_table(table, m: dict, path) -> Run:
    missing = [c for c in EVENT_COLUMNS if c not in table.column_names]
    if missing:
        raise refusal("profiler.no-columns", path=str(path), columns=", ".join(missing))
    cols = {}
    for c in EVENT_COLUMNS:
        col = table.column(c)
        if _DTYPES[c] is object:
            cols[c] = objects(col.to_pylist())
        else:
            cols[c] = col.to_numpy().astype(_DTYPES[c], copy=False)
    return Run(ranks=tuple(m["ranks"]), world_size=int(m["world_size"]),
               devices={int(k): v for k, v in m["devices"].items()},
               clock_offsets_s={int(k): float(v) for k, v in m["clock_offsets_s"].items()},
               iterations={int(k): [(int(a), float(b), float(c)) for a, b, c in v]
                           for k, v in m["iterations"].items()},
               events=Events(**cols), unknown_kernels=dict(m["unknown_kernels"]),
               sources={int(k): v for k, v in m["sources"].items()}, note_clauses=_note_clauses(m))


def _note_clauses(m: dict) -> tuple[Clause, ...]:
    """A table's notes as clauses; a table written before they were kept as clauses holds only
    their English, kept as it was written."""
    if "note_clauses" in m:
        return tuple(m["note_clauses"])
    return tuple(clause("profiler.note", detail=str(n)) for n in m.get("notes", ()))
