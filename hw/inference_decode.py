"""Context-parallel decode over a sharded KV cache, over torch.distributed.

A batch of requests of different lengths: request i has L_i tokens of context whose K/V
are in the cache (the tokens being generated included: their K/V are written before
attention) and s new queries, at positions L_i - s .. L_i - 1, each attending to the
keys up to itself. The cache of every request is sharded over the N ranks by token:
- contiguous: rank r holds tokens floor(r L / N) .. floor((r + 1) L / N) - 1 (the
  cache as a contiguous prefill wrote it, lengths not divisible by N included);
- round-robin: rank r holds the tokens t with t mod N = r (vLLM's and SGLang's decode
  context parallelism interleave the cache so, which keeps the shards within one token
  of each other as the context grows).
Every rank holds the new queries of every request (computed, or gathered, beside it),
attends them to its shard of each request (one call of the attention operator per
request, as a varlen kernel would cover them: no mask where every key it holds lies at
or before the first query, the explicit causal mask otherwise, and nothing where it
holds no key of the request) and merges the N partial results exactly
(`hw.inference_merge`):
- "a2a": all-to-all by heads, rank j merging heads j H/N .. (j + 1) H/N - 1 of every
  request (vLLM's all-to-all decode context parallelism); the output comes back
  sharded by heads, as the output projection under tensor parallelism takes it;
- "allgather": every rank gathers every partial result and merges all heads.

The cache shard is a varlen tensor: a rank's tokens of request 0, then of request 1,
..., (tokens, kv_heads, head_dim). Spans: one compute "fwd" (step0; work = kept
(query, key) pairs), one collective "a2a" or "ag" (step0 + 1), the merge's compute
(step0 + 1, no pairs). Chunks: rank r holds chunk r.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from hw.blocks import BlockOps
from hw.comm import Ring
from hw.inference_merge import empty_partial, merged, to_everyone, to_owners
from hw.merge import new_accumulators
from sim.errors import RingsimError
from sim.scenario.config import Workload

DECODE_LAYOUTS = ("contiguous", "round-robin")
DECODE_MERGES = ("a2a", "allgather")


def held_tokens(layout: str, length: int, n_gpus: int, rank: int) -> np.ndarray:
    """Positions (ascending) of a request's `length` tokens that `rank` holds."""
    if layout == "contiguous":
        return np.arange(rank * length // n_gpus, (rank + 1) * length // n_gpus, dtype=np.int64)
    if layout == "round-robin":
        return np.arange(rank, length, n_gpus, dtype=np.int64)
    raise RingsimError(f"decode layout must be one of {', '.join(DECODE_LAYOUTS)}, got {layout!r}")


@dataclass(frozen=True)
class DecodeBatch:
    """A decode step of a batch: every request's context length, the new tokens of each,
    and how the cache is sharded."""

    lengths: tuple[int, ...]
    """Tokens of each request's context, the new ones included."""
    new: int
    """New queries per request (1: one token per step; more: speculative tokens)."""
    n_gpus: int
    layout: str = "round-robin"

    def __post_init__(self) -> None:
        if self.layout not in DECODE_LAYOUTS:
            raise RingsimError(f"decode layout must be one of {', '.join(DECODE_LAYOUTS)}, got {self.layout!r}")
        if not self.lengths:
            raise RingsimError("a decode batch holds at least one request")
        if self.new < 1:
            raise RingsimError("a decode step computes at least one new token per request")
        short = [x for x in self.lengths if x < self.new]
        if short:
            raise RingsimError(f"a request of {short[0]} tokens cannot hold {self.new} new ones")

    def held(self, rank: int) -> list[np.ndarray]:
        """The positions rank holds, per request."""
        return [held_tokens(self.layout, length, self.n_gpus, rank) for length in self.lengths]

    def mask(self, i: int, keys: np.ndarray) -> np.ndarray | None:
        """(new, keys) bool, True where request i's new query sees the key; None where it
        sees them all."""
        first = self.lengths[i] - self.new
        if keys.size == 0 or keys[-1] <= first:
            return None
        return keys[None, :] <= (first + np.arange(self.new))[:, None]

    def pairs(self, rank: int) -> int:
        """Unmasked (query, key) pairs of rank's shard, per head."""
        total = 0
        for i, keys in enumerate(self.held(rank)):
            first = self.lengths[i] - self.new
            total += int(np.clip(first + np.arange(self.new)[:, None] - keys[None, :] + 1, 0, 1).sum())
        return total


def shard_sizes(batch: DecodeBatch, rank: int) -> list[int]:
    return [len(x) for x in batch.held(rank)]


def decode_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, ring: Ring, batch: DecodeBatch,
                   merge: str, ops: BlockOps, step0: int = 0,
                   on_step: Callable[[int], None] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The merged output and log-sum-exp of the new queries.

    q: (requests, new, heads, d), every request's new queries; k, v: this rank's shard
    (tokens, kv_heads, d). Returns out (requests, new, heads', d) in q's dtype and lse
    (requests, heads', new) fp32: heads' = heads / N, this rank's share, under "a2a";
    every head under "allgather"."""
    n, r = ring.n_gpus, ring.rank
    nreq, s, h, d = q.shape
    if merge not in DECODE_MERGES:
        raise RingsimError(f"decode merge must be one of {', '.join(DECODE_MERGES)}, got {merge!r}")
    if merge == "a2a" and h % n:
        raise RingsimError(f"the all-to-all merge splits the {h} heads over {n} ranks: {n} must divide them")
    if nreq != len(batch.lengths) or s != batch.new:
        raise RingsimError(f"queries {tuple(q.shape)} do not match {len(batch.lengths)} requests of "
                           f"{batch.new} new tokens")
    if on_step is not None:
        on_step(step0)
    chunks, every = (r,), tuple(range(n))
    t0 = ring.clock.mark()
    out, lse = empty_partial((nreq, h, s, d), q.device)
    at = 0
    for i, keys in enumerate(batch.held(r)):
        m = len(keys)
        if m == 0:
            continue
        mask = batch.mask(i, keys)
        kh, vh = (x[at:at + m].transpose(0, 1).unsqueeze(0) for x in (k, v))
        at += m
        o, ls = ops.forward(q[i:i + 1].transpose(1, 2), kh, vh, False,
                            None if mask is None else torch.from_numpy(mask).to(q.device))
        out[i], lse[i] = o[0], ls[0]
    if ring.recorder is not None:
        pairs = batch.pairs(r)
        flops = Workload(batch=1, seq=1, heads=h, kv_heads=1, head_dim=d).fwd_flops(1) * pairs
        ring.recorder.compute("fwd", step0, t0, ring.clock.mark(), flops, chunks, chunks)
    if merge == "a2a":
        hq = h // n
        parts = [(out[:, j * hq:(j + 1) * hq].contiguous(), lse[:, j * hq:(j + 1) * hq].contiguous())
                 for j in range(n)]
        got = to_owners(ring, parts, step=step0 + 1, chunks=chunks, all_chunks=every)
        shape = (nreq, s, hq, d)
    else:
        got = to_everyone(ring, (out, lse), step=step0 + 1, chunks=chunks, all_chunks=every)
        shape = (nreq, s, h, d)
    t0 = ring.clock.mark()
    acc = merged(got, new_accumulators(torch.Size(shape), q.device))
    if ring.recorder is not None and n > 1:
        ring.recorder.compute("fwd", step0 + 1, t0, ring.clock.mark(), 0.0, chunks, every)
    return acc[0].transpose(1, 2).to(q.dtype), acc[1]
