"""Contiguous layout: rank r holds chunk r, so under a causal mask the block of an
earlier rank is fully visible, the rank's own block is its causal diagonal, and a later
rank's block is fully masked (skipped). Later ranks do most of the work (DESIGN.md,
fact 8)."""

from __future__ import annotations

from hw.layouts.base import ALL, Piece


def plan(rank: int, owner: int, world: int, tokens: int) -> tuple[Piece, ...]:
    if owner == rank:
        return (Piece(ALL, ALL, True),)
    if owner < rank:
        return (Piece(ALL, ALL, False),)
    return ()
