"""NCCL's pull on the computes beside its transfers, played by stretching each compute.

sim.hardware.contention.GpuPull says what a transfer in flight takes from the computes on
its two GPUs: its CTAs' share of the SMs (sm) and its copies' share of HBM bandwidth
(hbm), summed over the transfers in flight there. A compute of w seconds alone, m of them
memory-bound, then progresses at rate r(t) = 1 / ((1 - m) / (1 - sm(t)) + m / (1 - hbm(t)))
and ends when its progress reaches w: its time T = w + the integral of 1 - r(t) over
[start, start + T]. The event loop (sim.hardware.contention.Sharing) finds that by
re-timing every compute at each transfer's start and end; at thousands of GPUs that is
millions of events. Here the wave player (sim.engine.players.times_waves) plays the
schedule, each GPU's sm and hbm become step functions of time from the transfers'
spans, and each compute is stretched by the integral over its span; the schedule is
played again with the stretched times until the computes have settled (a few plays: the
pull is a few per cent, and a later start shifts a compute within the same steps; each
play's moves some 15 to 70 times smaller than the last's, so that the last two foretell
when the next would move nothing by a nanosecond, `_settled`). A GPU's
stretches read only the transfers on that GPU, so ranges of GPUs are found apart, on
threads (sim.engine.threads) at thousands of GPUs.

The integrand is taken as (1 - m) sm(t) + m hbm(t): exactly 1 - r(t) for a compute- or a
memory-bound compute (m = 0 or 1), within the product of the two shares in between (a
thousandth of the compute's time for NCCL's shares on a GPU); linear in m, so every
compute's integral comes from two running sums over its GPU's steps.
"""

from __future__ import annotations

import numpy as np

from sim.engine import threads
from sim.engine.players import times_waves
from sim.engine.schedule import Schedule
from sim.hardware.contention import HBM_PASSES, MAX_SHARE, GpuPull

PLAYS = 8
"""At most this many plays; each after the first moves the computes by less than the last."""
SETTLED_S = 1e-9
"""The plays stop once the computes are within this of where more plays would take them (a
nanosecond: a millionth of a block of a millisecond, far below what the model can tell):
a play that moved none by more, or one whose next move, foretold from the last two, is
smaller (`_settled`)."""
PIECES = 8
"""Ranges of GPUs whose stretches are found on threads of their own, in a schedule of
sim.engine.threads.WORTH_THREADS operations or more (one range below it). A fixed count,
even on 2, 4 and 8 cores, so that the trace does not depend on the machine: a range's
running sums start at its first GPU, so ranges change the times in their last bits
(about 1e-14 s at 1,024 GPUs)."""


def times_pulled(schedule: Schedule, dur: np.ndarray, pull: tuple[np.ndarray, np.ndarray, np.ndarray],
                 gpu: GpuPull, pieces: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every op with the computes stretched by the transfers beside them
    (module docstring). `pull`: per op, a transfer's CTAs and bytes/s, a compute's
    memory-bound share (sim.engine.players.durations_s fills it). `pieces`: how many ranges
    of GPUs the stretches are found in, side by side on the cores (sim.engine.threads); a
    GPU's stretches read its own transfers alone. By default PIECES for a large schedule."""
    is_transfer = schedule.is_transfer
    xfer = np.flatnonzero(is_transfer & (dur > 0))
    comp = np.flatnonzero(~is_transfer & (dur > 0))
    start, end = times_waves(schedule, dur)
    if not xfer.size or not comp.size:
        return start, end
    if pieces is None:
        pieces = PIECES if len(schedule) >= threads.WORTH_THREADS else 1
    ctas, copy_bps, memory_share = pull
    by_gpu = threads.each(lambda x: _sorted_by(*x, schedule.n_ranks),
                          [(xfer, schedule.rank), (xfer, schedule.peer), (comp, schedule.rank)], size=len(schedule))
    gpus = threads.each(lambda r: _ByGpu(schedule, by_gpu, ctas, copy_bps, *r),
                        _ranges(schedule.n_ranks, pieces), size=len(schedule))
    ids = _joined([g.comp for g in gpus])
    m = [memory_share[g.comp] for g in gpus]
    stretched = dur.copy()
    before = None
    for _ in range(PLAYS):
        extra = _joined(threads.each(lambda j: _extra_s(gpus[j], start, end, m[j], gpu), range(len(gpus)),
                                     size=len(schedule)))
        moved = float(np.abs(dur[ids] + extra - stretched[ids]).max(initial=0.0))
        stretched[ids] = dur[ids] + extra
        start, end = times_waves(schedule, stretched)
        if _settled(moved, before):
            break
        before = moved
    return start, end


def _settled(moved: float, before: float | None) -> bool:
    """Whether the plays may stop, the last having moved the computes by at most `moved`
    and the one before by `before` (None for none before). Each play maps the stretches of
    the last to new ones; where that map shrinks every change by a ratio r < 1, the
    stretches are within moved r / (1 - r) of its fixed point, and r is about moved / before
    (a ring's plays shrink their moves by 15 to 70 times: 0.79 us, 12 ns, 0.18 ns at 1,024
    GPUs). That bound under SETTLED_S, the play that would only confirm it is left out."""
    if moved < SETTLED_S:
        return True
    if before is None or not before > moved:
        return False
    r = moved / before
    return moved * r / (1.0 - r) < SETTLED_S


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The ranges' arrays end to end (one range's as it is: a small run, as the planner makes
    thousands of, copies nothing)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _ranges(n_gpus: int, pieces: int) -> list[tuple[int, int]]:
    """`pieces` ranges of GPUs (as even as they divide), in order; none empty."""
    bounds = np.linspace(0, n_gpus, max(1, min(pieces, n_gpus)) + 1).round().astype(int).tolist()
    return list(zip(bounds, bounds[1:]))


class _ByGpu:
    """The transfers and computes of a range of GPUs [lo, hi) ordered by GPU, made once for
    every play.

    Each GPU's time runs on its own stretch of one axis (GPU g at g x span + t), so one
    sort and one search serve every GPU of the range. A GPU's ops on one stream follow each other in
    schedule order, so with the ops grouped by GPU (a stable sort: schedule order within
    a GPU) the breakpoints come in a few sorted runs, which a stable sort merges at a
    tenth of the cost of the ops in schedule order, and the computes' times come sorted.
    The merged order is the same as the schedule order's: ties keep starts before ends,
    a sender's side before a receiver's, schedule order within a side. `ctas` and `bps`:
    what each breakpoint adds to its GPU's CTAs and bytes/s in flight (a transfer's start
    its own, its end the negative), in the breakpoints' order before the merge."""

    def __init__(self, schedule: Schedule, by_gpu: list[tuple[np.ndarray, np.ndarray]], ctas: np.ndarray,
                 copy_bps: np.ndarray, lo: int, hi: int):
        # the transfers by sender, by receiver and the computes by GPU (`_sorted_by`), cut to
        # the range's GPUs
        self.sent, self.received, self.comp = (ops[first[lo]:first[hi]] for ops, first in by_gpu)
        self.sender = schedule.rank[self.sent].astype(float)
        self.receiver = schedule.peer[self.received].astype(float)
        self.computer = schedule.rank[self.comp].astype(float)
        c = np.concatenate([ctas[self.sent], ctas[self.received]])
        b = np.concatenate([copy_bps[self.sent], copy_bps[self.received]])
        self.ctas, self.bps = np.concatenate([c, -c]), np.concatenate([b, -b])
        self.steps: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        """The last play's (sort of the breakpoints, last of each time, sm and hbm shares
        of each step): kept while the breakpoints keep their order (`_in_last_order`)."""


def _sorted_by(ops: np.ndarray, gpu: np.ndarray, n_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """`ops` (ascending) sorted by their GPU in `gpu`, schedule order within a GPU (a stable
    sort, by radix on 16-bit GPU numbers), and where each GPU's start: GPU g's ops are
    sorted[first[g]:first[g + 1]]."""
    g = gpu[ops]
    order = np.argsort(g.astype(np.int16) if n_gpus <= 1 << 15 else g, kind="stable")
    return ops[order], np.searchsorted(g[order], np.arange(n_gpus + 1))


def _extra_s(gpus: _ByGpu, start: np.ndarray, end: np.ndarray, m: np.ndarray, gpu: GpuPull) -> np.ndarray:
    """Each compute's extra time (in the order of `gpus.comp`): the integral of
    (1 - m) sm(t) + m hbm(t) over its span; every transfer touches its two GPUs."""
    if not gpus.comp.size or not gpus.ctas.size:
        return np.zeros(gpus.comp.size)
    span = float(end.max(initial=0.0)) * 2.0 + 1.0
    sides = (gpus.sent, gpus.received)
    offsets = (gpus.sender * span, gpus.receiver * span)
    at = np.concatenate([start[x] + o for x, o in zip(sides, offsets)]
                        + [end[x] + o for x, o in zip(sides, offsets)])
    ordered = None if gpus.steps is None else _in_last_order(at, *gpus.steps[:2])
    if ordered is not None:
        # the last play's breakpoints in the same order, with the same ties: the same
        # steps in flight, only their times moved
        _, last, sm, hbm = gpus.steps
        at = ordered[last]
    else:
        order = np.argsort(at, kind="stable")
        at = at[order]
        in_flight_ctas = np.cumsum(gpus.ctas[order])
        in_flight_bps = np.cumsum(gpus.bps[order])
        # of breakpoints at one time, the last holds what is in flight from then on (a search
        # finds it) and the others hold for no time: they add nothing to the running sums, so
        # they go before the sums are taken (most of a ring's breakpoints are such ties)
        last = np.flatnonzero(np.append(at[1:] != at[:-1], True))
        at, in_flight_ctas, in_flight_bps = at[last], in_flight_ctas[last], in_flight_bps[last]
        # a step holds from its breakpoint to the next; rounding leaves dust where nothing is in flight
        in_flight_ctas[np.abs(in_flight_ctas) < 1e-9] = 0.0
        in_flight_bps[np.abs(in_flight_bps) < 1e-3] = 0.0
        sm = np.minimum(in_flight_ctas / gpu.sms, MAX_SHARE)
        hbm = np.minimum(in_flight_bps * HBM_PASSES / (gpu.hbm_gbps * 1e9), MAX_SHARE)
        # kept in 32-bit positions where they fit: 12 bytes a breakpoint fewer held (48 MB at
        # 1,024 GPUs)
        small = np.int32 if len(order) < 2 ** 31 else np.int64
        gpus.steps = (order.astype(small), last.astype(small), sm, hbm)
    steps = np.diff(at, append=at[-1])
    sm_sum = _sums_before(sm * steps)
    hbm_sum = _sums_before(hbm * steps)

    def integral(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The running sums of sm and hbm up to each of `t` (one search serves both; the
        times searched in order, several times faster than out of order: a GPU's computes
        come in order when they run on one stream)."""
        if np.all(t[1:] >= t[:-1]):
            k = np.searchsorted(at, t, side="right") - 1
        else:
            order = np.argsort(t, kind="stable")
            k = np.empty(len(t), dtype=np.int64)
            k[order] = np.searchsorted(at, t[order], side="right") - 1
        inside = k >= 0
        k = np.maximum(k, 0)
        into = t - at[k]
        return (np.where(inside, sm_sum[k] + sm[k] * into, 0.0),
                np.where(inside, hbm_sum[k] + hbm[k] * into, 0.0))

    g = gpus.computer * span
    sm0, hbm0 = integral(start[gpus.comp] + g)
    sm1, hbm1 = integral(end[gpus.comp] + g)
    return (1.0 - m) * (sm1 - sm0) + m * (hbm1 - hbm0)


def _in_last_order(at: np.ndarray, order: np.ndarray, last: np.ndarray) -> np.ndarray | None:
    """The breakpoint times `at` sorted by `order` where that is still their stable sort and
    `last` still the last of each run of equal times (ascending times, equal ones in the order
    they are listed, a new time exactly where one began before); else None. The plays after the first move the
    computes by microseconds and less: in the rings of 256 and 1,024 GPUs measured no
    breakpoint moved past another, in rings of 8 to 64 GPUs one often did. Where none moves,
    the sort, the running sums of what is in flight and the shares are the last play's, bit
    for bit."""
    ordered = at[order]
    rises = ordered[1:] != ordered[:-1]
    if not (ordered[1:] >= ordered[:-1]).all():
        return None
    if not (rises | (order[1:] > order[:-1])).all():
        return None
    was = np.zeros(len(at) - 1, dtype=bool)
    was[last[:-1]] = True
    return ordered if np.array_equal(rises, was) else None


def _sums_before(x: np.ndarray) -> np.ndarray:
    """The sum of the elements before each element of `x` (0 before the first)."""
    out = np.empty_like(x)
    out[:1] = 0.0
    np.cumsum(x[:-1], out=out[1:])
    return out
