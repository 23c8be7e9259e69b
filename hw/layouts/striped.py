"""Striped layout: token t lives on rank t mod N, so local query i and local key j of
any two ranks are global tokens i*N + rank and j*N + owner. A key is visible when
j < i, or j == i and owner <= rank: the causal diagonal for an owner at or before the
rank, the strict lower triangle otherwise, which is the causal diagonal of queries
1.. against keys ..-1 (as in ring-flash-attention's stripe variant)."""

from __future__ import annotations

from hw.layouts.base import ALL, Piece


def plan(rank: int, owner: int, world: int, tokens: int) -> tuple[Piece, ...]:
    if owner <= rank:
        return (Piece(ALL, ALL, True),)
    if tokens == 1:  # one token per rank: the strict triangle is empty
        return ()
    return (Piece(slice(1, None), slice(None, -1), True),)
