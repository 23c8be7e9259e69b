"""The players: they time a schedule's operations on a hardware model.

The SimPy player is the model: one process per resource (a rank's compute stream, a
directed link, or whatever a scheme names in the schedule's `resource` column) plays
that resource's operations one at a time, in schedule order (the program order in
which a rank posts them, as a communication stream does). An operation starts the
moment its dependencies are done and its resource is free, and holds the resource for
its duration: alpha + bytes / bandwidth for a transfer, the hardware model's block time
for a compute. An operation that holds more resources (`extra_resources`: a flow holds
its sender's port and its receiver's) plays in its first resource's process and also
waits, for each resource it holds, for the operation before it (in schedule order)
that held that resource: each resource still carries one operation at a time, in
schedule order. Because every queue has a fixed order, loosening a dependency can never
delay anything: overlap is never slower than lock-step exchange.

The same fixed orders make start times a max-plus recurrence over the operations in
schedule order (schedule order is topological), so the wave player computes the
identical times without an event loop, much faster: it times a whole wave of the
schedule (sim.engine.schedule) at once with numpy, reading the same resource column. Tests
hold the two bit-identical. A calibrated profile may slow compute while transfers run,
or computes and transfers while they share a CPU host's cores (sim.hardware.contention); rates
that change inside an operation need the event loop, so such a profile always plays on
SimPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import simpy

from sim.arrays import distinct_ints, unique_columns, unique_values
from sim.engine.schedule import A2A, BWD, EMPTY, KINDS, MASKS, NO_DEP, Posts, Schedule
from sim.engine.threads import each
from sim.hardware.contention import Contention, Sharing
from sim.hardware.model import HardwareModel
from sim.scenario.config import Workload

_KIND_NAMES = np.array(KINDS)      # fixed-width strings: compared in C, not per object
FIRST_COLLECTIVE = KINDS.index("ag")
_MASK_NAMES = np.array(MASKS)


class _CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for benchmarks)."""

    events = 0

    def step(self) -> None:
        self.events += 1
        super().step()


def durations_s(schedule: Schedule, hardware: HardwareModel, workload: Workload,
                host_waits: bool = False,
                pull: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Time each operation takes on `hardware` (0 for a skipped, fully masked block).

    The hardware model's batch forms (`compute_times_s`, `transfer_times_s`: its own over
    arrays, as sim.hardware.cluster.Hardware's, or sim.hardware.model's calls of the per-op
    methods once per distinct argument tuple, which they must be pure functions of) time
    the operations. A block is timed once per run of consecutive computes with the same
    arguments (a ring's step repeats one or two block shapes over all its ranks): the
    methods are elementwise, so this gives the same float for every op. A model that
    `times_groups` (NCCL) times every transfer knowing its communicator (`transfer_groups`).

    host_waits: the implementation makes the host wait for the GPU before each call (a copy to
    the GPU that synchronises, sim.implementations.base.Implementation.host_waits): every
    block is called on an idle GPU and pays its host-side time in front (`isolated`).

    pull: arrays over the ops that a GPU contention model reads (sim.hardware.contention
    .GpuPull), filled here: each transfer's CTAs and bytes/s, each compute's memory-bound
    share of its time (`memory_bound_s` over its time).
    """
    dur = np.zeros(len(schedule))
    comp = schedule.compute_ids
    comp = comp[schedule.mask[comp] != EMPTY]
    xfer = schedule.transfer_ids
    # the computes and the transfers write their own entries (of `dur`, and of `pull`'s
    # arrays): side by side on a large schedule (sim.engine.threads)
    each(lambda part: part(), [lambda: _compute_times(schedule, hardware, workload, comp, dur, host_waits, pull),
                               lambda: _transfer_times(schedule, hardware, xfer, dur, pull)], size=len(schedule))
    return dur


def _compute_times(schedule: Schedule, hardware: HardwareModel, workload: Workload, comp: np.ndarray,
                   dur: np.ndarray, host_waits: bool,
                   pull: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> None:
    """durations_s of the computed blocks `comp`, written into `dur` (and `pull`'s memory-bound shares)."""
    if not comp.size:
        return
    # a hardware model whose merge costs more on part of a rank's queries is told
    # which blocks those are (sliced: narrower than the rank's widest block)
    names = []
    extra = []
    if hardware.merge_copies_slices:
        names.append("sliced")
        extra.append(_sliced(schedule))
    if hardware.takes_call_order:
        names += ["alone", "isolated", "opens"]
        alone, isolated, opens = _call_order(schedule, comp)
        extra += [alone, np.ones_like(isolated) if host_waits else isolated, opens]
    geometry = head_geometry(workload)

    def times(flops, kind, mask, q_tokens, kv_tokens, *flags):
        return hardware.compute_times_s(flops, dtype=workload.dtype, kind=_KIND_NAMES[kind],
                                        mask=_MASK_NAMES[mask], q_tokens=q_tokens, kv_tokens=kv_tokens,
                                        **geometry, **dict(zip(names, flags)))
    computed = comp
    if schedule.calls is not None and hardware.times_varlen(workload.dtype):
        # packed documents: a block is one varlen call, a piece per document
        called = schedule.call[comp] >= 0
        vl, comp = comp[called], comp[~called]
        flags = dict(zip(names, [x[vl] for x in extra]))
        dur[vl] = hardware.varlen_times_s(
            [schedule.calls[i] for i in schedule.call[vl].tolist()], schedule.flops[vl],
            dtype=workload.dtype, kind=_KIND_NAMES[schedule.kind[vl]], **geometry, **flags)
    columns = [schedule.flops, schedule.kind, schedule.mask, schedule.q_tokens, schedule.kv_tokens, *extra]
    for a in range(0, len(comp), _CHUNK):
        ids = comp[a:a + _CHUNK]
        dur[ids] = _by_runs(times, [c[ids] for c in columns])
    if pull is not None:
        def memory(flops, kind, mask, q_tokens, kv_tokens, *flags):
            return hardware.memory_bound_s(flops, dtype=workload.dtype, kind=_KIND_NAMES[kind],
                                           mask=_MASK_NAMES[mask], q_tokens=q_tokens, kv_tokens=kv_tokens,
                                           **geometry, **dict(zip(names, flags)))
        busy = computed[dur[computed] > 0]     # varlen calls too, by their blocks' extent
        if busy.size:
            pull[2][busy] = np.clip(_by_runs(memory, [c[busy] for c in columns]) / dur[busy], 0.0, 1.0)


def _transfer_times(schedule: Schedule, hardware: HardwareModel, xfer: np.ndarray, dur: np.ndarray,
                    pull: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> None:
    """durations_s of the transfers `xfer`, written into `dur` (and `pull`'s CTAs and bytes/s)."""
    if xfer.size and hardware.times_groups:
        members, group_of = transfer_groups(schedule.kind[xfer], schedule.step[xfer], schedule.rank[xfer],
                                            schedule.peer[xfer])
        dur[xfer], ctas = hardware.group_transfer_times_s(_KIND_NAMES[schedule.kind[xfer]], schedule.nbytes[xfer],
                                                          schedule.rank[xfer], schedule.peer[xfer], members, group_of)
        if pull is not None:
            pull[0][xfer] = ctas
            pull[1][xfer] = np.where(dur[xfer] > 0, schedule.nbytes[xfer] / np.maximum(dur[xfer], 1e-300), 0.0)
    elif xfer.size:
        for a in range(0, len(xfer), _CHUNK):
            ids = xfer[a:a + _CHUNK]
            dur[ids] = hardware.transfer_times_s(schedule.nbytes[ids], schedule.rank[ids], schedule.peer[ids])
        # a calibrated profile times the flows of collectives on their own fits
        coll = (schedule.kind[xfer] >= FIRST_COLLECTIVE) & (schedule.kind[xfer] <= A2A)
        if hardware.times_collectives and coll.any():
            ids = xfer[coll]
            group = collective_groups(schedule.kind[ids], schedule.step[ids], schedule.rank[ids], schedule.peer[ids])
            dur[ids] = hardware.collective_times_s(_KIND_NAMES[schedule.kind[ids]], schedule.nbytes[ids],
                                                   dur[ids], group=group)


def collective_groups(kind: np.ndarray, step: np.ndarray, rank: np.ndarray, peer: np.ndarray) -> np.ndarray:
    """The group size of each collective flow: how many ranks its collective joins. The
    flows of one kind and step that link ranks, directly or through others, are one
    collective (an all-gather's rounds pass blocks around its ring; an all-to-all sends
    to every peer), so a flow's group is the number of ranks in its connected set. A
    rank that sends two collectives of one kind in a step (Ulysses' all-to-all in and
    out) still counts once. Connected sets by label propagation with pointer jumping."""
    if not len(kind):
        return np.zeros(0, dtype=np.int64)
    a, b, label = _connected(kind, step, rank, peer)
    nodes = distinct_ints(np.concatenate([a, b]), len(label))
    roots, size = np.unique(label[nodes], return_counts=True)
    return size[np.searchsorted(roots, label[a])]


def transfer_groups(kind: np.ndarray, step: np.ndarray, rank: np.ndarray, peer: np.ndarray
                    ) -> tuple[list[np.ndarray], np.ndarray]:
    """The communicator of each transfer: (the distinct groups' ranks, ascending; each
    transfer's index into them). A collective's group is its connected set of ranks
    (`collective_groups`); a ring's hops (K/V, dK/dV and a pipeline's sends) run in the
    group their first step links, the same at every step (a ring's hops of one step
    close the ring), found on that step alone."""
    n = len(kind)
    ranks = int(max(rank.max(initial=0), peer.max(initial=0))) + 1
    cat = np.zeros(n, dtype=np.int64)          # (category, a, b) names a group
    lo = np.zeros(n, dtype=np.int64)
    hi = np.full(n, -1, dtype=np.int64)
    coll = (kind >= FIRST_COLLECTIVE) & (kind <= A2A)
    if coll.any():
        lo[coll] = _labels(kind[coll], step[coll], rank[coll], peer[coll])
    for k in distinct_ints(kind[~coll], len(KINDS)).tolist():
        of_kind = np.flatnonzero(~coll & (kind == k))
        first = of_kind[step[of_kind] == step[of_kind].min()]
        at = np.arange(ranks)      # each rank's set among the first step's hops (alone: itself)
        root = _labels(np.zeros(len(first), np.int64), np.zeros(len(first), np.int64), rank[first], peer[first],
                       ranks=ranks)
        at[rank[first]] = root
        at[peer[first]] = root
        src, dst = rank[of_kind], peer[of_kind]
        joined = at[src] == at[dst]
        cat[of_kind] = 1 + k
        # a hop whose ends the first step does not join runs in a group of its two ranks
        lo[of_kind] = np.where(joined, at[src], np.minimum(src, dst))
        hi[of_kind] = np.where(joined, -1, np.maximum(src, dst))
    # (category, lo, hi) as one integer, so that one flat sort finds the groups (a sort of
    # columns is several times slower at a million transfers); lo and hi are ranks or labels
    # below `span`, hi -1 where unused
    span = int(max(ranks, lo.max(initial=0), hi.max(initial=0))) + 2
    keys, group_of = unique_values((cat * span + lo) * span + (hi + 1))
    ends = np.concatenate([rank, peer]).astype(np.int64)
    of = np.concatenate([group_of, group_of])
    pairs = distinct_ints(of * ranks + ends, len(keys) * ranks)
    pair_of, pair_end = pairs // ranks, pairs % ranks
    bounds = np.searchsorted(pair_of, np.arange(len(keys) + 1))
    return [pair_end[a:b] for a, b in zip(bounds[:-1], bounds[1:])], group_of


def _labels(kind: np.ndarray, step: np.ndarray, rank: np.ndarray, peer: np.ndarray, ranks: int | None = None
            ) -> np.ndarray:
    """For each flow, a label of its connected set of ranks among the flows of its kind and
    step (`_connected`)."""
    a, _, label = _connected(kind, step, rank, peer, ranks)
    return label[a]


def _connected(kind: np.ndarray, step: np.ndarray, rank: np.ndarray, peer: np.ndarray, ranks: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The connected sets of ranks that the flows of each (kind, step) link, by label
    propagation with pointer jumping: (each flow's sending node, its receiving node, every
    node's label), a node being a rank within one (kind, step)."""
    keys, key_of = unique_columns(np.stack([kind, step]))
    key_of = key_of.ravel()
    ranks = ranks or int(max(rank.max(), peer.max())) + 1
    a = key_of * ranks + rank
    b = key_of * ranks + peer
    label = np.arange(keys.shape[1] * ranks, dtype=np.int64)
    while True:
        low = np.minimum(label[a], label[b])
        before = label.copy()
        np.minimum.at(label, label[a], low)
        np.minimum.at(label, label[b], low)
        while True:
            jumped = label[label]
            if np.array_equal(jumped, label):
                break
            label = jumped
        if np.array_equal(label, before):
            break
    return a, b, label


def head_geometry(workload: Workload) -> dict[str, Any]:
    """The workload's head dim and K/V heads per query head, as keyword arguments for a
    hardware model's compute times (sim.hardware.model.HardwareModel)."""
    return {"head_dim": workload.head_dim, "kv_heads_per_head": workload.kv_heads / workload.heads}


_CHUNK = 1 << 18
"""Ops timed per call (a few MB of temporaries, reused by the allocator)."""


def _sliced(schedule: Schedule) -> np.ndarray:
    """Per op, whether it is a compute on part of its rank's queries: fewer query tokens
    than the widest block its rank computes (a rank's own block covers all of them)."""
    comp = schedule.compute_ids
    rank, q = schedule.rank[comp], schedule.q_tokens[comp]
    widest = np.zeros(schedule.n_ranks, dtype=q.dtype)
    np.maximum.at(widest, rank, q)
    out = np.zeros(len(schedule), dtype=bool)
    out[comp] = q < widest[rank]
    return out


def _call_order(schedule: Schedule, comp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per op, whether it is the only computed block of its pass on its rank (its result is
    the output: nothing to merge), whether it is its rank's first computed block (the
    GPU is idle when it is called) and whether it is its rank's first forward block (its
    merge opens the output), in schedule order; `comp`: the computed (not fully masked)
    blocks, ascending."""
    alone = np.zeros(len(schedule), dtype=bool)
    isolated = np.zeros(len(schedule), dtype=bool)
    opens = np.zeros(len(schedule), dtype=bool)
    rank, kind = schedule.rank[comp], schedule.kind[comp]
    _, first = np.unique(rank, return_index=True)
    isolated[comp[first]] = True
    keys, first, count = np.unique(rank.astype(np.int64) * len(KINDS) + kind, return_index=True, return_counts=True)
    alone[comp[first[count == 1]]] = True
    forward = keys % len(KINDS) == KINDS.index("fwd")
    opens[comp[first[forward]]] = True
    return alone, isolated, opens


def _by_runs(fn: Any, columns: list[np.ndarray]) -> np.ndarray:
    """fn(*columns) (elementwise), called on the first op of each run of consecutive ops
    whose arguments are all equal (floats compared bit for bit)."""
    new = np.zeros(len(columns[0]), dtype=bool)
    new[0] = True
    for c in columns:
        c = c.view(np.int64) if c.dtype == np.float64 else c
        new[1:] |= c[1:] != c[:-1]
    firsts = np.flatnonzero(new)
    if 2 * len(firsts) > len(new):
        return np.asarray(fn(*columns), dtype=np.float64)
    values = np.asarray(fn(*(c[firsts] for c in columns)), dtype=np.float64)
    return values[np.cumsum(new) - 1]


def resource_queues(schedule: Schedule) -> list[list[int]]:
    """Each resource's operations in schedule order, the resources that run computes
    first (by id), then the others in order of first use (the order the SimPy player
    starts their processes in)."""
    res = schedule.resource
    order = np.argsort(res, kind="stable")
    bounds = np.flatnonzero(np.diff(res[order])) + 1
    queues = {int(res[q[0]]): q for q in np.split(order, bounds) if len(q)}
    computes = set(np.unique(res[~schedule.is_transfer]).tolist())
    first_use = sorted((int(q[0]), r) for r, q in queues.items() if r not in computes)
    ids = sorted(computes) + [r for _, r in first_use]
    return [queues[r].tolist() for r in ids]


def times_simpy(schedule: Schedule, dur: list[float], contention: Contention | None = None,
                jitter: int | None = None, posts: Posts | None = None, inline_after_s: float = 0.0,
                pull: tuple[list[float], list[float], list[float]] | None = None
                ) -> tuple[list[float], list[float], int]:
    """Start and end of every operation, and the events SimPy processed; `jitter` seeds
    the host's measured spread of rank and block speeds (sim.hardware.contention).

    `posts` (Schedule.posts, made) plays gloo's point-to-point protocol (_GlooPosts).
    None: every compute starts once its dependencies are done (NCCL, GPUs, the presets).
    `pull`: per op, what a GPU contention model reads (durations_s)."""
    env = _CountingEnvironment()
    sharing = (Sharing(env, schedule.n_ranks, contention, jitter, pull)
               if contention is not None and contention.active else None)
    n_ops = len(schedule)
    start = [0.0] * n_ops
    end = [0.0] * n_ops
    after = schedule.after_tuples()
    if schedule.extra_resources is not None:
        after = _with_resource_turns(schedule, after)
    remaining = [len(a) for a in after]
    dependents = _dependents(after)
    is_compute = (~schedule.is_transfer).tolist()
    is_backward = (schedule.kind == BWD).tolist()
    rank, peer = schedule.rank.tolist(), schedule.peer.tolist()
    waiting: dict[int, simpy.Event] = {}
    gloo = _GlooPosts(env, posts, inline_after_s) if posts is not None else None
    send_of = gloo.send_of if gloo is not None else {}

    def ready(op_id: int):
        ev = env.event()
        waiting[op_id] = ev
        return ev

    def done(op_id: int) -> None:
        end[op_id] = env.now
        if gloo is not None:
            gloo.ended(op_id)
        for x in dependents[op_id]:
            remaining[x] -= 1
            if remaining[x] == 0 and x in waiting:
                waiting.pop(x).succeed()

    def stream(op_ids):
        for op_id in op_ids:
            if remaining[op_id]:
                yield ready(op_id)
            if gloo is not None:
                yield from gloo.posting(op_id)
            start[op_id] = env.now
            if op_id in send_of:
                gloo.post_returns(send_of[op_id])
            if dur[op_id] <= 0:
                pass
            elif sharing is None:
                yield env.timeout(dur[op_id])
            elif is_compute[op_id]:
                yield from sharing.compute(op_id, rank[op_id], dur[op_id], is_backward[op_id])
            else:
                yield from sharing.transfer(op_id, rank[op_id], peer[op_id], dur[op_id])
            done(op_id)

    for queue in resource_queues(schedule):
        env.process(stream(queue))
    if gloo is not None:
        for send, deps in gloo.alone.items():
            env.process(gloo.post_alone(send, deps))
    env.run()
    return start, end, env.events


def _dependents(after: list[tuple[int, ...]]) -> list[list[int]]:
    """The ops that depend on each op."""
    dependents: list[list[int]] = [[] for _ in range(len(after))]
    for op_id, deps in enumerate(after):
        for d in deps:
            dependents[d].append(op_id)
    return dependents


class _GlooPosts:
    """gloo's point-to-point protocol, as the SimPy player plays it.

    A rank posts a batch: a send, then a receive (batch_isend_irecv posts them in order).
    A receive posted first tells the sender it is ready, and a send posted once that word
    is in (more than `inline_after_s` later, the link's latency) is written by the
    posting thread before the post returns: the compute that follows the post in the
    rank's program starts only when the send ends. A send posted before its receive is
    written later by gloo's own thread, behind the compute. A transfer starts once the
    post that carries its receive has returned. A post comes up either with its compute's
    turn (the K/V hop, posted right before it) or on its own, when the ops it waits for
    are done (the dK/dV hop, after the step's compute); the compute after a post on its
    own waits for it to return before its own post comes up."""

    def __init__(self, env: simpy.Environment, posts: Posts, inline_after_s: float):
        self.env = env
        self.inline_after_s = inline_after_s
        self.send_of: dict[int, int] = {}               # compute -> the send posted with its turn
        self.alone_before: dict[int, list[int]] = {}    # compute -> the sends posted on their own before it
        self.partner: dict[int, int] = {}               # send -> the send whose post carries its receive
        self.alone: dict[int, list[int]] = {}           # a send posted on its own -> what its post waits for
        posted = posts.posted
        held, pair = posts.held[posted].tolist(), posts.partner[posted].tolist()
        waits_for = posts.after[:, posted].T.tolist()
        for send, compute, other, deps in zip(posted.tolist(), held, pair, waits_for):
            self.partner[send] = other
            deps = [d for d in deps if d != NO_DEP]
            if deps:
                self.alone[send] = deps
                if compute != NO_DEP:
                    self.alone_before.setdefault(compute, []).append(send)
            elif compute != NO_DEP:
                self.send_of[compute] = send
        self.returned: dict[int, float] = {}            # send -> when its post returned
        self.on_return: dict[int, simpy.Event] = {}
        self.on_end: dict[int, simpy.Event] = {}
        self.finished: set[int] = set()

    def ended(self, op_id: int) -> None:
        self.finished.add(op_id)
        if op_id in self.on_end:
            self.on_end.pop(op_id).succeed()

    def post_returns(self, send: int) -> None:
        self.returned[send] = self.env.now
        if send in self.on_return:
            self.on_return.pop(send).succeed()

    def write(self, send: int):
        """The post of `send`, from now: written by this thread when its receiver's
        post returned strictly more than the notice before (ranks that post at the same
        instant, a ring's first step, are each the first, whatever order the event loop
        takes them in)."""
        other = self.returned.get(self.partner[send])
        if other is not None and other + self.inline_after_s < self.env.now and send not in self.finished:
            yield self.on_end.setdefault(send, self.env.event())     # (a send of no duration may be done)

    def posting(self, op_id: int):
        """What an op waits for besides its dependencies under gloo's protocol."""
        for send in self.alone_before.get(op_id, ()):
            if send not in self.returned:
                yield self.on_return.setdefault(send, self.env.event())
        send = self.send_of.get(op_id)
        if send is not None:
            yield from self.write(send)
        other = self.partner.get(op_id)
        if other is not None and other not in self.returned:
            yield self.on_return.setdefault(other, self.env.event())     # the receive is not posted yet

    def post_alone(self, send: int, deps: list[int]):
        for d in deps:
            if d not in self.finished:
                yield self.on_end.setdefault(d, self.env.event())
        yield from self.write(send)
        self.post_returns(send)


def _with_resource_turns(schedule: Schedule, after: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Each op's dependencies, plus, for every resource it holds, the op before it in
    schedule order that held that resource (its turn on the resource)."""
    res = schedule.resource_rows()
    held = res >= 0
    op = np.broadcast_to(np.arange(len(schedule)), res.shape)[held]
    res = res[held]
    order = np.lexsort((op, res))
    op, res = op[order], res[order]
    same = np.flatnonzero(res[1:] == res[:-1])
    turns: list[list[int]] = [[] for _ in range(len(schedule))]
    for i, prev in zip(op[same + 1].tolist(), op[same].tolist()):
        turns[i].append(prev)
    return [a + tuple(sorted(set(t) - set(a))) if t else a for a, t in zip(after, turns)]


def times_waves(schedule: Schedule, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The max-plus recurrence, one wave at a time (sim.engine.schedule: within a wave no op waits
    on another and no two share a resource, so the ops of a wave are independent).

    Per op, as the event loop finds it: start = the latest of its resources' free times
    (the end of each resource's previous op) and its dependencies' ends, a max, exact in
    any order; end = start + duration, or start for a zero-duration op (a skipped block
    still takes its turn in its stream: it waits for what it waits on).

    `dur` may have more columns than one (ops x K): K plays of the same schedule with other
    durations, each column timed as alone (start and end ops x K); a planner plays many
    pipelines of one shape in one pass.
    """
    n_ops = len(schedule)
    lanes = dur.shape[1:]
    start = np.zeros((n_ops, *lanes))
    end = np.zeros((n_ops + 1, *lanes))   # end[NO_DEP], the last: waiting on nothing is ready at 0
    free = np.zeros((schedule.n_resources + 1, *lanes))   # free[-1]: no resource (an extra's padding)
    resource, after, extra = schedule.resource, schedule.after, schedule.extra_resources
    # adding 0.0 to a time leaves it exactly as it is: one addition serves every op (the
    # durations themselves where none is negative or NaN: -0.0 adds as 0.0 to a time)
    grow = dur if ((dur >= 0).all()) else np.where(dur > 0, dur, 0.0)
    bounds = schedule.wave_starts.tolist()
    for a, b in zip(bounds, bounds[1:]):
        res = resource[a:b]
        # written in place (start[a:b], end[a:b]): a wave of a ring is a few hundred ops,
        # and allocations cost as much as the arithmetic
        t = np.maximum(free[res], end[after[:, a:b]].max(axis=0, initial=0.0), out=start[a:b])
        if extra is not None:
            more = extra[:, a:b]
            np.maximum(t, free[more].max(axis=0, initial=0.0), out=t)
        done = np.add(t, grow[a:b], out=end[a:b])
        free[res] = done
        if extra is not None:
            free[more] = done
            free[-1] = 0.0
    return start, end[:n_ops]
