"""Where a rank's GPU time went: compute, communication, memory and idle time, and how much
of the communication computation hid, as Holistic Trace Analysis defines them.

HTA 0.5.0 (facebookresearch/HolisticTraceAnalysis, hta/analyzers/breakdown_analysis.py
get_temporal_breakdown, hta/analyzers/communication_analysis.py get_comm_comp_overlap,
hta/utils/utils.py get_kernel_type) looks at a rank's GPU events (kernels, memcpy, memset: any
event with a stream) and
- types each by name: communication if it matches `^nccl.*Kernel`, memory if `^Memcpy`,
  `^Memset` or `^dma`, else computation unless it matches `(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)`
  (then "other");
- spans them: kernel time = the last event's end - the first's start;
- idle = kernel time - the union of all events' intervals; compute = the union of the
  computation events; non-compute = kernel time - compute - idle;
- overlap = |union(communication) ∩ union(computation)| / |union(communication)|.
With two or more ProfilerSteps it counts only the GPU events launched (by correlation) from
the host before the last step starts (hta/common/trace.py _filter_irrelevant_gpu_kernels);
it rounds microsecond times with fractions inward (start up, end down:
hta/common/trace_parser.py round_down_time_stamps), and it also counts a host operator that
carries a `stream` argument (Inductor's Triton launches record one; with two or more steps,
one that starts before the last) as a GPU event, since it selects GPU events by that argument.
`hta_compat` (the default) does both, so that the numbers are HTA's; without it, GPU rows
only, times as recorded.

Non-compute is split here into communication, memory and other so that the parts add up to
the span: comm_s is communication not under computation, memory_s memory not under either,
other_s the rest. comm_kernel_s is the whole union of communication, HTA's overlap's
denominator. Per iteration, the rows of that ProfilerStep (a GPU row by its launch's step).

A trace with no GPU events (a CPU run on gloo) is broken down the same way over its host
threads' top-level operators: computation the operators, communication the gloo / c10d ones.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from sim.profiler.kernels import ATTENTION_KINDS
from sim.profiler.reader import Events, Run

# hta/utils/utils.py (HolisticTraceAnalysis 0.5.0): NCCL_KERNEL_RE, MEMORY_KERNEL_RE,
# NCCL_COMPUTE_KERNEL_RE, used with re.match
_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")

COMPUTE, COMM, MEMORY, OTHER = 0, 1, 2, 3


@lru_cache(maxsize=1 << 16)
def hta_kernel_type(name: str) -> int:
    """HTA's type of a GPU event by its name: COMPUTE, COMM, MEMORY or OTHER."""
    if _HTA_COMM.match(name):
        return COMM
    if _HTA_MEMORY.match(name):
        return MEMORY
    if not _HTA_NOT_COMPUTE.match(name):
        return COMPUTE
    return OTHER


@dataclass(frozen=True)
class Breakdown:
    """One rank's (or one iteration's) time, in seconds; the parts add up to span_s."""

    rank: int
    iteration: int
    """The ProfilerStep number, or -1 for HTA's scope over the trace."""
    span_s: float
    """HTA's kernel time: the first GPU event's start to the last one's end."""
    compute_s: float
    comm_s: float
    """Communication under no computation (exposed)."""
    memory_s: float
    other_s: float
    idle_s: float
    comm_kernel_s: float
    """The union of communication events, hidden or not."""
    overlap_pct: float | None
    """HTA's comm-comp overlap: the share of comm_kernel_s under computation (None: no comm)."""
    events: int
    on_gpu: bool
    """False when the breakdown is of host operators (a CPU-only trace)."""

    @property
    def non_compute_s(self) -> float:
        """HTA's non-compute time: communication, memory and other."""
        return self.comm_s + self.memory_s + self.other_s

    def to_dict(self) -> dict:
        return asdict(self)


def union_s(start: np.ndarray, end: np.ndarray) -> float:
    """The length of the union of intervals [start, end), merged as HTA merges them (a new
    interval where a start is after every end so far: hta/utils/utils.py merge_kernel_intervals)."""
    if len(start) == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    firsts = np.flatnonzero(new)
    ends = np.maximum.reduceat(e, firsts)
    return float((ends - s[firsts]).sum())


def _parts(start: np.ndarray, end: np.ndarray, types: np.ndarray) -> dict[str, float]:
    if len(start) == 0:
        return {"span_s": 0.0, "compute_s": 0.0, "comm_s": 0.0, "memory_s": 0.0, "other_s": 0.0, "idle_s": 0.0,
                "comm_kernel_s": 0.0, "overlap_pct": None}
    span = float(end.max() - start.min())
    comp, comm, mem = types == COMPUTE, types == COMM, types == MEMORY
    u_c = union_s(start[comp], end[comp])
    u_m = union_s(start[comm], end[comm])
    cm = comp | comm
    u_cm = union_s(start[cm], end[cm])
    u_cmm = union_s(start[cm | mem], end[cm | mem])
    u_all = union_s(start, end)
    # differences of unions: float sums can leave -1e-18 where the answer is 0
    hidden = max(0.0, u_c + u_m - u_cm)
    return {"span_s": span, "compute_s": u_c, "comm_s": max(0.0, u_cm - u_c), "memory_s": max(0.0, u_cmm - u_cm),
            "other_s": max(0.0, u_all - u_cmm), "idle_s": max(0.0, span - u_all), "comm_kernel_s": u_m,
            "overlap_pct": 100.0 * hidden / u_m if u_m > 0 else None}


def _rounded(start_s: np.ndarray, end_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA's rounding of fractional microseconds inward (start up, end down); the 1e-6 us
    guard keeps a whole microsecond that float arithmetic nudged up from moving."""
    s = np.ceil(start_s * 1e6 - 1e-6) * 1e-6
    e = np.floor(end_s * 1e6 + 1e-6) * 1e-6
    return s, e


def _hta_types(names: np.ndarray) -> np.ndarray:
    return np.fromiter((hta_kernel_type(n) for n in names.tolist()), dtype=np.int8, count=len(names))


def _hta_scope(run: Run, ev: Events, rank: int, compat: bool) -> np.ndarray:
    """The rank's GPU rows HTA counts: with two or more ProfilerSteps in the run, those
    launched from the host before the rank's last step starts; else every row with a stream."""
    mine = ev.rank == rank
    gpu = mine & ev.on_gpu
    step_names = {n for r in run.iterations.values() for n, _, _ in r}
    steps = run.iterations.get(rank, [])
    if len(step_names) < 2 or not steps:
        return mine & (ev.stream_arg != -1) if compat else gpu
    last_start = max(s for _, s, _ in steps)
    launched = ~np.isnan(ev.launch_start_s) & (ev.launch_start_s < last_start)
    rows = gpu & launched & (ev.correlation >= 0) & (ev.stream_arg >= 0)
    if compat:
        # HTA keeps the host rows that start before the last step, and among them counts
        # those with a stream argument as GPU events
        rows |= mine & ~ev.on_gpu & (ev.stream_arg != -1) & (ev.start_s < last_start)
    return rows


def _host_rows(ev: Events, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A CPU-only trace's operators as a device: the top-level ops and communication ops of
    each host thread (nested ops lie inside their parent's interval)."""
    keep = rows & ~ev.on_gpu & np.isin(ev.kind, ("cpu_op", "cpu_attention_fwd", "cpu_attention_bwd", "cpu_gemm",
                                                   "cpu_comm"))
    idx = np.flatnonzero(keep)
    types = np.where(ev.kind[idx] == "cpu_comm", COMM, COMPUTE).astype(np.int8)
    return idx, types


def breakdown(run: Run, *, per_iteration: bool = False, hta_compat: bool = True) -> list[Breakdown]:
    """Each rank's breakdown in HTA's scope (iteration -1), and with `per_iteration` one per
    ProfilerStep after it."""
    ev = run.events
    out: list[Breakdown] = []
    for rank in run.ranks:
        mine = ev.rank == rank
        on_gpu = bool((mine & ev.on_gpu).any())
        if on_gpu:
            scopes = [(-1, np.flatnonzero(_hta_scope(run, ev, rank, hta_compat)))]
            if per_iteration:
                scopes += [(n, np.flatnonzero(mine & ev.on_gpu & (ev.iteration == n)))
                           for n, _, _ in run.iterations.get(rank, [])]
            types_of = None
        else:
            idx, types = _host_rows(ev, mine)
            types_of = dict(zip(idx.tolist(), types.tolist()))
            scopes = [(-1, idx)]
            if per_iteration:
                scopes += [(n, idx[ev.iteration[idx] == n]) for n, _, _ in run.iterations.get(rank, [])]
        for number, idx in scopes:
            start, end = ev.start_s[idx], ev.start_s[idx] + ev.dur_s[idx]
            if hta_compat and on_gpu:
                start, end = _rounded(start, end)
                end = np.maximum(end, start)
            if types_of is None:
                types = _hta_types(ev.name[idx])
            else:
                types = np.array([types_of[i] for i in idx.tolist()], dtype=np.int8)
            parts = _parts(start, end, types)
            out.append(Breakdown(rank=rank, iteration=number, events=len(idx), on_gpu=on_gpu, **parts))
    return out


def kernel_counts(run: Run, rank: int | None = None) -> dict[str, int]:
    """GPU rows per kind (sim.profiler.kernels), for one rank or all."""
    ev = run.events
    rows = ev.on_gpu if rank is None else ev.on_gpu & (ev.rank == rank)
    return dict(sorted(Counter(ev.kind[rows].tolist()).items()))


def has_attention(run: Run) -> bool:
    """Whether the run holds attention kernels (or, on a CPU trace, attention operators)."""
    ev = run.events
    return bool(np.isin(ev.kind, ATTENTION_KINDS + ("cpu_attention_fwd", "cpu_attention_bwd")).any())


def pct(part_s: float, span_s: float) -> float:
    """A part as a percentage of its span (0 for an empty span)."""
    return 100.0 * part_s / span_s if span_s > 0 and math.isfinite(span_s) else 0.0
