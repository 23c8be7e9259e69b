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
    # a start past the wait's end (measured: the peer posted after this rank stopped
    # waiting) is held at the end; the simulator's transfers never start so late
    s = np.where(flying, np.minimum(np.maximum(starts, t0[:, None]), t1[:, None]), np.inf)
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
        t = np.where(on, np.maximum(e[:, j], sj), t)   # never back: a measured start may pass its end
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
    comp = comp[_by_rank(rank[comp], n)]
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
    sent = xfer[_by_rank(rank[xfer], n)]
    got = xfer[_by_rank(peer[xfer], n)]
    del xfer
    kinds = schedule.kind
    # per group: its ranks, its stream, then each column's values where they vary (made
    # one at a time, when written) or the one value they all share
    groups = [
        (rank[ran], COMPUTE, dict(kind=lambda: kinds[ran], step=lambda: step[ran],
                                  start_s=lambda: start[ran], end_s=lambda: end[ran],
                                  flops=lambda: schedule.flops[ran], q_chunks=lambda: schedule.q_chunks[ran],
                                  kv_chunks=lambda: schedule.kv_chunks[ran])),
        (rank[sent], SEND, dict(kind=lambda: kinds[sent], step=lambda: step[sent], start_s=lambda: start[sent],
                                end_s=lambda: end[sent], bytes=lambda: schedule.nbytes[sent],
                                peer=lambda: peer[sent], kv_chunks=lambda: schedule.kv_chunks[sent])),
        (peer[got], RECV, dict(kind=lambda: kinds[got], step=lambda: step[got], start_s=lambda: start[got],
                               end_s=lambda: end[got], bytes=lambda: schedule.nbytes[got],
                               peer=lambda: rank[got], kv_chunks=lambda: schedule.kv_chunks[got])),
        (rank[w_op], WAIT, dict(kind=lambda: w_kind, step=lambda: step[w_op], start_s=lambda: w_start,
                                end_s=lambda: w_end, q_chunks=lambda: schedule.q_chunks[w_op],
                                kv_chunks=lambda: schedule.kv_chunks[w_op])),
        (late, WAIT, dict(kind=_SCHED_IDLE, step=lambda: last_step[late], start_s=lambda: last[late],
                          end_s=makespan)),
    ]
    shared = dict(flops=0.0, bytes=0.0, peer=-1, q_chunks=-1, kv_chunks=-1)
    # the record is rank by rank, each rank's groups in turn: where each (rank, group)
    # block starts follows from the counts, and each group's spans (sorted by rank) go
    # to their blocks in one ascending sweep; no sort of all spans is needed
    counts = np.stack([np.bincount(ranks, minlength=n) for ranks, _, _ in groups], axis=1)   # (n, groups)
    total = int(counts.sum())
    block_start = (np.cumsum(counts.ravel()) - counts.ravel()).reshape(counts.shape)
    cols = {name: np.empty(total, dtype=dtype) for name, dtype in COLUMN_TYPES.items()}
    cols["rank"] = np.repeat(np.arange(n, dtype=np.int32), counts.sum(axis=1))
    cols["stream"] = np.repeat(np.tile(np.array([g[1] for g in groups], dtype=np.int8), n), counts.ravel())
    for g, (ranks, _, values) in enumerate(groups):
        # place of the group's i-th span: its block's start + its index within the block
        first_of_rank = np.cumsum(counts[:, g]) - counts[:, g]
        at = np.repeat(block_start[:, g] - first_of_rank, counts[:, g]) + np.arange(len(ranks), dtype=np.int64)
        for name in ("kind", "step", "start_s", "end_s", "flops", "bytes", "peer", "q_chunks", "kv_chunks"):
            v = values.get(name, shared.get(name))
            v = v() if callable(v) else v
            cols[name][at] = _KIND_CODES[v] if name == "kind" else v
    return SpanTable(**cols, chunk_sets=schedule.chunk_sets)


def _by_rank(ranks: np.ndarray, n: int) -> np.ndarray:
    """A stable sort by rank (16-bit keys sort by radix, in linear time)."""
    return np.argsort(ranks.astype(np.int16) if n <= 1 << 15 else ranks, kind="stable")


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
