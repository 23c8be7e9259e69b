"""Clocks and the per-rank recorder of measured spans.

A clock hands out *marks* while the ring runs and turns them into seconds afterwards,
so that timing costs nothing but the mark itself on the hot path. On CPU a mark is a
`time.perf_counter()` reading; the completion of a send or receive is stamped by a
watcher thread blocked in the transfer's `wait()` (which releases the GIL), since the
rank's own thread is busy computing when it completes. On CUDA a mark is an event
recorded on a stream and resolved after a synchronize; a transfer's completion is an
event recorded on a side stream made to wait for the NCCL work.

On CUDA the rank's thread never blocks on a transfer while the ring runs (the compute
stream waits on the GPU), so a dead or hung peer shows only where the thread does
block: `synchronize` (and `align`) poll the outstanding transfers, call `on_poll` (which
may raise, for example when a peer left word that it failed) and raise
`TransferStalled` when a transfer errs or is still in flight `timeout_s` after it was
posted, so that the run gives up on its own timeout, before NCCL's watchdog (whose
timeout `hw.spawn.join_group` sets longer) tears the process down.

NCCL runs the batched point-to-point operations of a device on one stream in posting
order: a batch starts when the previous one has ended. The CUDA clock records that
queue (`Pending.after`), and a transfer's span starts when it could actually start:
at the later of its posting and the end of the batch before it. Gloo runs each
operation on its own, so CPU transfers start when posted.

Clocks of different ranks are aligned by a barrier: every rank takes its time origin
on leaving the same barrier (`Clock.align`), so spans of all ranks share one axis up to
the barrier's exit skew (tens of µs on one host).

The recorder keeps spans as marks and resolves them to `sim.trace.format.Span`s with times
relative to the aligned origin (docs/design.md, "One trace"). A wait is exposed
communication ("kv"/"dkv") when a transfer it waited for was still in flight after the
wait began, idle otherwise.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from sim.trace.format import Span


class TransferStalled(RuntimeError):
    """A posted transfer failed, or was not complete within the timeout."""


class Pending:
    """Posted transfers (their work handles) and, once all are complete, the completion mark."""

    __slots__ = ("works", "done", "mark", "error", "posted_at", "after")

    def __init__(self, works: Sequence[Any], after: "Pending | None" = None):
        self.works = list(works)
        self.done = threading.Event()
        self.mark: Any = None
        self.error: BaseException | None = None
        self.posted_at = time.monotonic()
        self.after = after
        """The batch this one queued behind (NCCL's one stream per device), if any."""


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
                for w in p.works:
                    w.wait()
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

    def watch(self, channel: str, works: Sequence[Any]) -> Pending:
        w = self._watchers.get(channel)
        if w is None:
            w = self._watchers[channel] = _Watcher(f"ringsim-watch-{channel}")
        p = Pending(works)
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
    waits on the same event when it needs the data, so the rank's CPU thread never blocks
    there; it blocks in `synchronize`, which watches the transfers (see the module).
    """

    kind = "cuda_events"
    POLL_S = 0.005
    """How often `settle` looks at the transfers."""
    ON_POLL_S = 0.2
    """How often it calls `on_poll` (which may ask the rendezvous store)."""

    def __init__(self, device: torch.device, timeout_s: float,
                 on_poll: Callable[[], None] | None = None):
        self.device = device
        self.timeout_s = timeout_s
        self.on_poll = on_poll
        """Called while waiting for transfers; may raise to give up early."""
        self.side = torch.cuda.Stream(device=device)
        self.origin: Any = None
        self._last: Pending | None = None     # the batch at the tail of NCCL's queue
        self._outstanding: list[Pending] = []

    def _event(self, stream: Any = None) -> Any:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(stream if stream is not None else torch.cuda.current_stream(self.device))
        return ev

    def mark(self) -> Any:
        return self._event()

    def align(self, barrier: Callable[[], None]) -> None:
        self.synchronize()
        barrier()
        # the stream is idle after the synchronize, so the event fires at once
        self.origin = self._event()

    def watch(self, channel: str, works: Sequence[Any]) -> Pending:
        p = Pending(works, after=self._last)
        self._last = p
        with torch.cuda.stream(self.side):
            for w in works:
                w.wait()
            p.mark = self._event(self.side)
        p.done.set()
        self._outstanding.append(p)
        return p

    def block(self, pending: list[Pending]) -> None:
        stream = torch.cuda.current_stream(self.device)
        for p in pending:
            stream.wait_event(p.mark)

    def settle(self) -> None:
        """Wait (on the CPU) until every transfer posted so far is complete.

        Raises TransferStalled when one fails or is still in flight `timeout_s` after it
        was posted; `on_poll` runs between polls.
        """
        polled = time.monotonic()
        while self._outstanding:
            p = self._outstanding[0]
            for w in p.works:
                if w.is_completed():
                    try:
                        w.wait()   # complete: returns at once, or raises what went wrong
                    except Exception as e:
                        raise TransferStalled(f"{type(e).__name__}: {e}") from e
            if all(w.is_completed() for w in p.works):
                self._outstanding.pop(0)
                continue
            now = time.monotonic()
            if self.on_poll is not None and now - polled >= self.ON_POLL_S:
                polled = now
                self.on_poll()
            if now - p.posted_at > self.timeout_s:
                raise TransferStalled(f"a transfer was not complete {self.timeout_s:.0f} s after "
                                      "it was posted")
            time.sleep(self.POLL_S)

    def synchronize(self) -> None:
        self.settle()
        torch.cuda.synchronize(self.device)

    def seconds(self, mark: Any) -> float:
        return self.origin.elapsed_time(mark) / 1e3

    def close(self) -> None:
        self._outstanding.clear()
        self._last = None


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
    """For waits: the transfers waited on (the wait is exposed while one is in flight)."""


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
        """Resolve every mark (after the clock's synchronize) into spans, in seconds.

        A wait keeps the kind of what it waited for; `needs` (filled here) then lists, for
        each wait's index in the returned spans, the indices of the transfers it waited on,
        so that hw.runner can split it as the simulator does (sim.engine.record.wait_pieces) once
        it knows when each transfer really started (both ends posted)."""
        sec = self.clock.seconds
        out: list[Span] = []
        index_of: dict[int, int] = {}          # id of a transfer's Pending -> its span
        waits: list[tuple[int, list[Pending]]] = []
        for r in self._recs:
            start = sec(r.start)
            if isinstance(r.end, Pending) and r.end.after is not None:
                # queued behind the batch before it on the device's one NCCL stream
                start = max(start, sec(r.end.after.mark))
            end = sec(r.end.mark if isinstance(r.end, Pending) else r.end)
            end = max(end, start)
            if r.stream == "wait":
                if end - start < self.MIN_WAIT_S:
                    continue
                waits.append((len(out), r.needs))
            elif isinstance(r.end, Pending):
                index_of[id(r.end)] = len(out)
            out.append(Span(self.rank, r.stream, r.kind, r.step, start, end, r.flops, r.nbytes,
                            r.q_chunks, r.kv_chunks, r.peer))
        self.needs = {w: [index_of[id(p)] for p in needs if id(p) in index_of] for w, needs in waits}
        return out
