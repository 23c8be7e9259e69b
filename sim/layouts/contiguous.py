"""Contiguous layout: rank r holds chunk r of N. Under a causal mask the block of an
earlier rank is fully visible, the rank's own block is its causal diagonal, and a later
rank's block is fully masked (skipped). Later ranks do most of the work (docs/design.md,
fact 8)."""

from __future__ import annotations

from sim.layouts.base import ALL, Layout, Piece, Segment, token_order_pair_work


def segments(seq: int, n: int) -> list[list[Segment]]:
    c = seq // n
    return [[Segment(r * c, c, 1)] for r in range(n)]


def pieces(rank: int, owner: int, n_gpus: int, tokens: int) -> tuple[Piece, ...]:
    if owner == rank:
        return (Piece(ALL, ALL, True),)
    if owner < rank:
        return (Piece(ALL, ALL, False),)
    return ()


LAYOUT = Layout(
    name="contiguous", summary="rank r holds the r-th run of S/N tokens", chunks_per_rank=1,
    segments=segments, chunks_of_rank=lambda n: [(r,) for r in range(n)],
    chunk_pair_work=lambda size, n, i, j: token_order_pair_work(size, i, j), pieces=pieces)
