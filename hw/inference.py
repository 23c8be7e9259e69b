"""Context-parallel prefill over a cached prefix: pass-KV, pass-Q and all-gather, over
torch.distributed.

A request's context is P cached tokens (their K/V kept from an earlier pass: a prompt
prefix, a previous turn) followed by T new tokens computed now. The cache is sharded
over the N ranks as it was written (contiguous, zigzag or striped over the P tokens,
sim.inference.work.cache_tokens: the ranks may hold a token more or less each); the new
tokens lie in their own layout (`layout` over the T tokens: T/N per rank, zigzag to
balance the causal work). A new token attends to every cached token and,
causally, to the new tokens up to itself; P = 0 is a full prefill. Each rank's K/V
block is its cached shard followed by its new shard ([cached | new] along tokens).

- pass-KV: the ring of hw.ring, K/V blocks travelling. At step k rank r holds the
  block of rank (r - k) mod N and merges its queries against it into its accumulators:
  the cached part whole (no mask), the new part by the layout's pieces
  (`sim.layouts.block_pieces`; fully masked blocks skipped). Each block carries its
  owner's cached and new tokens of K and V.
- pass-Q: the K/V stay; the queries travel the ring instead (T/N tokens of Q, K/V
  heads x Q heads fewer bytes per token under GQA when K/V are many). At step k rank r
  holds the queries of rank o = (r - k) mod N and computes their partial result
  against its own block, the same pieces with the roles swapped. After the last step
  every partial result goes home by one all-to-all and each rank merges the N results
  of its queries (`hw.inference_merge.to_owners`).
- all-gather: one all-gather of every rank's block (each padded to the largest, as an
  all-gather moves equal shares), then the rank's queries against each block in turn,
  merged.

Everything merged is exact (`hw.merge`): each rank returns the output and log-sum-exp
of its new queries that attention over the whole context gives. Spans are recorded as
the ring's are: computes "fwd" per step with their unmasked pairs as work (cached
pairs plus `sim.layouts.exact_work` of the new tokens), travelling blocks on the
ring's channel (K/V as "kv", queries as `Q_KIND`), collectives as "a2a"/"ag". Chunks
are the new tokens' layout's (a rank's block holds its cached shard with them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from hw.blocks import BlockOps
from hw.collective import nbytes, run_collective
from hw.comm import Ring
from hw.inference_merge import empty_partial, merged, to_owners
from hw.merge import merge_, new_accumulators
from sim.errors import RingsimError
from sim.layouts import block_pieces, chunks_of_rank, exact_work, n_chunks
from sim.layouts.base import ALL
from sim.scenario.config import Workload

PREFILL_SCHEMES = ("pass-kv", "pass-q", "allgather")
Q_KIND = "kv"
"""The trace kind of a travelling query block: the ring's block kind, as the trace's
kinds (sim.trace.format.KIND_NAMES) have no other for a ring's travelling block."""

StepHook = Callable[[int], None]


@dataclass(frozen=True)
class Prefill:
    """What every rank knows of a prefill: the ranks, the new tokens' layout and how many
    new and cached tokens each rank holds."""

    n_gpus: int
    layout: str
    """Layout of the T new tokens (sim.layouts)."""
    new_per_rank: int
    cached: tuple[int, ...]
    """Cached tokens each rank holds."""
    causal: bool = True
    """New tokens attend causally to each other (cached ones are all before them)."""

    def __post_init__(self) -> None:
        if self.new_per_rank <= 0:
            raise RingsimError("a prefill computes at least one new token per rank")
        if len(self.cached) != self.n_gpus or any(c < 0 for c in self.cached):
            raise RingsimError(f"give the cached tokens of each of the {self.n_gpus} ranks, 0 or more")
        new = self.new_per_rank * self.n_gpus
        if new % n_chunks(self.layout, self.n_gpus):
            raise RingsimError(f"{new} new tokens do not split into the {n_chunks(self.layout, self.n_gpus)} "
                               f"chunks of the {self.layout} layout")

    def pieces(self, q_owner: int, kv_owner: int):
        """Pieces of q_owner's new queries against kv_owner's new keys (local slices)."""
        return block_pieces(self.layout, q_owner, kv_owner, self.n_gpus, self.new_per_rank, self.causal)

    def pairs(self) -> np.ndarray:
        """(N, N): unmasked pairs of (query rank, K/V rank), per head and batch item."""
        n = self.n_gpus
        new = exact_work(self.layout, self.new_per_rank * n, n, self.causal)
        return new + self.new_per_rank * np.asarray(self.cached, dtype=np.int64)[None, :]

    def block_tokens(self, owner: int) -> int:
        """Tokens of K/V in the block of `owner`: its cached and its new ones."""
        return self.cached[owner] + self.new_per_rank

    def chunks(self) -> list[tuple[int, ...]]:
        return chunks_of_rank(self.layout, self.n_gpus)


def _hf(x: torch.Tensor) -> torch.Tensor:
    """(batch, tokens, heads, d) <-> (batch, heads, tokens, d), a view."""
    return x.transpose(1, 2)


def _flops(q: torch.Tensor, pairs: float) -> float:
    b, _, h, d = q.shape
    return Workload(batch=b, seq=1, heads=h, kv_heads=1, head_dim=d).fwd_flops(1) * float(pairs)


def _shifted(s: slice, by: int, length: int) -> slice:
    """A slice of the new shard as a slice of the block [cached | new]."""
    start, stop, _ = s.indices(length)
    return slice(start + by, stop + by)


def block_attention(qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor, pf: Prefill, q_owner: int,
                    kv_owner: int, ops: BlockOps, acc=None):
    """The new queries of q_owner (qh, heads-first) against the block of kv_owner (kh, vh:
    [cached | new] along tokens, heads-first), merged into `acc` = (out, lse) (fp32; None:
    made here); returns the accumulators, None where nothing was computed."""
    c, t = pf.cached[kv_owner], pf.new_per_rank
    b, h, _, d = qh.shape
    if c:
        b_out, b_lse = ops.forward(qh, kh[:, :, :c], vh[:, :, :c], False)
        if acc is None:   # covers every row: its fp32 result is the accumulator
            acc = (b_out.float(), b_lse)
        else:
            merge_(acc[0], acc[1], b_out, b_lse)
    for p in pf.pieces(q_owner, kv_owner):
        kv = _shifted(p.kv, c, t)
        b_out, b_lse = ops.forward(qh[:, :, p.q], kh[:, :, kv], vh[:, :, kv], p.causal)
        if acc is None and p.q == ALL:
            acc = (b_out.float(), b_lse)
            continue
        if acc is None:
            acc = new_accumulators(torch.Size((b, t, h, d)), qh.device)
        merge_(acc[0][:, :, p.q], acc[1][:, :, p.q], b_out, b_lse)
    return acc


def own_block(k_cache: torch.Tensor, v_cache: torch.Tensor, k_new: torch.Tensor,
              v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's K/V block, [cached | new] along tokens, heads-first and contiguous."""
    return (torch.cat((_hf(k_cache), _hf(k_new)), dim=2).contiguous(),
            torch.cat((_hf(v_cache), _hf(v_new)), dim=2).contiguous())


def _buffers(own: tuple[torch.Tensor, ...], n: int, tokens_at: Callable[[int], int] | None = None
             ) -> Callable[[int], tuple[torch.Tensor, ...]]:
    """The block a rank holds at each ring step: its own, then two receive buffers in
    turn; `tokens_at(step)`: the tokens (dim 2) of the block arriving for that step, when
    blocks differ in size (a contiguous view of a buffer of the largest)."""
    if tokens_at is None:
        recv = [tuple(torch.empty_like(x) for x in own) for _ in range(min(n - 1, 2))]
        return lambda step: own if step == 0 else recv[(step - 1) % 2]
    most = max([tokens_at(k) for k in range(1, n)], default=0)
    flat = [tuple(torch.empty(x.numel() // x.shape[2] * most, dtype=x.dtype, device=x.device) for x in own)
            for _ in range(min(n - 1, 2))]

    def at(step: int) -> tuple[torch.Tensor, ...]:
        if step == 0:
            return own
        tokens = tokens_at(step)
        return tuple(buf[:x.numel() // x.shape[2] * tokens].view(*x.shape[:2], tokens, *x.shape[3:])
                     for buf, x in zip(flat[(step - 1) % 2], own))
    return at


def _finish(acc, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if acc is None:    # no key at all: only with zero tokens
        acc = new_accumulators(q.shape, q.device)
    return acc[0].transpose(1, 2).to(q.dtype), acc[1]


def prefill_pass_kv(q, k_new, v_new, k_cache, v_cache, *, ring: Ring, pf: Prefill, ops: BlockOps,
                    step0: int = 0, on_step: StepHook | None = None):
    """This rank's output (q's dtype and shape) and log-sum-exp (fp32, (b, h, t)), K/V travelling."""
    n, r = ring.n_gpus, ring.rank
    chunks, work = pf.chunks(), pf.pairs()
    qh = _hf(q)
    block_at = _buffers(own_block(k_cache, v_cache, k_new, v_new), n,
                        lambda step: pf.block_tokens((r - step) % n))
    comm = ring.comm("kv")
    acc = None
    for step in range(n):
        if on_step is not None:
            on_step(step0 + step)
        owner = (r - step) % n
        cur = block_at(step)
        if step < n - 1:
            comm.post(cur, block_at(step + 1), step=step0 + step, send_chunks=chunks[owner],
                      recv_chunks=chunks[(owner - 1) % n], holds=(step0 + step, chunks[r], chunks[owner]))
        if work[r, owner] > 0:
            t0 = ring.clock.mark()
            acc = block_attention(qh, cur[0], cur[1], pf, r, owner, ops, acc)
            if ring.recorder is not None:
                ring.recorder.compute("fwd", step0 + step, t0, ring.clock.mark(), _flops(q, work[r, owner]),
                                      chunks[r], chunks[owner])
        if step < n - 1:
            comm.wait(step=step0 + step + 1, q_chunks=chunks[r], kv_chunks=chunks[(owner - 1) % n])
    return _finish(acc, q)


def prefill_pass_q(q, k_new, v_new, k_cache, v_cache, *, ring: Ring, pf: Prefill, ops: BlockOps,
                   step0: int = 0, on_step: StepHook | None = None):
    """This rank's output and log-sum-exp, queries travelling; the partial results come
    home by an all-to-all (step step0 + N) and are merged."""
    n, r = ring.n_gpus, ring.rank
    chunks, work = pf.chunks(), pf.pairs()
    kh, vh = own_block(k_cache, v_cache, k_new, v_new)
    q_at = _buffers((_hf(q).contiguous(),), n)
    comm = ring.comm(Q_KIND)
    b, t, h, d = q.shape
    parts = [None] * n
    for step in range(n):
        if on_step is not None:
            on_step(step0 + step)
        owner = (r - step) % n              # whose queries this rank holds now
        cur = q_at(step)
        if step < n - 1:
            comm.post(cur, q_at(step + 1), step=step0 + step, send_chunks=chunks[owner],
                      recv_chunks=chunks[(owner - 1) % n], holds=(step0 + step, chunks[owner], chunks[r]))
        if work[owner, r] > 0:
            t0 = ring.clock.mark()
            parts[owner] = block_attention(cur[0], kh, vh, pf, owner, r, ops)
            if ring.recorder is not None:
                ring.recorder.compute("fwd", step0 + step, t0, ring.clock.mark(), _flops(q, work[owner, r]),
                                      chunks[owner], chunks[r])
        if step < n - 1:
            comm.wait(step=step0 + step + 1, q_chunks=chunks[(owner - 1) % n], kv_chunks=chunks[r])
    parts = [p if p is not None else empty_partial((b, h, t, d), q.device) for p in parts]
    every = tuple(sorted(x for cs in chunks for x in cs))
    home = to_owners(ring, parts, step=step0 + n, chunks=chunks[r], all_chunks=every)
    t0 = ring.clock.mark()
    acc = merged(home, new_accumulators(q.shape, q.device))
    if ring.recorder is not None and n > 1:   # the merge of N results: no attention pairs
        ring.recorder.compute("fwd", step0 + n, t0, ring.clock.mark(), 0.0, chunks[r], every)
    return _finish(acc, q)


def prefill_allgather(q, k_new, v_new, k_cache, v_cache, *, ring: Ring, pf: Prefill, ops: BlockOps,
                      step0: int = 0, on_step: StepHook | None = None):
    """This rank's output and log-sum-exp against every rank's block, gathered at once."""
    n, r = ring.n_gpus, ring.rank
    chunks, work = pf.chunks(), pf.pairs()
    every = tuple(sorted(x for cs in chunks for x in cs))
    if on_step is not None:
        on_step(step0)
    kh, vh = own_block(k_cache, v_cache, k_new, v_new)
    most = max(pf.block_tokens(o) for o in range(n))
    own = kh.new_zeros((2, *kh.shape[:2], most, kh.shape[3]))
    own[0, :, :, :kh.shape[2]], own[1, :, :, :kh.shape[2]] = kh, vh
    if n > 1:
        blocks = [torch.empty_like(own) for _ in range(n)]
        run_collective(ring, "ag", lambda: dist.all_gather(blocks, own, group=ring.group, async_op=True),
                       step=step0, sent=(n - 1) * nbytes(own), received=(n - 1) * nbytes(own),
                       send_chunks=chunks[r], recv_chunks=every, q_chunks=chunks[r], kv_chunks=every)
    else:
        blocks = [own]
    qh = _hf(q)
    acc = None
    t0 = ring.clock.mark()
    for owner in range(n):
        if work[r, owner] > 0:
            size = pf.block_tokens(owner)
            acc = block_attention(qh, blocks[owner][0, :, :, :size], blocks[owner][1, :, :, :size], pf, r, owner,
                                  ops, acc)
    if ring.recorder is not None:
        ring.recorder.compute("fwd", step0, t0, ring.clock.mark(), _flops(q, work[r].sum()), chunks[r], every)
    return _finish(acc, q)


PREFILL_KERNELS = {"pass-kv": prefill_pass_kv, "pass-q": prefill_pass_q, "allgather": prefill_allgather}


def prefill_kernel(scheme: str):
    """The prefill kernel of a scheme (PREFILL_SCHEMES)."""
    if scheme not in PREFILL_KERNELS:
        raise RingsimError(f"prefill scheme must be one of {', '.join(PREFILL_SCHEMES)}, got {scheme!r}")
    return PREFILL_KERNELS[scheme]
