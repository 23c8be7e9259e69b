"""Shared references for the hw tests: attention computed by torch itself in float64; and
which tests must share a worker when pytest-xdist spreads the suite (`--dist loadgroup`)."""

from __future__ import annotations

import pytest
import torch.nn.functional as F


def pytest_collection_modifyitems(config, items):
    """The tests of one module and one GPU count read the results of one spawned group
    (tests.hw.test_schemes_common.results caches it per process): they go to one worker
    together, which starts the group once, where workers of their own would each start it."""
    here = __file__.rsplit("/", 1)[0]
    for item in items:
        params = getattr(item, "callspec", None) and item.callspec.params
        if str(item.path).startswith(here) and params and params.get("n_gpus", 1) > 1:
            item.add_marker(pytest.mark.xdist_group(f"{item.path.stem}-n{params['n_gpus']}"))


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
