"""Decode over a sharded K/V cache: tokens per rank, the memory-bound time, the merge, the
cache per GPU and the longest context that fits, against closed forms."""

import numpy as np
import pytest

from sim.errors import RingsimError
from sim.hardware.cluster import Hardware, Link
from sim.hardware.presets import KERNEL_GAP_US
from sim.inference.decode import DecodeAttention, attention_s, merge_kernel_s, simulate_decode_attention
from sim.inference.serve import MEMORY_UTILIZATION, Serving, check_fits, decode, max_context_tokens
from sim.scenario.models import model_preset
from sim.trace.format import A2A, AG, SEND
from sim.trace.metrics import compute_metrics


def test_round_robin_spreads_every_token():
    s = DecodeAttention(n_ranks=3, prompts=(10, 7), generated=2)
    owner = [np.arange(12) % 3, np.arange(9) % 3]
    assert s.tokens().tolist() == [np.bincount(o, minlength=3).tolist() for o in owner]


def test_contiguous_appends_the_output_on_the_last_rank():
    s = DecodeAttention(n_ranks=4, prompts=(100,), generated=30, layout="contiguous")
    assert s.tokens().tolist() == [[25, 25, 25, 55]]


def test_attention_is_its_bytes_at_the_streaming_rate():
    s = DecodeAttention(n_ranks=2, prompts=(4096, 1000), heads=8, kv_heads=1, head_dim=128)
    kv = np.array([2548, 2548]) * 2 * 1 * 128 * 2
    io = 2 * 8 * 128 * 2 + 2 * 8 * (128 * 2 + 4)
    assert np.allclose(attention_s(s, 2000.0), (kv + io) / 2000e9 + 2 * KERNEL_GAP_US * 1e-6)


@pytest.mark.parametrize("merge", ["all-gather", "all-to-all"])
def test_the_partials_meet_in_the_merge(merge):
    hw = Hardware(link=Link(bandwidth_gbps=100.0, latency_us=5.0), gpus_per_node=1, comm_cost="link")
    s = DecodeAttention(n_ranks=4, prompts=(8192,), heads=8, kv_heads=1, merge=merge)
    trace = simulate_decode_attention(s, hw)
    c = trace.columns
    send = c.stream == SEND
    partial = 8 * (128 * 2 + 4)
    if merge == "all-gather":
        assert (c.kind[send] == AG).all() and c.bytes[send].sum() == 4 * 3 * partial
    else:
        a2a = send & (c.kind == A2A)
        assert c.bytes[a2a].sum() == 4 * 3 * -(-partial // 4)
        assert c.bytes[send & (c.kind == AG)].sum() == 4 * 3 * (8 * 128 * 2 // 4)
    m = compute_metrics(trace)
    # the attention, then the collective's latency-bound rounds, then the merge
    assert m.makespan_s > attention_s(s, hw.gpu.memory_bandwidth_gbps).max() + merge_kernel_s(
        s, hw.gpu.memory_bandwidth_gbps) + 3 * 5e-6


def test_kv_cache_per_gpu_and_the_longest_context():
    model = model_preset("llama3-70b")
    serving = Serving(model=model, hardware=Hardware(), tp=8, cp=2)
    # 80 layers x K and V x one head per GPU x 128 x 2 bytes
    assert serving.kv_bytes_per_token() == 80 * 2 * 1 * 128 * 2
    d = decode(serving, [65536], 64)
    assert d.kv_cache_bytes_per_gpu == (65536 + 64) / 2 * 80 * 2 * 128 * 2
    longest = max_context_tokens(serving)
    room = 80e9 * MEMORY_UTILIZATION - serving.weight_bytes()
    assert longest == int(room // (80 * 2 * 128 * 2)) * 2
    check_fits(serving, longest / 2 * serving.kv_bytes_per_token(), "the longest")
    with pytest.raises(RingsimError, match="does not fit"):
        check_fits(serving, (longest / 2 + 1) * serving.kv_bytes_per_token(), "one more")


def test_a_decode_step_is_its_parts():
    serving = Serving(model=model_preset("llama3-8b"), hardware=Hardware(), tp=8, cp=1)
    d = decode(serving, [4096, 2048], 16)
    assert d.tpot_s == pytest.approx(sum(d.parts.values()))
    assert d.parts["merge_comm_s"] == 0.0 and d.parts["merge_s"] == 0.0
    assert d.to_dict()["tokens_per_s"] == pytest.approx(2 / d.tpot_s)
