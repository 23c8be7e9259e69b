"""The kernel model against hand computation: launch + FLOPs / (the cited table's rate) +
merge bytes / HBM bandwidth, with the rates read off the published figures here."""

import math

import numpy as np
import pytest

from sim.config import Gpu, Hardware, Scenario, Workload
from sim.engine import simulate
from sim.layouts import block_extents
from sim.metrics import compute_metrics
from tests.sim.reference import block_extents as token_extents

H, HKV, D, B = 32, 8, 128, 1            # the defaults the model assumes when not told
H800_HBM = 2500e9                       # the merge's rate: an H100 SXM's measured device-local copy


def h800(merge="fused", kernel="fa2"):
    return Hardware(gpu=Gpu.preset("H800-SXM", kernel=kernel, merge=merge))


def block(hw, flops, kind, mask, q, kv):
    return hw.compute_time_s(flops, dtype="bf16", kind=kind, mask=mask, q_tokens=q, kv_tokens=kv)


def test_dense_forward_block_by_hand():
    q = kv = 8192
    flops = 4 * D * q * kv * H * B
    # rate: FlashAttention-2 forward, no mask, head dim 128, 8k, H100: 370 TFLOP/s
    # merge (fused): per output element 4 + 2 + 4 bytes, per (row, head) 12
    merge = q * H * B * D * 10 + q * H * B * 12
    want = 5e-6 + flops / 370e12 + merge / H800_HBM
    assert block(h800(), flops, "fwd", "full", q, kv) == pytest.approx(want, rel=1e-12)


def test_unfused_merge_moves_the_bytes_of_each_elementwise_kernel():
    q = kv = 8192
    flops = 4 * D * q * kv * H * B
    # to(fp32) 2+4, sub 12, mul 8, sub 12 = 38 per element; statistics 52 per (row, head)
    merge = q * H * B * (D * 38 + 52)
    want = 5e-6 + flops / 370e12 + merge / H800_HBM
    assert block(h800("unfused"), flops, "fwd", "full", q, kv) == pytest.approx(want, rel=1e-12)


def test_an_unfused_merge_on_part_of_the_rank_s_queries_also_copies_the_slice_back():
    q, kv = 4096, 8192                  # zigzag's half-query block
    flops = 4 * D * q * kv * H * B
    # ring-flash-attention: out[slice_], lse[slice_] = slice_out, slice_lse after the
    # elementwise kernels: one more fp32 read and write, 8 bytes per element and per row
    merge = q * H * B * (D * (38 + 8) + 52 + 8)
    rate = 370e12                       # FlashAttention-2 dense forward, head dim 128, 8k keys
    want = 5e-6 + flops / rate + merge / H800_HBM
    hw = h800("unfused")
    got = hw.compute_time_s(flops, dtype="bf16", kind="fwd", mask="full", q_tokens=q, kv_tokens=kv, sliced=True)
    assert got == pytest.approx(want, rel=1e-12)
    assert hw.merge_copies_slices and not h800().merge_copies_slices
    # a fused merge writes the slice in place; a backward block adds into its slice in place
    fused = h800()
    assert fused.compute_time_s(flops, dtype="bf16", kind="fwd", mask="full", q_tokens=q, kv_tokens=kv,
                                sliced=True) == block(fused, flops, "fwd", "full", q, kv)
    assert hw.compute_time_s(2.5 * flops, dtype="bf16", kind="bwd", mask="full", q_tokens=q, kv_tokens=kv,
                             sliced=True) == block(hw, 2.5 * flops, "bwd", "full", q, kv)


def test_causal_block_runs_at_the_causal_rate_and_merges_every_row():
    c = 4096
    flops = 4 * D * (c * (c + 1) // 2) * H * B
    # FlashAttention-2 forward, causal, head dim 128, 4k: 319; width from q x kv / 2 pairs
    width = flops / (4 * c * c / 2)
    want = 5e-6 + flops / 319e12 + c * width * (10 + 12 / D) / H800_HBM
    assert block(h800(), flops, "fwd", "diagonal", c, c) == pytest.approx(want, rel=1e-12)
    assert width == pytest.approx(H * B * D, rel=1e-3)


def test_backward_rate_follows_the_queries_and_accumulates_dq_dk_dv():
    q, kv = 4096, 8192                  # a zigzag half block with half the queries
    flops = 2.5 * 4 * D * q * kv * H * B
    # FlashAttention-3 paper: FlashAttention-2 backward, head dim 128, 4k: 310
    grads = 10 * D * (q * H + 2 * kv * HKV) * B    # fp32 += bf16 on dQ, dK, dV
    want = 5e-6 + flops / 310e12 + grads / H800_HBM
    assert block(h800(), flops, "bwd", "full", q, kv) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("length,rate", [
    (3000, 298 + (319 - 298) * (math.log2(3000) - 11)),   # between 2k (298) and 4k (319), in log2
    (256, 191),                                            # held at 512's
    (65536, 335),                                          # held at 16k's
])
def test_rate_between_and_beyond_the_published_lengths(length, rate):
    hw = Hardware(gpu=Gpu.preset("H800-SXM", memory_bandwidth_gbps=1e15, launch_overhead_us=0.0))
    flops = 1e12
    assert block(hw, flops, "fwd", "diagonal", length, length) == pytest.approx(flops / (rate * 1e12), rel=1e-9)


def test_flat_model_is_overhead_plus_flops_over_rate():
    hw = Hardware(gpu=Gpu.preset("H100-SXM", efficiency=0.5, launch_overhead_us=7.0))
    assert block(hw, 1e12, "fwd", "diagonal", 4096, 4096) == pytest.approx(7e-6 + 1e12 / (989.4e12 * 0.5))
    fp32 = Hardware(gpu=Gpu.preset("H100-SXM"))           # no 32-bit kernel table: flat for fp32
    assert fp32.compute_time_s(1e12, dtype="fp32", kind="fwd", mask="full", q_tokens=8, kv_tokens=8) == \
        pytest.approx(5e-6 + 1e12 / (66.9e12 * 0.5))


def test_per_block_and_array_times_agree():
    hw = h800("unfused")
    kind = np.array(["fwd", "bwd", "fwd", "bwd"], dtype=object)
    mask = np.array(["full", "diagonal", "diagonal", "full"], dtype=object)
    q, kv = np.array([8192, 8192, 8191, 4096]), np.array([4096, 8192, 8191, 8192])
    flops = np.array([1e12, 2e12, 3e11, 5e12])
    many = hw.compute_times_s(flops, dtype="bf16", kind=kind, mask=mask, q_tokens=q, kv_tokens=kv)
    one = [block(hw, f, k, m, a, b) for f, k, m, a, b in zip(flops, kind, mask, q, kv)]
    assert many.tolist() == one


def test_ideal_rate_is_the_fastest_published_one():
    assert Gpu.preset("H800-SXM").rate_flops("bf16") == 370e12      # FA2 forward, dense, 8k-16k
    assert Gpu.preset("H100-SXM", kernel="fa3").rate_flops("bf16") == 648e12


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("n,seq", [(1, 16), (2, 32), (3, 36), (4, 64), (8, 128)])
@pytest.mark.parametrize("causal", [True, False])
def test_block_extents_count_the_tokens_that_take_part(layout, n, seq, causal):
    q_ext, kv_ext = block_extents(layout, seq, n, causal)
    want = token_extents(layout, seq, n, causal)
    assert [[(int(a), int(b)) for a, b in zip(qr, kr)] for qr, kr in zip(q_ext, kv_ext)] == want


def test_the_layouts_no_longer_tie():
    """8 x H100, 64k tokens, Llama-3-8B attention, fwd+bwd: causal blocks run slower than
    dense ones, so zigzag (mostly dense half blocks) beats striped (all causal), and every
    merge costs: nobody reaches 99% any more."""
    w = Workload(seq=65536, pass_="fwdbwd")
    eff = {lay: compute_metrics(simulate(Scenario(workload=w, layout=lay), player="recurrence")).efficiency
           for lay in ("contiguous", "striped", "zigzag")}
    assert eff["contiguous"] < eff["striped"] < eff["zigzag"] < 0.95


def test_the_workload_s_head_dim_and_kv_heads_choose_the_rates_and_the_bytes():
    """Head dim 64 and 4 K/V heads per 32 query heads: every block of a simulated ring is
    read off the head-dim-64 series, its dK/dV adds are those of 4 K/V heads, and the
    ideal time runs at the head-dim-64 dense forward's best rate."""
    from sim.players import durations_s
    from sim.schemes import get as get_scheme

    d, hkv, c = 64, 4, 8192
    w = Workload(seq=2 * c, heads=H, kv_heads=hkv, head_dim=d, causal=False, pass_="fwdbwd")
    sc = Scenario(workload=w, hardware=h800(), n_gpus=2, layout="contiguous")
    schedule = get_scheme("ring").build_schedule(sc)
    dur = durations_s(schedule, sc.hardware, w)
    comp = schedule.compute_ids
    flops = 4 * d * c * c * H * B
    # FlashAttention-2 on H100, dense, head dim 64, 8k: forward 322, backward 287 TFLOP/s
    fwd = 5e-6 + flops / 322e12 + c * H * B * (d * 10 + 12) / H800_HBM
    bwd = 5e-6 + 2.5 * flops / 287e12 + 10 * d * (c * H + 2 * c * hkv) * B / H800_HBM
    assert sorted(set(np.round(dur[comp], 15).tolist())) == pytest.approx(sorted([fwd, bwd]), rel=1e-12)
    trace = simulate(sc, player="recurrence")
    assert trace.hardware["rate_flops"] == 324e12      # FA2 forward, dense, head dim 64, 16k
    # the same blocks at the default geometry (head dim 128, 8 K/V heads) take other times
    default = Scenario(workload=Workload(seq=2 * c, causal=False, pass_="fwdbwd", head_dim=128),
                       hardware=h800(), n_gpus=2, layout="contiguous")
    assert trace.hardware["rate_flops"] != simulate(default, player="recurrence").hardware["rate_flops"]
