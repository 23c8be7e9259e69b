"""Striped layout: token t lives on rank t mod N ("chunk" r is the stripe of rank r), so
local query i and local key j of any two ranks are global tokens i*N + rank and
j*N + owner. A key is visible when j < i, or j == i and owner <= rank: the causal
diagonal for an owner at or before the rank, the strict lower triangle otherwise, which
is the causal diagonal of queries 1.. against keys ..-1 (as in ring-flash-attention's
stripe variant)."""

from __future__ import annotations

import numpy as np

from sim.layouts.base import ALL, Layout, Piece, Segment


def segments(seq: int, n: int) -> list[list[Segment]]:
    return [[Segment(r, seq // n, n)] for r in range(n)]


def chunk_pair_work(size: int, n: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    # query i + a*n, key j + b*n: key <= query iff b < a, or b == a and j <= i
    return size * (size - 1) // 2 + np.where(j <= i, size, 0).astype(np.int64)


def pieces(rank: int, owner: int, n_gpus: int, tokens: int) -> tuple[Piece, ...]:
    if owner <= rank:
        return (Piece(ALL, ALL, True),)
    if tokens == 1:  # one token per rank: the strict triangle is empty
        return ()
    return (Piece(slice(1, None), slice(None, -1), True),)


LAYOUT = Layout(
    name="striped", summary="token t on rank t mod N", chunks_per_rank=1, segments=segments,
    chunks_of_rank=lambda n: [(r,) for r in range(n)], chunk_pair_work=chunk_pair_work,
    pieces=pieces, chunk_axis="blocks.stripe")
