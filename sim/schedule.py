"""A schedule as plain data: who computes what at which step, who sends what to whom,
and what each operation waits on. The engine plays any schedule; it knows nothing of
layouts or schemes.

Operations are numbered in schedule order, which is topological: `after` lists the ids
(all smaller) that must complete before an operation may start. A rank's computes run
one after another in schedule order (`compute_order[rank]`). A transfer starts once
everything in its `after` is done and its link (src -> dst) is free; it occupies the
link for its whole duration, and transfers on one link queue in schedule order.

The schedule is held as columns (one numpy array per field, one entry per operation)
so that a scheme can build it and the engine can play it a whole group of operations
at a time. The groups are *waves*: contiguous id ranges in which no operation waits on
another of the same wave and no two share a resource (a rank's compute stream or a
directed link), so every operation of a wave can be timed at once from the earlier
waves (sim.engine). A scheme that knows its waves (sim.ring: a step's computes and
K/V hops, then its dK/dV hops) passes them; `Schedule.from_ops` finds them for any
list of operations. The operations as named tuples (`ops`), which the SimPy player and
tests read, are made from the columns on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

import numpy as np

KINDS = ("fwd", "bwd", "kv", "dkv")
"""Operation kinds by code (the `kind` column): computes are 0 and 1, transfers 2 and 3."""
FWD, BWD, KV, DKV = range(4)
MASKS = ("full", "diagonal", "empty")
"""Block masks by code (the `mask` column); see sim.layouts.block_masks."""
FULL, DIAGONAL, EMPTY = range(3)
NO_DEP = -1
"""Fills the rows of `after` beyond an operation's dependencies."""


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
    """'kv' or 'dkv'."""
    step: int
    kv_rank: int
    nbytes: int
    kv_chunks: tuple[int, ...]
    after: tuple[int, ...]


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
    n_resources: int = field(init=False)
    _ops: list[ComputeOp | TransferOp] | None = field(default=None, init=False, repr=False)

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
        self.n_resources = int(self.resource.max(initial=n - 1)) + 1
        names = list(self.resource_names or [])
        self.resource_names = names + [f"resource {i}" for i in range(len(names), self.n_resources)]

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def is_transfer(self) -> np.ndarray:
        return self.kind >= KV

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
        key = wave * self.n_resources + self.resource
        if len(np.unique(key)) != n_ops:
            raise ValueError("two operations of one wave share a stream or other resource")

    @classmethod
    def from_ops(cls, n_ranks: int, ops: Iterable[ComputeOp | TransferOp],
                 resources: Iterable[str] | None = None) -> "Schedule":
        """The schedule of a list of operations (ids 0, 1, ... in order, dependencies first).

        `resources`, when given, names the resource of each operation (operations with
        one name share it: several links through one NIC port, say); otherwise a compute
        occupies its rank's stream and a transfer its link (src, dst). Waves are cut
        greedily: a new one starts at the first operation that waits on one of the
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
            if stream in in_wave or any(d >= wave_starts[-1] for d in op.after):
                wave_starts.append(i)
                in_wave.clear()
            in_wave.add(stream)
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
        resource = resource_names = None
        if named is not None:
            resource_names = list(dict.fromkeys(named))
            index = {name: i for i, name in enumerate(resource_names)}
            resource = np.array([index[name] for name in named], dtype=np.int64)
        sched = cls(n_ranks=n_ranks, **arrays, chunk_sets=list(sets), after=after,
                    wave_starts=np.array(wave_starts, dtype=np.int64), resource=resource,
                    resource_names=resource_names)
        sched._ops = ops
        return sched
