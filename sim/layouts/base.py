"""What every layout module supplies, and the two records it speaks in.

A layout module (one per layout in this package) is a `Layout`: which chunks the
sequence is cut into and which rank holds which (as `Segment`s: arithmetic progressions
of tokens, from which causal pair counts follow in closed form), the causal work between
any two chunks, and the kernel's plan for a causal block (`Piece`s, each one call of a
fused attention operator). The simulator, the kernels and the figures all read these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Segment:
    """Tokens start, start + stride, ..., start + (count - 1) * stride."""

    start: int
    count: int
    stride: int


@dataclass(frozen=True)
class Piece:
    """Local queries `q` against local keys `kv` (slices of the shard's tokens)."""

    q: slice
    kv: slice
    causal: bool
    """True: a square block with key index <= query index (top-left diagonal)."""

    def pairs(self, tokens: int) -> int:
        """Unmasked (query, key) pairs of this piece, per head and batch item."""
        nq = len(range(*self.q.indices(tokens)))
        nk = len(range(*self.kv.indices(tokens)))
        return nq * (nq + 1) // 2 if self.causal else nq * nk


ALL = slice(None)


@dataclass(frozen=True)
class Layout:
    name: str
    summary: str
    chunks_per_rank: int
    """The sequence is cut into chunks_per_rank x N equal chunks."""
    segments: Callable[[int, int], list[list[Segment]]]
    """(seq, n) -> each rank's tokens, ascending, as segments."""
    chunks_of_rank: Callable[[int], list[tuple[int, ...]]]
    """n -> the chunk ids each rank holds (the trace's q_chunks / kv_chunks)."""
    chunk_pair_work: Callable[[int, int, np.ndarray, np.ndarray], np.ndarray]
    """(chunk size, n, query chunks, key chunks) -> causal unmasked pairs between each query
    chunk and key chunk (index arrays, broadcast against each other)."""
    pieces: Callable[[int, int, int, int], tuple[Piece, ...]]
    """(rank, owner, n_gpus, tokens per rank) -> the pieces of a causal block; () if empty."""
    chunk_axis: str = "blocks.chunk"
    """What a chunk is, for a figure's axis: the key of its sim.reasons clause."""

    def n_chunks(self, n: int) -> int:
        return self.chunks_per_rank * n

    def owner_of_chunk(self, n: int) -> np.ndarray:
        """(chunks,) the rank that holds each chunk."""
        owner = np.empty(self.n_chunks(n), dtype=np.int64)
        for r, chunks in enumerate(self.chunks_of_rank(n)):
            owner[list(chunks)] = r
        return owner


def token_order_pair_work(size: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Causal pairs between query chunk i and key chunk j of `size` consecutive tokens
    each, in token order."""
    return np.where(j < i, size * size, np.where(j == i, size * (size + 1) // 2, 0)).astype(np.int64)
