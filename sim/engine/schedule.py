"""A schedule as plain data: who computes what at which step, who sends what to whom,
and what each operation waits on. The engine plays any schedule; it knows nothing of
layouts or schemes.

Operations are numbered in schedule order, which is topological: `after` lists the ids
(all smaller) that must complete before an operation may start. A rank's computes run
one after another in schedule order (`compute_order[rank]`). A transfer starts once
everything in its `after` is done and its link (src -> dst) is free; it occupies the
link for its whole duration, and transfers on one link queue in schedule order.
A scheme may name other resources (`resource`), and give an operation more than one
(`extra_resources`: a flow between nodes holds its sender's NIC and its receiver's):
an operation starts once each of its resources is free, in schedule order per
resource, and holds them all for its duration.

The schedule is held as columns (one numpy array per field, one entry per operation)
so that a scheme can build it and the engine can play it a whole group of operations
at a time. The groups are *waves*: contiguous id ranges in which no operation waits on
another of the same wave and no two share a resource (a rank's compute stream, a
directed link, a port), so every operation of a wave can be timed at once from the
earlier waves (sim.engine.play). A scheme that knows its waves (sim.schemes.ring: a step's
computes and K/V hops, then its dK/dV hops) passes them; `cut_waves` finds them for
any columns (`ScheduleBuilder` uses it), `Schedule.from_ops` for any list of
operations. The operations as named tuples (`ops`), which the SimPy player and tests
read, are made from the columns on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

import numpy as np

KINDS = ("fwd", "bwd", "kv", "dkv", "ag", "rs", "a2a", "pp")
"""Operation kinds by code (the `kind` column): computes are 0 and 1, transfers from 2:
a ring's K/V and dK/dV hops, the flows of collectives (all-gather, reduce-scatter,
all-to-all), and a training step's sends between pipeline stages (sim.training.pipeline)."""
FWD, BWD, KV, DKV, AG, RS, A2A, PP = range(8)
MASKS = ("full", "diagonal", "empty")
"""Block masks by code (the `mask` column); see sim.layouts.block_masks."""
FULL, DIAGONAL, EMPTY = range(3)
NO_DEP = -1
"""Fills the rows of `after` beyond an operation's dependencies."""


_ID_PIECE = 1 << 20
"""Ops searched at a time for the ids of the computes or of the transfers."""


class ComputeOp(NamedTuple):
    id: int
    rank: int
    kind: str
    """'fwd' or 'bwd'."""
    step: int
    kv_rank: int
    """Owner of the K/V block computed on."""
    pairs: int
    """Work of the block (unmasked or tile-rounded pairs, per head and batch item)."""
    flops: float
    mask: str
    """'full', 'diagonal' or 'empty' (see sim.layouts.block_masks; empty is skipped)."""
    q_tokens: int
    kv_tokens: int
    q_chunks: tuple[int, ...]
    kv_chunks: tuple[int, ...]
    after: tuple[int, ...]


class TransferOp(NamedTuple):
    id: int
    src: int
    dst: int
    kind: str
    """'kv', 'dkv', 'ag', 'rs' or 'a2a'."""
    step: int
    kv_rank: int
    nbytes: int
    kv_chunks: tuple[int, ...]
    after: tuple[int, ...]


class Posts(NamedTuple):
    """Where a kernel posts its point-to-point transfers, for gloo's protocol
    (sim.engine.players.times_simpy). A rank posts a batch: its send to the next rank, then the
    receive from the previous one (batch_isend_irecv posts them in that order). Arrays
    over all operations, NO_DEP where they do not apply (on every op that is not such a
    transfer)."""

    held: np.ndarray
    """(ops,) the compute of the sender that comes after the post of this transfer in its
    program: a post that writes its send holds it until the send ends."""
    partner: np.ndarray
    """(ops,) the send the receiver posts in the batch that holds this transfer's
    receive: the receive is posted once that post returns."""
    after: np.ndarray
    """(k, ops) the ops a post standing on its own waits for (a dK/dV hop, posted after
    the step's compute): the sender posts when they are done. All NO_DEP for a post that
    comes up with its held compute's turn (a K/V hop, posted right before it)."""

    @property
    def posted(self) -> np.ndarray:
        """The ids of the transfers posted so."""
        return np.flatnonzero(self.partner != NO_DEP)


@dataclass(eq=False, kw_only=True)
class Schedule:
    """Operations as columns; entry i of every array describes operation i."""

    n_ranks: int
    kind: np.ndarray
    """Code into KINDS."""
    rank: np.ndarray
    """The computing rank, or a transfer's sender."""
    peer: np.ndarray
    """A transfer's receiver; -1 for a compute."""
    step: np.ndarray
    kv_rank: np.ndarray
    """Owner of the K/V block computed on or carried."""
    pairs: np.ndarray
    """Work of a compute's block (0 for a transfer)."""
    flops: np.ndarray
    """FLOPs of a compute (0.0 for a transfer)."""
    mask: np.ndarray
    """Code into MASKS of a compute's block (FULL for a transfer)."""
    q_tokens: np.ndarray
    kv_tokens: np.ndarray
    nbytes: np.ndarray
    """Bytes a transfer carries (0 for a compute)."""
    q_chunks: np.ndarray
    """Index into `chunk_sets` of a compute's query chunks (-1 for a transfer)."""
    kv_chunks: np.ndarray
    """Index into `chunk_sets` of the K/V chunks computed on or carried."""
    chunk_sets: list[tuple[int, ...]]
    after: np.ndarray
    """(width, ops) int64: column i the ids op i waits on, NO_DEP where none; an id may
    appear twice (`ops` lists it once, where first named)."""
    wave_starts: np.ndarray
    """Wave w is the ids wave_starts[w] .. wave_starts[w + 1] - 1 (see module docstring)."""
    resource: np.ndarray | None = None
    """The resource each operation occupies while it runs (an index into
    `resource_names`): a rank's compute stream, a directed link, or whatever the scheme
    names (a NIC port, a switch); operations on one resource run one at a time, in
    schedule order. When not given: its rank for a compute, n_ranks + an index of its
    link (src, dst) for a transfer."""
    resource_names: list[str] | None = None
    """A name per resource (derived with `resource` when not given)."""
    extra_resources: np.ndarray | None = None
    """(k, ops) int: more resources each operation holds while it runs, besides
    `resource` (-1: none), such as the receiving port of a flow; None: none at all."""
    call: np.ndarray | None = None
    """Packed documents (sim.layouts.packed): index into `calls` of each compute's varlen kernel
    call (-1 for a transfer); None: every block is one call of its extent."""
    calls: tuple | None = None
    """The varlen calls (sim.layouts.packed.BlockCall) that `call` indexes."""
    posts: Callable[[], "Posts"] | None = None
    """How a kernel posts its transfers (the ring's "step" sync): a function giving its
    Posts. Made only for a player whose host writes a send in the posting thread when the
    receiver posted first (sim.engine.play.play, sim.engine.players.times_simpy): at 4096 GPUs the
    arrays would take over 500 MB. None: no transfer is posted so."""
    n_resources: int = field(init=False)
    _ops: list[ComputeOp | TransferOp] | None = field(default=None, init=False, repr=False)
    _ids: dict[bool, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        n = self.n_ranks
        if self.resource is None:
            transfer = self.is_transfer
            links, index = np.unique(self.rank[transfer] * n + self.peer[transfer], return_inverse=True)
            self.resource = self.rank.copy()
            self.resource[transfer] = n + index.reshape(-1)
            if self.resource_names is None:
                self.resource_names = ([f"GPU {r} compute" for r in range(n)]
                                       + [f"link {x // n}->{x % n}" for x in links.tolist()])
        top = int(self.resource.max(initial=n - 1))
        if self.extra_resources is not None:
            self.extra_resources = np.asarray(self.extra_resources).reshape(-1, len(self.kind))
            top = max(top, int(self.extra_resources.max(initial=-1)))
        names = list(self.resource_names or [])
        self.n_resources = max(top + 1, len(names))
        self.resource_names = names + [f"resource {i}" for i in range(len(names), self.n_resources)]

    def __len__(self) -> int:
        return len(self.kind)

    def release(self, *names: str) -> None:
        """Let go of columns that nobody reads again: a schedule built for one play lets
        them go as the play is done with them (sim.engine.play.play, `own`), so that the
        trace's table takes their memory back (a ring of 4096 GPUs holds 2 GB of
        columns). A released column reads None."""
        for name in names:
            setattr(self, name, None)

    @property
    def is_transfer(self) -> np.ndarray:
        return self.kind >= KV

    @property
    def compute_ids(self) -> np.ndarray:
        """The ids of the computes, ascending (made once: every stage of a play reads them)."""
        return self._ids_of(False)

    @property
    def transfer_ids(self) -> np.ndarray:
        """The ids of the transfers, ascending."""
        return self._ids_of(True)

    def _ids_of(self, transfer: bool) -> np.ndarray:
        if transfer not in self._ids:
            is_transfer = self.is_transfer
            # int32 ids halve what every gather by them moves (a schedule has under 2^31
            # ops); found a piece at a time, with no temporary of 64-bit ids of them all
            chosen = is_transfer if transfer else ~is_transfer
            if len(self) >= 2 ** 31:
                self._ids[transfer] = np.flatnonzero(chosen)
            else:
                self._ids[transfer] = np.concatenate(
                    [np.flatnonzero(chosen[a:a + _ID_PIECE]).astype(np.int32) + np.int32(a)
                     for a in range(0, len(chosen), _ID_PIECE)] or [np.zeros(0, np.int32)])
        return self._ids[transfer]

    @property
    def n_waves(self) -> int:
        return len(self.wave_starts) - 1

    @property
    def ops(self) -> list[ComputeOp | TransferOp]:
        """The operations as named tuples, by id (made from the columns on first use)."""
        if self._ops is None:
            self._ops = self._materialize()
        return self._ops

    @property
    def compute_order(self) -> list[list[int]]:
        """Each rank's computes, in the order its stream runs them."""
        order: list[list[int]] = [[] for _ in range(self.n_ranks)]
        ids = np.flatnonzero(~self.is_transfer)
        for op_id, r in zip(ids.tolist(), self.rank[ids].tolist()):
            order[r].append(op_id)
        return order

    def _materialize(self) -> list[ComputeOp | TransferOp]:
        kinds = np.array(KINDS, dtype=object)[self.kind]
        sets = np.empty(len(self.chunk_sets) + 1, dtype=object)
        for i, chunks in enumerate(self.chunk_sets):
            sets[i] = chunks
        sets[-1] = ()
        after = self.after_tuples()
        ops: list = [None] * len(self)
        comp = np.flatnonzero(~self.is_transfer)
        made = map(ComputeOp, comp.tolist(), self.rank[comp].tolist(), kinds[comp].tolist(),
                   self.step[comp].tolist(), self.kv_rank[comp].tolist(), self.pairs[comp].tolist(),
                   self.flops[comp].tolist(), np.array(MASKS, dtype=object)[self.mask[comp]].tolist(),
                   self.q_tokens[comp].tolist(), self.kv_tokens[comp].tolist(),
                   sets[self.q_chunks[comp]].tolist(), sets[self.kv_chunks[comp]].tolist(),
                   [after[i] for i in comp.tolist()])
        for i, op in zip(comp.tolist(), made):
            ops[i] = op
        xfer = np.flatnonzero(self.is_transfer)
        made = map(TransferOp, xfer.tolist(), self.rank[xfer].tolist(), self.peer[xfer].tolist(),
                   kinds[xfer].tolist(), self.step[xfer].tolist(), self.kv_rank[xfer].tolist(),
                   self.nbytes[xfer].tolist(), sets[self.kv_chunks[xfer]].tolist(),
                   [after[i] for i in xfer.tolist()])
        for i, op in zip(xfer.tolist(), made):
            ops[i] = op
        return ops

    def after_tuples(self) -> list[tuple[int, ...]]:
        """Each op's dependencies as a tuple: in the order given, each id once."""
        deps = self.after.copy()
        for j in range(1, len(deps)):
            deps[j][(deps[j] == deps[:j]).any(axis=0)] = NO_DEP
        named = deps != NO_DEP
        deps = np.take_along_axis(deps, np.argsort(~named, axis=0, kind="stable"), axis=0).T
        counts = named.sum(axis=0)
        out: list[tuple[int, ...]] = [()] * len(counts)
        for k in np.flatnonzero(np.bincount(counts)).tolist():   # ops waiting on k ids, at once
            ids = np.flatnonzero(counts == k)
            for i, t in zip(ids.tolist(), map(tuple, deps[ids, :k].tolist())):
                out[i] = t
        return out

    def check(self) -> None:
        """Raise ValueError unless the waves hold what the engine relies on."""
        n_ops = len(self)
        starts = self.wave_starts
        if starts[0] != 0 or starts[-1] != n_ops or (np.diff(starts) <= 0).any():
            raise ValueError("waves must cover the operations in order, none empty")
        wave = np.repeat(np.arange(self.n_waves), np.diff(starts))
        deps = self.after
        real = deps != NO_DEP
        if ((deps < NO_DEP) | (deps >= n_ops)).any():
            raise ValueError("a dependency names no operation")
        if (real & (deps >= starts[wave])).any():
            raise ValueError("an operation waits on one of its own wave or a later one")
        res = self.resource_rows()
        held = res >= 0
        if ((res < -1) | (res >= self.n_resources)).any() or not held[0].all():
            raise ValueError("an operation names no resource or one that does not exist")
        ops = np.broadcast_to(np.arange(n_ops), res.shape)[held]
        if len(np.unique(ops * self.n_resources + res[held])) != held.sum():
            raise ValueError("an operation names one resource twice")
        key = (np.broadcast_to(wave, res.shape) * self.n_resources + res)[held]
        if len(np.unique(key)) != len(key):
            raise ValueError("two operations of one wave share a stream or other resource")

    def resource_rows(self) -> np.ndarray:
        """(1 + k, ops): each operation's resource, then its extra ones (-1: none)."""
        if self.extra_resources is None:
            return self.resource[None, :]
        return np.vstack([self.resource[None, :], self.extra_resources])

    @classmethod
    def from_ops(cls, n_ranks: int, ops: Iterable[ComputeOp | TransferOp],
                 resources: Iterable[str] | None = None) -> "Schedule":
        """The schedule of a list of operations (ids 0, 1, ... in order, dependencies first).

        `resources`, when given, names the resource of each operation (operations with
        one name share it: several links through one NIC port, say), or a tuple of names:
        all the resources it holds, the first one the one it plays on; otherwise a
        compute occupies its rank's stream and a transfer its link (src, dst). Waves are
        cut greedily: a new one starts at the first operation that waits on one of the
        current wave or uses a resource the current wave already uses.
        """
        ops = list(ops)
        n_ops = len(ops)
        sets: dict[tuple[int, ...], int] = {}
        cols: dict[str, list] = {name: [] for name in (
            "kind", "rank", "peer", "step", "kv_rank", "pairs", "flops", "mask", "q_tokens",
            "kv_tokens", "nbytes", "q_chunks", "kv_chunks")}
        width = max((len(op.after) for op in ops), default=0)
        after = np.full((width, n_ops), NO_DEP, dtype=np.int64)
        wave_starts = [0]
        in_wave: set = set()
        named = list(resources) if resources is not None else None
        if named is not None and len(named) != n_ops:
            raise ValueError("resources must name one resource per operation")
        for i, op in enumerate(ops):
            if op.id != i:
                raise ValueError(f"operation {i} has id {op.id}: ids must be 0, 1, ... in order")
            if any(not 0 <= d < i for d in op.after):
                raise ValueError(f"operation {i} waits on {op.after}: dependencies must come first")
            compute = isinstance(op, ComputeOp)
            stream = (op.rank if compute else (op.src, op.dst)) if named is None else named[i]
            held = stream if isinstance(stream, tuple) and named is not None else (stream,)
            if any(h in in_wave for h in held) or any(d >= wave_starts[-1] for d in op.after):
                wave_starts.append(i)
                in_wave.clear()
            in_wave.update(held)
            after[:len(op.after), i] = op.after
            values = {"kind": KINDS.index(op.kind), "step": op.step, "kv_rank": op.kv_rank,
                      "kv_chunks": sets.setdefault(op.kv_chunks, len(sets))}
            if compute:
                values.update(rank=op.rank, peer=-1, pairs=op.pairs, flops=op.flops,
                              mask=MASKS.index(op.mask), q_tokens=op.q_tokens,
                              kv_tokens=op.kv_tokens, nbytes=0,
                              q_chunks=sets.setdefault(op.q_chunks, len(sets)))
            else:
                values.update(rank=op.src, peer=op.dst, pairs=0, flops=0.0, mask=FULL,
                              q_tokens=0, kv_tokens=0, nbytes=op.nbytes, q_chunks=-1)
            for name, v in values.items():
                cols[name].append(v)
        if n_ops:
            wave_starts.append(n_ops)
        arrays = {name: np.array(v, dtype=np.float64 if name == "flops" else np.int64)
                  for name, v in cols.items()}
        resource = resource_names = extra = None
        if named is not None:
            held = [name if isinstance(name, tuple) else (name,) for name in named]
            resource_names = list(dict.fromkeys(h for hs in held for h in hs))
            index = {name: i for i, name in enumerate(resource_names)}
            resource = np.array([index[hs[0]] for hs in held], dtype=np.int64)
            k = max((len(hs) - 1 for hs in held), default=0)
            if k:
                extra = np.full((k, n_ops), -1, dtype=np.int64)
                for i, hs in enumerate(held):
                    extra[:len(hs) - 1, i] = [index[h] for h in hs[1:]]
        sched = cls(n_ranks=n_ranks, **arrays, chunk_sets=list(sets), after=after,
                    wave_starts=np.array(wave_starts, dtype=np.int64), resource=resource,
                    resource_names=resource_names, extra_resources=extra)
        sched._ops = ops
        return sched


def cut_waves(resources: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Wave starts for operations in schedule order (see the module docstring), cut
    greedily as `Schedule.from_ops` cuts them: a wave ends before the first operation
    that waits on one of it or holds a resource one of it holds.

    resources: (k, ops), each operation's resources (-1: none); after: (width, ops),
    dependencies (NO_DEP: none). Returns the starts and the end (ops).
    """
    n_ops = resources.shape[1]
    if n_ops == 0:
        return np.zeros(1, dtype=np.int64)
    # conflict[i]: the latest earlier operation op i cannot share a wave with: its last
    # dependency, or the last earlier holder of one of its resources
    conflict = after.max(axis=0, initial=NO_DEP).astype(np.int64)
    # (op, resource) pairs op by op, then a stable sort by resource alone: by resource,
    # then op (a radix sort when the resource ids fit 16 bits, where a sort on both keys
    # took most of the time of large schedules)
    held = (resources >= 0).T
    op = np.broadcast_to(np.arange(n_ops)[:, None], held.shape)[held]
    res = resources.T[held]
    top = int(res.max(initial=0))
    order = np.argsort(res.astype(np.int16 if top < 2 ** 15 else np.int32 if top < 2 ** 31 else np.int64),
                       kind="stable")
    op, res = op[order], res[order]
    prev = np.full(len(op), -1, dtype=np.int64)
    same = res[1:] == res[:-1]
    prev[1:][same] = op[:-1][same]
    np.maximum.at(conflict, op, prev)
    # the greedy scan starts a new wave at the first i with conflict[i] >= the current
    # start s (such an i is after s: conflict[i] < i); first[s], that i for every s, is
    # a suffix minimum, so the scan takes one step per wave
    hit = conflict >= 0
    first = np.full(n_ops + 1, n_ops, dtype=np.int64)
    np.minimum.at(first, conflict[hit], np.flatnonzero(hit))
    first = np.minimum.accumulate(first[::-1])[::-1]
    starts = [0]
    while starts[-1] < n_ops:
        starts.append(int(first[starts[-1]]))
    return np.array(starts, dtype=np.int64)


class ScheduleBuilder:
    """Builds a schedule group by group: each call adds a group of operations (arrays,
    or scalars for what the group shares) and returns their ids; `build` cuts the waves
    (`cut_waves`) and returns the Schedule. The schemes other than the ring build their
    schedules with it."""

    _COLUMNS = ("kind", "rank", "peer", "step", "kv_rank", "pairs", "flops", "mask", "q_tokens",
                "kv_tokens", "nbytes", "q_chunks", "kv_chunks")

    def __init__(self, n_ranks: int, resource_names: list[str]):
        self.n_ranks = n_ranks
        self.resource_names = list(resource_names)
        self._groups: list[tuple[dict[str, np.ndarray], list[np.ndarray], list[np.ndarray]]] = []
        self._sets: dict[tuple[int, ...], int] = {}
        self._calls: dict = {}
        self._call_ids: list[tuple[np.ndarray, np.ndarray]] = []
        self.n_ops = 0

    def varlen_calls(self, ids: np.ndarray, calls: Iterable) -> None:
        """Computes `ids` are varlen kernel calls (packed documents: Schedule.call), one
        sim.layouts.packed.BlockCall each."""
        which = [self._calls.setdefault(c, len(self._calls)) for c in calls]
        self._call_ids.append((np.asarray(ids, dtype=np.int64), np.asarray(which, dtype=np.int32)))

    def chunk_set(self, chunks: Iterable[int]) -> int:
        """The index of a set of chunk ids (the q_chunks / kv_chunks columns)."""
        key = chunks if type(chunks) is tuple else tuple(map(int, chunks))
        return self._sets.setdefault(key, len(self._sets))

    def add(self, size: int, values: dict, after: Iterable, resources: Iterable) -> np.ndarray:
        """`size` operations: `values` a value or an array for every column, `after` rows
        of dependencies, `resources` rows (the one each plays on, then others, -1 none)."""
        cols = {name: np.broadcast_to(np.asarray(values[name]), (size,)) for name in self._COLUMNS}
        deps = [np.broadcast_to(np.asarray(a), (size,)) for a in after]
        held = [np.broadcast_to(np.asarray(r), (size,)) for r in resources]
        ids = np.arange(self.n_ops, self.n_ops + size, dtype=np.int64)
        if any(((d >= ids) | (d < NO_DEP)).any() for d in deps):
            raise ValueError("an operation must wait only on earlier ones")
        self._groups.append((cols, deps, held))
        self.n_ops += size
        return ids

    def computes(self, *, kind: int, rank, step, pairs, flops, mask, q_tokens, kv_tokens,
                 q_chunks, kv_chunks, kv_rank=None, after: Iterable = ()) -> np.ndarray:
        """Computes (on each rank's compute stream, resource `rank`); returns their ids."""
        after = list(after)
        size = _size(rank, step, pairs, flops, mask, q_tokens, kv_tokens, q_chunks, kv_chunks, *after)
        values = dict(kind=kind, rank=rank, peer=-1, step=step, kv_rank=rank if kv_rank is None else kv_rank,
                      pairs=pairs, flops=flops, mask=mask, q_tokens=q_tokens, kv_tokens=kv_tokens,
                      nbytes=0, q_chunks=q_chunks, kv_chunks=kv_chunks)
        return self.add(size, values, after, [rank])

    def transfers(self, *, kind: int, src, dst, step, nbytes, resources, kv_chunks=-1,
                  kv_rank=None, after: Iterable = ()) -> np.ndarray:
        """Transfers src -> dst holding `resources` (a list of arrays: the one they play
        on, then the others); returns their ids."""
        after, resources = list(after), list(resources)
        size = _size(src, dst, step, nbytes, kv_chunks, *resources, *after)
        values = dict(kind=kind, rank=src, peer=dst, step=step, kv_rank=src if kv_rank is None else kv_rank,
                      pairs=0, flops=0.0, mask=FULL, q_tokens=0, kv_tokens=0, nbytes=nbytes, q_chunks=-1,
                      kv_chunks=kv_chunks)
        return self.add(size, values, after, resources)

    def take_in(self, flows: np.ndarray, dst: np.ndarray, *, kind: int, step, q_chunks: np.ndarray,
                kv_chunks) -> np.ndarray:
        """A zero-length compute per flow on its receiver's compute stream, each waiting on
        its flow, in the order of the flows: the moments a rank takes in what it
        received. A compute after them on the stream waits for every flow, and its wait
        splits into exposed communication while a flow is in flight (sim.engine.record), with
        one dependency per operation however many flows a rank receives. Returns, per
        rank, the id of its last one (NO_DEP where it received nothing).

        q_chunks: per rank, the chunk set of its queries; kv_chunks: per flow, or one."""
        flows, dst = np.asarray(flows, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        last = np.full(self.n_ranks, NO_DEP, dtype=np.int64)
        if not len(flows):
            return last
        order = np.lexsort((flows, dst))
        place = np.arange(len(order)) - np.searchsorted(dst[order], dst[order])
        order = order[np.lexsort((dst[order], place))]      # the first of every rank, the second, ...
        rank = dst[order]
        ids = self.computes(kind=kind, rank=rank, step=step, pairs=0, flops=0.0, mask=EMPTY, q_tokens=0,
                            kv_tokens=0, q_chunks=np.asarray(q_chunks)[rank],
                            kv_chunks=np.broadcast_to(kv_chunks, flows.shape)[order], after=[flows[order]])
        np.maximum.at(last, rank, ids)
        return last

    def build(self) -> Schedule:
        groups = self._groups
        cols = {name: np.concatenate([g[0][name] for g in groups]) if groups else np.zeros(0)
                for name in self._COLUMNS}
        arrays = {name: v.astype(np.float64 if name == "flops" else np.int64) for name, v in cols.items()}
        width = max((len(g[1]) for g in groups), default=0)
        after = np.full((width, self.n_ops), NO_DEP, dtype=np.int64)
        k = max((len(g[2]) for g in groups), default=1)
        held = np.full((k, self.n_ops), -1, dtype=np.int64)
        at = 0
        for _, deps, res in groups:
            size = len(res[0])
            for row, d in enumerate(deps):
                after[row, at:at + size] = d
            for row, r in enumerate(res):
                held[row, at:at + size] = r
            at += size
        call = None
        if self._call_ids:
            call = np.full(self.n_ops, -1, dtype=np.int32)
            for ids, which in self._call_ids:
                call[ids] = which
        return Schedule(n_ranks=self.n_ranks, **arrays, chunk_sets=list(self._sets), after=after,
                        wave_starts=cut_waves(held, after), resource=held[0],
                        resource_names=self.resource_names,
                        extra_resources=held[1:] if k > 1 else None,
                        call=call, calls=tuple(self._calls) if call is not None else None)


def _size(*values) -> int:
    """The length of a group whose columns are these (arrays or scalars)."""
    shape = np.broadcast_shapes(*(np.shape(v) for v in values))
    return shape[0] if shape else 1
