"""Independent references shared by the test packages (written from docs/design.md and
docs/packed.md, not from the code under test)."""

import math


def token_owner(layout: str, seq: int, n: int, t: int) -> int:
    """The rank that holds token t: contiguous, striped, or zigzag (2N chunks, rank r
    holds chunks r and 2N-1-r)."""
    if layout == "contiguous":
        return t // (seq // n)
    if layout == "striped":
        return t % n
    chunk = t // (seq // (2 * n))
    return chunk if chunk < n else 2 * n - 1 - chunk


def document_mask(bounds, causal: bool, window: int | None = None):
    """Bool (S, S), True where query t sees key u in a packed sequence whose documents
    have cumulative lengths `bounds` (docs/packed.md): same document, u <= t when causal,
    and t - u < window (|t - u| < window without the causal mask). Token by token."""
    import torch

    seq = int(bounds[-1])
    doc = torch.empty(seq, dtype=torch.long)
    for d in range(len(bounds) - 1):
        doc[int(bounds[d]):int(bounds[d + 1])] = d
    t = torch.arange(seq)[:, None]
    u = torch.arange(seq)[None, :]
    keep = doc[:, None] == doc[None, :]
    if causal:
        keep &= u <= t
    if window is not None:
        keep &= (t - u).abs() < window
    return keep


def masked_attention(q, k, v, mask, dout=None):
    """Output (and dq, dk, dv) of attention under a bool (S, S) mask, in float64 by plain
    softmax and torch's autograd. (batch, seq, heads, head_dim); K/V may have fewer heads."""
    import torch

    qq, kk, vv = (x.detach().double().transpose(1, 2).requires_grad_(dout is not None) for x in (q, k, v))
    g = qq.shape[1] // kk.shape[1]
    scores = qq @ kk.repeat_interleave(g, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    out = probs @ vv.repeat_interleave(g, 1)
    if dout is None:
        return out.transpose(1, 2).detach(), None, None, None
    out.backward(dout.double().transpose(1, 2))
    return (out.transpose(1, 2).detach(), *(x.grad.transpose(1, 2) for x in (qq, kk, vv)))
