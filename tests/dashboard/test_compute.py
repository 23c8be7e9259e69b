"""The cached results and the tables behind the views."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dashboard import compute
from dashboard.figures.timeline import rank_starts
from dashboard.state import defaults, scenario_from_values
from sim.engine.play import simulate
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.trace.format import KV, SEND
from sim.trace.metrics import compute_metrics
from tests.dashboard.conftest import small_scenario


def test_crossover_is_the_design_condition():
    # the closed form holds for the flat model (one rate for every block, no merge) on the
    # link's alpha-beta (NCCL's costs are not fact 5's link), with no fixed cost on either side
    gpu = Gpu.preset("H100-SXM", efficiency=0.5, launch_overhead_us=0.0)
    sc = small_scenario(hardware=Hardware(gpu=gpu, link=Link(bandwidth_gbps=450.0, latency_us=0.0), comm_cost="link"))
    w, hw = sc.workload, sc.hardware
    # docs/design.md fact 5, per kv head group: 4 c^2 d H / F = 2 c d H_kv b / B
    c_star = w.elem_bytes * hw.gpu.rate_flops(w.dtype) * w.kv_heads / (2 * hw.link.bandwidth_gbps * 1e9 * w.heads)
    assert compute.crossover_tokens(hw, sc) == pytest.approx(c_star, rel=2e-6)
    c = 2048
    b_star = 2 * w.kv_heads * c * w.head_dim * w.elem_bytes / (4 * c * c * w.head_dim * w.heads / hw.gpu.rate_flops(w.dtype))
    assert compute.crossover_bandwidth_gbps(hw, sc, c) * 1e9 == pytest.approx(b_star, rel=2e-6)


def test_the_crossover_is_where_the_block_curves_cross():
    """From the crossover on a full block's compute covers its transfer at every size, and
    just below it does not (the curves the sweep and question 5 draw, fixed costs included)."""
    sc = scenario_from_values(defaults())
    c = compute.crossover_tokens(sc.hardware, sc)
    assert c is not None
    below = compute.block_times(sc.hardware, sc, c * (1 - 1e-5))
    assert below[0] < below[1]
    for x in np.geomspace(c, compute.CROSSOVER_TOKENS[1], 40):
        comp, xfer = compute.block_times(sc.hardware, sc, float(x))
        assert comp >= xfer
    b = compute.crossover_bandwidth_gbps(sc.hardware, sc, 1024)
    at = compute.block_times(compute.with_link_gbps(sc.hardware, b), sc, 1024)
    under = compute.block_times(compute.with_link_gbps(sc.hardware, b * (1 - 1e-5)), sc, 1024)
    assert at[0] >= at[1] and under[0] < under[1]


@pytest.mark.parametrize("gpus", [16, 64])
def test_a_blocks_transfer_is_the_rings_slowest_send(gpus):
    """The block's transfer is what the simulation gives the ring's slowest K/V send of a
    block of that size, NCCL's costs in the ring's communicator (fewer channels past 64 GPUs)."""
    sc = scenario_from_values(defaults() | {"gpus": gpus, "seq": 128 * gpus})
    cols = simulate(sc).columns
    send = (cols.stream == SEND) & (cols.kind == KV)
    _, transfer = compute.block_times(sc.hardware, sc, 128)
    assert transfer == pytest.approx(float((cols.end_s[send] - cols.start_s[send]).max()), rel=1e-12)


def test_a_smaller_ring_standing_for_a_larger_one_sends_as_it_does():
    """The sweep's ring of 16 GPUs for a ring of 256 (dashboard.compute.as_slice_of): each send
    takes what the 256's take, not the 16's own (more channels)."""
    big = scenario_from_values(defaults() | {"gpus": 256, "seq": 128 * 256})
    small = big.with_(n_gpus=16, workload=replace(big.workload, seq=128 * 16))
    sliced = small.with_(hardware=compute.as_slice_of(small.hardware, 16, 256))

    def slowest_send(sc):
        cols = simulate(sc).columns
        send = (cols.stream == SEND) & (cols.kind == KV)
        return float((cols.end_s[send] - cols.start_s[send]).max())
    assert slowest_send(sliced) == pytest.approx(compute.block_times(big.hardware, big, 128)[1], rel=1e-12)
    assert slowest_send(small) < 0.8 * slowest_send(sliced)
    assert compute.as_slice_of(small.hardware, 16, 16) is small.hardware


def test_metrics_of_cached_run_equal_direct(small_trace):
    sc = small_scenario(layout="zigzag")
    res = compute.run(sc)
    assert res.metrics == compute_metrics(small_trace)
    assert compute.run(sc) is res                     # second call comes from the cache


def test_a_result_keeps_where_each_ranks_spans_begin(small_trace):
    res = compute.Result(small_trace)
    starts = res.rank_starts
    assert starts is res.rank_starts
    ranks = [s.rank for s in small_trace.spans]
    for r in range(small_trace.n_gpus):
        assert starts[r] == ranks.index(r) and starts[r + 1] - starts[r] == ranks.count(r)
    assert (rank_starts(small_trace.columns, 4) == starts).all()


def _ask(cache, out) -> None:
    out.put(cache.get("k", lambda: "made by the forked process"))


def test_a_forked_process_makes_what_a_thread_of_its_parent_was_making():
    """A Dash background job is forked from a server process, perhaps while one of its
    threads makes a value (the page's run): the job has no such thread, so it makes the value
    itself where it would wait for ever."""
    import multiprocessing
    import threading

    cache = compute.BoundedCache(10, len)
    making, finish = threading.Event(), threading.Event()
    parent = threading.Thread(target=lambda: cache.get("k", lambda: making.set() or finish.wait(30) and "parent's"))
    parent.start()
    try:
        assert making.wait(30)
        fork = multiprocessing.get_context("fork")
        out = fork.Queue()
        job = fork.Process(target=_ask, args=(cache, out))
        job.start()
        try:
            assert out.get(timeout=30) == "made by the forked process"
        finally:
            job.kill()
            job.join(30)
    finally:
        finish.set()
        parent.join(30)
    assert cache.get("k", lambda: "again") == "parent's"


def test_the_cache_is_bounded_by_spans():
    cache = compute.BoundedCache(10, len)
    cache.get("a", lambda: "x" * 6)
    cache.get("b", lambda: "y" * 6)                    # 12 > 10: "a" goes
    assert cache.get("a", lambda: "new") == "new" and cache.misses == 3
    assert cache.get("too big", lambda: "z" * 11) == "z" * 11
    assert "too big" not in cache._items               # larger than the budget: not kept


def test_past_the_crossover_bandwidth_every_faster_link_hides_the_block():
    """At 64 GPUs a send's time steps up and down with the link's bandwidth (NCCL's channels):
    the crossover is where every faster link hides the block, so that the page's own link
    (450 GB/s, its send 419 us against 228 us of compute) reads as exposed, below it."""
    sc = scenario_from_values(defaults() | {"gpus": 64})
    c = sc.tokens_per_rank
    b = compute.crossover_bandwidth_gbps(sc.hardware, sc, c)
    comp, own = compute.block_times(sc.hardware, sc, c)
    assert own > comp and b > sc.hardware.link.bandwidth_gbps
    for x in np.geomspace(b, 8 * b, 90):
        assert compute.block_times(compute.with_link_gbps(sc.hardware, float(x)), sc, c)[1] <= comp
