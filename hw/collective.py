"""One collective of a non-ring scheme (all-gather, reduce-scatter, all-to-all), timed.

A collective is posted asynchronously (`async_op=True`) and waited for at once: nothing
in the all-gather or Ulysses kernels overlaps it (docs/design.md, "Beyond the ring"). It is
recorded as the ring's transfers are (`hw.comm`): a send and a receive span from
posted to complete, with the bytes this rank sends and receives and peer -1 (many
peers), and the wait of the compute stream, exposed ("ag"/"rs"/"a2a") while the
collective was in flight, idle otherwise.

gloo (torch 2.13, CPU) runs all_gather, all_gather_into_tensor, reduce_scatter,
reduce_scatter_tensor, all_to_all and all_to_all_single asynchronously; the kernels
use the list forms (all_gather, reduce_scatter, all_to_all), which NCCL runs too.
"""

from __future__ import annotations

from typing import Any, Callable

from hw.comm import PeerFailure, Ring, peer_failure


def run_collective(ring: Ring, kind: str, start: Callable[[], Any], *, step: int, sent: float,
                   received: float, send_chunks: tuple[int, ...] = (),
                   recv_chunks: tuple[int, ...] = (), q_chunks: tuple[int, ...] = (),
                   kv_chunks: tuple[int, ...] = ()) -> None:
    """Post `start()` (returns the collective's work) and block until it is complete."""
    clock = ring.clock
    posted = clock.mark()
    try:
        work = start()
    except Exception as e:
        raise peer_failure(ring, f"posting a {kind} collective", e) from e
    done = clock.watch(kind, [work])
    rec = ring.recorder
    if rec is not None:
        rec.transfer("send", kind, step, posted, done, float(sent), send_chunks, -1)
        rec.transfer("recv", kind, step, posted, done, float(received), recv_chunks, -1)
    ready = clock.mark()
    try:
        clock.block([done])
    except PeerFailure:
        raise
    except Exception as e:
        raise peer_failure(ring, f"a {kind} collective", e) from e
    if rec is not None:
        rec.wait(kind, step, ready, clock.mark(), [done], q_chunks, kv_chunks)


def nbytes(*tensors) -> float:
    return float(sum(t.numel() * t.element_size() for t in tensors))
