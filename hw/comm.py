"""The one communication helper of the ring: post, then wait (docs/design.md, fact 2).

`post` sends the block a rank holds to rank + 1 and receives the next one from rank - 1
in one `batch_isend_irecv` (NCCL groups the pair, so neither side can block on a send
whose receive is queued behind it; gloo issues both at once). A block is one or more
tensors (K and V as two, so that they travel from where they lie without being
stacked into one buffer first), sent and received in the same order on both sides.
The rank then computes and calls `wait` before it touches the received block or reuses
the sent one. Both verbs record their spans: send and receive from posted (or, on
NCCL, from the end of the batch queued before it) to completed, and the time the
compute stream was blocked in `wait`. NCCL completes a group as one work, so there
the send and the receive of a step end together.

A failure of a transfer (the peer raised, died or hung past the process-group timeout)
is raised as `PeerFailure`, naming the peer, so that the rank that failed first can be
told from the ranks that merely lost it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist

from hw.timing import Pending, Recorder

FAILURE_KEY = "ringsim/failed"


class PeerFailure(RuntimeError):
    """A transfer with a peer failed; this rank did nothing wrong itself."""

    def __init__(self, message: str, peer: int):
        super().__init__(message)
        self.peer = peer


@dataclass
class Ring:
    """Where a rank sits in the ring and how it talks and measures."""

    rank: int
    n_gpus: int
    group: Any
    """The process group of the ring (None when n_gpus is 1)."""
    clock: Any
    recorder: Recorder | None = None
    """Where spans go; None runs untimed."""
    store: Any = None
    """The rendezvous store, where a failing rank leaves its name (see `note_failure`)."""
    channel: Any = None
    """Makes the ring's transfer channels, `channel(ring, kind)`; None: `RingComm` over
    torch.distributed. `hw.inprocess` plays the ring's ranks as threads of one process and
    hands the blocks between them in memory (`ThreadChannel`)."""

    def comm(self, kind: str) -> "RingComm":
        """The channel for one kind of block ('kv' or 'dkv') to rank + 1 and from rank - 1."""
        return (self.channel or RingComm)(self, kind)

    @property
    def next(self) -> int:
        return (self.rank + 1) % self.n_gpus

    @property
    def prev(self) -> int:
        return (self.rank - 1) % self.n_gpus

    def failure_note(self) -> str | None:
        """What the first failing rank wrote in the store, if anything."""
        if self.store is None:
            return None
        try:
            if self.store.check([FAILURE_KEY]):
                return self.store.get(FAILURE_KEY).decode(errors="replace")
        except Exception:  # the store may have gone with the failed rank
            return None
        return None


def note_failure(store: Any, text: str) -> None:
    """Leave `text` where the other ranks look when their transfers fail."""
    if store is None:
        return
    try:
        if not store.check([FAILURE_KEY]):
            store.set(FAILURE_KEY, text)
    except Exception:
        pass


class RingComm:
    """Send to rank + 1 and receive from rank - 1, one kind of block ('kv' or 'dkv')."""

    def __init__(self, ring: Ring, kind: str):
        self.ring = ring
        self.kind = kind
        self._pending: list[Pending] = []

    def post(self, send: Sequence[torch.Tensor], recv: Sequence[torch.Tensor], *, step: int,
             send_chunks: tuple[int, ...], recv_chunks: tuple[int, ...],
             holds: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None) -> None:
        """Send the tensors of `send` to rank + 1, receive `recv`'s from rank - 1 (contiguous).

        `holds`: the (step, query chunks, K/V chunks) of the compute this post comes
        before; on gloo the time the post call takes is then recorded as that compute's
        wait on the send (gloo writes a send in the posting thread when the
        receive was posted first; the simulator plays the same, sim.engine.players.times_simpy).
        NCCL's posts return at once."""
        ring = self.ring
        clock = ring.clock
        posted = clock.mark()
        ops = ([dist.P2POp(dist.isend, t, ring.next, ring.group) for t in send]
               + [dist.P2POp(dist.irecv, t, ring.prev, ring.group) for t in recv])
        try:
            works = dist.batch_isend_irecv(ops)
        except Exception as e:
            raise peer_failure(ring, "posting a transfer", e) from e
        gloo = len(works) == len(ops)    # one work per operation; NCCL coalesces a batch
        returned = clock.mark() if holds is not None and gloo else None
        if gloo:
            done_send = clock.watch(f"{self.kind}-send", works[:len(send)])
            done_recv = clock.watch(f"{self.kind}-recv", works[len(send):])
            self._pending = [done_send, done_recv]
        else:                        # coalesced into one work (NCCL): both end together
            done_send = done_recv = clock.watch(f"{self.kind}-batch", works)
            self._pending = [done_send]
        rec = ring.recorder
        if rec is not None:
            nbytes = float(sum(t.numel() * t.element_size() for t in send))
            rec.transfer("send", self.kind, step, posted, done_send, nbytes, send_chunks, ring.next)
            rec.transfer("recv", self.kind, step, posted, done_recv, nbytes, recv_chunks, ring.prev)
            if returned is not None:
                held_step, q_chunks, kv_chunks = holds
                rec.wait(self.kind, held_step, posted, returned, [done_send], q_chunks, kv_chunks)

    def wait(self, *, step: int, q_chunks: tuple[int, ...] = (),
             kv_chunks: tuple[int, ...] = ()) -> None:
        """Block the compute stream until the posted send and receive are complete."""
        ring = self.ring
        pending, self._pending = self._pending, []
        ready = ring.clock.mark()
        try:
            ring.clock.block(pending)
        except PeerFailure:
            raise
        except Exception as e:
            raise peer_failure(ring, "a transfer", e) from e
        if ring.recorder is not None:
            ring.recorder.wait(self.kind, step, ready, ring.clock.mark(), pending,
                               q_chunks, kv_chunks)


def peer_failure(ring: Ring, what: str, e: BaseException) -> PeerFailure:
    """The PeerFailure for `what` failing between `ring.rank` and its neighbours, naming
    the rank that failed first when it left word in the store."""
    note = ring.failure_note()
    cause = note if note else f"rank {ring.prev} or rank {ring.next} failed, exited or timed out"
    text = str(e).strip()
    return PeerFailure(
        f"{what} with ranks {ring.prev}/{ring.next} failed ({cause}): "
        f"{type(e).__name__}: {text.splitlines()[0] if text else ''}",
        ring.prev)


def raise_if_peer_failed(ring: Ring) -> None:
    """Raise PeerFailure at once when another rank has left word that it failed."""
    note = ring.failure_note()
    if note is not None:
        raise PeerFailure(f"ranks {ring.prev}/{ring.next} stopped: {note}", ring.prev)
