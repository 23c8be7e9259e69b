"""Layouts: which tokens each rank holds, and the work of every (query rank, K/V rank) block.

A layout cuts the sequence into chunks and gives each rank some of them (docs/design.md,
fact 8). Each layout is one small module of this package (contiguous, striped, zigzag:
see sim.layouts.base for what it supplies); this module looks them up by name and
derives from their segments what everything else reads. A rank's tokens are a few
arithmetic progressions ("segments"), which gives the causal pair counts in closed form
without touching individual tokens.

Work of a block = unmasked (query, key) pairs (docs/design.md, Definitions), counted per
head and batch item, exactly or rounded up to whole tiles of the local score matrix.
"""

from __future__ import annotations

import numpy as np

from sim.errors import RingsimError
from sim.layouts import contiguous, striped, zigzag
from sim.layouts.base import Layout, Piece, Segment
from sim.reasons import refusal

LAYOUTS: dict[str, Layout] = {m.LAYOUT.name: m.LAYOUT for m in (contiguous, striped, zigzag)}
NAMES = tuple(LAYOUTS)


def get(name: str) -> Layout:
    """The layout called `name`; RingsimError naming the choices otherwise."""
    try:
        return LAYOUTS[name]
    except (KeyError, TypeError):
        raise RingsimError(f"unknown layout {name!r}; choose {', '.join(NAMES[:-1])} or {NAMES[-1]}") from None


def n_chunks(layout: str, n: int) -> int:
    """How many equal chunks `layout` cuts the sequence into on n ranks."""
    return get(layout).n_chunks(n)


def _check(layout: str, seq: int, n: int) -> None:
    lay = get(layout)
    if n <= 0 or seq <= 0:
        raise RingsimError("sequence length and number of ranks must be positive")
    chunks = lay.n_chunks(n)
    if seq % chunks:
        raise refusal("refused.chunks", seq=seq, chunks=chunks, layout=layout, ranks=n)


def segments(layout: str, seq: int, n: int) -> list[list[Segment]]:
    """Each rank's tokens, in ascending order, as segments."""
    _check(layout, seq, n)
    return get(layout).segments(seq, n)


def chunks_of_rank(layout: str, n: int) -> list[tuple[int, ...]]:
    """The chunk ids each rank holds (the q_chunks / kv_chunks of the trace)."""
    return get(layout).chunks_of_rank(n)


def chunk_pair_work(layout: str, seq: int, n: int, causal: bool) -> np.ndarray:
    """(chunks, chunks): unmasked (query, key) pairs between every two of the layout's
    chunks (those of the trace's q_chunks/kv_chunks)."""
    _check(layout, seq, n)
    lay = get(layout)
    chunks = lay.n_chunks(n)
    size = seq // chunks
    if not causal:
        return np.full((chunks, chunks), size * size, dtype=np.int64)
    return lay.chunk_pair_work(size, n, np.arange(chunks)[:, None], np.arange(chunks)[None, :])


def block_pieces(layout: str, rank: int, owner: int, n_gpus: int, tokens: int,
                 causal: bool) -> tuple[Piece, ...]:
    """Pieces of rank `rank`'s queries against the K/V block of rank `owner`."""
    if not causal:
        return (Piece(slice(None), slice(None), False),)
    return get(layout).pieces(rank, owner, n_gpus, tokens)


def rank_tokens(layout: str, seq: int, n: int) -> np.ndarray:
    """Array (n, seq // n): the global token ids each rank holds, ascending."""
    out = np.empty((n, seq // n), dtype=np.int64)
    for r, segs in enumerate(segments(layout, seq, n)):
        out[r] = np.concatenate([s.start + s.stride * np.arange(s.count, dtype=np.int64) for s in segs])
    return out


def rank_of_token(layout: str, seq: int, n: int) -> np.ndarray:
    """Array (seq,): the rank that holds each token."""
    owner = np.empty(seq, dtype=np.int64)
    for r, toks in enumerate(rank_tokens(layout, seq, n)):
        owner[toks] = r
    return owner


def _prefix(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """sum over t <= x of clip(t + 1, 0, m), elementwise, in exact integers."""
    x = np.asarray(x, dtype=np.int64)
    inside = (x + 1) * (x + 2) // 2
    beyond = m * (m + 1) // 2 + (x - m + 1) * m
    return np.where(x < 0, 0, np.where(x < m, inside, beyond))


def _causal_pairs(qs: np.ndarray, ks: np.ndarray, stride: int) -> np.ndarray:
    """Pairs (query, key) with key <= query between segments sharing one stride.

    qs, ks: int64 arrays [..., 2] of (start, count), broadcast against each other.
    """
    # query a + i*s, key b + j*s: key <= query  <=>  j <= i + floor((a - b) / s)
    shift = (qs[..., 0] - ks[..., 0]) // stride
    m = ks[..., 1]
    return _prefix(qs[..., 1] - 1 + shift, m) - _prefix(shift - 1, m)


def exact_work(layout: str, seq: int, n: int, causal: bool) -> np.ndarray:
    """Array (n, n) of int64: unmasked pairs of the block (query rank, K/V rank)."""
    if not causal:
        _check(layout, seq, n)
        c = seq // n
        return np.full((n, n), c * c, dtype=np.int64)
    pairs, _ = _segment_pairs(layout, seq, n)
    return pairs.sum(axis=(1, 3))


def _segment_pairs(layout: str, seq: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Causal pairs and all pairs of every (query rank, segment, K/V rank, segment)."""
    segs = segments(layout, seq, n)
    stride = segs[0][0].stride
    sc = np.array([[(g.start, g.count) for g in rank] for rank in segs], dtype=np.int64)  # (n, m, 2)
    qs = sc[:, :, None, None, :]     # (n, m, 1, 1, 2)
    ks = sc[None, None, :, :, :]     # (1, 1, n, m, 2)
    return _causal_pairs(qs, ks, stride), qs[..., 1] * ks[..., 1]


def block_masks(layout: str, seq: int, n: int, causal: bool) -> np.ndarray:
    """Array (n, n) of str: how a kernel computes each block.

    "empty": every pair masked (skipped). "full": the unmasked pairs are whole
    (query segment x key segment) rectangles, computed densely with no mask (all of a
    non-causal block; zigzag's off-diagonal blocks, half the queries or half the keys).
    "diagonal": some segment pair is cut by the causal mask, so the kernel applies it.
    """
    _check(layout, seq, n)
    out = np.full((n, n), "full", dtype=object)
    if not causal:
        return out
    pairs, whole = _segment_pairs(layout, seq, n)                # (n, m, n, m)
    cut = ((pairs > 0) & (pairs < whole)).any(axis=(1, 3))
    empty = pairs.sum(axis=(1, 3)) == 0
    out[cut] = "diagonal"
    out[empty] = "empty"
    return out


def tile_work(layout: str, seq: int, n: int, causal: bool, tile: int) -> np.ndarray:
    """Array (n, n): pairs counted in whole tiles of the local (query x key) matrix.

    A tile costs its full area when it holds at least one unmasked pair, nothing
    otherwise; edge tiles are smaller when `tile` does not divide the shard.
    """
    c = seq // n
    if not causal:
        return exact_work(layout, seq, n, causal)
    toks = rank_tokens(layout, seq, n)
    edges = np.arange(0, c, tile)
    sizes = np.diff(np.append(edges, c))                      # (nt,)
    last = np.minimum(edges + tile, c) - 1
    qmax = toks[:, last]                                      # (n, nt): ascending tokens
    kmin = toks[:, edges]                                     # (n, nt)
    cum = np.concatenate([[0], np.cumsum(sizes)])             # key tokens in the first j tiles
    work = np.empty((n, n), dtype=np.int64)
    for s in range(n):
        idx = np.searchsorted(kmin[s], qmax.ravel(), side="right").reshape(qmax.shape)
        work[:, s] = (cum[idx] * sizes[None, :]).sum(axis=1)
    return work


def block_work(layout: str, seq: int, n: int, causal: bool, granularity: str = "exact",
               tile: int = 128) -> np.ndarray:
    """Work matrix by the chosen granularity (see module docstring)."""
    _check(layout, seq, n)
    if granularity == "tile":
        return tile_work(layout, seq, n, causal, tile)
    return exact_work(layout, seq, n, causal)


MASK_NAMES = ("full", "diagonal", "empty")
"""Block masks by code (see block_masks; sim.engine.schedule's MASKS)."""


def block_work_and_masks(layout: str, seq: int, n: int, causal: bool, granularity: str = "exact",
                         tile: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """block_work and block_masks (as codes into MASK_NAMES) from one count of the pairs
    between chunks: a block of two ranks is the union of their chunk pairs, and a chunk
    pair is cut by the mask when some but not all of its pairs are unmasked. Both in the
    smallest integer types that hold them (the tables of 4096 ranks have 16M entries)."""
    _check(layout, seq, n)
    c = seq // n
    counts = _holding(c * c)                 # a block's work is at most its c x c pairs
    if not causal:
        return np.full((n, n), c * c, dtype=counts), np.zeros((n, n), dtype=np.int8)
    lay = get(layout)
    size = seq // lay.n_chunks(n)
    held = np.array(lay.chunks_of_rank(n), dtype=np.int64)        # (n, chunks per rank)
    exact = np.zeros((n, n), dtype=counts)
    masks = np.zeros((n, n), dtype=np.int8)
    for rows in _row_blocks(n):
        for a in range(held.shape[1]):
            for b in range(held.shape[1]):
                p = lay.chunk_pair_work(size, n, held[rows, a][:, None], held[:, b][None, :])
                exact[rows] += p
                masks[rows][(p > 0) & (p < size * size)] = 1
        masks[rows][exact[rows] == 0] = 2
    work = tile_work(layout, seq, n, causal, tile).astype(counts) if granularity == "tile" else exact
    return work, masks


def block_extents(layout: str, seq: int, n: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """Arrays (n, n) for every (query rank, K/V rank) block, in the smallest integer type
    that holds a rank's tokens: the query tokens that see some key of the block, and the
    key tokens that some query of it sees.

    That is the extent of the block's kernel call: all of a dense or diagonal block; for
    zigzag's off-diagonal blocks half the keys (the K/V rank is earlier) or half the
    queries (it is later), the dense rectangles a ring kernel passes on; for a striped
    block whose K/V rank is later, every query but the first and every key but the last
    (ring-flash-attention's q[:, 1:], k[:, :-1]). The hardware model takes a block's rate
    and merge from it (sim.hardware.kernel_model). In closed form from the segments."""
    segs = segments(layout, seq, n)
    c = seq // n
    if not causal:
        full = np.full((n, n), c, dtype=_holding(c))
        return full, full.copy()
    sc = np.array([[(g.start, g.count, g.stride) for g in rank] for rank in segs], dtype=np.int64)
    start, count, stride = sc[..., 0], sc[..., 1], sc[..., 2]          # (n, m)
    first = start.min(axis=1)                                          # each rank's first token
    last = (start + (count - 1) * stride).max(axis=1)                  # and last
    q_ext = np.empty((n, n), dtype=_holding(c))
    kv_ext = np.empty((n, n), dtype=_holding(c))
    unit = bool((stride == 1).all())           # runs of consecutive tokens: no division needed
    for r in _row_blocks(n):
        q_ext[r] = 0
        kv_ext[r] = 0
        for j in range(start.shape[1]):             # segment by segment: (n_r, n_s) each
            # queries of rank r at or after the first key of rank s: key <= query for that key
            ahead = first[None, :] - start[r, j, None]
            below = np.clip(ahead if unit else -(-ahead // stride[r, j, None]), 0, count[r, j, None])
            q_ext[r] += count[r, j, None] - below
            # keys of rank s at or before the last query of rank r
            behind = last[r, None] - start[None, :, j]
            kv_ext[r] += np.clip((behind if unit else behind // stride[None, :, j]) + 1, 0, count[None, :, j])
    return q_ext, kv_ext


def _holding(most: int) -> type:
    """The smallest signed integer type that holds 0..most."""
    return next(t for t in (np.int16, np.int32, np.int64) if most <= np.iinfo(t).max)


def _row_blocks(n: int, entries: int = 1 << 16) -> list[slice]:
    """Query ranks a few at a time, so that the (rank, rank) tables of a large ring are
    built from temporaries of a few MB (reused by the allocator) instead of several of
    the whole table's size (fresh memory each time)."""
    rows = max(1, entries // n)
    return [slice(r0, min(n, r0 + rows)) for r0 in range(0, n, rows)]
