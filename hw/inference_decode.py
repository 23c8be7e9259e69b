"""Context-parallel decode over a sharded KV cache, over torch.distributed.

A batch of requests of different lengths: request i has a prompt of P_i tokens and has
generated G tokens since, all with their K/V in the cache (the tokens being generated
included: their K/V are written before attention), and s new queries, the context's
last s tokens, each attending to the keys up to itself. Every request's cache is
sharded over the N ranks by token, as sim.inference.decode lays it out:
- contiguous: the prompt cut in N contiguous pieces (boundaries at floor(r P / N), as
  a contiguous prefill wrote it), every generated token appended on the last rank;
- round-robin: token t on rank t mod N (vLLM's and SGLang's decode context parallelism
  interleave the cache so, which keeps the shards within a token of each other as the
  context grows).
Every rank holds the new queries of every request (computed, or gathered, beside it),
attends them to its shard of each request (one call of the attention operator per
request, as a varlen kernel covers them: no mask where every key it holds lies at or
before the first query, the explicit causal mask otherwise, nothing where it holds no
key of the request) and the N partial results are merged exactly
(`hw.inference_merge`):
- "all-to-all": rank j receives heads j ceil(H/N) .. (j + 1) ceil(H/N) - 1 of every
  request from every rank (the last share padded with empty heads where N does not
  divide H), merges them, and the merged outputs are all-gathered so that every rank
  holds the whole output for the next layer (vLLM's all-to-all decode context
  parallelism);
- "all-gather": every rank gathers every partial result and merges all heads.

The cache shard is a varlen tensor: a rank's tokens of request 0, then of request 1,
..., (tokens, kv_heads, head_dim), of any strides; heads-first in memory (each head's
tokens consecutive) is the fast case of the fused CPU operator, which took longer on
tokens-first memory (median 3.6x over 15 paired calls, one query of 8 heads against
41k keys, 2 K/V heads of 64, one thread, on a loaded 2-core host).

Spans: one compute "fwd" (step0; work = kept (query, key) pairs), then the collective and
the merge's compute (step0 + 1, no pairs), and for the all-to-all the gather of the merged
outputs (step0 + 2), as sim.inference.decode schedules them. Chunks: rank r holds chunk r.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from hw.blocks import BlockOps
from hw.comm import Ring
from hw.inference_merge import empty_partial, gather_outputs, merged, to_everyone, to_owners
from hw.merge import new_accumulators
from sim.errors import RingsimError
from sim.scenario.config import Workload

DECODE_LAYOUTS = ("round-robin", "contiguous")
DECODE_MERGES = ("all-to-all", "all-gather")


def held_tokens(layout: str, prompt: int, generated: int, n_gpus: int, rank: int) -> np.ndarray:
    """Positions (ascending) of a request's prompt + generated tokens that `rank` holds."""
    if layout == "contiguous":
        mine = np.arange(rank * prompt // n_gpus, (rank + 1) * prompt // n_gpus, dtype=np.int64)
        if rank == n_gpus - 1:
            mine = np.concatenate([mine, prompt + np.arange(generated, dtype=np.int64)])
        return mine
    if layout == "round-robin":
        return np.arange(rank, prompt + generated, n_gpus, dtype=np.int64)
    raise RingsimError(f"decode layout must be one of {', '.join(DECODE_LAYOUTS)}, got {layout!r}")


@dataclass(frozen=True)
class DecodeBatch:
    """A decode step of a batch: every request's context length, the new tokens of each,
    and how the cache is sharded."""

    prompts: tuple[int, ...]
    """Each request's prompt tokens in the cache."""
    generated: int
    """Tokens each request has generated since (in the cache too, the new ones included)."""
    new: int
    """New queries per request, the context's last (1: one token per step; more:
    speculative tokens checked at once)."""
    n_gpus: int
    layout: str = "round-robin"

    def __post_init__(self) -> None:
        if self.layout not in DECODE_LAYOUTS:
            raise RingsimError(f"decode layout must be one of {', '.join(DECODE_LAYOUTS)}, got {self.layout!r}")
        if not self.prompts or any(p < 1 for p in self.prompts):
            raise RingsimError("a decode batch holds at least one request, each with a prompt of 1 token or more")
        if self.generated < 0 or self.new < 1:
            raise RingsimError("a decode step computes at least one new token per request, after 0 or more")
        short = [x for x in self.lengths if x < self.new]
        if short:
            raise RingsimError(f"a request of {short[0]} tokens cannot hold {self.new} new ones")

    @property
    def lengths(self) -> tuple[int, ...]:
        """Tokens of each request's context, the new ones included."""
        return tuple(p + self.generated for p in self.prompts)

    def held(self, rank: int) -> list[np.ndarray]:
        """The positions rank holds, per request."""
        return [held_tokens(self.layout, p, self.generated, self.n_gpus, rank) for p in self.prompts]

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
    """The merged output of the new queries, on every rank, and their log-sum-exp.

    q: (requests, new, heads, d), every request's new queries; k, v: this rank's shard
    (tokens, kv_heads, d). Returns out (requests, new, heads, d) in q's dtype and lse
    (requests, heads', new) fp32: heads' this rank's share (`merged_heads`) under
    "all-to-all", every head under "all-gather"."""
    n, r = ring.n_gpus, ring.rank
    nreq, s, h, d = q.shape
    if merge not in DECODE_MERGES:
        raise RingsimError(f"decode merge must be one of {', '.join(DECODE_MERGES)}, got {merge!r}")
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
    if merge == "all-gather":
        got = to_everyone(ring, (out, lse), step=step0 + 1, chunks=chunks, all_chunks=every)
        t0 = ring.clock.mark()
        acc = merged(got, new_accumulators(torch.Size((nreq, s, h, d)), q.device))
        if ring.recorder is not None and n > 1:
            ring.recorder.compute("fwd", step0 + 1, t0, ring.clock.mark(), 0.0, chunks, every)
        return acc[0].transpose(1, 2).to(q.dtype), acc[1]
    share = -(-h // n)
    parts = []
    for j in range(n):
        part = empty_partial((nreq, share, s, d), q.device)
        heads = merged_heads(h, n, j)
        width = heads.stop - heads.start
        part[0][:, :width], part[1][:, :width] = out[:, heads], lse[:, heads]
        parts.append(part)
    got = to_owners(ring, parts, step=step0 + 1, chunks=chunks, all_chunks=every)
    t0 = ring.clock.mark()
    acc = merged(got, new_accumulators(torch.Size((nreq, s, share, d)), q.device))
    if ring.recorder is not None and n > 1:
        ring.recorder.compute("fwd", step0 + 1, t0, ring.clock.mark(), 0.0, chunks, every)
    mine = acc[0].transpose(1, 2).to(q.dtype).contiguous()        # (requests, new, share, d)
    outs = gather_outputs(ring, mine, step=step0 + 2, chunks=chunks, all_chunks=every)
    mine_heads = merged_heads(h, n, r)
    return torch.cat(outs, dim=2)[:, :, :h], acc[1][:, :mine_heads.stop - mine_heads.start]


def merged_heads(heads: int, n_gpus: int, rank: int) -> slice:
    """The heads rank merges under the all-to-all: ceil(H/N) of them, fewer on the last."""
    share = -(-heads // n_gpus)
    return slice(min(rank * share, heads), min((rank + 1) * share, heads))
