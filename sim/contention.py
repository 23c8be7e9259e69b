"""Compute slowed by what runs beside it: transfers in flight and shared CPU cores.

Two effects a calibrated profile can carry (both absent from a datasheet preset):
- interference: while a transfer of its own (a send or a receive) is in flight, a
  rank's compute progresses at 1/slowdown of its speed (gloo on CPU burns cores to
  move bytes; NCCL kernels take SMs from the attention kernel);
- core sharing: when several ranks compute at once on one host, each slows down. If
  the profile measured it (`concurrency`: the time of a block with k processes
  computing at once, over the time alone), a rank progresses at 1 / slowdown(active),
  interpolated between measured counts and extended along the last segment; otherwise
  at slots / active once more ranks compute than there are compute slots (CPU cores /
  threads per rank).

A block's duration from the hardware model is its work at full speed; `Sharing`
tracks, inside the SimPy run, every compute in progress, and whenever a compute or a
transfer starts or ends it books the progress made so far and re-times the computes
whose rate changed (by interrupting their timeouts). Exact for this fluid model.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy


@dataclass(frozen=True)
class Contention:
    slowdown_in_flight: float = 1.0
    """Compute time factor while a transfer of the same rank is in flight (>= 1)."""
    compute_slots: float | None = None
    """Ranks that can compute at full speed at once (None: unlimited, as on GPUs)."""
    concurrency: tuple[tuple[float, float], ...] | None = None
    """Measured (processes computing at once, slowdown of each) pairs, ascending; when
    given it replaces `compute_slots`."""

    @property
    def active(self) -> bool:
        return (self.slowdown_in_flight != 1.0 or self.compute_slots is not None
                or self.concurrency is not None)

    def sharing_slowdown(self, active: int) -> float:
        """How much slower each of `active` computing ranks runs than one alone."""
        if self.concurrency:
            pts = self.concurrency
            if active <= pts[0][0] or len(pts) == 1:
                return max(1.0, pts[0][1]) if active >= pts[0][0] else 1.0
            for (k0, f0), (k1, f1) in zip(pts, pts[1:]):
                if active <= k1:
                    break
            return max(1.0, f0 + (f1 - f0) * (active - k0) / (k1 - k0))
        if self.compute_slots is not None and active > self.compute_slots:
            return active / self.compute_slots
        return 1.0


class _Running:
    __slots__ = ("rank", "left", "since", "rate", "process")

    def __init__(self, rank: int, left: float, since: float, process):
        self.rank, self.left, self.since, self.rate, self.process = rank, left, since, 1.0, process


class Sharing:
    """Progress rates of the computes in flight, re-timed at every change."""

    def __init__(self, env: simpy.Environment, n_ranks: int, model: Contention):
        self.env = env
        self.model = model
        self.in_flight = [0] * n_ranks
        self.running: dict[int, _Running] = {}

    def _rate(self, rank: int) -> float:
        rate = 1.0
        if self.in_flight[rank]:
            rate /= self.model.slowdown_in_flight
        return rate / self.model.sharing_slowdown(len(self.running))

    def _retime(self, caller: int | None) -> None:
        now = self.env.now
        for op_id, run in self.running.items():
            run.left -= (now - run.since) * run.rate
            run.since = now
        for op_id, run in self.running.items():
            rate = self._rate(run.rank)
            if rate != run.rate:
                run.rate = rate
                if op_id != caller and run.process.is_alive and run.process.target is not None:
                    run.process.interrupt()

    def compute(self, op_id: int, rank: int, work_s: float):
        """A SimPy process body: `work_s` of full-speed compute at the current rates."""
        env = self.env
        run = _Running(rank, work_s, env.now, env.active_process)
        self.running[op_id] = run
        run.rate = 0.0           # forces a fresh rate for this one
        self._retime(op_id)
        while True:
            try:
                yield env.timeout(max(run.left, 0.0) / run.rate)
                break
            except simpy.Interrupt:
                continue
        del self.running[op_id]
        self._retime(None)

    def transfer(self, src: int, dst: int, delta: int) -> None:
        """A transfer between src and dst starts (delta=1) or ends (delta=-1)."""
        self.in_flight[src] += delta
        self.in_flight[dst] += delta
        self._retime(None)
