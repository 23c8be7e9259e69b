"""Zigzag layout (head-tail, DualChunkSwap): 2N chunks, rank r holds chunks r and
2N-1-r (the first and second half of its shard). Under a causal mask the own block is
its causal diagonal. The block of an earlier rank: both query halves see all of that
rank's first chunk and none of its second. The block of a later rank: only the second
query half (a late chunk) sees it, and sees all of it. Every rank does the same work at
every step (docs/design.md, fact 8)."""

from __future__ import annotations

from sim.layouts.base import ALL, Layout, Piece, Segment, token_order_pair_work


def segments(seq: int, n: int) -> list[list[Segment]]:
    h = seq // (2 * n)
    return [[Segment(r * h, h, 1), Segment((2 * n - 1 - r) * h, h, 1)] for r in range(n)]


def pieces(rank: int, owner: int, n_gpus: int, tokens: int) -> tuple[Piece, ...]:
    half = tokens // 2
    if owner == rank:
        return (Piece(ALL, ALL, True),)
    if owner < rank:
        return (Piece(ALL, slice(None, half), False),)
    return (Piece(slice(half, None), ALL, False),)


LAYOUT = Layout(
    name="zigzag", summary="2N chunks; rank r holds chunks r and 2N-1-r", chunks_per_rank=2,
    segments=segments, chunks_of_rank=lambda n: [(r, 2 * n - 1 - r) for r in range(n)],
    chunk_pair_work=lambda size, n, i, j: token_order_pair_work(size, i, j), pieces=pieces)
