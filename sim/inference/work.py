"""Who holds which tokens in a prefill over a cached prefix, and the work and bytes that
follow (docs/inference.md; docs/design.md, "Inference").

A prefill with context parallelism over N ranks computes T new tokens (positions P ..
P + T - 1) that attend to all P cached tokens and causally to each other. The cached
tokens stay where the cache was written (`cache_tokens`): contiguous (rank r the r-th
N-th of the prefix), zigzag (the load-balanced prefill that wrote it: 2N chunks, rank r
holding r and 2N-1-r) or striped (token t on rank t mod N, as a round-robin decode
writes it). The new tokens are cut by a layout of sim.layouts over the T new tokens alone
(`new_tokens`), so the work between new tokens is the causal ring's on T tokens
(sim.layouts.block_work_and_masks) and the work against the cache is every pair:

    pairs(r, s) = |new_r| x |cached_s| + causal_pairs_T(r, s)

per head and batch item, for the queries of rank r against the K/V that rank s holds.
pass-KV moves K/V of |cached_s| + |new_s| tokens a hop, pass-Q moves the queries of
|new_r| tokens (H heads where K/V have H_kv): pass-Q's hop is smaller when
T x H < 2 (T + P) H_kv, which is the rule of Yang et al. ("Context Parallelism for
Scalable Million-Token Inference", arXiv 2411.01783): pass-KV when T / (T + P) >=
2 H_kv / H, else pass-Q (`rule_scheme`).
"""

from __future__ import annotations

import numpy as np

from sim.errors import RingsimError
from sim.layouts import block_extents, block_work_and_masks, rank_tokens
from sim.layouts import get as get_layout

CACHE_LAYOUTS = ("contiguous", "zigzag", "striped")
"""How the cached prefix lies over the ranks: as the prefill (or decode) that wrote it cut it."""
SCHEMES = ("pass-kv", "pass-q", "allgather")
"""The prefill's own schemes (not the training schemes of sim.schemes): K/V travel, queries
travel, or K/V are gathered once."""
PASS_KV, PASS_Q, ALL_GATHER = SCHEMES
LSE_BYTES = 4
"""A log-sum-exp is kept in fp32 per query row and head (flash-attention's softmax_lse)."""


def cache_tokens(cached: int, n: int, layout: str) -> list[np.ndarray]:
    """The global positions of the cached tokens each rank holds, ascending. The prefix
    need not divide evenly: boundaries fall at floor(i x P / pieces)."""
    if layout not in CACHE_LAYOUTS:
        raise RingsimError(f"the cache layout must be one of {', '.join(CACHE_LAYOUTS)}, got {layout!r}")
    t = np.arange(cached, dtype=np.int64)
    if layout == "striped":
        return [t[r::n] for r in range(n)]
    pieces = n if layout == "contiguous" else 2 * n
    edges = np.arange(pieces + 1, dtype=np.int64) * cached // pieces
    chunks = [t[edges[i]:edges[i + 1]] for i in range(pieces)]
    if layout == "contiguous":
        return chunks
    return [np.concatenate([chunks[r], chunks[2 * n - 1 - r]]) for r in range(n)]


def cached_counts(cached: int, n: int, layout: str) -> np.ndarray:
    """(n,) how many cached tokens each rank holds (`cache_tokens`, counted in closed form)."""
    if layout == "striped":
        r = np.arange(n, dtype=np.int64)
        return (cached - r + n - 1) // n
    if layout not in CACHE_LAYOUTS:
        raise RingsimError(f"the cache layout must be one of {', '.join(CACHE_LAYOUTS)}, got {layout!r}")
    pieces = n if layout == "contiguous" else 2 * n
    size = np.diff(np.arange(pieces + 1, dtype=np.int64) * cached // pieces)
    return size if layout == "contiguous" else size[:n] + size[::-1][:n]


def padded_new(new: int, n: int, layout: str) -> int:
    """The new tokens rounded up to whole chunks of `layout` on n ranks (the padding a
    load-balanced prefill adds, so that every rank holds as many new tokens)."""
    chunks = get_layout(layout).n_chunks(n)
    return -(-new // chunks) * chunks


def new_tokens(cached: int, new: int, n: int, layout: str) -> np.ndarray:
    """(n, new / n): the global positions of the new tokens each rank holds, ascending
    (`new` a multiple of the layout's chunks: `padded_new`)."""
    return cached + rank_tokens(layout, new, n)


def block_pairs(cached: int, new: int, n: int, layout: str, cache_layout: str) -> np.ndarray:
    """(n, n) int64: unmasked (query, key) pairs of rank r's new queries against the
    cached and new K/V rank s holds (module docstring), per head and batch item."""
    work, _ = block_work_and_masks(layout, new, n, True)
    return (new // n) * cached_counts(cached, n, cache_layout)[None, :] + work.astype(np.int64)


def rank_pairs(cached: int, new: int, n: int, layout: str, cache_layout: str, scheme: str) -> np.ndarray:
    """(n,) pairs each rank computes: its queries' row of `block_pairs` where the queries
    stay (pass-KV, all-gather), the column of its K/V where they travel (pass-Q)."""
    pairs = block_pairs(cached, new, n, layout, cache_layout)
    return pairs.sum(axis=0) if scheme == "pass-q" else pairs.sum(axis=1)


def new_pieces(new: int, n: int, layout: str, granularity: str = "exact", tile: int = 128):
    """The new-token part of every (query rank, K/V rank) block as the ring's kernel calls
    it (sim.layouts): (pairs, mask codes, query tokens, key tokens), each (n, n)."""
    work, masks = block_work_and_masks(layout, new, n, True, granularity, tile)
    q_ext, kv_ext = block_extents(layout, new, n, True)
    return work.astype(np.int64), masks, q_ext.astype(np.int64), kv_ext.astype(np.int64)


def q_hop_bytes(new_per_rank: int, heads: int, head_dim: int, elem_bytes: int, batch: int = 1) -> int:
    """Bytes of one pass-Q hop: the queries of a rank's new tokens, every query head."""
    return batch * new_per_rank * heads * head_dim * elem_bytes


def kv_hop_bytes(tokens: int | np.ndarray, kv_heads: int, head_dim: int, kv_elem_bytes: int, batch: int = 1):
    """Bytes of one pass-KV hop: K and V of the `tokens` (cached and new) a rank holds."""
    return 2 * batch * np.asarray(tokens, dtype=np.int64) * kv_heads * head_dim * kv_elem_bytes


def partial_bytes(new_per_rank: int, heads: int, head_dim: int, elem_bytes: int, batch: int = 1) -> int:
    """Bytes of one partial result a pass-Q rank returns to the queries' owner: the
    output (every head, in the input dtype) and its log-sum-exp (fp32 per row and head)."""
    return batch * new_per_rank * heads * (head_dim * elem_bytes + LSE_BYTES)


def rule_threshold(heads: int, kv_heads: int) -> float:
    """The share of new tokens T / (T + P) at and above which the paper's rule takes pass-KV:
    2 H_kv / H (K and V against Q)."""
    return 2.0 * kv_heads / heads


def rule_scheme(cached: int, new: int, heads: int, kv_heads: int) -> str:
    """The paper's choice (arXiv 2411.01783, its heuristic for persistent-KV prefill):
    pass-KV when T / (T + P) >= 2 H_kv / H, else pass-Q."""
    return "pass-kv" if new / (new + cached) >= rule_threshold(heads, kv_heads) else "pass-q"
