"""Layouts on the kernel side: which pieces of a (query shard, K/V block) pair to compute.

A layout (DESIGN.md, fact 8; token assignment in `sim.layouts`) decides which tokens a
rank holds. Under a causal mask it also decides, for the block a rank holds at a ring
step, which part of the local score matrix is unmasked. Each layout module answers
that with a few `Piece`s, each either fully unmasked or a square causal diagonal, so
that every piece is one call of a fused attention operator (full or causal) and no
piece has a row with every key masked. An empty answer is a fully masked block: it is
skipped. Without a causal mask every layout computes the whole block.

Sharding and unsharding full tensors by the layout's token order live here too.
"""

from __future__ import annotations

from typing import Callable

from sim.layouts import rank_tokens

from hw.layouts import contiguous, striped, zigzag
from hw.layouts.base import ALL, Piece

# plan(rank, owner, world, tokens_per_rank) -> the pieces of a causal block
Plan = Callable[[int, int, int, int], tuple[Piece, ...]]
PLANS: dict[str, Plan] = {
    "contiguous": contiguous.plan,
    "striped": striped.plan,
    "zigzag": zigzag.plan,
}


def block_pieces(layout: str, rank: int, owner: int, world: int, tokens: int,
                 causal: bool) -> tuple[Piece, ...]:
    """Pieces of rank `rank`'s queries against the K/V block of rank `owner`."""
    if not causal:
        return (Piece(ALL, ALL, False),)
    return PLANS[layout](rank, owner, world, tokens)


def token_index(layout: str, seq: int, world: int):
    """LongTensor (world, seq // world): the global tokens of each rank, ascending."""
    import torch

    return torch.from_numpy(rank_tokens(layout, seq, world))


def shard(x, layout: str, world: int, rank: int, *, dim: int = 1):
    """Rank `rank`'s tokens of a full tensor (tokens along `dim`), contiguous."""
    return x.index_select(dim, token_index(layout, x.shape[dim], world)[rank]).contiguous()


def unshard(shards, layout: str, *, dim: int = 1):
    """The full tensor, in the original token order, from every rank's shard."""
    import torch

    world = len(shards)
    seq = shards[0].shape[dim] * world
    idx = token_index(layout, seq, world)
    shape = list(shards[0].shape)
    shape[dim] = seq
    full = shards[0].new_empty(shape)
    for r, s in enumerate(shards):
        full.index_copy_(dim, idx[r], s)
    return full
