"""Layouts on the kernel side: sharding full tensors by a layout's token order.

Which tokens a rank holds and which pieces of a (query shard, K/V block) pair a causal
kernel computes (each piece one call of a fused attention operator, none with a row
whose keys are all masked) are the layout modules' answers in `sim.layouts`, shared
with the simulator and the figures; `block_pieces` is re-exported from there.
"""

from __future__ import annotations

from sim.layouts import block_pieces, rank_tokens
from sim.layouts.base import Piece

__all__ = ["Piece", "block_pieces", "shard", "token_index", "unshard"]


def token_index(layout: str, seq: int, world: int):
    """LongTensor (world, seq // world): the global tokens of each rank, ascending."""
    import torch

    return torch.from_numpy(rank_tokens(layout, seq, world))


def shard(x, layout: str, world: int, rank: int, *, dim: int = 1):
    """Rank `rank`'s tokens of a full tensor (tokens along `dim`), contiguous."""
    return x.index_select(dim, token_index(layout, x.shape[dim], world)[rank]).contiguous()


def unshard(shards, layout: str, *, dim: int = 1):
    """The full tensor, in the original token order, from every rank's shard."""
    world = len(shards)
    seq = shards[0].shape[dim] * world
    idx = token_index(layout, seq, world)
    shape = list(shards[0].shape)
    shape[dim] = seq
    full = shards[0].new_empty(shape)
    for r, s in enumerate(shards):
        full.index_copy_(dim, idx[r], s)
    return full
