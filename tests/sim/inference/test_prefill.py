"""One prefill layer on the engine: the work and bytes in its trace against the closed
forms, pass-Q's return and merge, and the times of a case simple enough to add up."""

import numpy as np
import pytest

from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.hardware.presets import KERNEL_GAP_US
from sim.inference import work
from sim.inference.prefill import PrefillAttention, merge_s, simulate_prefill_attention
from sim.trace.format import A2A, AG, COMPUTE, KV, SEND
from sim.trace.metrics import compute_metrics

FLAT = Hardware(gpu=Gpu(name="flat", achieved_tflops=100.0, launch_overhead_us=0.0, memory_bandwidth_gbps=1000.0),
                link=Link(bandwidth_gbps=100.0, latency_us=0.0), gpus_per_node=1, comm_cost="link")
"""A flat GPU and an alpha-beta link with no latency: every time is work over a rate."""


def shape(**kw):
    base = dict(n_ranks=4, cached=3000, new=1024, heads=8, kv_heads=2, head_dim=64)
    return PrefillAttention(**(base | kw))


def sent(trace, kind):
    c = trace.columns
    sel = (c.stream == SEND) & (c.kind == kind)
    return c.bytes[sel], c.rank[sel]


@pytest.mark.parametrize("scheme", ["pass-kv", "pass-q", "allgather"])
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_each_scheme_computes_every_pair_once(scheme, layout):
    s = shape(scheme=scheme, layout=layout)
    trace = simulate_prefill_attention(s, FLAT)
    c = trace.columns
    comp = c.stream == COMPUTE
    pairs = work.block_pairs(s.cached, s.new_padded, 4, layout, "zigzag")
    assert c.flops[comp].sum() == pytest.approx(4 * 64 * 8 * pairs.sum())
    per_rank = np.bincount(c.rank[comp], weights=c.flops[comp], minlength=4) / (4 * 64 * 8)
    want = pairs.sum(axis=0) if scheme == "pass-q" else pairs.sum(axis=1)
    assert np.allclose(per_rank, want)


def test_pass_kv_moves_each_ranks_kv_and_pass_q_its_queries():
    kv = simulate_prefill_attention(shape(scheme="pass-kv"), FLAT)
    q = simulate_prefill_attention(shape(scheme="pass-q"), FLAT)
    cached = work.cached_counts(3000, 4, "zigzag")
    nbytes, _ = sent(kv, KV)
    # N - 1 hops of every rank's block: K and V of its cached and new tokens, 2 heads of 64 in bf16
    assert nbytes.sum() == 3 * sum(2 * (c + 256) * 2 * 64 * 2 for c in cached)
    nbytes, _ = sent(q, KV)
    assert len(nbytes) == 4 * 3 and (nbytes == 256 * 8 * 64 * 2).all()
    back, _ = sent(q, A2A)
    assert len(back) == 4 * 3 and (back == 256 * 8 * (64 * 2 + 4)).all()
    assert q.meta["carries"] == "q" and kv.meta["carries"] == "kv"


def test_allgather_gathers_every_ranks_block_on_every_rank():
    trace = simulate_prefill_attention(shape(scheme="allgather"), FLAT)
    nbytes, ranks = sent(trace, AG)
    cached = work.cached_counts(3000, 4, "zigzag")
    # every rank receives the three other blocks
    assert nbytes.sum() == 3 * sum(2 * (c + 256) * 2 * 64 * 2 for c in cached)


def test_pass_q_merge_reads_every_partial():
    s = shape(scheme="pass-q")
    rows = 256 * 8
    want = (4 * rows * (64 * 2 + 4) + rows * 64 * 2) / 1000e9 + KERNEL_GAP_US * 1e-6
    assert merge_s(s, 4, 1000.0) == pytest.approx(want)
    trace = simulate_prefill_attention(s, FLAT)
    c = trace.columns
    last = (c.stream == COMPUTE) & (c.step == 4)
    assert np.allclose(c.end_s[last] - c.start_s[last], want)


def test_one_rank_is_the_work_over_the_rate():
    s = shape(n_ranks=1, cached=1000, new=512, scheme="pass-kv")
    m = compute_metrics(simulate_prefill_attention(s, FLAT))
    pairs = 512 * 1000 + 512 * 513 // 2
    assert m.makespan_s == pytest.approx(4 * 64 * 8 * pairs / 100e12)


def test_a_ring_whose_hops_hide_takes_the_computes():
    # links so fast the hops take nothing: the makespan is the busiest rank's work over the rate
    fast = Hardware(gpu=FLAT.gpu, link=Link(bandwidth_gbps=1e9, latency_us=0.0), gpus_per_node=1, comm_cost="link")
    for scheme in ("pass-kv", "pass-q"):
        s = shape(scheme=scheme)
        m = compute_metrics(simulate_prefill_attention(s, fast))
        pairs = work.rank_pairs(s.cached, s.new_padded, 4, "zigzag", "zigzag", scheme)
        extra = merge_s(s, 4, 1000.0) if scheme == "pass-q" else 0.0
        assert m.makespan_s == pytest.approx(4 * 64 * 8 * pairs.max() / 100e12 + extra, rel=1e-6)


def test_new_tokens_are_padded_to_whole_chunks():
    s = shape(new=1001)                 # zigzag on 4 ranks: 8 chunks
    assert s.new_padded == 1008 and s.new_per_rank == 252


@pytest.mark.parametrize("bad,match", [
    (dict(heads=6, kv_heads=4), "must divide"),
    (dict(cached=-1), "cached prefix"),
    (dict(scheme="pass-x"), "prefill scheme"),
    (dict(scheme="allgather", layout="striped"), "chunks"),
    (dict(kv_dtype="fp4"), "cache dtype"),
])
def test_bad_shapes_are_one_line(bad, match):
    with pytest.raises(RingsimError, match=match):
        shape(**bad)


@pytest.mark.parametrize("scheme", ["pass-kv", "pass-q", "allgather"])
def test_a_traces_header_replays_the_same_layer(scheme, tmp_path):
    from sim.inference.decode import DecodeAttention, simulate_decode_attention
    from sim.inference.serve import simulate_config
    from sim.trace.format import Trace

    s = shape(scheme=scheme, new=1001)
    path = tmp_path / "t.json"
    simulate_prefill_attention(s, FLAT).save(path)
    again = simulate_config(Trace.load(path).config, FLAT)
    assert PrefillAttention.from_config(again.config) == s
    assert np.array_equal(again.columns.end_s, simulate_prefill_attention(s, FLAT).columns.end_s)
    d = DecodeAttention(n_ranks=2, prompts=(100, 50), generated=3)
    assert DecodeAttention.from_config(simulate_decode_attention(d, FLAT).config) == d
    with pytest.raises(RingsimError, match="no inference layer"):
        simulate_config({"workload": {}}, FLAT)
