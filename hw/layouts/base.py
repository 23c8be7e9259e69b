"""A piece of a block: the unit of work one fused attention call computes."""

from __future__ import annotations

from dataclasses import dataclass


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
