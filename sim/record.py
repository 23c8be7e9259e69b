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


_CHUNK = 1 << 18
"""Spans written per pass: a pass's temporaries take a few MB, which the allocator reuses,
where whole-column temporaries would be fresh memory every time (what a trace of tens of
millions of spans spends most of its time on)."""


def record_spans(schedule: Schedule, start: np.ndarray, end: np.ndarray) -> SpanTable:
    """The trace's spans, grouped by rank, then by stream (compute, send, recv, wait), each
    in the order it ran (schedule order; a wait's pieces in time order; the idle at the
    end last)."""
    n = schedule.n_ranks
    rank, peer, step = schedule.rank, schedule.peer, schedule.step

    # each rank's computes in order; a compute waits from the end of the one before
    comp = schedule.compute_ids
    comp_rank = rank[comp]
    by_rank = _by_rank(comp_rank, n)
    comp, comp_rank = comp[by_rank], comp_rank[by_rank]
    del by_rank
    first = np.ones(len(comp), dtype=bool)
    first[1:] = comp_rank[1:] != comp_rank[:-1]
    ready = np.empty(len(comp))
    ready[1:] = end[comp[:-1]]
    ready[first] = 0.0
    waits = start[comp] > ready
    ran = comp[schedule.mask[comp] != EMPTY]
    xfer = schedule.transfer_ids

    # each rank's last event: its last compute's end (its start, if skipped), or a later
    # transfer's end at either end; its last step likewise; idle from there to the end
    last = np.zeros(n)
    last_step = np.zeros(n, dtype=step.dtype)     # ufunc.at is many times slower when it must cast
    final = comp[np.append(first[1:], True)] if len(comp) else comp
    last[rank[final]] = end[final]
    last_step[rank[final]] = step[final]
    for a in range(0, len(xfer), _CHUNK):
        ids = xfer[a:a + _CHUNK]
        t, k = end[ids], step[ids]
        for side in (rank[ids], peer[ids]):
            np.maximum.at(last, side, t)
            np.maximum.at(last_step, side, k)
    makespan = last.max(initial=0.0)
    late = np.flatnonzero(last < makespan).astype(np.int32)

    # the spans, group by group (computes, sends, receives, wait pieces, idle ends), each
    # laid out by rank, then op (comp already is), so that each group's places in the
    # record ascend; every column is written there group by group, a chunk of spans at a
    # time, so that no concatenation of all spans, nor any temporary of a whole column,
    # is ever made
    w_op, w_kind, w_start, w_end = _compute_waits(schedule, comp[waits], ready[waits], start, end)
    del comp, comp_rank, first, ready, waits
    sent = xfer[_by_rank(rank[xfer], n)]
    got = xfer[_by_rank(peer[xfer], n)]
    kinds = schedule.kind

    # each column's values for spans a..b of a group (a chunk at a time); `across` is
    # given for a group with as many spans on every rank, and then the values come as
    # (span of the rank, rank) of the ranks a // across ..: read a span of every rank in
    # turn, which for a schedule numbered step by step (a ring's) reads memory in order,
    # where rank by rank would jump to another page at every span
    def of(column: np.ndarray, ids: np.ndarray):
        def values(a, b, across=None):
            if across is None:
                return column[ids[a:b]]
            return column[np.ascontiguousarray(ids[a:b].reshape(-1, across).T)]
        return values

    def kind_of(ids: np.ndarray):
        read = of(kinds, ids)
        return lambda a, b, across=None: _KIND_CODES[read(a, b, across)]

    def part(values: np.ndarray):
        return lambda a, b, across=None: values[a:b] if across is None else values[a:b].reshape(-1, across).T

    # per group: its ranks, its stream, then each column's values where they vary (a
    # chunk at a time) or the one value they all share
    groups = [
        (rank[ran], COMPUTE, dict(kind=kind_of(ran), step=of(step, ran), start_s=of(start, ran),
                                  end_s=of(end, ran), flops=of(schedule.flops, ran),
                                  q_chunks=of(schedule.q_chunks, ran), kv_chunks=of(schedule.kv_chunks, ran))),
        (rank[sent], SEND, dict(kind=kind_of(sent), step=of(step, sent), start_s=of(start, sent),
                                end_s=of(end, sent), bytes=of(schedule.nbytes, sent), peer=of(peer, sent),
                                kv_chunks=of(schedule.kv_chunks, sent))),
        (peer[got], RECV, dict(kind=kind_of(got), step=of(step, got), start_s=of(start, got),
                               end_s=of(end, got), bytes=of(schedule.nbytes, got), peer=of(rank, got),
                               kv_chunks=of(schedule.kv_chunks, got))),
        (rank[w_op], WAIT, dict(kind=part(_KIND_CODES[w_kind]), step=of(step, w_op), start_s=part(w_start),
                                end_s=part(w_end), q_chunks=of(schedule.q_chunks, w_op),
                                kv_chunks=of(schedule.kv_chunks, w_op))),
        (late, WAIT, dict(kind=_KIND_CODES[_SCHED_IDLE], step=part(last_step[late]), start_s=part(last[late]),
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
    names = ("kind", "step", "start_s", "end_s", "flops", "bytes", "peer", "q_chunks", "kv_chunks")
    for g, (ranks, _, values) in enumerate(groups):
        count = counts[:, g]
        if not len(ranks):
            continue
        if (count == count[0]).all():
            # as many spans on every rank (a ring's computes and hops): each rank's block
            # is a row of a window view of the column, and rows are copied whole
            width = int(count[0])
            step_rows = max(1, _CHUNK // width)
            for r0 in range(0, n, step_rows):
                r1 = min(n, r0 + step_rows)
                rows = block_start[r0:r1, g]
                for name in names:
                    v = values.get(name, shared.get(name))
                    _windows(cols[name], width)[rows] = v(r0 * width, r1 * width, width).T if callable(v) else v
            continue
        # place of the group's i-th span: its block's start + its index within the block
        offset = block_start[:, g] - (np.cumsum(count) - count)
        for a in range(0, len(ranks), _CHUNK):
            b = min(a + _CHUNK, len(ranks))
            at = offset[ranks[a:b]] + np.arange(a, b)
            for name in names:
                v = values.get(name, shared.get(name))
                cols[name][at] = v(a, b) if callable(v) else v
    return SpanTable(**cols, chunk_sets=schedule.chunk_sets)


def _windows(column: np.ndarray, width: int) -> np.ndarray:
    """(len - width + 1, width) view of a column: row i is column[i:i + width]."""
    return np.lib.stride_tricks.as_strided(column, (len(column) - width + 1, width),
                                           (column.strides[0], column.strides[0]))


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
