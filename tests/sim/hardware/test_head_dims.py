"""Every head dim on every preset: a head dim runs as the kernel's next larger template
(FlashAttention-2's HEADDIM_SWITCH, FlashAttention-3's round_up_headdim), padded, and the
ideal counts the same rule, so efficiency never exceeds 1 and a block's time never falls
as the head dim grows. Checked against closed forms of the padding rule and the published
(or, between published head dims, interpolated) rate."""

import numpy as np
import pytest

from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware
from sim.hardware.kernel_model import call_gpu_s, kernel_table, template_head_dim
from sim.hardware.presets import GPU_PRESETS
from sim.scenario.config import Scenario, Workload
from sim.trace.metrics import compute_metrics

HEAD_DIMS = (16, 32, 40, 64, 72, 80, 96, 112, 128, 144, 160, 192, 224, 256)
PRESET_KERNELS = [(name, k) for name, p in GPU_PRESETS.items() for k in (list(p.kernels) or ["flat"])]
BW = 2500e9
SMS = 132


def test_a_head_dim_runs_as_the_next_larger_template():
    fa2, fa3 = kernel_table("fa2-h100"), kernel_table("fa3-h100")
    assert [template_head_dim(fa2, d) for d in (8, 33, 64, 65, 80, 96, 97, 160, 192, 193, 256)] == \
        [32, 64, 64, 96, 96, 96, 128, 192, 192, 256, 256]
    assert [template_head_dim(fa3, d) for d in (8, 64, 80, 112, 160, 256)] == [64, 64, 96, 128, 192, 256]
    with pytest.raises(RingsimError, match="head dim 320.*up to 256"):
        template_head_dim(fa2, 320)


def test_padding_in_closed_form():
    """Head dim 80 on FlashAttention-2 runs the 96 template: the same main kernel as 96;
    at the published setting of the 96 template (16k tokens x 2048 / 96 = 21 heads per
    sequence) it runs the rate between the published 64 and 128 ones (linear in the head
    dim), and the ideal counts 80 / 96 of the template's FLOPs."""
    seq = 4096
    heads = (16384 // seq) * (2048 // 96)
    at_96 = call_gpu_s("fa2-h100", "fwd", "full", seq, seq, heads, 96, 1.0, 2, BW, SMS, 0.0)
    at_80 = call_gpu_s("fa2-h100", "fwd", "full", seq, seq, heads, 80, 1.0, 2, BW, SMS, 0.0)
    # the same steps; only the pipeline fill (264 CTAs' 128-row Q tiles, 9 heads' 64-key K
    # and V tiles) loads the tensors' own 80 columns instead of 96
    fill = (264 * 128 + 9 * 2 * 64) * 2 / BW
    assert at_80 - 80 * fill == pytest.approx(at_96 - 96 * fill, rel=1e-12)
    rate_96 = 321 + (368 - 321) * (96 - 64) / (128 - 64)         # published 64 and 128 at 4k, TFLOP/s
    assert at_96 == pytest.approx(4 * 96 * seq * seq * heads / (rate_96 * 1e12), rel=1e-12)
    gpu = Gpu.preset("H100-SXM", kernel="fa2")
    assert gpu.rate_flops("bf16", 80) == pytest.approx(gpu.rate_flops("bf16", 96) * 80 / 96, rel=1e-12)
    with pytest.raises(RingsimError, match="head dim 512"):
        gpu.rate_flops("bf16", 512)


@pytest.mark.parametrize("table", ["fa2-h100", "fa3-h100", "cudnn-h100", "fa2-a100"])
@pytest.mark.parametrize("kind", ["fwd", "bwd"])
@pytest.mark.parametrize("mask", ["full", "diagonal"])
def test_a_block_s_time_grows_with_the_head_dim(table, kind, mask):
    """At fixed tokens and heads, a larger head dim never takes less time: each dim's time
    lies between its neighbours'. Across templates this holds once a call fills the GPU
    (a wave of CTAs or more, where ring blocks of 8k tokens per GPU live); within one
    template, at every size."""
    dims = list(range(8, 257, 8))
    for q, heads in [(2048, 32), (4096, 16), (8192, 8), (16384, 32)]:
        t = [call_gpu_s(table, kind, mask, q, q, heads, d, 0.25, 2, BW, SMS, 1.0) for d in dims]
        assert all(b >= a for a, b in zip(t, t[1:])), (q, heads, t)
    fa = kernel_table(table)
    for q, heads in [(128, 1), (1000, 8), (4096, 4)]:
        t = [(template_head_dim(fa, d), call_gpu_s(table, kind, mask, q, q, heads, d, 0.25, 2, BW, SMS, 1.0))
             for d in dims]
        assert all(b >= a for (ta, a), (tb, b) in zip(t, t[1:]) if ta == tb), (q, heads, t)


def test_below_a_wave_a_template_s_own_tiles_decide():
    """Below a wave the templates' tiles, not their head dims, set the time, as in the
    kernels: FlashAttention-2's backward cuts 192-dim keys in 64-row tiles where 128's
    takes 128 (flash_bwd_launch_template.h), so 1k tokens x 8 heads runs 128 CTAs of half
    the work instead of 64, each on its own SM: the 192 template finishes first."""
    t128 = call_gpu_s("fa2-h100", "bwd", "full", 1024, 1024, 8, 128, 1.0, 2, BW, SMS, 0.0)
    t192 = call_gpu_s("fa2-h100", "bwd", "full", 1024, 1024, 8, 192, 1.0, 2, BW, SMS, 0.0)
    assert t192 < t128


@pytest.mark.parametrize("table,gpu", [("fa2-h100", "H100-SXM"), ("fa3-h100", "H100-SXM"),
                                       ("cudnn-h100", "H100-SXM"), ("fa2-a100", "A100-SXM-80GB")])
def test_no_block_beats_the_ideal_rate(table, gpu):
    """Useful FLOPs of any block over its GPU time never exceed the ideal's rate for its
    head dim."""
    kernel = {"fa2-h100": "fa2", "fa3-h100": "fa3", "cudnn-h100": "cudnn", "fa2-a100": "fa2"}[table]
    g = Gpu.preset(gpu, kernel=kernel)
    for d in HEAD_DIMS:
        ideal = g.rate_flops("bf16", d)
        for kind in ("fwd", "bwd"):
            for mask in ("full", "diagonal"):
                for q in (128, 1000, 2048, 8192, 32768):
                    for heads in (1, 8, 32, 128):
                        pairs = q * q / 2 if mask == "diagonal" else q * q
                        useful = 4 * d * pairs * heads * (2.5 if kind == "bwd" else 1.0)
                        t = call_gpu_s(table, kind, mask, q, q, heads, d, 0.25, 2, g.memory_bandwidth_gbps * 1e9,
                                       g.sms, 0.0)
                        assert useful / t <= ideal * (1 + 1e-9), (d, kind, mask, q, heads)


@pytest.mark.parametrize("gpu,kernel", PRESET_KERNELS)
def test_efficiency_never_exceeds_one(gpu, kernel):
    """Every preset, kernel and head dim: a ring of 8 GPUs, 64k tokens, causal and full,
    forward and backward: efficiency (ideal time / makespan) at most 1."""
    hw = Hardware(gpu=Gpu.preset(gpu, kernel=kernel))
    for d in HEAD_DIMS:
        for causal in (True, False):
            w = Workload(seq=65536, heads=32, kv_heads=8, head_dim=d, causal=causal, pass_="fwdbwd")
            m = compute_metrics(simulate(Scenario(workload=w, hardware=hw, n_gpus=8, layout="zigzag"),
                                         player="recurrence"))
            assert 0 < m.efficiency <= 1, (gpu, kernel, d, causal, m.efficiency)


def test_head_dim_96_on_h100_no_longer_beats_the_ideal():
    """`ringsim simulate --gpus 8 --seq 64k --head-dim 96` read the 128 series' rate for the
    ideal and the 64 series' steps for the blocks (126% efficiency); now both are the 96
    template's."""
    w = Workload(seq=65536, head_dim=96)
    eff = compute_metrics(simulate(Scenario(workload=w, n_gpus=8), player="recurrence")).efficiency
    assert 0.5 < eff < 1
    assert np.isfinite(eff)


@pytest.mark.parametrize("scale", [0.8, 1.0, 1.3])
def test_a_calibrated_rate_scale_keeps_the_ideal_a_bound(scale):
    # a GPU calibrated faster than its table (rate_scale above 1 on every group) runs its
    # blocks faster; the ideal's rate grows with it, so efficiency stays at most 1, and a
    # slower calibration leaves the ideal at the table's own best
    from sim.engine.play import simulate
    from sim.hardware.cluster import RATE_GROUPS, Gpu, Hardware
    from sim.scenario.config import Scenario, Workload
    from sim.trace.metrics import compute_metrics

    gpu = Gpu.preset("H100-SXM", rate_scale={g: scale for g in RATE_GROUPS})
    base = Gpu.preset("H100-SXM")
    assert gpu.rate_flops("bf16", 128) == pytest.approx(base.rate_flops("bf16", 128) * max(scale, 1.0))
    w = Workload(seq=8 * 16384, heads=32, kv_heads=8, head_dim=128, causal=False, pass_="fwd")
    m = compute_metrics(simulate(Scenario(workload=w, hardware=Hardware(gpu=gpu), n_gpus=8, layout="contiguous")))
    assert 0 < m.efficiency <= 1.0
