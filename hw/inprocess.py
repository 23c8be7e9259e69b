"""The ring's ranks as threads of one process, its transfers handed over in memory.

NCCL puts one rank on one GPU, so a machine with a single GPU cannot run the ring over
torch.distributed. `play_ring` runs `hw.ring.ring_forward` and `ring_backward`
unchanged, each rank in a thread of this process on the same device, with the ring's
channels (`Ring.channel`) replaced by `ThreadChannel`: a post puts a copy of the
blocks it sends in the receiver's queue, a wait takes the oldest from its own. Every
piece, merge and dK/dV accumulation is the kernel's own, on the device's own operators
(`hw.blocks`), so the numbers are the kernel's. The ranks share one device and one
Python interpreter, so their timings are not a ring's; with `timed=True` each rank's
compute of each step (its blocks, and the forward's merges) runs alone, one rank at a
time, between two marks of a `StepClock` (CUDA events on a GPU), and comes back as the
ring's spans: what one block and its merge take, queued on the device, as the simulator's
block model times them.

All threads enqueue on the device's current stream, so a copy made at a post is
ordered after the work that wrote the block and before the receiver's use of it.
"""

from __future__ import annotations

import collections
import functools
import threading
import time
from typing import Any

import torch

from hw.blocks import BlockOps
from hw.comm import Ring
from hw.layouts import shard, unshard
from hw.ring import ring_backward, ring_forward
from hw.timing import Recorder
from sim.errors import RingsimError


class _Mailbox:
    """One queue per (receiving rank, kind of block)."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._cv = threading.Condition()
        self._queues: dict[tuple[int, str], collections.deque] = collections.defaultdict(collections.deque)
        self.failed: BaseException | None = None

    def put(self, to: int, kind: str, tensors: list[torch.Tensor]) -> None:
        with self._cv:
            self._queues[(to, kind)].append(tensors)
            self._cv.notify_all()

    def take(self, rank: int, kind: str) -> list[torch.Tensor]:
        with self._cv:
            queue = self._queues[(rank, kind)]   # made under the lock, as put makes it
            if not self._cv.wait_for(lambda: queue or self.failed is not None, self.timeout_s):
                raise RingsimError(f"rank {rank}: no {kind} block arrived within {self.timeout_s:g} s")
            if self.failed is not None and not queue:
                raise RingsimError(f"rank {rank}: a peer failed ({self.failed})")
            return queue.popleft()

    def fail(self, e: BaseException) -> None:
        with self._cv:
            if self.failed is None:   # the first failure is the cause; later ones follow it
                self.failed = e
            self._cv.notify_all()


class ThreadChannel:
    """`hw.comm.RingComm`'s post and wait between threads: send to rank + 1, receive from
    rank - 1, in order."""

    def __init__(self, ring: Ring, kind: str):
        self.ring = ring
        self.kind = kind
        self._recv: list[torch.Tensor] | None = None

    def post(self, send, recv, *, step: int, send_chunks=(), recv_chunks=(), holds=None) -> None:
        ring = self.ring
        ring.group.put(ring.next, self.kind, [t.clone() for t in send])
        self._recv = list(recv)

    def wait(self, *, step: int, q_chunks=(), kv_chunks=()) -> None:
        recv, self._recv = self._recv, None
        if recv is None:
            raise RingsimError(f"rank {self.ring.rank}: wait on {self.kind} with nothing posted")
        got = self.ring.group.take(self.ring.rank, self.kind)
        for dst, src in zip(recv, got, strict=True):
            dst.copy_(src)


class _Clock:
    """What the ring asks of a clock when nothing is recorded."""

    @staticmethod
    def mark() -> float:
        return time.perf_counter()


class StepClock:
    """Marks for `timed` plays: the ring marks the start and the end of each step's compute
    (hw.ring), and between the two this rank holds the device alone (`lock`), so no other
    rank's work lands inside. CUDA events on a GPU, perf_counter (after a synchronize) on
    the CPU; `seconds` after `synchronize`."""

    def __init__(self, device: torch.device, lock: threading.Lock):
        self.device, self.lock = device, lock
        self.cuda = device.type == "cuda"
        self._open = False
        self.origin = self._stamp()

    def _stamp(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def mark(self) -> Any:
        if not self._open:
            self.lock.acquire()
            self._open = True
            return self._stamp()
        end = self._stamp()       # CPU operators return when done: the stamp follows the work
        self._open = False
        self.lock.release()
        return end

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def seconds(self, mark: Any) -> float:
        if self.cuda:
            return self.origin.elapsed_time(mark) / 1e3
        return mark - self.origin


def play_ring(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor | None, *,
              n_gpus: int, layout: str, causal: bool, ops: BlockOps,
              timeout_s: float = 120.0, timed: bool = False, library: str | None = None,
              compiled: bool = False):
    """Output (and dq, dk, dv when dout is given) of the ring on `n_gpus` threads, in the
    original token order, on q's device; with `timed`, also each rank's compute spans
    (hw.timing.Span: rank, kind, step, start_s, end_s, flops), each step run alone.
    `library`: the ring's step as that library launches it (hw.impl_steps: its merge, its
    calls, annotated for the profiler), its merge compiled as the library compiles it where
    `compiled`; None: the project's kernel (hw.ring).

    q, dout: (batch, seq, heads, head_dim); k, v: (batch, seq, kv_heads, head_dim); seq
    divisible by the layout's chunks (2 x n_gpus for zigzag).
    """
    chunks = 2 * n_gpus if layout == "zigzag" else n_gpus
    if n_gpus < 1 or q.shape[1] % chunks:
        raise RingsimError(f"{q.shape[1]} tokens do not split into {chunks} chunks of the {layout} layout")
    device = q.device
    forward, backward = ring_forward, ring_backward
    if library is not None:
        from hw import impl_steps

        impl = impl_steps.ring_implementation(library)
        if not impl_steps.runs(impl, layout, causal):
            raise RingsimError(f"{library}'s ring does not run the {layout} layout "
                               f"{'with' if causal else 'without'} a causal mask")
        forward = functools.partial(impl_steps.ring_forward, library=library, compiled=compiled)
        backward = functools.partial(impl_steps.ring_backward, library=library)
    box = _Mailbox(timeout_s)
    parts: list[Any] = [None] * n_gpus
    lock = threading.Lock()
    if timed and device.type == "cuda":
        torch.cuda.synchronize(device)
    clocks = [StepClock(device, lock) if timed else _Clock() for _ in range(n_gpus)]
    recorders = [Recorder(clocks[r], r) if timed else None for r in range(n_gpus)]

    def shard_of(x: torch.Tensor, rank: int) -> torch.Tensor:
        return shard(x.cpu(), layout, n_gpus, rank).to(device)

    def rank_main(rank: int) -> None:
        try:
            ring = Ring(rank=rank, n_gpus=n_gpus, group=box, clock=clocks[rank], recorder=recorders[rank],
                        channel=ThreadChannel)
            mine = [shard_of(x, rank) for x in (q, k, v)]
            out, lse = forward(*mine, ring=ring, layout=layout, causal=causal, ops=ops)
            if dout is None:
                parts[rank] = (out,)
                return
            # the backward's steps follow the forward's, numbered from `n_gpus` as the simulator does
            grads = backward(shard_of(dout, rank), *mine, out, lse, ring=ring, layout=layout,
                                  causal=causal, ops=ops, step0=n_gpus)
            parts[rank] = (out, *grads)
        except BaseException as e:  # handed to the caller below
            parts[rank] = e
            box.fail(e)

    threads = [threading.Thread(target=rank_main, args=(r,), name=f"ring-rank-{r}") for r in range(n_gpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if box.failed is not None:
        raise box.failed
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    results = tuple(unshard([p[i].cpu() for p in parts], layout).to(device) for i in range(len(parts[0])))
    if not timed:
        return results
    return results, [span for rec in recorders for span in rec.spans()]
