"""Clocks and the per-rank recorder of measured spans.

A clock hands out *marks* while the ring runs and turns them into seconds afterwards,
so that timing costs nothing but the mark itself on the hot path. On CPU a mark is a
`time.perf_counter()` reading; the completion of a send or receive is stamped by a
watcher thread blocked in the transfer's `wait()` (which releases the GIL), since the
rank's own thread is busy computing when it completes. On CUDA a mark is an event
recorded on a stream and resolved after a synchronize; a transfer's completion is an
event recorded on a side stream made to wait for the NCCL work.

Clocks of different ranks are aligned by a barrier: every rank takes its time origin
on leaving the same barrier (`Clock.align`), so spans of all ranks share one axis up to
the barrier's exit skew (tens of µs on one host).

The recorder keeps spans as marks and resolves them to `sim.trace.Span`s with times
relative to the aligned origin (DESIGN.md, "One trace"). A wait is exposed
communication ("kv"/"dkv") when a transfer it waited for was still in flight after the
wait began, idle otherwise.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from sim.trace import Span


class Pending:
    """A posted transfer: its work handle and, once complete, its completion mark."""

    __slots__ = ("work", "done", "mark", "error")

    def __init__(self, work: Any):
        self.work = work
        self.done = threading.Event()
        self.mark: Any = None
        self.error: BaseException | None = None


class _Watcher:
    """A daemon thread that waits on transfers in posting order and stamps completion.

    Transfers of one channel (one kind, one direction) complete in the order posted, so
    one thread per channel stamps each within a thread wake-up of its completion.
    """

    def __init__(self, name: str):
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._t = threading.Thread(target=self._loop, name=name, daemon=True)
        self._t.start()

    def submit(self, p: Pending) -> None:
        self._q.put(p)

    def close(self) -> None:
        self._q.put(None)

    def _loop(self) -> None:
        while True:
            p = self._q.get()
            if p is None:
                return
            try:
                p.work.wait()
                p.mark = time.perf_counter()
            except BaseException as e:  # handed to the rank's thread, which raises it
                p.error = e
                p.mark = time.perf_counter()
            finally:
                p.done.set()


class CpuClock:
    """perf_counter marks; watcher threads stamp transfer completions."""

    kind = "perf_counter"

    def __init__(self, timeout_s: float):
        self.origin = 0.0
        self.timeout_s = timeout_s
        self._watchers: dict[str, _Watcher] = {}

    def mark(self) -> float:
        return time.perf_counter()

    def align(self, barrier: Callable[[], None]) -> None:
        barrier()
        self.origin = time.perf_counter()

    def watch(self, channel: str, work: Any) -> Pending:
        w = self._watchers.get(channel)
        if w is None:
            w = self._watchers[channel] = _Watcher(f"ringsim-watch-{channel}")
        p = Pending(work)
        w.submit(p)
        return p

    def block(self, pending: list[Pending]) -> None:
        """Block the rank until every transfer in `pending` is complete; raise its error."""
        for p in pending:
            # the process-group timeout bounds the work itself; this bound is a backstop
            if not p.done.wait(self.timeout_s + 30.0):
                raise TimeoutError(f"transfer not complete after {self.timeout_s + 30.0:.0f} s")
            if p.error is not None:
                raise p.error

    def synchronize(self) -> None:
        pass

    def seconds(self, mark: float) -> float:
        return mark - self.origin

    def close(self) -> None:
        for w in self._watchers.values():
            w.close()
        self._watchers.clear()


class CudaClock:
    """CUDA events on the compute stream; transfers completed per a side stream.

    The side stream is made to wait for each NCCL work (`work.wait()` under it) and then
    records an event: that event completes when the transfer does. The compute stream
    waits on the same event when it needs the data, so the rank's CPU thread never blocks.
    """

    kind = "cuda_events"

    def __init__(self, device: torch.device, timeout_s: float):
        self.device = device
        self.timeout_s = timeout_s
        self.side = torch.cuda.Stream(device=device)
        self.origin: Any = None

    def _event(self, stream: Any = None) -> Any:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(stream if stream is not None else torch.cuda.current_stream(self.device))
        return ev

    def mark(self) -> Any:
        return self._event()

    def align(self, barrier: Callable[[], None]) -> None:
        torch.cuda.synchronize(self.device)
        barrier()
        # the stream is idle after the synchronize, so the event fires at once
        self.origin = self._event()

    def watch(self, channel: str, work: Any) -> Pending:
        p = Pending(work)
        with torch.cuda.stream(self.side):
            work.wait()
            p.mark = self._event(self.side)
        p.done.set()
        return p

    def block(self, pending: list[Pending]) -> None:
        stream = torch.cuda.current_stream(self.device)
        for p in pending:
            stream.wait_event(p.mark)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def seconds(self, mark: Any) -> float:
        return self.origin.elapsed_time(mark) / 1e3

    def close(self) -> None:
        pass


@dataclass
class _Rec:
    stream: str
    kind: str
    step: int
    start: Any
    end: Any
    flops: float = 0.0
    nbytes: float = 0.0
    q_chunks: tuple[int, ...] = ()
    kv_chunks: tuple[int, ...] = ()
    peer: int = -1
    needs: list[Pending] = field(default_factory=list)
    """For waits: the transfers waited on (exposed if one completed after the wait began)."""


class Recorder:
    """The spans of one rank in one iteration, kept as marks until `spans()`."""

    # waits shorter than this are the cost of looking, not waiting
    MIN_WAIT_S = 1e-6

    def __init__(self, clock: Any, rank: int):
        self.clock = clock
        self.rank = rank
        self._recs: list[_Rec] = []

    def compute(self, kind: str, step: int, start: Any, end: Any, flops: float,
                q_chunks: tuple[int, ...], kv_chunks: tuple[int, ...]) -> None:
        self._recs.append(_Rec("compute", kind, step, start, end, flops=flops,
                               q_chunks=q_chunks, kv_chunks=kv_chunks))

    def transfer(self, stream: str, kind: str, step: int, posted: Any, done: Pending,
                 nbytes: float, kv_chunks: tuple[int, ...], peer: int) -> None:
        self._recs.append(_Rec(stream, kind, step, posted, done, nbytes=nbytes,
                               kv_chunks=kv_chunks, peer=peer))

    def wait(self, kind: str, step: int, ready: Any, resume: Any, needs: list[Pending],
             q_chunks: tuple[int, ...], kv_chunks: tuple[int, ...]) -> None:
        self._recs.append(_Rec("wait", kind, step, ready, resume, q_chunks=q_chunks,
                               kv_chunks=kv_chunks, needs=list(needs)))

    def spans(self) -> list[Span]:
        """Resolve every mark (after the clock's synchronize) into spans, in seconds."""
        sec = self.clock.seconds
        out: list[Span] = []
        for r in self._recs:
            start = sec(r.start)
            end = sec(r.end.mark if isinstance(r.end, Pending) else r.end)
            end = max(end, start)
            kind = r.kind
            if r.stream == "wait":
                if end - start < self.MIN_WAIT_S:
                    continue
                if not any(sec(p.mark) > start for p in r.needs):
                    kind = "idle"
            out.append(Span(self.rank, r.stream, kind, r.step, start, end, r.flops, r.nbytes,
                            r.q_chunks, r.kv_chunks, r.peer))
        return out
