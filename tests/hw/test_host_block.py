"""The host parts' block (hw.bench.parts._host_block_call): the forward or the backward of a
square block without a mask, against torch's own attention and autograd, and a ring of
ranks timing a backward under ring conditions, with one hop in flight and with two."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hw.bench.measure import make_block
from hw.bench.parts import _host_block_call, _ring_worker, block_kv_bytes, full_forward_block
from hw.blocks import select_block_ops
from hw.spawn import spawn

HEADS, HEAD_DIM, TOKENS = 2, 16, 32


def entry(kind: str) -> dict:
    return {"processes": 2, **full_forward_block("fp32", 1, HEADS, HEADS, HEAD_DIM, TOKENS, kind),
            "bytes": 2 * HEADS * TOKENS * HEAD_DIM * 4}          # K and V, fp32


def test_a_blocks_kv_bytes_are_its_k_and_v():
    assert block_kv_bytes(entry("bwd")) == entry("bwd")["bytes"]


def reference(seed: int):
    q, k, v, dout = make_block(torch.device("cpu"), "fp32", 1, HEADS, HEADS, HEAD_DIM, TOKENS, seed=seed)
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def test_the_forward_block_is_torchs_attention():
    ops = select_block_ops("cpu", "fp32", HEAD_DIM, "auto")
    out, _ = _host_block_call(ops, entry("fwd"), seed=3)()
    want, *_ = reference(3)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)


def test_the_backward_block_gives_autograds_gradients():
    ops = select_block_ops("cpu", "fp32", HEAD_DIM, "auto")
    dq, dk, dv = _host_block_call(ops, entry("bwd"), seed=5)()
    _, want_dq, want_dk, want_dv = reference(5)
    for got, want in ((dq, want_dq), (dk, want_dk), (dv, want_dv)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_a_ring_times_backward_blocks_under_ring_conditions():
    per_rank = spawn(_ring_worker, 2, args=(entry("bwd"), 2, 1, 1, "auto"), backend="gloo", timeout_s=120)
    assert len(per_rank) == 2
    for r in per_rank:
        assert len(r["compute_alone_s"]) == 2 and len(r["transfer_alone_s"]) == 2
        assert r["compute_ring_s"] and r["transfer_ring_s"]
        assert min(r["compute_alone_s"] + r["compute_ring_s"]) > 0


@pytest.mark.slow
def test_a_ring_of_three_exchanges_a_backward_steps_two_hops():
    """Two hops posted one after the other each exchange (K/V, then dK/dV) complete on
    every rank of a ring of three: none waits on a post its neighbour has not made."""
    per_rank = spawn(_ring_worker, 3, args=({**entry("bwd"), "processes": 3, "hops": 2}, 2, 1, 1, "auto"),
                     backend="gloo", timeout_s=120)
    assert len(per_rank) == 3
    for r in per_rank:
        assert len(r["transfer_alone_s"]) == 2 and r["transfer_ring_s"] and r["compute_ring_s"]
