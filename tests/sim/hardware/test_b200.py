"""B200's attention as cuDNN runs it there (sim.hardware.presets, cudnn-b200): each pass is
H100's cuDNN table scaled to B200's tensor cores and divided by what bounds that pass on
Blackwell (FlashAttention-4's analysis: exponentials forward, shared memory backward), so
the backward runs at a smaller share of the peak than the forward; checked in closed form."""

import pytest

from sim.hardware.cluster import Gpu, Hardware
from sim.hardware.kernel_model import kernel_table
from sim.hardware.presets import KERNEL_TABLES

SCALE = 2250.0 / 989.4


@pytest.mark.parametrize("kind,mask,d,bound", [("fwd", "full", 128, 1.25), ("fwd", "diagonal", 128, 1.25),
                                               ("fwd", "full", 64, 1.25), ("bwd", "full", 128, 1.6),
                                               ("bwd", "diagonal", 128, 1.6)])
def test_each_pass_is_h100_s_scaled_by_its_bound(kind, mask, d, bound):
    h100, b200 = KERNEL_TABLES["cudnn-h100"].series, KERNEL_TABLES["cudnn-b200"].series
    for h, b in zip(h100[kind, mask, d].tflops, b200[kind, mask, d].tflops):
        assert b == pytest.approx(h * SCALE / bound, abs=0.05)
    assert "FlashAttention-4" in b200[kind, mask, d].source


def test_b200_backward_runs_at_a_smaller_share_of_its_forward_than_h100_s():
    """A 16k-token block (the CP benchmark's tokens per GPU), 32 heads x 128, dense: the
    backward's rate over the forward's is H100's times 1.25 / 1.6."""
    q, heads, d = 16384, 32, 128
    rates = {}
    for gpu in ("H100-SXM", "B200"):
        hw = Hardware(gpu=Gpu.preset(gpu, kernel="cudnn"))
        for kind, factor in (("fwd", 1.0), ("bwd", 2.5)):
            flops = 4 * d * q * q * heads * factor
            t = hw.compute_time_s(flops, dtype="bf16", kind=kind, mask="full", q_tokens=q, kv_tokens=q,
                                  head_dim=d, kv_heads_per_head=1.0, alone=True)
            rates[gpu, kind] = flops / t
    h100 = rates["H100-SXM", "bwd"] / rates["H100-SXM", "fwd"]
    b200 = rates["B200", "bwd"] / rates["B200", "fwd"]
    assert b200 == pytest.approx(h100 * 1.25 / 1.6, rel=0.03)
    # against the flat model it replaces (half the peak, 1125 TFLOP/s, both passes): the
    # forward within 5%, the backward a third slower
    assert rates["B200", "fwd"] == pytest.approx(0.5 * 2250e12, rel=0.05)
    assert rates["B200", "bwd"] < 0.7 * 0.5 * 2250e12
    assert kernel_table("cudnn-b200").sms == 148
