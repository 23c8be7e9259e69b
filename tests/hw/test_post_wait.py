"""The time a ring rank spends in its post call is recorded as its next compute's wait on
the send it posted, and split as the simulator splits waits: exposed K/V communication
when the receiver had posted first (gloo writes the send in the posting thread), idle
before that. Clock marks are set by hand."""

from __future__ import annotations

import torch
import torch.distributed as dist

from hw.comm import Ring, RingComm
from hw.runner import _split_waits
from hw.timing import Pending, Recorder
from sim.trace.format import Span


class _Work:
    def wait(self):
        return True

    def is_completed(self):
        return True


class _HandClock:
    """Marks read from a list; a watched batch completes at the next time in `done`."""

    def __init__(self, marks, done):
        self.marks, self.done = list(marks), list(done)

    def mark(self):
        return self.marks.pop(0)

    def watch(self, channel, works):
        p = Pending(works)
        p.mark = self.done.pop(0)
        p.done.set()
        return p

    def seconds(self, mark):
        return mark


def _rank0_spans(monkeypatch, holds, kind="kv"):
    """Rank 0 of two posts at 1.0, its post call returns at 1.4; its send completes at 1.5
    and its receive at 1.6."""
    monkeypatch.setattr(dist, "P2POp", lambda *a: a)
    monkeypatch.setattr(dist, "batch_isend_irecv", lambda ops: [_Work() for _ in ops])
    clock = _HandClock([1.0, 1.4], [1.5, 1.6])
    rec = Recorder(clock, 0)
    comm = RingComm(Ring(0, 2, None, clock, rec), kind)
    t = torch.zeros(2)
    comm.post([t, t], [t, t], step=0, send_chunks=(0,), recv_chunks=(1,), holds=holds)
    return rec.spans(), rec.needs


def _rank1(recv_posted: float) -> list[Span]:
    return [Span(1, "recv", "kv", 0, recv_posted, 1.5, 0.0, 16.0, (), (0,), 0),
            Span(1, "send", "kv", 0, 0.5, 1.6, 0.0, 16.0, (), (1,), 0)]


def test_a_post_after_the_receive_was_posted_is_exposed_communication_of_the_compute_it_holds(monkeypatch):
    spans, needs = _rank0_spans(monkeypatch, holds=(0, (0,), (0,)))
    waits = [s for s in _split_waits([spans, _rank1(0.5)], [needs, {}]) if s.stream == "wait"]
    assert [(s.rank, s.kind, s.step, s.start_s, s.end_s, s.q_chunks, s.kv_chunks) for s in waits] == [
        (0, "kv", 0, 1.0, 1.4, (0,), (0,))]


def test_a_post_before_the_receive_was_posted_is_idle_until_it_is(monkeypatch):
    spans, needs = _rank0_spans(monkeypatch, holds=(0, (0,), (0,)))
    waits = [s for s in _split_waits([spans, _rank1(1.25)], [needs, {}]) if s.stream == "wait"]
    assert [(s.kind, s.start_s, s.end_s) for s in waits] == [("idle", 1.0, 1.25), ("kv", 1.25, 1.4)]


def test_a_dkv_post_is_a_wait_of_the_next_steps_compute_it_holds(monkeypatch):
    # the dK/dV hop of step 0 is posted after the step's compute, before step 1's
    spans, needs = _rank0_spans(monkeypatch, holds=(1, (0,), (1,)), kind="dkv")
    rank1 = [Span(1, "recv", "dkv", 0, 0.5, 1.5, 0.0, 16.0, (), (0,), 0),
             Span(1, "send", "dkv", 0, 0.5, 1.6, 0.0, 16.0, (), (1,), 0)]
    waits = [s for s in _split_waits([spans, rank1], [needs, {}]) if s.stream == "wait"]
    assert [(s.kind, s.step, s.start_s, s.end_s, s.q_chunks, s.kv_chunks) for s in waits] == [
        ("dkv", 1, 1.0, 1.4, (0,), (1,))]
    assert [(s.stream, s.step) for s in spans if s.stream != "wait"] == [("send", 0), ("recv", 0)]


def test_a_post_that_holds_no_compute_records_no_wait(monkeypatch):
    spans, _ = _rank0_spans(monkeypatch, holds=None)
    assert [s.stream for s in spans] == ["send", "recv"]
