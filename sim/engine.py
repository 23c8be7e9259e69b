"""The SimPy engine: plays a schedule on a hardware model and records the trace.

One process per rank plays its computes in order, and one process per directed link
(full duplex: each direction is its own) carries that link's transfers one at a time,
in the order the schedule lists them (the program order in which a rank posts them,
as a communication stream does), each for alpha + bytes / bandwidth. Because every
queue has a fixed order, loosening a dependency can never delay anything: overlap is
never slower than lock-step exchange.

When a compute stream is ready but its block is not, it waits. The part of that wait
during which a transfer it depends on is in flight is exposed communication (wait
span of kind "kv"/"dkv"); the rest (the transfer had not started: a late peer, a busy
link) is idle (kind "idle"), as is the time after a rank's last event until the
makespan. The result is deterministic: SimPy orders simultaneous events by insertion.
"""

from __future__ import annotations

from typing import Any

import simpy

from sim.config import Hardware, Scenario, Workload
from sim.memory import peak_memory_bytes
from sim.schedule import ComputeOp, Schedule, TransferOp
from sim.trace import Span, Trace


class _Run:
    def __init__(self, schedule: Schedule, hardware: Hardware, workload: Workload):
        self.s = schedule
        self.hw = hardware
        self.w = workload
        self.env = simpy.Environment()
        n_ops = len(schedule.ops)
        self.remaining = [len(op.after) for op in schedule.ops]
        self.dependents: list[list[int]] = [[] for _ in range(n_ops)]
        for op in schedule.ops:
            for d in op.after:
                self.dependents[d].append(op.id)
        self.start = [0.0] * n_ops
        self.end = [0.0] * n_ops
        self.waiting: dict[int, simpy.Event] = {}
        self.links: dict[tuple[int, int], list[TransferOp]] = {}
        for op in schedule.ops:
            if isinstance(op, TransferOp):
                self.links.setdefault((op.src, op.dst), []).append(op)
        self.spans: list[Span] = []

    def run(self) -> list[Span]:
        for rank in range(self.s.n_ranks):
            self.env.process(self._compute_stream(rank))
        for transfers in self.links.values():
            self.env.process(self._link(transfers))
        self.env.run()
        return self.spans

    def _ready(self, op_id: int):
        """An event that fires when every dependency of `op_id` is done."""
        ev = self.env.event()
        if self.remaining[op_id]:
            self.waiting[op_id] = ev
        else:
            ev.succeed()
        return ev

    def _done(self, op_id: int) -> None:
        self.end[op_id] = self.env.now
        ops = self.s.ops
        for x in self.dependents[op_id]:
            self.remaining[x] -= 1
            if self.remaining[x] == 0:
                if x in self.waiting:
                    self.waiting.pop(x).succeed()

    def _compute_stream(self, rank: int):
        env = self.env
        for op_id in self.s.compute_order[rank]:
            op: ComputeOp = self.s.ops[op_id]
            ready = env.now
            if self.remaining[op_id]:
                yield self._ready(op_id)
                self._record_wait(op, ready, env.now)
            self.start[op_id] = env.now
            if op.mask != "empty":
                dur = self.hw.compute_time_s(op.flops, dtype=self.w.dtype, kind=op.kind,
                                             mask=op.mask, q_tokens=op.q_tokens,
                                             kv_tokens=op.kv_tokens)
                yield env.timeout(dur)
                self.spans.append(Span(rank, "compute", op.kind, op.step, self.start[op_id],
                                       env.now, op.flops, 0.0, op.q_chunks, op.kv_chunks))
            self._done(op_id)

    def _link(self, transfers: list[TransferOp]):
        env = self.env
        for op in transfers:
            if self.remaining[op.id]:
                yield self._ready(op.id)
            t0 = self.start[op.id] = env.now
            yield env.timeout(self.hw.transfer_time_s(op.nbytes, op.src, op.dst))
            for rank, stream, peer in ((op.src, "send", op.dst), (op.dst, "recv", op.src)):
                self.spans.append(Span(rank, stream, op.kind, op.step, t0, env.now, 0.0,
                                       float(op.nbytes), (), op.kv_chunks, peer))
            self._done(op.id)

    def _record_wait(self, op: ComputeOp, t0: float, t1: float) -> None:
        """Split [t0, t1] into exposed-communication and idle wait spans."""
        if t1 <= t0:
            return
        ops = self.s.ops
        flights = sorted((max(self.start[d], t0), min(self.end[d], t1), ops[d].kind)
                         for d in op.after if isinstance(ops[d], TransferOp))
        t = t0
        for s, e, kind in flights:
            if e <= t:
                continue
            s = max(s, t)
            if s > t:
                self._wait(op, t, s, "idle")
            self._wait(op, s, e, kind)
            t = e
        if t < t1:
            self._wait(op, t, t1, "idle")

    def _wait(self, op: ComputeOp, t0: float, t1: float, kind: str) -> None:
        if t1 > t0:
            self.spans.append(Span(op.rank, "wait", kind, op.step, t0, t1, 0.0, 0.0,
                                   op.q_chunks, op.kv_chunks))


def play(schedule: Schedule, hardware: Hardware, workload: Workload,
         header: dict[str, Any] | None = None) -> Trace:
    """Run `schedule` and return its simulated trace (spans sorted by start time)."""
    run = _Run(schedule, hardware, workload)
    spans = run.run()
    n = schedule.n_ranks
    end = max((s.end_s for s in spans), default=0.0)
    last = [0.0] * n
    last_step = [0] * n
    for s in spans:
        if s.end_s > last[s.rank]:
            last[s.rank] = s.end_s
        last_step[s.rank] = max(last_step[s.rank], s.step)
    for r in range(n):
        if last[r] < end:
            spans.append(Span(r, "wait", "idle", last_step[r], last[r], end))
    spans.sort(key=lambda s: (s.start_s, s.rank, s.stream))
    header = header or {}
    return Trace("simulated", n, spans, header.get("config", {}), header.get("hardware", {}),
                 header.get("meta", {}))


def simulate(scenario: Scenario, hardware: Any | None = None) -> Trace:
    """Build the ring schedule for `scenario` and play it.

    `hardware` replaces `scenario.hardware` (for example a calibrated profile); it must
    offer compute_time_s, transfer_time_s, rate_flops and describe.
    """
    from sim.ring import build_ring_schedule

    hw = hardware if hardware is not None else scenario.hardware
    schedule = build_ring_schedule(scenario)
    mem = peak_memory_bytes(scenario.workload, scenario.tokens_per_rank)
    header = {
        "config": scenario.describe(),
        "hardware": {**hw.describe(), "rate_flops": hw.rate_flops(scenario.workload.dtype)},
        "meta": {"peak_mem_bytes": [mem["total"]] * scenario.n_gpus, "memory": mem,
                 "schedule": "ring", "events": len(schedule.ops)},
    }
    return play(schedule, hw, scenario.workload, header)
