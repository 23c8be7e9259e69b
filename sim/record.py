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

import numpy as np

from sim.schedule import DKV, EMPTY, KINDS, NO_DEP, Schedule
from sim.trace import COLUMN_TYPES, COMPUTE, IDLE, KIND_NAMES, RECV, SEND, WAIT, SpanTable

# a schedule's kind codes as the trace's; the trace's idle after them
_KIND_CODES = np.array([KIND_NAMES.index(k) for k in KINDS] + [IDLE], dtype=np.int8)
_SCHED_IDLE = len(KINDS)
# transfers in flight over the same interval: taken in the order of their kinds' names
# (dK/dV before K/V, as the ring always had it)
_TIE = np.argsort(np.argsort(np.array(KINDS + ("idle",))))


def wait_pieces(t0: np.ndarray, t1: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                kinds: np.ndarray, flying: np.ndarray, idle: int, dkv: int,
                tie: np.ndarray | None = None
                ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Split waits [t0, t1] (one per row) into exposed communication and idle.

    Row i waits on the transfers j where flying[i, j], each in flight over
    [starts[i, j], ends[i, j]] with kind kinds[i, j]. Taking them by (start, end, then
    `tie`, smaller first, or when not given kind `dkv` first), with t the end of the last
    piece (t0 at first), a transfer still in flight after t covers [max(its start, t),
    min(its end, t1)] as exposed communication of its kind, idle (kind `idle`) before
    it; what is left after the last is idle.

    Returns the pieces as (start, end, kind, row) arrays, zero-length pieces dropped, in
    the order: for each transfer position, the idle before it then it, and the idle last.
    """
    s = np.where(flying, np.maximum(starts, t0[:, None]), np.inf)
    e = np.where(flying, np.minimum(ends, t1[:, None]), np.inf)
    order = np.lexsort((kinds != dkv if tie is None else tie, e, s), axis=-1)
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
    n = schedule.n_ranks
    # 32-bit indices halve the memory this moves around (a schedule has under 2^31 ops)
    rank, peer = schedule.rank.astype(np.int32, copy=False), schedule.peer.astype(np.int32, copy=False)
    step = schedule.step.astype(np.int32, copy=False)

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

    # the spans, group by group (computes, sends, receives, wait pieces, idle ends), each
    # in op order; a stable sort of their ranks (16-bit keys sort by radix, in linear
    # time) gives each span's place in the record, and every column is written there
    # group by group, so that no concatenation of all spans is ever made
    # every group is laid out by rank, then op (comp already is), so that each group's
    # places in the record ascend and its columns are written in one forward sweep
    w_op, w_kind, w_start, w_end = _compute_waits(schedule, comp[waits], ready[waits], start, end)
    del comp, first, ready, waits
    sent = xfer[np.argsort(rank[xfer], kind="stable")]
    got = xfer[np.argsort(peer[xfer], kind="stable")]
    del xfer
    kinds = schedule.kind
    nothing = np.int32(-1)
    # per group, each column's values (made one column at a time, when written)
    groups = [
        (lambda: rank[ran], COMPUTE, lambda: kinds[ran], lambda: step[ran], lambda: start[ran],
         lambda: end[ran], lambda: schedule.flops[ran], 0.0, nothing, lambda: schedule.q_chunks[ran],
         lambda: schedule.kv_chunks[ran]),
        (lambda: rank[sent], SEND, lambda: kinds[sent], lambda: step[sent], lambda: start[sent],
         lambda: end[sent], 0.0, lambda: schedule.nbytes[sent], lambda: peer[sent], nothing,
         lambda: schedule.kv_chunks[sent]),
        (lambda: peer[got], RECV, lambda: kinds[got], lambda: step[got], lambda: start[got],
         lambda: end[got], 0.0, lambda: schedule.nbytes[got], lambda: rank[got], nothing,
         lambda: schedule.kv_chunks[got]),
        (lambda: rank[w_op], WAIT, lambda: w_kind, lambda: step[w_op], lambda: w_start, lambda: w_end,
         0.0, 0.0, nothing, lambda: schedule.q_chunks[w_op], lambda: schedule.kv_chunks[w_op]),
        (late, WAIT, _SCHED_IDLE, lambda: last_step[late], lambda: last[late], makespan, 0.0, 0.0,
         nothing, nothing, nothing),
    ]
    sizes = [len(ran), len(sent), len(got), len(w_op), len(late)]
    bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    where = np.concatenate([rank[ran], rank[sent], peer[got], rank[w_op], late])
    order = np.argsort(where.astype(np.int16) if n <= 1 << 15 else where, kind="stable")
    del where
    place = np.empty(len(order), dtype=np.int32)
    place[order] = np.arange(len(order), dtype=np.int32)
    del order
    names = ("rank", "stream", "kind", "step", "start_s", "end_s", "flops", "bytes", "peer",
             "q_chunks", "kv_chunks")
    cols = {name: np.empty(bounds[-1], dtype=COLUMN_TYPES[name]) for name in names}
    for g, columns in enumerate(groups):
        at = place[bounds[g]:bounds[g + 1]]
        for name, values in zip(names, columns):
            values = values() if callable(values) else values
            cols[name][at] = _KIND_CODES[values] if name == "kind" else values
    return SpanTable(**cols, chunk_sets=schedule.chunk_sets)


def _compute_waits(schedule: Schedule, ops: np.ndarray, t0: np.ndarray, start: np.ndarray,
                   end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The wait pieces of each compute in `ops` (waiting from t0 to its start), as
    (op, schedule kind code, start, end) arrays, in the order of `ops`."""
    deps = np.take(schedule.after, ops, axis=1).T                       # (ops, width)
    flying = (deps != NO_DEP) & schedule.is_transfer[deps]   # a pad reads the last op: masked
    kinds = schedule.kind[deps]
    pieces = wait_pieces(t0, start[ops], start[deps], end[deps], kinds, flying, _SCHED_IDLE, DKV,
                         tie=_TIE[kinds])
    # by row (the order of `ops`), each row's pieces in time order
    by_row = np.argsort(np.concatenate([row for _, _, _, row in pieces]), kind="stable")
    return (ops[np.concatenate([row for _, _, _, row in pieces])[by_row]],
            np.concatenate([kind for _, _, kind, _ in pieces])[by_row],
            np.concatenate([a for a, _, _, _ in pieces])[by_row],
            np.concatenate([b for _, b, _, _ in pieces])[by_row])
