"""Zigzag layout: 2N chunks, rank r holds chunks r and 2N-1-r (first and second half of
its shard). Under a causal mask the own block is its causal diagonal. The block of an
earlier rank: both query halves see all of that rank's first chunk and none of its
second. The block of a later rank: only the second query half (a late chunk) sees it,
and sees all of it. Every rank does the same work at every step (DESIGN.md, fact 8)."""

from __future__ import annotations

from hw.layouts.base import ALL, Piece


def plan(rank: int, owner: int, world: int, tokens: int) -> tuple[Piece, ...]:
    half = tokens // 2
    if owner == rank:
        return (Piece(ALL, ALL, True),)
    if owner < rank:
        return (Piece(ALL, slice(None, half), False),)
    return (Piece(slice(half, None), ALL, False),)
