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

from sim.trace import Trace


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
    total = 0.0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def compute_metrics(trace: Trace) -> Metrics:
    n = trace.world_size
    first, last = float("inf"), float("-inf")
    compute = [0.0] * n
    exposed = [0.0] * n
    flops = [0.0] * n
    flights: list[list[tuple[float, float]]] = [[] for _ in range(n)]
    total_bytes = 0.0
    for s in trace.spans:
        if s.start_s < first:
            first = s.start_s
        if s.end_s > last:
            last = s.end_s
        if s.stream == "compute":
            compute[s.rank] += s.end_s - s.start_s
            flops[s.rank] += s.flops
        elif s.stream == "wait":
            if s.kind != "idle":
                exposed[s.rank] += s.end_s - s.start_s
        else:
            flights[s.rank].append((s.start_s, s.end_s))
            if s.stream == "send":
                total_bytes += s.bytes
    makespan = last - first if trace.spans else 0.0   # the same as trace.makespan_s, in this pass
    comm = [union_length(f) for f in flights]
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
