"""The engine: plays a schedule on a hardware model and records the trace.

The SimPy player is the model: one process per rank plays its computes in order, and
one process per directed link (full duplex: each direction is its own) carries that
link's transfers one at a time, in the order the schedule lists them (the program
order in which a rank posts them, as a communication stream does), each for
alpha + bytes / bandwidth. An operation starts the moment its dependencies are done
and its stream or link is free. Because every queue has a fixed order, loosening a
dependency can never delay anything: overlap is never slower than lock-step exchange.

The same fixed orders make start times a max-plus recurrence over the operations in
schedule order (schedule order is topological), so `player="recurrence"` computes the
identical times without an event loop, much faster: it times a whole wave of the
schedule (sim.schedule) at once with numpy, durations come from the hardware model
over arrays, and the spans are made from arrays too. Tests hold the two players to
bit-identical traces, and the wave player to the per-op recurrence it replaced; the
dashboard uses it. A calibrated profile may slow compute while transfers run or while
ranks share CPU cores (sim.contention); rates that change inside a block need the event
loop, so such a profile always plays on SimPy.

When a compute stream is ready (its previous block done) but its block is not, it
waits. The part of that wait during which a transfer it depends on is in flight is
exposed communication (wait span of kind "kv"/"dkv"); the rest (the transfer had not
started: a late peer, a busy link) is idle (kind "idle"), as is the time after a rank's
last event until the makespan. Definitions: DESIGN.md. Deterministic: the same
schedule gives the identical trace.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Any

import numpy as np
import simpy

from sim.config import Scenario, Workload
from sim.contention import Contention, Sharing
from sim.memory import peak_memory_bytes
from sim.schedule import DKV, EMPTY, KINDS, MASKS, NO_DEP, ComputeOp, Schedule, TransferOp
from sim.trace import Span, Trace

PLAYERS = ("simpy", "recurrence")


class _CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for benchmarks)."""

    events = 0

    def step(self) -> None:
        self.events += 1
        super().step()


def durations_s(schedule: Schedule, hardware: Any, workload: Workload) -> np.ndarray:
    """Time each operation takes on `hardware` (0 for a skipped, fully masked block).

    A hardware object may offer `compute_times_s` and `transfer_times_s`, the per-op
    methods over arrays (sim.config.Hardware does); otherwise its per-op methods are
    called once for each distinct argument tuple, which they must be pure functions of.
    """
    dur = np.zeros(len(schedule))
    comp = np.flatnonzero(~schedule.is_transfer & (schedule.mask != EMPTY))
    xfer = np.flatnonzero(schedule.is_transfer)
    if comp.size:
        flops, kind, mask = schedule.flops[comp], schedule.kind[comp], schedule.mask[comp]
        q_tokens, kv_tokens = schedule.q_tokens[comp], schedule.kv_tokens[comp]
        if hasattr(hardware, "compute_times_s"):
            dur[comp] = hardware.compute_times_s(flops, dtype=workload.dtype, kind=_KIND_NAMES[kind],
                                                 mask=_MASK_NAMES[mask], q_tokens=q_tokens,
                                                 kv_tokens=kv_tokens)
        else:
            dur[comp] = _per_distinct(
                lambda f, k, m, q, kv: hardware.compute_time_s(f, dtype=workload.dtype, kind=KINDS[k],
                                                                mask=MASKS[m], q_tokens=q, kv_tokens=kv),
                [flops, kind, mask, q_tokens, kv_tokens])
    if xfer.size:
        nbytes, src, dst = schedule.nbytes[xfer], schedule.rank[xfer], schedule.peer[xfer]
        if hasattr(hardware, "transfer_times_s"):
            dur[xfer] = hardware.transfer_times_s(nbytes, src, dst)
        else:
            dur[xfer] = _per_distinct(hardware.transfer_time_s, [nbytes, src, dst])
    return dur


def _per_distinct(fn: Any, columns: list[np.ndarray]) -> np.ndarray:
    """fn(one op's arguments, as Python scalars) for every op, called once per distinct
    argument tuple: a ring repeats a few block shapes and link hops many times over."""
    order = np.lexsort(columns[::-1])
    new = np.zeros(len(order), dtype=bool)     # where a sorted row differs from the last
    new[0] = True
    for c in columns:
        c = c[order]
        new[1:] |= c[1:] != c[:-1]
    firsts = order[new]
    values = [fn(*args) for args in zip(*(c[firsts].tolist() for c in columns))]
    out = np.empty(len(order))
    out[order] = np.array(values, dtype=np.float64)[np.cumsum(new) - 1]
    return out


def _links(schedule: Schedule) -> dict[tuple[int, int], list[TransferOp]]:
    links: dict[tuple[int, int], list[TransferOp]] = {}
    for op in schedule.ops:
        if isinstance(op, TransferOp):
            links.setdefault((op.src, op.dst), []).append(op)
    return links


def _times_simpy(schedule: Schedule, dur: list[float], contention: Contention | None = None
                 ) -> tuple[list[float], list[float], int]:
    env = _CountingEnvironment()
    sharing = Sharing(env, schedule.n_ranks, contention) if contention is not None and contention.active else None
    ops = schedule.ops
    start = [0.0] * len(ops)
    end = [0.0] * len(ops)
    remaining = [len(op.after) for op in ops]
    dependents: list[list[int]] = [[] for _ in ops]
    for op in ops:
        for d in op.after:
            dependents[d].append(op.id)
    waiting: dict[int, simpy.Event] = {}

    def ready(op_id: int):
        ev = env.event()
        waiting[op_id] = ev
        return ev

    def done(op_id: int) -> None:
        end[op_id] = env.now
        for x in dependents[op_id]:
            remaining[x] -= 1
            if remaining[x] == 0 and x in waiting:
                waiting.pop(x).succeed()

    def stream(op_ids):
        for op_id in op_ids:
            if remaining[op_id]:
                yield ready(op_id)
            start[op_id] = env.now
            op = ops[op_id]
            if dur[op_id] <= 0:
                pass
            elif sharing is None:
                yield env.timeout(dur[op_id])
            elif op.__class__ is ComputeOp:
                yield from sharing.compute(op_id, op.rank, dur[op_id])
            else:
                sharing.transfer(op.src, op.dst, 1)
                yield env.timeout(dur[op_id])
                sharing.transfer(op.src, op.dst, -1)
            done(op_id)

    for order in schedule.compute_order:
        env.process(stream(order))
    for transfers in _links(schedule).values():
        env.process(stream([t.id for t in transfers]))
    env.run()
    return start, end, env.events


def _times_waves(schedule: Schedule, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The max-plus recurrence, one wave at a time (sim.schedule: within a wave no op waits
    on another and no two share a stream, so the ops of a wave are independent).

    Per op, as the event loop finds it: start = the later of its stream's free time (the
    end of the stream's previous op) and its dependencies' ends, a max, exact in any
    order; end = start + duration, or start for a zero-duration op (a skipped block
    still takes its turn in its stream: it waits for what it waits on).
    """
    n_ops = len(schedule)
    start = np.zeros(n_ops)
    end = np.zeros(n_ops + 1)   # end[NO_DEP], the last: waiting on nothing is ready at 0
    free = np.zeros(schedule.n_resources)
    resource, after = schedule.resource, schedule.after
    # adding 0.0 to a time leaves it exactly as it is: one addition serves every op
    grow = np.where(dur > 0, dur, 0.0)
    bounds = schedule.wave_starts.tolist()
    for a, b in zip(bounds, bounds[1:]):
        res = resource[a:b]
        t = np.maximum(free[res], end[after[:, a:b]].max(axis=0, initial=0.0))
        start[a:b] = t
        end[a:b] = free[res] = t + grow[a:b]
    return start, end[:n_ops]


# Span columns are codes into these. The streams are in alphabetical order, so that
# sorting by code sorts as the names do.
_STREAM_NAMES = np.array(["compute", "recv", "send", "wait"], dtype=object)
COMPUTE, RECV, SEND, WAIT = range(4)
_SPAN_KIND_NAMES = np.array(KINDS + ("idle",), dtype=object)
IDLE = len(KINDS)
_KIND_NAMES = np.array(KINDS, dtype=object)
_MASK_NAMES = np.array(MASKS, dtype=object)


def _spans(schedule: Schedule, start: np.ndarray, end: np.ndarray) -> list[Span]:
    """The trace's spans, sorted by (start_s, rank, stream), ties in schedule order."""
    n, n_ops = schedule.n_ranks, len(schedule)
    rank, peer, step = schedule.rank, schedule.peer, schedule.step

    # each rank's computes in order; a compute waits from the end of the one before
    comp = np.flatnonzero(~schedule.is_transfer)
    comp = comp[np.argsort(rank[comp], kind="stable")]
    first = np.ones(len(comp), dtype=bool)
    first[1:] = rank[comp[1:]] != rank[comp[:-1]]
    ready = np.zeros(len(comp))
    ready[1:] = end[comp[:-1]]
    ready[first] = 0.0
    waits = start[comp] > ready
    ran = comp[schedule.mask[comp] != EMPTY]
    xfer = np.flatnonzero(schedule.is_transfer)

    # each rank's last event: its last compute's end (its start, if skipped), or a later
    # transfer's end at either end; its last step likewise; idle from there to the end
    last = np.zeros(n)
    last_step = np.zeros(n, dtype=np.int64)
    final = comp[np.append(first[1:], True)] if len(comp) else comp
    last[rank[final]] = end[final]
    last_step[rank[final]] = step[final]
    for side in (rank[xfer], peer[xfer]):
        np.maximum.at(last, side, end[xfer])
        np.maximum.at(last_step, side, step[xfer])
    makespan = last.max(initial=0.0)
    late = np.flatnonzero(last < makespan)

    # one entry per span: its op (n_ops + rank for the idle at the end), stream, kind,
    # rank and times
    w_op, w_kind, w_start, w_end = _wait_pieces(schedule, comp[waits], ready[waits], start, end)
    op = np.concatenate([ran, xfer, xfer, w_op, n_ops + late])
    count = [len(ran), len(xfer), len(xfer), len(w_op), len(late)]
    stream = np.repeat([COMPUTE, SEND, RECV, WAIT, WAIT], count)
    kind = np.concatenate([schedule.kind[ran], schedule.kind[xfer], schedule.kind[xfer], w_kind,
                           np.full(len(late), IDLE)])
    where = np.concatenate([rank[ran], rank[xfer], peer[xfer], rank[w_op], late])
    t0 = np.concatenate([start[ran], start[xfer], start[xfer], w_start, last[late]])
    t1 = np.concatenate([end[ran], end[xfer], end[xfer], w_end, np.full(len(late), makespan)])
    # the order a sort of the recorded spans gives: by start, rank, stream, then the order
    # they were recorded in (schedule order, the idle at the end last); rank, stream and
    # op packed in one integer key sort twice as fast as three keys
    order = np.lexsort((((where * 4 + stream) * (n_ops + n + 1) + op), t0))
    op, stream, kind, where, t0, t1 = (x[order] for x in (op, stream, kind, where, t0, t1))

    # what a span takes from its op; the idle at the end has no op (the padding)
    def of_op(column: np.ndarray, pad: Any) -> np.ndarray:
        return np.concatenate([column, np.full(n, pad, dtype=column.dtype)])[op]

    is_compute, is_wait = stream == COMPUTE, stream == WAIT
    moves = (stream == SEND) | (stream == RECV)
    flops = np.where(is_compute, of_op(schedule.flops, 0.0), 0.0)
    nbytes = np.where(moves, of_op(schedule.nbytes, 0), 0).astype(np.float64)
    q_chunks = np.where(is_compute | is_wait, of_op(schedule.q_chunks, -1), -1)
    kv_chunks = of_op(schedule.kv_chunks, -1)
    other_end = np.where(stream == SEND, of_op(peer, -1), of_op(rank, -1))
    span_peer = np.where(moves, other_end, -1)
    steps = np.concatenate([step, last_step])[op]

    chunk_sets = np.empty(len(schedule.chunk_sets) + 1, dtype=object)
    for i, chunks in enumerate(schedule.chunk_sets):
        chunk_sets[i] = chunks
    chunk_sets[-1] = ()            # index -1: no chunks
    return list(map(Span, where.tolist(), _STREAM_NAMES[stream].tolist(),
                    _SPAN_KIND_NAMES[kind].tolist(), steps.tolist(), t0.tolist(), t1.tolist(),
                    flops.tolist(), nbytes.tolist(), chunk_sets[q_chunks].tolist(),
                    chunk_sets[kv_chunks].tolist(), span_peer.tolist()))


def _wait_pieces(schedule: Schedule, ops: np.ndarray, t0: np.ndarray, start: np.ndarray,
                 end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split the wait [t0, t1] of each compute in `ops` (t1 its start) into exposed
    communication and idle: taking the transfers it waits on by (start, end, kind), with
    t the end of the last piece (t0 at first), a transfer still in flight after t covers
    [max(its start, t), min(its end, t1)] as exposed communication, idle before it; what
    is left after the last is idle. Returns (op, kind, start, end) of each piece."""
    t1 = start[ops]
    deps = np.take(schedule.after, ops, axis=1).T                       # (ops, width)
    flying = (deps != NO_DEP) & schedule.is_transfer[deps]   # a pad reads the last op: masked
    s = np.where(flying, np.maximum(start[deps], t0[:, None]), np.inf)
    e = np.where(flying, np.minimum(end[deps], t1[:, None]), np.inf)
    kinds = schedule.kind[deps]
    order = np.lexsort((kinds != DKV, e, s), axis=-1)      # the names sort dkv before kv
    s, e, kinds, flying = (np.take_along_axis(x, order, -1) for x in (s, e, kinds, flying))
    t = t0
    pieces = []           # (start, end, kind, taken)
    for j in range(int(flying.sum(axis=1).max(initial=0))):
        on = flying[:, j] & (e[:, j] > t)
        sj = np.maximum(s[:, j], t)
        pieces += [(t, sj, IDLE, on), (sj, e[:, j], kinds[:, j], on)]
        t = np.where(on, e[:, j], t)
    pieces.append((t, t1, IDLE, True))
    keep = [on & (b > a) for a, b, _, on in pieces]
    return (np.concatenate([ops[k] for k in keep]),
            np.concatenate([np.broadcast_to(kind, k.shape)[k] for (_, _, kind, _), k in zip(pieces, keep)]),
            np.concatenate([a[k] for (a, _, _, _), k in zip(pieces, keep)]),
            np.concatenate([b[k] for (_, b, _, _), k in zip(pieces, keep)]))


def play(schedule: Schedule, hardware: Any, workload: Workload,
         header: dict[str, Any] | None = None, *, player: str = "simpy") -> Trace:
    """Play `schedule` and return its simulated trace (spans sorted by start time)."""
    if player not in PLAYERS:
        raise ValueError(f"unknown player {player!r}")
    dur = durations_s(schedule, hardware, workload)
    header = dict(header or {})
    meta = dict(header.get("meta", {}))
    contention = getattr(hardware, "contention", None)
    if contention is not None and contention.active:
        player = "simpy"     # rates that change mid-block need the event loop
        meta["contention"] = {"slowdown_in_flight": contention.slowdown_in_flight,
                              "compute_slots": contention.compute_slots,
                              "concurrency": contention.concurrency}
    if player == "simpy":
        start, end, meta["sim_events"] = _times_simpy(schedule, dur.tolist(), contention)
        start, end = np.array(start), np.array(end)
    else:
        start, end = _times_waves(schedule, dur)
    meta["player"] = player
    return Trace("simulated", schedule.n_ranks, _spans(schedule, start, end),
                 header.get("config", {}), header.get("hardware", {}), meta)


def simulate(scenario: Scenario, hardware: Any | None = None, *, player: str = "simpy") -> Trace:
    """Build the ring schedule for `scenario` and play it.

    `hardware` replaces `scenario.hardware` (for example a calibrated profile); it must
    offer compute_time_s, transfer_time_s, rate_flops and describe, and may offer
    compute_times_s and transfer_times_s (see durations_s).
    """
    from sim.ring import build_ring_schedule

    hw = hardware if hardware is not None else scenario.hardware
    with _gc_paused():
        schedule = build_ring_schedule(scenario)
        mem = peak_memory_bytes(scenario.workload, scenario.tokens_per_rank)
        header = {
            "config": scenario.describe(),
            "hardware": {**hw.describe(), "rate_flops": hw.rate_flops(scenario.workload.dtype)},
            "meta": {"peak_mem_bytes": [mem["total"]] * scenario.n_gpus, "memory": mem,
                     "schedule": "ring", "ops": len(schedule)},
        }
        return play(schedule, hw, scenario.workload, header, player=player)


@contextlib.contextmanager
def _gc_paused():
    """Millions of small, acyclic objects: the cycle collector only costs time here (it
    looks at them once they are made, when the caller next allocates)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
