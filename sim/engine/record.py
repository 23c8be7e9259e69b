"""From the times of a schedule's operations to the trace's span table.

Each compute becomes a compute span (a skipped, fully masked block none), each transfer
a send span on its sender and a recv span on its receiver. When a compute stream is
ready (its previous block done) but its block is not, it waits: `wait_pieces` splits
that wait into exposed communication (a transfer it depends on is in flight; a wait span
of the transfer's kind) and idle (the transfer had not started: a late peer, a busy
link); the time after a rank's last event until the makespan is idle too. The real
kernels split their measured waits with the same function, so simulated and measured
traces mean the same thing (docs/design.md, Definitions).
"""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np

from sim.engine import threads
from sim.engine.schedule import DKV, EMPTY, KINDS, NO_DEP, Posts, Schedule
from sim.engine.threads import each
from sim.trace.format import COLUMN_TYPES, COMPUTE, IDLE, KIND_NAMES, RECV, SEND, WAIT, SpanTable

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
    # a position where nothing is in flight on any row sorts last everywhere and is
    # never read: dropped (a schedule's padding, a dependency on a compute)
    used = flying.any(axis=0)
    if not used.all():
        starts, ends, kinds, flying = (x[:, used] for x in (starts, ends, kinds, flying))
        tie = tie[:, used] if tie is not None else None
    s = np.where(flying, np.minimum(np.maximum(starts, t0[:, None]), t1[:, None]), np.inf)
    e = np.where(flying, np.minimum(ends, t1[:, None]), np.inf)
    tie = (kinds != dkv) if tie is None else tie
    if s.shape[1] == 2:
        # one compare-exchange sorts two (stable: only a strictly smaller key moves up)
        swap = (s[:, 1] < s[:, 0]) | ((s[:, 1] == s[:, 0]) & (
            (e[:, 1] < e[:, 0]) | ((e[:, 1] == e[:, 0]) & (tie[:, 1] < tie[:, 0]))))
        if swap.any():
            s, e, kinds, flying = (np.where(swap[:, None], x[:, ::-1], x) for x in (s, e, kinds, flying))
    elif s.shape[1] > 2:
        order = np.lexsort((tie, e, s), axis=-1)
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


_SOURCES = ("kind", "step", "flops", "nbytes", "q_chunks", "kv_chunks", "peer", "rank")
"""The schedule's columns the table's columns are read from."""

_CHUNK = 1 << 18
"""Spans written per pass: a pass's temporaries take a few MB, which the allocator reuses,
where whole-column temporaries would be fresh memory every time (what a trace of tens of
millions of spans spends most of its time on)."""


class _ByRank:
    """Ops of one group laid out by rank, then in schedule order: either a grid (a
    schedule that numbers them step by step, every rank once per step, in the same order
    each step: a ring's), `ids[:, column[r]]` the ops of rank r, read without any sort;
    or the ids sorted by rank (`ids`, their ranks `ranks`)."""

    def __init__(self, ids: np.ndarray, keys: np.ndarray, n: int):
        self.n = n
        self.grid = None
        if n > 1 and len(ids) and len(ids) % n == 0:
            rows = keys[ids[:n]]
            if np.array_equal(np.sort(rows), np.arange(n)) and _rows_equal(keys, ids, rows):
                self.grid = ids.reshape(-1, n)
                self.column = np.empty(n, dtype=np.int64)
                self.column[rows] = np.arange(n)
                self.counts = np.full(n, self.grid.shape[0])
                # ranks whose columns follow one another (one run for the senders, two
                # for the receivers of a ring: rank 0 receives from N - 1)
                cuts = np.flatnonzero(np.diff(self.column) != 1) + 1
                self.runs = list(zip([0, *cuts.tolist()], [*cuts.tolist(), n]))
                # the ops of a step consecutive, and the steps equally spaced (a ring's
                # computes, its forward hops): a block of the grid is a strided view of
                # any column, read without a gather
                starts = self.grid[:, 0]
                pitch = np.diff(starts)
                self.pitch = int(pitch[0]) if len(pitch) and (pitch == pitch[0]).all() else None
                if self.pitch is not None and not _rows_consecutive(self.grid):
                    self.pitch = None
                return
        order = _by_rank(keys[ids], n)
        self.ids = ids[order]
        self.ranks = keys[self.ids]
        self.counts = np.bincount(self.ranks, minlength=n)

    def block(self, r0: int, r1: int) -> np.ndarray:
        """(span of the rank, rank) ids of ranks r0..r1-1 of a grid."""
        cols = self.column[r0:r1]
        if cols[-1] - cols[0] == r1 - r0 - 1 and (np.diff(cols) == 1).all():
            return self.grid[:, cols[0]:cols[-1] + 1]
        return self.grid[:, cols]

    def read(self, column: np.ndarray, r0: int, r1: int) -> np.ndarray:
        """(span of the rank, rank) values of `column` at the ops of ranks r0..r1-1 of a
        grid, whose columns follow one another."""
        if self.pitch is None or len(self.grid) < 2:
            return column[self.block(r0, r1)]
        at = int(self.grid[0, 0]) + int(self.column[r0])
        step = column.strides[0]
        return np.lib.stride_tricks.as_strided(column[at:], (len(self.grid), r1 - r0), (self.pitch * step, step),
                                               writeable=False)

    def sorted_ids(self) -> np.ndarray:
        """The ids by rank, then schedule order."""
        return self.ids if self.grid is None else self.grid[:, self.column].T.ravel()


def _rows_consecutive(grid: np.ndarray) -> bool:
    """Whether every row of `grid` counts up by one (read a few rows at a time)."""
    n = grid.shape[1]
    step = max(1, _CHUNK // n)
    up = np.arange(n)
    return all(((grid[a:a + step] - grid[a:a + step, :1]) == up).all() for a in range(0, len(grid), step))


def _rows_equal(keys: np.ndarray, ids: np.ndarray, row: np.ndarray) -> bool:
    """Whether keys[ids] is `row` over and over (read a chunk at a time)."""
    n = len(row)
    step = max(1, _CHUNK // n) * n
    return all((keys[ids[a:a + step]].reshape(-1, n) == row).all() for a in range(0, len(ids), step))


def record_spans(schedule: Schedule, start: np.ndarray, end: np.ndarray) -> SpanTable:
    """The trace's spans, grouped by rank, then by stream (compute, send, recv, wait), each
    in the order it ran (schedule order; a wait's pieces in time order; the idle at the
    end last)."""
    return record_owned(schedule, [start, end], release=False)


def record_owned(schedule: Schedule, times: list[np.ndarray], *, release: bool,
                 posts: Posts | None = None) -> SpanTable:
    """record_spans of the times [start, end], which this call takes over (it empties the
    list). release: the schedule and the times were made for this record alone, so each
    input is let go once the record has read it for the last time (the dependencies once
    the waits are found, a column once the table's columns that read it are written),
    and the table takes their memory back. posts: the play held computes on the sends
    they posted (Schedule.posts, made; sim.engine.players.times_simpy), which they then wait on."""
    start, end = times
    times.clear()
    n = schedule.n_ranks

    # each rank's computes in order; a compute waits from the end of the one before
    comp = _ByRank(schedule.compute_ids, schedule.rank, n)
    w_ops, w_ready, final = _compute_ready(comp, start, end)
    ran = _computes_run(comp, schedule)
    last, last_step = _last_events(schedule, final, end)
    makespan = last.max(initial=0.0)
    late = np.flatnonzero(last < makespan).astype(np.int32)

    # the spans, group by group (computes, sends, receives, wait pieces, idle ends), each
    # laid out by rank, then op, so that each group's places in the record ascend; every
    # column is written there group by group, a chunk of spans at a time, so that no
    # concatenation of all spans, nor any temporary of a whole column, is ever made
    w_op, w_kind, w_start, w_end = _compute_waits_apart(schedule, w_ops, w_ready, start, end, posts)
    del w_ops, w_ready
    if release:
        schedule.release("after")
    xfer = schedule.transfer_ids
    sent, got = _ByRank(xfer, schedule.rank, n), _ByRank(xfer, schedule.peer, n)
    waits = _sorted(w_op, schedule.rank, n)
    # a column read from the schedule or the times is named (a key of `source`), so that
    # the record can let it go after its last reader
    source = {"start": start, "end": end, **{name: getattr(schedule, name) for name in _SOURCES}}
    del start, end
    # per group: how its ops lie (or None: its values are given span by span), its
    # stream, then each column: a source read at the group's ops, the values span by
    # span, or the one value they all share
    groups = [
        (ran, COMPUTE, dict(kind="kind", step="step", start_s="start", end_s="end", flops="flops",
                            q_chunks="q_chunks", kv_chunks="kv_chunks")),
        (sent, SEND, dict(kind="kind", step="step", start_s="start", end_s="end", bytes="nbytes",
                          peer="peer", kv_chunks="kv_chunks")),
        (got, RECV, dict(kind="kind", step="step", start_s="start", end_s="end", bytes="nbytes",
                         peer="rank", kv_chunks="kv_chunks")),
        (waits, WAIT, dict(kind=_KIND_CODES[w_kind], step="step", start_s=w_start, end_s=w_end,
                           q_chunks="q_chunks", kv_chunks="kv_chunks")),
        (_Given(late, n), WAIT, dict(kind=_KIND_CODES[_SCHED_IDLE], step=last_step[late], start_s=last[late],
                                     end_s=makespan)),
    ]
    return _TableWriter(schedule, groups, source, release).table()


def _computes_run(comp: _ByRank, schedule: Schedule) -> _ByRank:
    """The computes that ran (a skipped, fully masked block is no span), by rank."""
    mask = schedule.mask
    if comp.grid is not None and all((mask[comp.grid[a:a + 64]] != EMPTY).all()
                                     for a in range(0, len(comp.grid), 64)):
        return comp
    ids = comp.sorted_ids()
    ids = ids[mask[ids] != EMPTY]
    return _sorted(ids, schedule.rank, schedule.n_ranks)


def _last_events(schedule: Schedule, final: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each rank's last event: its last compute's end (its start, if skipped; `final` its
    last computes), or a later transfer's end at either end; and its last step likewise.
    Idle goes from there to the end."""
    rank, peer, step = schedule.rank, schedule.peer, schedule.step
    xfer = schedule.transfer_ids
    last = np.zeros(schedule.n_ranks)
    last_step = np.zeros(schedule.n_ranks, dtype=step.dtype)     # ufunc.at is many times slower when it must cast
    last[rank[final]] = end[final]
    last_step[rank[final]] = step[final]
    for a in range(0, len(xfer), _CHUNK):
        ids = xfer[a:a + _CHUNK]
        t, k = end[ids], step[ids]
        for side in (rank[ids], peer[ids]):
            np.maximum.at(last, side, t)
            np.maximum.at(last_step, side, k)
    return last, last_step


_NAMES = ("start_s", "end_s", "flops", "bytes", "step", "peer", "q_chunks", "kv_chunks", "kind")
"""The table's columns written group by group (rank and stream follow from the counts)."""


class _TableWriter:
    """The span table of a record's groups (record_owned), a column at a time, each
    column group by group into its place. The record is rank by rank, each rank's groups
    in turn: where each (rank, group) block starts follows from the counts, and each
    group's spans (sorted by rank) go to their blocks in one ascending sweep; no sort of
    all spans is needed. With `release`, a source is let go once the last column that
    reads it is written."""

    def __init__(self, schedule: Schedule, groups: list, source: dict[str, np.ndarray], release: bool):
        self.schedule, self.groups, self.source, self.release = schedule, groups, source, release
        self.reads = {name: {v[name] for _, _, v in groups if isinstance(v.get(name), str)} for name in _NAMES}
        # per source: columns still to read it
        self.readers = Counter(key for keys in self.reads.values() for key in keys)
        self.lock = threading.Lock()
        self.counts = np.stack([g.counts for g, _, _ in groups], axis=1)   # (n, groups)
        self.total = int(self.counts.sum())
        self.block_start = (np.cumsum(self.counts.ravel()) - self.counts.ravel()).reshape(self.counts.shape)

    def table(self) -> SpanTable:
        # the columns are independent: written side by side on the host's cores (NumPy lets
        # go of the interpreter while it copies), the widest first; each writes (and so
        # first touches) its own memory
        cols = dict(zip(_NAMES, each(self.column, _NAMES, size=self.total)))
        n = self.schedule.n_ranks
        cols["rank"] = np.repeat(np.arange(n, dtype=np.int32), self.counts.sum(axis=1))
        cols["stream"] = np.repeat(np.tile(np.array([g[1] for g in self.groups], dtype=np.int8), n),
                                   self.counts.ravel())
        return SpanTable(**cols, chunk_sets=self.schedule.chunk_sets)

    def done_with(self, keys: set[str]) -> None:
        """A column is written: let go of the sources no other column reads."""
        with self.lock:
            for key in keys:
                self.readers[key] -= 1
                if self.readers[key] == 0 and self.release:
                    del self.source[key]
                    if key in _SOURCES:
                        self.schedule.release(key)

    def column(self, name: str) -> np.ndarray:
        """One column of the record, written group by group."""
        source, counts, block_start = self.source, self.counts, self.block_start
        out = np.empty(self.total, dtype=COLUMN_TYPES[name])
        for g, (ops, _, values) in enumerate(self.groups):
            given = _BY_SPAN.get(g, ())

            def read(ids: np.ndarray | tuple[int, int] | None, a: int, b: int):
                v = values.get(name, _SHARED.get(name))
                if isinstance(v, str):
                    v = source[v]
                if name in given:
                    return v[a:b]
                if not isinstance(v, np.ndarray):
                    return v
                v = ops.read(v, *ids) if isinstance(ids, tuple) else v[ids]
                return _KIND_CODES[v] if name == "kind" else v

            if ops.grid is not None:
                # each rank's block is a row of a window view of the column, and rows
                # are copied whole; the values are read a step of every rank at a
                # time, which reads the schedule's columns in order where rank by rank
                # would jump to another page at every span
                width = ops.grid.shape[0]
                if not width:
                    continue
                per_pass = max(1, _CHUNK // width)
                # a strided read needs ranks whose columns follow one another (a run); a
                # gather reads any ranks at once (a hybrid's rings inside nodes: every rank
                # a run of its own, 9,216 passes of a few spans each where 9 do)
                for lo, hi in (ops.runs if ops.pitch is not None else [(0, ops.n)]):
                    for r0 in range(lo, hi, per_pass):
                        r1 = min(hi, r0 + per_pass)
                        _put_rows(_windows(out, width), block_start[r0:r1, g], read((r0, r1), 0, 0))
                continue
            count = counts[:, g]
            # place of the group's i-th span: its block's start + its index within the block
            offset = block_start[:, g] - (np.cumsum(count) - count)
            for a in range(0, len(ops.ranks), _CHUNK):
                b = min(a + _CHUNK, len(ops.ranks))
                out[offset[ops.ranks[a:b]] + np.arange(a, b)] = read(ops.ids[a:b] if ops.ids is not None else None,
                                                                   a, b)
        self.done_with(self.reads[name])
        return out


_BY_SPAN = {3: ("kind", "start_s", "end_s"), 4: ("step", "start_s")}
"""Per group (by position in record_owned's list): the columns whose values it gives span by span."""
_SHARED = dict(flops=0.0, bytes=0.0, peer=-1, q_chunks=-1, kv_chunks=-1)
"""The value of a column a group neither reads nor gives: every span's alike."""


class _Given(_ByRank):
    """A group whose spans are given in rank order, one per listed rank (no ops)."""

    def __init__(self, ranks: np.ndarray, n: int):
        self.n, self.grid, self.ids, self.ranks = n, None, None, ranks
        self.counts = np.bincount(ranks, minlength=n)


def _sorted(ids: np.ndarray, rank: np.ndarray, n: int) -> _ByRank:
    """A group of ops already in rank order."""
    out = _Given(rank[ids], n)
    out.ids = ids
    return out


def _compute_ready(comp: _ByRank, start: np.ndarray, end: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The computes that wait (ready, its previous compute on the rank done, before they
    start), by rank then order, with the time each is ready (0 for a rank's first); and
    each rank's last compute (the ranks that have one)."""
    if comp.grid is None:
        ids, ranks = comp.ids, comp.ranks
        first = np.ones(len(ids), dtype=bool)
        first[1:] = ranks[1:] != ranks[:-1]
        ready = np.empty(len(ids))
        ready[1:] = end[ids[:-1]]
        ready[first] = 0.0
        waits = start[ids] > ready
        final = ids[np.append(first[1:], True)] if len(ids) else ids
        return ids[waits], ready[waits], final
    n = comp.n
    ops, readies = [], []
    per_pass = max(1, _CHUNK // max(comp.grid.shape[0], 1))
    for r0 in range(0, n, per_pass):
        ids = comp.block(r0, min(n, r0 + per_pass)).T       # (rank, its computes)
        ready = np.zeros(ids.shape)
        ready[:, 1:] = end[ids[:, :-1]]
        waits = start[ids] > ready
        ops.append(ids[waits])
        readies.append(ready[waits])
    return np.concatenate(ops), np.concatenate(readies), comp.grid[-1, comp.column]


def _put_rows(windows: np.ndarray, rows: np.ndarray, value) -> None:
    """Write a (span, rank) block of a grid group as rank rows: `windows[rows[i]]` gets
    column i of `value` (or `value` itself, where it is one number).

    The block is a strided view that steps through the schedule a step at a time; read
    in that order into one contiguous block, it is then written across, a transpose
    that no longer jumps a schedule's step for every value. A block whose values depend
    only on the rank (a rank's own chunks, its peer) or only on the step is written
    from one row or one column of it (compared bit for bit), without the transpose."""
    if not isinstance(value, np.ndarray):
        windows[rows] = value
        return
    block = np.ascontiguousarray(value)
    bits = block.view(np.int64) if block.dtype == np.float64 else block
    if (bits[1:] == bits[:1]).all():
        windows[rows] = block[0][:, None]
    elif (bits[:, 1:] == bits[:, :1]).all():
        windows[rows] = block[:, 0]
    else:
        windows[rows] = block.T


def _windows(column: np.ndarray, width: int) -> np.ndarray:
    """(len - width + 1, width) view of a column: row i is column[i:i + width]."""
    return np.lib.stride_tricks.as_strided(column, (len(column) - width + 1, width),
                                           (column.strides[0], column.strides[0]))


def _by_rank(ranks: np.ndarray, n: int) -> np.ndarray:
    """A stable sort by rank (16-bit keys sort by radix, in linear time)."""
    return np.argsort(ranks.astype(np.int16) if n <= 1 << 15 else ranks, kind="stable")


def _compute_waits_apart(schedule: Schedule, ops: np.ndarray, t0: np.ndarray, start: np.ndarray,
                         end: np.ndarray, posts: Posts | None = None
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """_compute_waits, found for the two halves of `ops` side by side (each compute's waits
    are its own: sim.engine.threads) when the schedule is large enough to gain from it."""
    if len(schedule) < threads.WORTH_THREADS or len(ops) < 2:
        return _compute_waits(schedule, ops, t0, start, end, posts)
    halves = [slice(0, len(ops) // 2), slice(len(ops) // 2, None)]
    found = each(lambda h: _compute_waits(schedule, ops[h], t0[h], start, end, posts), halves, size=len(schedule))
    return tuple(np.concatenate(x) for x in zip(*found))


def _compute_waits(schedule: Schedule, ops: np.ndarray, t0: np.ndarray, start: np.ndarray,
                   end: np.ndarray, posts: Posts | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The wait pieces of each compute in `ops` (waiting from t0 to its start), as
    (op, schedule kind code, start, end) arrays, in the order of `ops`; `posts`: the
    play held computes on the sends they posted (Schedule.posts, made)."""
    deps = np.take(schedule.after, ops, axis=1).T                       # (ops, width)
    if posts is not None:
        # a compute that a post held while it wrote its send (sim.engine.players.times_simpy)
        # waited on that send: one column per post before it (a K/V post, and in backward
        # the dK/dV post of the step before)
        posted = posts.posted
        posted = posted[posts.held[posted] != NO_DEP]
        while posted.size:
            held = posts.held[posted]
            _, first = np.unique(held, return_index=True)
            sent = np.full(len(schedule), NO_DEP, dtype=deps.dtype)
            sent[held[first]] = posted[first]
            deps = np.concatenate([deps, sent[ops][:, None]], axis=1)
            posted = np.delete(posted, first)
    flying = (deps != NO_DEP) & schedule.is_transfer[deps]   # a pad reads the last op: masked
    used = flying.any(axis=0)
    if not used.all():
        # a position no compute here waits a transfer on (a compute before, padding) is
        # never read: dropped before the times are gathered for it
        deps, flying = deps[:, used], flying[:, used]
    kinds = schedule.kind[deps]
    pieces = wait_pieces(t0, start[ops], start[deps], end[deps], kinds, flying, _SCHED_IDLE, DKV,
                         tie=_TIE[kinds])
    # by row (the order of `ops`), each row's pieces in time order
    by_row = np.argsort(np.concatenate([row for _, _, _, row in pieces]), kind="stable")
    return (ops[np.concatenate([row for _, _, _, row in pieces])[by_row]],
            np.concatenate([kind for _, _, kind, _ in pieces])[by_row],
            np.concatenate([a for a, _, _, _ in pieces])[by_row],
            np.concatenate([b for _, b, _, _ in pieces])[by_row])
