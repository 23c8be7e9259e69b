"""Metrics of a trace (docs/design.md, Definitions), read from the trace record alone.

Per rank: compute_s (sum of compute spans), comm_s (time at least one of its sends or
receives is in flight), exposed_comm_s (wait spans on a transfer), idle_s (the rest of
the makespan), flops, peak_mem_bytes (from the header, when it has it), bytes_sent.
Overall: makespan, ideal time (total FLOPs / (N x rate), when the header carries the
rate), efficiency, load imbalance (max / mean compute time), overlap efficiency
(1 - exposed / comm), total FLOPs and bytes sent.

`scheme_row` puts one run in a comparison of schemes, with what bounds it from those numbers
alone: `explain_clauses` (sim.reasons clauses, which the row carries) and `explain` (their
English sentence); the dashboard writes the same clauses in each of its languages.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from sim.engine.threads import each
from sim.errors import RingsimError
from sim.hardware.pcie import LINK_KIND_KEYS, LINK_KINDS, Pcie
from sim.reasons import Clause, clause, english
from sim.trace.format import COMPUTE, IDLE, KIND_NAMES, RECV, SEND, TRANSFER_KINDS, WAIT, Trace


@dataclass(frozen=True)
class RankMetrics:
    rank: int
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    idle_s: float
    flops: float
    peak_mem_bytes: int | None
    bytes_sent: float = 0.0


@dataclass(frozen=True)
class Metrics:
    makespan_s: float
    ideal_s: float | None
    efficiency: float | None
    load_imbalance: float
    overlap_efficiency: float
    work_imbalance: float
    """The most FLOPs any rank computes over the mean: the layout's imbalance of work (as
    the kernel counts it), where load_imbalance is that of compute time."""
    total_flops: float
    total_bytes: float
    ranks: list[RankMetrics]

    def to_dict(self) -> dict[str, Any]:
        # the fields are numbers (and the ranks' list): read directly, where asdict deep-
        # copies every value (30 ms for 256 ranks, in every comparison row)
        return {**self.overall(), "ranks": [{name: getattr(r, name) for name in _RANK_FIELDS}
                                            for r in self.ranks]}

    def overall(self) -> dict[str, Any]:
        """The fields of to_dict but the ranks."""
        return {name: getattr(self, name) for name in _OVERALL_FIELDS}

    @property
    def bytes_sent(self) -> list[float]:
        """Bytes each rank sent."""
        return [r.bytes_sent for r in self.ranks]


_RANK_FIELDS = tuple(f.name for f in fields(RankMetrics))
_OVERALL_FIELDS = tuple(f.name for f in fields(Metrics) if f.name != "ranks")


def comparison_row(layout: str, overlap: bool, m: Metrics) -> dict[str, Any]:
    """One row of a layout comparison: the overall metrics and the worst rank's exposed
    communication (what `ringsim compare` and the dashboard tabulate)."""
    return {"layout": layout, "overlap": overlap,
            "exposed_comm_s": max(r.exposed_comm_s for r in m.ranks),
            **m.overall()}


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals (start, end)."""
    if not intervals:
        return 0.0
    s, e = np.array(intervals, dtype=np.float64).reshape(-1, 2).T
    return float(_union_lengths(np.zeros(len(s), dtype=np.int64), s, e, 1)[0])


def _union_lengths(group: np.ndarray, start: np.ndarray, end: np.ndarray, n: int) -> np.ndarray:
    """Per group (0..n-1), the length of the union of its intervals: sorted by start (ties
    in their given order), merged where one starts after the running end, the merged
    lengths summed in order. The groups are laid out as the rows of one padded table, so
    that every step runs on all groups at once."""
    out = np.zeros(n)
    if not len(group):
        return out
    counts = np.bincount(group, minlength=n)
    if (np.diff(group) < 0).any():     # a trace's spans usually come grouped by rank already
        order = np.argsort(group.astype(np.int16) if n <= 1 << 15 else group, kind="stable")
        group, start, end = group[order], start[order], end[order]
    width = int(counts.max())
    if (counts == width).all():
        # as many intervals in every group (a ring's hops): the table is the columns
        s_tab, e_tab = start.reshape(n, width), end.reshape(n, width)
    else:
        col = np.arange(len(group)) - np.repeat(np.cumsum(counts) - counts, counts)
        s_tab = np.full((n, width), np.inf)
        e_tab = np.full((n, width), -np.inf)
        s_tab[group, col] = start
        e_tab[group, col] = end
    by_start = np.argsort(s_tab, axis=1, kind="stable")      # the padding (inf) stays last
    s_tab = np.take_along_axis(s_tab, by_start, axis=1)
    e_tab = np.take_along_axis(e_tab, by_start, axis=1)
    valid = np.arange(width)[None, :] < counts[:, None]
    reach = np.maximum.accumulate(e_tab, axis=1)
    new = np.ones((n, width), dtype=bool)
    new[:, 1:] = s_tab[:, 1:] > reach[:, :-1]
    new &= valid
    last = valid.copy()
    last[:, :-1] &= new[:, 1:] | ~valid[:, 1:]
    if not width:
        return out
    # each merged run's length, from its first interval's start to the reach at its last;
    # the runs of each group, in order, as the rows of a padded table: a running sum along
    # a row adds them in order (the zeros after them leave it exactly as it was)
    firsts, lasts = np.flatnonzero(new), np.flatnonzero(last)
    length = reach.ravel()[lasts] - s_tab.ravel()[firsts]
    row = firsts // width
    runs = np.bincount(row, minlength=n)
    table = np.zeros((n, int(runs.max())))
    table[row, np.arange(len(row)) - np.repeat(np.cumsum(runs) - runs, runs)] = length
    return np.cumsum(table, axis=1)[:, -1]


_SPANS = 1 << 18
"""Spans read per pass (see compute_metrics)."""


def compute_metrics(trace: Trace) -> Metrics:
    """The metrics of a trace, from its columns (docs/design.md, Definitions).

    A trace's spans come rank by rank (sim.engine.record; a measured trace may not): the sums
    are then taken over a few ranks at a time, each rank's in its own order as over the
    whole columns, so that the temporaries stay a few MB (reused by the allocator, where
    whole-column ones would be fresh memory every time on a trace of tens of millions of
    spans)."""
    n = trace.n_gpus
    c = trace.columns
    compute, flops, exposed, comm, sent = (np.zeros(n) for _ in range(5))

    def block(at: tuple[int, int, int, int]) -> None:
        """The sums of ranks g0..g1-1, whose spans are a..b-1."""
        g0, g1, a, b = at
        rank, stream, kind = c.rank[a:b], c.stream[a:b], c.kind[a:b]
        start, end = c.start_s[a:b], c.end_s[a:b]
        dur = end - start
        is_compute = stream == COMPUTE
        is_exposed = (stream == WAIT) & (kind != IDLE)
        # bincount adds its weights in order, as a running sum per rank would
        # (with no spans at all bincount gives integers: made floats)
        ranks = rank[is_compute] - g0
        m = g1 - g0
        compute[g0:g1] = np.bincount(ranks, dur[is_compute], minlength=m)
        flops[g0:g1] = np.bincount(ranks, c.flops[a:b][is_compute], minlength=m)
        exposed[g0:g1] = np.bincount(rank[is_exposed] - g0, dur[is_exposed], minlength=m)
        moves = (stream == SEND) | (stream == RECV)
        comm[g0:g1] = _union_lengths(rank[moves] - g0, start[moves], end[moves], m)
        is_send = stream == SEND
        sent[g0:g1] = np.bincount(rank[is_send] - g0, c.bytes[a:b][is_send], minlength=m)

    # the blocks' ranks are disjoint: summed side by side (sim.engine.threads)
    blocks = _rank_blocks(c.rank, n)
    each(block, blocks, size=len(c))
    total_bytes = 0.0
    any_sends = False
    for _, _, a, b in blocks:      # a running sum over all sends, in order
        sends = c.bytes[a:b][c.stream[a:b] == SEND]
        if len(sends):
            any_sends = True
            total_bytes = float(np.cumsum(np.append(total_bytes, sends))[-1])
    makespan = trace.makespan_s
    if not any_sends:
        sent = sent.astype(np.int64)       # what bincount gives with no weights at all
    compute, exposed, flops, comm, sent = (x.tolist() for x in (compute, exposed, flops, comm, sent))
    mem = trace.meta.get("peak_mem_bytes")
    ranks = [RankMetrics(r, compute[r], comm[r], exposed[r],
                         max(0.0, makespan - compute[r] - exposed[r]), flops[r],
                         int(mem[r]) if isinstance(mem, list) and len(mem) == n else None, sent[r])
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
        work_imbalance=(max(flops) * n / total_flops) if total_flops > 0 else 1.0,
        total_flops=total_flops,
        total_bytes=total_bytes,
        ranks=ranks,
    )


def _ascending(values: np.ndarray) -> bool:
    """Whether `values` never decrease (read _SPANS at a time: no temporary of a whole
    column)."""
    return all(not (np.diff(values[a:a + _SPANS + 1]) < 0).any() for a in range(0, len(values), _SPANS))


def _rank_blocks(rank: np.ndarray, n: int) -> list[tuple[int, int, int, int]]:
    """(first rank, end rank, first span, end span) of blocks of about _SPANS spans
    holding every span of their ranks; one block of all ranks unless the spans come
    rank by rank."""
    if len(rank) <= _SPANS or n == 1 or not _ascending(rank):
        return [(0, n, 0, len(rank))]
    # keys of the column's own type: other ones would have NumPy convert the whole column
    bounds = np.searchsorted(rank, np.arange(n + 1, dtype=rank.dtype))
    out, g0 = [], 0
    while g0 < n:
        g1 = max(g0 + 1, int(np.searchsorted(bounds, bounds[g0] + _SPANS, side="right")) - 1)
        g1 = min(g1, n)
        out.append((g0, g1, int(bounds[g0]), int(bounds[g1])))
        g0 = g1
    return out


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


EXPOSED_SHARE = 0.05
"""Exposed communication above this share of the makespan is what `explain` names first."""
IMBALANCE = 1.10
"""Then a load imbalance above this."""
COMPUTE_BOUND = 0.90
"""Then compute-bound when the busiest GPU computes at least this share of the makespan."""
CALL_BOUND_RATE = 0.5
"""...and bound by its calls' fixed costs instead when its computes reach less than this
share of the kernel's best rate: a call's floor (the launch, the host's dispatch) and its
partial wave of CTAs then take more of each call than the block's work does."""
NIC_BUSY = 0.5
"""A NIC busy this share of the makespan, while no GPU is compute-bound, is named."""
PCIE_BUSY = 0.2
"""A PCIe fabric link (sim.hardware.pcie) busy this share of the makespan, and longer than the
busiest GPU port, is named as the bound of exposed communication: the flows queue for it
rather than for the GPUs' own ports."""
ACROSS_NODES = 0.5
"""A kind of transfer is NIC-limited when more than this share of its time is on flows
between nodes."""


def scheme_row(scheme: str, variant: str, trace: Trace, m: Metrics) -> dict[str, Any]:
    """One row of a comparison of schemes, with the numbers `explain` reads: the worst
    rank's exposed communication by kind, each kind's share of transfer time on flows
    between nodes (from the trace's `gpus_per_node`), bytes sent and peak memory per GPU
    (the largest), and the GPU's memory."""
    c = trace.columns
    n = trace.n_gpus
    worst = max(m.ranks, key=lambda r: r.exposed_comm_s).rank if m.ranks else 0
    exposed = (c.stream == WAIT) & (c.kind != IDLE) & (c.rank == worst)
    by_kind = np.bincount(c.kind[exposed], (c.end_s - c.start_s)[exposed], minlength=len(KIND_NAMES))
    send = c.stream == SEND
    per_node = int(trace.hardware.get("gpus_per_node", n) or n)
    between = send & (c.rank // per_node != c.peer // per_node)
    dur = c.end_s - c.start_s
    # each NIC's time carrying at least one flow, per direction: sends between nodes
    # leave through the sender's NIC, receives arrive through the receiver's
    nics = int(trace.hardware.get("nics_per_node") or per_node)
    moving = ((c.stream == SEND) | (c.stream == RECV)) & (c.peer >= 0)
    moving &= c.rank // per_node != np.maximum(c.peer, 0) // per_node
    nic = (c.rank // per_node) * nics + (c.rank % per_node) // max(per_node // nics, 1)
    port = nic[moving] * 2 + (c.stream[moving] == RECV)
    busy = _union_lengths(port, c.start_s[moving], c.end_s[moving], int(port.max(initial=-1)) + 1)
    total = np.bincount(c.kind[send], dur[send], minlength=len(KIND_NAMES))
    across = np.bincount(c.kind[between], dur[between], minlength=len(KIND_NAMES))
    mem = [r.peak_mem_bytes for r in m.ranks if r.peak_mem_bytes is not None]
    gpu = trace.hardware.get("gpu", {})
    row = {
        "scheme": scheme, "variant": variant,
        **m.overall(),
        "exposed_comm_s": max((r.exposed_comm_s for r in m.ranks), default=0.0),
        "exposed_by_kind_s": {k: float(by_kind[KIND_NAMES.index(k)]) for k in TRANSFER_KINDS
                              if by_kind[KIND_NAMES.index(k)] > 0},
        "across_nodes_share": {k: float(across[KIND_NAMES.index(k)] / total[KIND_NAMES.index(k)])
                               for k in TRANSFER_KINDS if total[KIND_NAMES.index(k)] > 0},
        "compute_s": max((r.compute_s for r in m.ranks), default=0.0),
        "busiest_nic_s": float(busy.max(initial=0.0)),
        "bytes_sent_per_gpu": max(m.bytes_sent, default=0.0),
        "peak_mem_bytes": max(mem) if mem else None,
        "memory_bytes": gpu.get("memory_gb") * 1e9 if isinstance(gpu, dict) and gpu.get("memory_gb") else None,
    }
    row.update(_busiest_pcie_link(trace, send))
    row["explanation_clauses"] = explain_clauses(row)
    row["explanation"] = english(row["explanation_clauses"])
    return row


def _busiest_pcie_link(trace: Trace, send: np.ndarray) -> dict[str, Any]:
    """On a PCIe node (the trace's hardware has `pcie`): the fabric link (a switch's uplink,
    a root complex, the socket link: sim.hardware.pcie) that carries flows the longest, its busy
    time (the union of the flows on it), and the busiest GPU port's, for `explain`.
    Nothing without a PCIe fabric, or when the trace's hardware does not describe one."""
    hw = trace.hardware
    if not isinstance(hw, dict) or not isinstance(hw.get("pcie"), dict):
        return {}
    try:
        g = int(hw["gpus_per_node"])
        fabric = Pcie(**hw["pcie"]).fabric(g, float(hw["link"]["bandwidth_gbps"]))
    except (KeyError, TypeError, ValueError, RingsimError):
        return {}
    c = trace.columns
    inside = send & (c.peer >= 0) & (c.rank // g == np.maximum(c.peer, 0) // g)
    src, dst = c.rank[inside], c.peer[inside]
    start, end = c.start_s[inside], c.end_s[inside]
    route = fabric.route[src % g, dst % g]                           # (flows, width)
    held = route >= 0
    flow = np.nonzero(held)[0]
    link = (src[flow] // g) * fabric.n_resources + route[held]
    n_links = (int(src.max(initial=0)) // g + 1) * fabric.n_resources
    busy = _union_lengths(link, start[flow], end[flow], n_links) if len(flow) else np.zeros(0)
    ports = _union_lengths(src, start, end, int(src.max(initial=-1)) + 1)
    if not busy.size or busy.max() <= 0:
        return {}
    top = int(busy.argmax())
    resource, lane = fabric.links[top % fabric.n_resources]
    where = clause("link.in-node", node=top // fabric.n_resources, resource=resource,
                   on_lane=None if lane is None else clause("link.lane", lane=lane))
    return {"busiest_pcie_link": english(where), "busiest_pcie_link_clause": where,
            "busiest_pcie_link_kind": LINK_KINDS[int(fabric.kinds[top % fabric.n_resources])],
            "busiest_pcie_link_s": float(busy[top]), "busiest_port_s": float(ports.max(initial=0.0))}


def explain_clauses(row: dict[str, Any]) -> list[Clause]:
    """What bounds a run, from the numbers of its `scheme_row`, as sim.reasons clauses:
    exposed communication when it passes EXPOSED_SHARE of the makespan (its largest kind, of how
    much exposed in all where another kind is exposed too, and "NIC-limited" when most of that
    kind's transfer time crosses nodes); a NIC busy NIC_BUSY of the makespan while no GPU
    computes COMPUTE_BOUND of it (transfers queue for the NIC, and a wait for a flow that has
    not started counts as idle, not exposed); a load imbalance above IMBALANCE. Without any of
    these: compute-bound when the busiest GPU computes COMPUTE_BOUND of the makespan (at what
    share of the kernel's best rate; by per-call costs below CALL_BOUND_RATE of it), else
    waiting on peers. A warning comes first when the peak memory exceeds the GPU's."""
    makespan = row["makespan_s"]
    if not makespan:
        return [clause("bound.idle")]
    exposed = row.get("exposed_by_kind_s") or {}
    computing = row["compute_s"] / makespan
    out: list[Clause] = []
    if exposed and row["exposed_comm_s"] >= EXPOSED_SHARE * makespan:
        kind = max(exposed, key=exposed.get)
        across = row.get("across_nodes_share", {}).get(kind, 0.0) > ACROSS_NODES
        # the worst GPU's exposure of every kind adds up to its whole: where another kind has
        # some too, the clause says how much of the whole this kind is
        others = sum(v for k, v in exposed.items() if k != kind)
        of_all = clause("bound.of-all", exposed_s=row["exposed_comm_s"]) if others > 0 else None
        out.append(clause("bound.exposed-across-nodes" if across else "bound.exposed", kind=kind,
                          exposed_s=exposed[kind], of_all=of_all, share=exposed[kind] / makespan))
    nic = row.get("busiest_nic_s") or 0.0
    if nic >= NIC_BUSY * makespan and computing < COMPUTE_BOUND:
        said = bool(out) and out[-1]["clause"] == "bound.exposed-across-nodes"
        out.append(clause("bound.nic-also" if said else "bound.nic", share=nic / makespan))
    link = row.get("busiest_pcie_link_s") or 0.0
    if out and link >= PCIE_BUSY * makespan and link > 1.001 * row.get("busiest_port_s", 0.0):
        out.append(clause("bound.pcie", link_kind=LINK_KIND_KEYS[LINK_KINDS.index(row["busiest_pcie_link_kind"])],
                          link=row["busiest_pcie_link_clause"], share=link / makespan))
    if row["load_imbalance"] >= IMBALANCE:
        out.append(clause("bound.imbalance" if out else "bound.imbalance-alone", ratio=row["load_imbalance"]))
    if not out and computing >= COMPUTE_BOUND:
        if row.get("efficiency") is not None:
            rate = row["efficiency"] / computing
            key = "bound.call-overhead" if rate < CALL_BOUND_RATE else "bound.compute-bound-rate"
            out.append(clause(key, computing=computing, rate=rate))
        else:
            out.append(clause("bound.compute-bound", computing=computing))
    elif not out:
        out.append(clause("bound.waits", computing=computing))
    peak, capacity = row.get("peak_mem_bytes"), row.get("memory_bytes")
    if peak is not None and capacity and peak > capacity:
        out.insert(0, clause("bound.no-fit", peak_bytes=peak, capacity_gb=capacity / 1e9))
    return out


def explain(row: dict[str, Any]) -> str:
    """One sentence on what bounds a run (`explain_clauses`, in English)."""
    return english(explain_clauses(row))
