"""Shared references for the hw tests: attention computed by torch itself in float64."""

from __future__ import annotations

import torch.nn.functional as F


def reference_attention(q, k, v, causal: bool, dout=None):
    """Output (and dq, dk, dv) of full attention in float64 by torch's SDPA and autograd.

    Tensors are (batch, seq, heads, head_dim), K/V possibly with fewer heads (GQA).
    """
    qq, kk, vv = (x.detach().double().transpose(1, 2).requires_grad_(dout is not None)
                  for x in (q, k, v))
    out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal,
                                         enable_gqa=qq.shape[1] != kk.shape[1])
    if dout is None:
        return out.transpose(1, 2).detach(), None, None, None
    out.backward(dout.double().transpose(1, 2))
    return (out.transpose(1, 2).detach(), *(x.grad.transpose(1, 2) for x in (qq, kk, vv)))


def max_err(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()
