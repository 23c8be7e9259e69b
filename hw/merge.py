"""The one merge of partial attention results: (out, log-sum-exp) pairs, docs/design.md fact 3.

A block's result over some keys is its normalized output and, per query row, the
log-sum-exp of its scores. Two such results over disjoint key sets combine into the
result over their union: with m = max(lse1, lse2) and w_i = e^(lse_i - m),
lse = m + log(w1 + w2) and out = (out1·w1 + out2·w2) / (w1 + w2). One weight is exactly
1 and the other at most 1, so large scores never overflow, and the weights come from
the difference of the two lse, not from a rounded sum. A row that has seen no unmasked
key yet has lse = -inf and out = 0; where both sides are -inf, m is taken as 0 so the
weights are 0 instead of NaN and the row stays (0, -inf).
"""

from __future__ import annotations

import torch


def new_accumulators(q_shape: torch.Size, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty (out, lse) for queries of shape (batch, tokens, heads, head_dim): fp32, lse -inf.

    out is (batch, heads, tokens, head_dim) and lse (batch, heads, tokens), the shapes
    the attention operators return, laid out in memory tokens before heads as the fused
    operators lay out theirs, so that merging streams through memory instead of
    transposing (a tenth of a block's time at 64 heads otherwise).
    """
    b, t, h, d = q_shape
    out = torch.zeros(b, t, h, d, dtype=torch.float32, device=device).transpose(1, 2)
    lse = torch.full((b, t, h), float("-inf"), dtype=torch.float32, device=device).transpose(1, 2)
    return out, lse


def merge_(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor,
           block_lse: torch.Tensor, *, first: bool = False) -> None:
    """Fold (block_out, block_lse) into the accumulators (out, lse), in place.

    out: (..., rows, head_dim) fp32; lse: (..., rows) fp32; the block's tensors have the
    same shapes (block_out in any float dtype). `first`: the accumulators are still
    empty on these rows, so the block's result is copied as it is.
    """
    if first:
        out.copy_(block_out)
        lse.copy_(block_lse)
        return
    block_lse = block_lse.float()
    m = torch.maximum(lse, block_lse)
    # rows where both sides are still empty: weigh against 0, giving exp(-inf) = 0
    m = m.masked_fill(m == float("-inf"), 0.0)
    # weights relative to the larger side: one is exactly 1, the other at most 1
    w_acc, w_blk = torch.exp(lse - m), torch.exp(block_lse - m)
    total = w_acc + w_blk
    lse.copy_(m + torch.log(total))          # log 0 = -inf keeps empty rows empty
    share = w_blk / total.masked_fill(total == 0.0, 1.0)
    # out·(1 - share) + block·share in one pass over the output
    out.lerp_(block_out.float(), share.unsqueeze(-1))
