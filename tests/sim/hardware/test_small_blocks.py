"""The block model's small-block terms against hand computation: FlashAttention-3's causal
tile order (its schedulers' sections of heads, longest tile first), the pipeline fill a
call pays once (each head's shared first tiles read once), and GQA's backward kernels
(FlashAttention-3's fp32 accumulators cleared and converted)."""

import numpy as np
import pytest

from sim.hardware.kernel_model import _load, call_gpu_s, cta_work, fill_s, kernel_table, lpt_section

FA3 = kernel_table("fa3-h100")
SMS = 132
BW = 2500e9
GAP = 1e-6


def test_sections_of_heads_as_flashattention_3_sizes_them():
    # forward: K and V of one head at 2k keys, head dim 128, bf16: 2048 x 256 x 2 = 1 MiB;
    # 32 fit in 32 MiB, times 8 query heads per K/V head
    assert lpt_section(FA3, "fwd", "diagonal", 2048, 2048, 128, 1 / 8, 2) == 256
    # backward: Q and dO (2048 x 256 x 2) and the fp32 dQ accumulator (2048 x 128 x 4) = 2 MiB:
    # 20 fit in 40 MiB, rounded down to a power of two
    assert lpt_section(FA3, "bwd", "diagonal", 2048, 2048, 128, 1 / 8, 2) == 16
    # dense calls and FlashAttention-2 go head by head
    assert lpt_section(FA3, "fwd", "full", 2048, 2048, 128, 1.0, 2) == 0
    assert lpt_section(kernel_table("fa2-h100"), "fwd", "diagonal", 2048, 2048, 128, 1.0, 2) == 0


def test_longest_tiles_first_across_heads_fill_the_sms_evenly():
    """A causal 2k forward of 64 heads on FlashAttention-3's 128 x 128 tiles: 16 tiles a
    head of 16 down to 1 steps, 8,704 steps on 132 SMs (65.9 each). Head by head, the last
    heads' long tiles run when the others are done (76 on the busiest SM); tile by tile
    across the section, longest first, each SM ends within one step of the average."""
    work, _, _ = cta_work(FA3, "fwd", "diagonal", 2048, 2048, 64, 128, SMS)
    assert work.tolist() == list(range(16, 0, -1))
    assert _load(work, 64, SMS) == 76.0
    even = work.sum() * 64 / SMS
    assert even <= _load(work, 64, SMS, 256) <= np.ceil(even) + 1


def test_the_causal_backward_s_key_tiles_come_longest_first():
    work, _, _ = cta_work(FA3, "bwd", "diagonal", 1024, 1024, 8, 128, SMS)
    assert work.tolist() == [16.0, 14.0, 12.0, 10.0, 8.0, 6.0, 4.0, 2.0]   # 64-row steps, 128-key tiles


def test_the_fill_reads_each_head_s_shared_tiles_once():
    """FlashAttention-3's dense forward, head dim 128, 2k tokens x 8 query heads on 2 K/V
    heads: 16 query tiles a head, 128 CTAs, all resident (one per SM): their own 128-row
    query tiles, and the first 176-key K and V tiles of the 2 K/V heads among their 8
    query heads, 2 bytes each."""
    got = fill_s(FA3, "fwd", "full", 16, 8, 128, 128, 0.25, 2, BW, SMS)
    assert got == pytest.approx((128 * 128 + 2 * 2 * 176) * 128 * 2 / BW, rel=1e-12)
    # backward: 16 key tiles of 128 a head, all 128 CTAs resident: their own K and V, and
    # the first 80-row Q and dO tiles of their 8 heads
    got = fill_s(FA3, "bwd", "full", 16, 8, 128, 128, 0.25, 2, BW, SMS)
    assert got == pytest.approx((128 * 2 * 128 + 8 * 2 * 80) * 128 * 2 / BW, rel=1e-12)


def test_flashattention_3_s_gqa_backward_clears_and_converts_fp32_accumulators():
    """hopper/flash_api.cpp mha_bwd: with fewer K/V heads, dk_accum and dv_accum (fp32, one
    per K/V head) are cleared, the main kernel adds into them, and two postprocess kernels
    convert them: 2 x (4 bytes written) + 2 x (4 read + 2 written) per K/V element, four
    more kernels."""
    q = kv = 4096
    heads, d = 32, 128
    mha = call_gpu_s("fa3-h100", "bwd", "full", q, kv, heads, d, 1.0, 2, BW, SMS, 1.0)
    gqa = call_gpu_s("fa3-h100", "bwd", "full", q, kv, heads, d, 0.25, 2, BW, SMS, 1.0)
    elems = kv * heads * 0.25 * d
    assert gqa - mha == pytest.approx((2 * 4 + 2 * 6) * elems / BW + 4 * GAP, rel=1e-9)
