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
identical times without an event loop, much faster; tests hold the two to bit-identical
traces and the dashboard uses the fast one. A calibrated profile may slow compute while
transfers run or while ranks share CPU cores (sim.contention); rates that change inside
a block need the event loop, so such a profile always plays on SimPy.

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
from operator import attrgetter
from typing import Any

import simpy

from sim.config import Scenario, Workload
from sim.contention import Contention, Sharing
from sim.memory import peak_memory_bytes
from sim.schedule import ComputeOp, Schedule, TransferOp
from sim.trace import Span, Trace

PLAYERS = ("simpy", "recurrence")


class _CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for benchmarks)."""

    events = 0

    def step(self) -> None:
        self.events += 1
        super().step()


def durations_s(schedule: Schedule, hardware: Any, workload: Workload) -> list[float]:
    """Time each operation takes on `hardware` (0 for a skipped, fully masked block)."""
    out = []
    for op in schedule.ops:
        if isinstance(op, TransferOp):
            out.append(hardware.transfer_time_s(op.nbytes, op.src, op.dst))
        elif op.mask == "empty":
            out.append(0.0)
        else:
            out.append(hardware.compute_time_s(op.flops, dtype=workload.dtype, kind=op.kind,
                                               mask=op.mask, q_tokens=op.q_tokens,
                                               kv_tokens=op.kv_tokens))
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


def _times_recurrence(schedule: Schedule, dur: list[float]) -> tuple[list[float], list[float]]:
    ops = schedule.ops
    start = [0.0] * len(ops)
    end = [0.0] * len(ops)
    free: dict[Any, float] = {}
    for op in ops:          # schedule order is topological
        key = op.rank if isinstance(op, ComputeOp) else (op.src, op.dst)
        t = free.get(key, 0.0)
        for d in op.after:
            if end[d] > t:
                t = end[d]
        start[op.id] = t
        end[op.id] = free[key] = t + dur[op.id] if dur[op.id] > 0 else t
    return start, end


def _spans(schedule: Schedule, start: list[float], end: list[float]) -> list[Span]:
    ops = schedule.ops
    spans: list[Span] = []
    n = schedule.n_ranks
    last = [0.0] * n          # each rank's last event, for the idle tail
    last_step = [0] * n
    for rank, order in enumerate(schedule.compute_order):
        free = 0.0
        for op_id in order:
            op: ComputeOp = ops[op_id]
            t0 = start[op_id]
            if t0 > free:
                _wait_spans(spans, op, ops, free, t0, start, end)
            if op.mask != "empty":
                free = end[op_id]
                spans.append(Span(rank, "compute", op.kind, op.step, t0, free,
                                  op.flops, 0.0, op.q_chunks, op.kv_chunks))
            else:
                free = t0
            last_step[rank] = op.step
        last[rank] = free
    for op in ops:
        if op.__class__ is TransferOp:
            t0, t1, b = start[op.id], end[op.id], float(op.nbytes)
            spans.append(Span(op.src, "send", op.kind, op.step, t0, t1, 0.0, b, (), op.kv_chunks, op.dst))
            spans.append(Span(op.dst, "recv", op.kind, op.step, t0, t1, 0.0, b, (), op.kv_chunks, op.src))
            for r in (op.src, op.dst):
                if t1 > last[r]:
                    last[r] = t1
                if op.step > last_step[r]:
                    last_step[r] = op.step
    makespan = max(last, default=0.0)
    for r in range(n):
        if last[r] < makespan:
            spans.append(Span(r, "wait", "idle", last_step[r], last[r], makespan))
    spans.sort(key=attrgetter("start_s", "rank", "stream"))
    return spans


def _wait_spans(spans: list[Span], op: ComputeOp, ops, t0: float, t1: float,
                start: list[float], end: list[float]) -> None:
    """Split the wait [t0, t1] into exposed-communication and idle spans."""
    def add(a: float, b: float, kind: str) -> None:
        if b > a:
            spans.append(Span(op.rank, "wait", kind, op.step, a, b, 0.0, 0.0,
                              op.q_chunks, op.kv_chunks))

    flights = sorted((max(start[d], t0), min(end[d], t1), ops[d].kind)
                     for d in op.after if isinstance(ops[d], TransferOp))
    t = t0
    for s, e, kind in flights:
        if e <= t:
            continue
        s = max(s, t)
        add(t, s, "idle")
        add(s, e, kind)
        t = e
    add(t, t1, "idle")


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
                              "compute_slots": contention.compute_slots}
    if player == "simpy":
        start, end, meta["sim_events"] = _times_simpy(schedule, dur, contention)
    else:
        start, end = _times_recurrence(schedule, dur)
    meta["player"] = player
    return Trace("simulated", schedule.n_ranks, _spans(schedule, start, end),
                 header.get("config", {}), header.get("hardware", {}), meta)


def simulate(scenario: Scenario, hardware: Any | None = None, *, player: str = "simpy") -> Trace:
    """Build the ring schedule for `scenario` and play it.

    `hardware` replaces `scenario.hardware` (for example a calibrated profile); it must
    offer compute_time_s, transfer_time_s, rate_flops and describe.
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
                 "schedule": "ring", "ops": len(schedule.ops)},
    }
    with _gc_paused():
        return play(schedule, hw, scenario.workload, header, player=player)


@contextlib.contextmanager
def _gc_paused():
    """Millions of small, acyclic objects: the cycle collector only costs time here."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
