"""The cached results and the tables behind the views."""

from __future__ import annotations

import pytest

from dashboard import compute
from dashboard.figures.timeline import rank_starts
from sim.hardware.cluster import Gpu, Hardware
from sim.trace.metrics import compute_metrics
from tests.dashboard.conftest import small_scenario


def test_crossover_is_the_design_condition():
    # the closed form holds for the flat model (one rate for every block, no merge)
    # ... and for the link's alpha-beta (NCCL's costs are not fact 5's link)
    sc = small_scenario(hardware=Hardware(gpu=Gpu.preset("H100-SXM", efficiency=0.5), comm_cost="link"))
    w, hw = sc.workload, sc.hardware
    # docs/design.md fact 5, per kv head group: 4 c^2 d H / F = 2 c d H_kv b / B
    c_star = w.elem_bytes * hw.gpu.rate_flops(w.dtype) * w.kv_heads / (2 * hw.link.bandwidth_gbps * 1e9 * w.heads)
    assert compute.crossover_tokens(hw, sc) == pytest.approx(c_star, rel=1e-9)
    c = 2048
    b_star = 2 * w.kv_heads * c * w.head_dim * w.elem_bytes / (4 * c * c * w.head_dim * w.heads / hw.gpu.rate_flops(w.dtype))
    assert compute.crossover_bandwidth_gbps(hw, sc, c) * 1e9 == pytest.approx(b_star, rel=1e-9)


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
