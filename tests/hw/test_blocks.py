import math

import pytest
import torch

from hw.blocks import CpuFlashOps, MatmulOps, select_block_ops
from tests.hw.conftest import max_err


def _ref(q, k, v, causal, dout):
    """Block attention, lse and grads in float64 by torch's SDPA and autograd."""
    qq, kk, vv = (x.double().requires_grad_() for x in (q, k, v))
    g = qq.shape[1] // kk.shape[1]
    s = qq @ kk.repeat_interleave(g, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(s, -1)
    out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, enable_gqa=True)
    out.backward(dout.double())
    return out.detach(), lse.detach(), qq.grad, kk.grad, vv.grad


@pytest.mark.parametrize("ops", [CpuFlashOps(), MatmulOps()], ids=lambda o: o.name)
@pytest.mark.parametrize("lq,lk,causal", [(12, 12, True), (12, 7, False), (5, 9, False)])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_block_forward_and_backward_match_torch_in_float64(ops, lq, lk, causal, kv_heads):
    g = torch.Generator().manual_seed(lq * 31 + lk)
    q, dout = (torch.randn(2, 4, lq, 16, generator=g) for _ in range(2))
    k, v = (torch.randn(2, kv_heads, lk, 16, generator=g) for _ in range(2))
    out, lse = ops.forward(q, k, v, causal)
    w_out, w_lse, w_dq, w_dk, w_dv = _ref(q, k, v, causal, dout)
    assert max_err(out, w_out) < 1e-5 and max_err(lse, w_lse) < 1e-5
    dq, dk, dv = ops.backward(dout, q, k, v, w_out.float(), w_lse.float(), causal)
    assert dk.shape == k.shape and dv.shape == v.shape
    for got, want in ((dq, w_dq), (dk, w_dk), (dv, w_dv)):
        assert max_err(got, want) < 1e-4


def test_matmul_rows_with_every_key_masked_give_zero_and_minus_inf():
    q = torch.randn(1, 1, 3, 4)
    k = torch.randn(1, 1, 3, 4)
    # a causal piece wider than tall would mask nothing; a 0-key block masks everything
    out, lse = MatmulOps().forward(q, k[:, :, :0], k[:, :, :0], False)
    assert torch.equal(out, torch.zeros_like(q)) and (lse == float("-inf")).all()


def test_cpu_picks_the_fused_operator_and_matmul_on_request():
    assert select_block_ops("cpu", "fp32", 16).name == "cpu-flash"
    assert select_block_ops("cpu", "bf16", 16, "fused").name == "cpu-flash"
    assert select_block_ops("cpu", "fp32", 16, "matmul").name == "matmul"
