"""From the times of a schedule's operations to the trace's span table.

Each compute becomes a compute span (a skipped, fully masked block none), each transfer
a send span on its sender and a recv span on its receiver. When a compute stream is
ready (its previous block done) but its block is not, it waits: `wait_pieces` splits
that wait into exposed communication (a transfer it depends on is in flight; a wait span
of the transfer's kind) and idle (the transfer had not started: a late peer, a busy
link); the time after a rank's last event until the makespan is idle too. The real
kernels split their measured waits with the same function, so simulated and measured
traces mean the same thing (DESIGN.md, Definitions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.schedule import DKV, EMPTY, KINDS, NO_DEP, Schedule
from sim.trace import COMPUTE, IDLE, KIND_NAMES, RECV, SEND, WAIT, SpanTable

# a schedule's kind codes as the trace's; the trace's idle after them
_KIND_CODES = np.array([KIND_NAMES.index(k) for k in KINDS] + [IDLE], dtype=np.int8)
_SCHED_IDLE = len(KINDS)


def wait_pieces(t0: np.ndarray, t1: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                kinds: np.ndarray, flying: np.ndarray, idle: int, dkv: int
                ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Split waits [t0, t1] (one per row) into exposed communication and idle.

    Row i waits on the transfers j where flying[i, j], each in flight over
    [starts[i, j], ends[i, j]] with kind kinds[i, j]. Taking them by (start, end, kind:
    `dkv` first), with t the end of the last piece (t0 at first), a transfer still in
    flight after t covers [max(its start, t), min(its end, t1)] as exposed communication
    of its kind, idle (kind `idle`) before it; what is left after the last is idle.

    Returns the pieces as (start, end, kind, row) arrays, zero-length pieces dropped, in
    the order: for each transfer position, the idle before it then it, and the idle last.
    """
    s = np.where(flying, np.maximum(starts, t0[:, None]), np.inf)
    e = np.where(flying, np.minimum(ends, t1[:, None]), np.inf)
    order = np.lexsort((kinds != dkv, e, s), axis=-1)
    s, e, kinds, flying = (np.take_along_axis(x, order, -1) for x in (s, e, kinds, flying))
    rows = np.arange(len(t0))
    t = t0
    pieces = []
    for j in range(int(flying.sum(axis=1).max(initial=0))):
        on = flying[:, j] & (e[:, j] > t)
        sj = np.maximum(s[:, j], t)
        pieces += [(t, sj, idle, on), (sj, e[:, j], kinds[:, j], on)]
        t = np.where(on, e[:, j], t)
    pieces.append((t, t1, idle, True))
    out = []
    for a, b, kind, on in pieces:
        keep = on & (b > a)
        out.append((a[keep], b[keep], np.broadcast_to(kind, keep.shape)[keep], rows[keep]))
    return out


def record_spans(schedule: Schedule, start: np.ndarray, end: np.ndarray) -> SpanTable:
    """The trace's spans, grouped by rank, then by stream (compute, send, recv, wait), each
    in the order it ran (schedule order; a wait's pieces in time order; the idle at the
    end last)."""
    n, n_ops = schedule.n_ranks, len(schedule)
    # 32-bit indices halve the memory this moves around (a schedule has under 2^31 ops)
    rank, peer = schedule.rank.astype(np.int32), schedule.peer.astype(np.int32)
    step = schedule.step.astype(np.int32)

    # each rank's computes in order; a compute waits from the end of the one before
    comp = np.flatnonzero(~schedule.is_transfer).astype(np.int32)
    comp = comp[np.argsort(rank[comp], kind="stable")]
    first = np.ones(len(comp), dtype=bool)
    first[1:] = rank[comp[1:]] != rank[comp[:-1]]
    ready = np.zeros(len(comp))
    ready[1:] = end[comp[:-1]]
    ready[first] = 0.0
    waits = start[comp] > ready
    ran = comp[schedule.mask[comp] != EMPTY]
    xfer = np.flatnonzero(schedule.is_transfer).astype(np.int32)

    # each rank's last event: its last compute's end (its start, if skipped), or a later
    # transfer's end at either end; its last step likewise; idle from there to the end
    last = np.zeros(n)
    last_step = np.zeros(n, dtype=np.int32)
    final = comp[np.append(first[1:], True)] if len(comp) else comp
    last[rank[final]] = end[final]
    last_step[rank[final]] = step[final]
    for side in (rank[xfer], peer[xfer]):
        np.maximum.at(last, side, end[xfer])
        np.maximum.at(last_step, side, step[xfer])
    makespan = last.max(initial=0.0)
    late = np.flatnonzero(last < makespan).astype(np.int32)

    # one entry per span: its op (n_ops + rank for the idle at the end), stream, kind,
    # rank and times; laid out stream by stream (in the trace's stream order), each in
    # op order, so that a stable sort by rank gives the record's order
    w_op, w_kind, w_start, w_end = _compute_waits(schedule, comp[waits], ready[waits], start, end)
    by_op = np.argsort(w_op, kind="stable")
    w_op, w_kind, w_start, w_end = w_op[by_op], w_kind[by_op], w_start[by_op], w_end[by_op]
    ran = np.sort(ran)
    op = np.concatenate([ran, xfer, xfer, w_op, n_ops + late])
    count = [len(ran), len(xfer), len(xfer), len(w_op), len(late)]
    stream = np.repeat(np.array([COMPUTE, SEND, RECV, WAIT, WAIT], dtype=np.int8), count)
    where = np.concatenate([rank[ran], rank[xfer], peer[xfer], rank[w_op], late])
    # a 16-bit key sorts by radix, in linear time
    order = np.argsort(where.astype(np.int16) if n <= 1 << 15 else where, kind="stable")
    op, stream, where = op[order], stream[order], where[order]
    kind = np.concatenate([schedule.kind[ran], schedule.kind[xfer], schedule.kind[xfer], w_kind,
                           np.full(len(late), _SCHED_IDLE)])[order]
    t0 = np.concatenate([start[ran], start[xfer], start[xfer], w_start, last[late]])[order]
    t1 = np.concatenate([end[ran], end[xfer], end[xfer], w_end, np.full(len(late), makespan)])[order]
    del order

    # what a span takes from its op; the idle at the end has no op (the padding)
    at_end = op >= n_ops
    inside = np.minimum(op, n_ops - 1) if n_ops else op

    def of_op(column: np.ndarray, pad: Any) -> np.ndarray:
        out = column[inside] if n_ops else np.full(len(op), pad, dtype=column.dtype)
        out[at_end] = pad
        return out

    is_compute, is_wait = stream == COMPUTE, stream == WAIT
    moves = (stream == SEND) | (stream == RECV)
    other_end = np.where(stream == SEND, of_op(peer, -1), of_op(rank, -1))
    return SpanTable(
        rank=where, stream=stream, kind=_KIND_CODES[kind], step=np.where(at_end, last_step[np.maximum(op - n_ops, 0)], of_op(step, 0)),
        start_s=t0, end_s=t1, flops=np.where(is_compute, of_op(schedule.flops, 0.0), 0.0),
        bytes=np.where(moves, of_op(schedule.nbytes, 0), 0).astype(np.float64),
        peer=np.where(moves, other_end, -1),
        q_chunks=np.where(is_compute | is_wait, of_op(schedule.q_chunks, -1), -1),
        kv_chunks=of_op(schedule.kv_chunks, -1), chunk_sets=schedule.chunk_sets)


def _compute_waits(schedule: Schedule, ops: np.ndarray, t0: np.ndarray, start: np.ndarray,
                   end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The wait pieces of each compute in `ops` (waiting from t0 to its start), as
    (op, schedule kind code, start, end) arrays."""
    deps = np.take(schedule.after, ops, axis=1).T                       # (ops, width)
    flying = (deps != NO_DEP) & schedule.is_transfer[deps]   # a pad reads the last op: masked
    pieces = wait_pieces(t0, start[ops], start[deps], end[deps], schedule.kind[deps], flying,
                         _SCHED_IDLE, DKV)
    return (np.concatenate([ops[row] for _, _, _, row in pieces]),
            np.concatenate([kind for _, _, kind, _ in pieces]),
            np.concatenate([a for a, _, _, _ in pieces]),
            np.concatenate([b for _, b, _, _ in pieces]))
