"""Metrics of a trace (DESIGN.md, Definitions), read from the trace record alone.

Per rank: compute_s (sum of compute spans), comm_s (time at least one of its sends or
receives is in flight), exposed_comm_s (wait spans on a transfer), idle_s (the rest of
the makespan), flops, peak_mem_bytes (from the header, when it has it). Overall:
makespan, ideal time (total FLOPs / (N x rate), when the header carries the rate),
efficiency, load imbalance (max / mean compute time), overlap efficiency
(1 - exposed / comm), total FLOPs and bytes sent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from sim.trace import COMPUTE, IDLE, RECV, SEND, WAIT, Trace


@dataclass(frozen=True)
class RankMetrics:
    rank: int
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    idle_s: float
    flops: float
    peak_mem_bytes: int | None


@dataclass(frozen=True)
class Metrics:
    makespan_s: float
    ideal_s: float | None
    efficiency: float | None
    load_imbalance: float
    overlap_efficiency: float
    total_flops: float
    total_bytes: float
    ranks: list[RankMetrics]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ranks"] = [asdict(r) for r in self.ranks]
        return d


def comparison_row(layout: str, overlap: bool, m: Metrics) -> dict[str, Any]:
    """One row of a layout comparison: the overall metrics and the worst rank's exposed
    communication (what `ringsim compare` and the dashboard tabulate)."""
    return {"layout": layout, "overlap": overlap,
            "exposed_comm_s": max(r.exposed_comm_s for r in m.ranks),
            **{k: v for k, v in m.to_dict().items() if k != "ranks"}}


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals (start, end)."""
    if not intervals:
        return 0.0
    s, e = np.array(intervals, dtype=np.float64).reshape(-1, 2).T
    return float(_union_lengths(np.zeros(len(s), dtype=np.int64), s, e, 1)[0])


def _union_lengths(group: np.ndarray, start: np.ndarray, end: np.ndarray, n: int) -> np.ndarray:
    """Per group (0..n-1), the length of the union of its intervals: sorted by start (ties
    in any order: they merge either way), merged where one starts before the running
    end, the merged lengths summed in order."""
    out = np.zeros(n)
    if not len(group):
        return out
    if (np.diff(group) < 0).any():     # a trace's spans usually come grouped by rank already
        order = np.argsort(group.astype(np.int16) if n <= 1 << 15 else group, kind="stable")
        group, start, end = group[order], start[order], end[order]
    bounds = np.flatnonzero(np.diff(group)) + 1
    for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(group)].tolist()):
        gs, ge = start[lo:hi], end[lo:hi]
        if (np.diff(gs) < 0).any():
            by_start = np.argsort(gs, kind="stable")
            gs, ge = gs[by_start], ge[by_start]
        reach = np.maximum.accumulate(ge)
        new = np.ones(len(gs), dtype=bool)
        new[1:] = gs[1:] > reach[:-1]
        firsts = np.flatnonzero(new)
        lasts = np.append(firsts[1:] - 1, len(gs) - 1)
        out[group[lo]] = np.cumsum(reach[lasts] - gs[firsts])[-1]
    return out


def compute_metrics(trace: Trace) -> Metrics:
    """The metrics of a trace, from its columns (DESIGN.md, Definitions)."""
    n = trace.world_size
    c = trace.columns
    dur = c.end_s - c.start_s
    is_compute = c.stream == COMPUTE
    is_exposed = (c.stream == WAIT) & (c.kind != IDLE)
    # bincount adds its weights in order, as a running sum per rank would
    # (with no spans at all bincount gives integers: made floats)
    ranks = c.rank[is_compute]
    compute = np.bincount(ranks, dur[is_compute], minlength=n).astype(np.float64, copy=False)
    flops = np.bincount(ranks, c.flops[is_compute], minlength=n).astype(np.float64, copy=False)
    exposed = np.bincount(c.rank[is_exposed], dur[is_exposed], minlength=n).astype(np.float64, copy=False)
    moves = (c.stream == SEND) | (c.stream == RECV)
    comm = _union_lengths(c.rank[moves], c.start_s[moves], c.end_s[moves], n).tolist()
    sends = c.bytes[c.stream == SEND]
    total_bytes = float(np.cumsum(sends)[-1]) if len(sends) else 0.0
    makespan = trace.makespan_s
    compute, exposed, flops = compute.tolist(), exposed.tolist(), flops.tolist()
    mem = trace.meta.get("peak_mem_bytes")
    ranks = [RankMetrics(r, compute[r], comm[r], exposed[r],
                         max(0.0, makespan - compute[r] - exposed[r]), flops[r],
                         int(mem[r]) if isinstance(mem, list) and len(mem) == n else None)
             for r in range(n)]
    mean_compute = sum(compute) / n
    total_flops = sum(flops)
    rate = trace.hardware.get("rate_flops")
    ideal = total_flops / (n * rate) if isinstance(rate, (int, float)) and rate > 0 else None
    total_comm = sum(comm)
    return Metrics(
        makespan_s=makespan,
        ideal_s=ideal,
        efficiency=(ideal / makespan) if ideal is not None and makespan > 0 else None,
        load_imbalance=(max(compute) / mean_compute) if mean_compute > 0 else 1.0,
        overlap_efficiency=(1.0 - sum(exposed) / total_comm) if total_comm > 0 else 1.0,
        total_flops=total_flops,
        total_bytes=total_bytes,
        ranks=ranks,
    )


def step_durations(trace: Trace) -> dict[tuple[int, int], float]:
    """(rank, step) -> how long that step took on that rank.

    A rank's step k ends when its compute of step k ends (a skipped, fully masked block
    ends with the step before); its duration runs from the end of the rank's previous
    computed step (the trace's start for the first).
    """
    c = trace.columns
    if not len(c):
        return {}
    t0 = float(c.start_s.min())
    comp = np.flatnonzero(c.stream == COMPUTE)
    # the last compute of each (rank, step) in record order, then by rank and step
    rank, step, end = c.rank[comp].astype(np.int64), c.step[comp].astype(np.int64), c.end_s[comp]
    key = rank * (int(step.max(initial=0)) + 1) + step
    order = np.argsort(key, kind="stable")
    key, end = key[order], end[order]
    last = np.append(key[1:] != key[:-1], True)
    key, end = key[last], end[last]
    rank, step = rank[order][last], step[order][last]
    first = np.ones(len(key), dtype=bool)
    first[1:] = rank[1:] != rank[:-1]
    prev = np.where(first, t0, np.roll(end, 1))
    return dict(zip(zip(rank.tolist(), step.tolist()), (end - prev).tolist()))
