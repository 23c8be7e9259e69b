"""The one merge of partial attention results: (out, log-sum-exp) pairs, DESIGN.md fact 3.

A block's result over some keys is its normalized output and, per query row, the
log-sum-exp of its scores. Two such results over disjoint key sets combine into the
result over their union: lse = log(e^lse1 + e^lse2), out = out1·e^(lse1-lse) +
out2·e^(lse2-lse). Both weights are at most 1, so large scores never overflow. A row
that has seen no unmasked key yet has lse = -inf and out = 0; where both sides are
-inf the weights are taken against 0 instead of -inf, so the row stays (0, -inf) and
never becomes NaN.
"""

from __future__ import annotations

import torch


def new_accumulators(q_shape: torch.Size, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty (out, lse) for queries of shape (batch, tokens, heads, head_dim): fp32, lse -inf.

    out is (batch, heads, tokens, head_dim) and lse (batch, heads, tokens), the layout
    of the attention operators.
    """
    b, t, h, d = q_shape
    out = torch.zeros(b, h, t, d, dtype=torch.float32, device=device)
    lse = torch.full((b, h, t), float("-inf"), dtype=torch.float32, device=device)
    return out, lse


def merge_(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor,
           block_lse: torch.Tensor) -> None:
    """Fold (block_out, block_lse) into the accumulators (out, lse), in place.

    out: (..., rows, head_dim) fp32; lse: (..., rows) fp32; the block's tensors have the
    same shapes (block_out in any float dtype).
    """
    new = torch.logaddexp(lse, block_lse)
    # rows where both sides are still empty: weigh against 0, giving exp(-inf) = 0
    ref = new.masked_fill(new == float("-inf"), 0.0)
    out.mul_(torch.exp(lse - ref).unsqueeze(-1))
    out.add_(block_out.float() * torch.exp(block_lse.float() - ref).unsqueeze(-1))
    lse.copy_(new)
