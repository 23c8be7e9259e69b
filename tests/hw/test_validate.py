"""Validation arithmetic on traces whose errors are known by construction."""

import pytest

from sim.config import Gpu, Hardware, Link, Scenario, Workload
from sim.engine import simulate
from sim.trace import Span, Trace
from hw.validate import Case, compare_case, markdown, matrix, summarize
from sim.metrics import step_durations


def sim_trace(layout="zigzag", causal=True, n=4, seq=4096):
    hw = Hardware(gpu=Gpu(achieved_tflops=0.02, launch_overhead_us=20.0),
                  link=Link(bandwidth_gbps=1.0, latency_us=50.0))
    w = Workload(seq=seq, heads=4, kv_heads=4, head_dim=32, dtype="fp32", causal=causal)
    return simulate(Scenario(workload=w, hardware=hw, n_gpus=n, layout=layout))


def scaled(trace, factor, shift=0.0):
    spans = [Span(s.rank, s.stream, s.kind, s.step, shift + s.start_s * factor,
                  shift + s.end_s * factor, s.flops, s.bytes, s.q_chunks, s.kv_chunks, s.peer)
             for s in trace.spans]
    return Trace("measured", trace.world_size, spans, trace.config, {}, {})


def test_errors_of_a_uniformly_slower_measurement():
    sim = sim_trace()
    measured = [scaled(sim, f, shift=5.0) for f in (1.05, 1.10, 1.20)]
    row = compare_case(Case("zigzag", True, 4, 4096), measured, sim)
    assert row["measured_median_s"] == pytest.approx(1.10 * sim.makespan_s)
    assert row["measured_min_s"] == pytest.approx(1.05 * sim.makespan_s)
    assert row["error"] == pytest.approx(1 / 1.10 - 1)
    assert row["within_range"] is False
    # every step is off by the same factor
    assert row["step_median_abs_error"] == pytest.approx(1 - 1 / 1.10)
    assert row["step_max_abs_error"] == pytest.approx(1 - 1 / 1.10)
    assert row["parts"]["compute_s"]["error"] == pytest.approx(1 / 1.10 - 1)
    cv = (sum((f - 1.1167) ** 2 for f in (1.05, 1.10, 1.20)) / 2) ** 0.5 / 1.1167
    assert row["measured_cv"] == pytest.approx(cv, rel=1e-3)


def test_a_prediction_inside_the_spread_is_in_range():
    sim = sim_trace(layout="contiguous")
    row = compare_case(Case("contiguous", True, 4, 4096), [scaled(sim, f) for f in (0.9, 1.0, 1.1)], sim)
    assert row["within_range"] and row["abs_error"] == pytest.approx(0.0, abs=1e-12)
    s = summarize([row])
    assert s["median_abs_error"] == pytest.approx(0.0, abs=1e-12)
    assert s["cases_within_range_or_tolerance"] == 1


def test_step_durations_partition_each_ranks_busy_time():
    trace = sim_trace(layout="contiguous")
    steps = step_durations(trace)
    for rank in range(4):
        last = max(s.end_s for s in trace.spans if s.stream == "compute" and s.rank == rank)
        assert sum(d for (r, _), d in steps.items() if r == rank) == pytest.approx(last)
    # contiguous causal: rank 0 skips every block after its own
    assert [k for k in steps if k[0] == 0] == [(0, 0)]


def test_quick_matrix_has_at_least_twelve_cases_over_three_world_sizes():
    cases = matrix(quick=True)
    assert len(cases) >= 12
    assert {c.world_size for c in cases} == {2, 3, 4}
    assert {c.layout for c in cases} == {"contiguous", "striped", "zigzag"}
    assert {c.causal for c in cases} == {True, False}
    assert len({c.seq for c in cases}) >= 2
    assert len({c.key for c in cases}) == len(cases)


def test_markdown_lists_every_case():
    sim = sim_trace()
    rows = [compare_case(Case("zigzag", True, 4, 4096), [scaled(sim, f) for f in (1.0, 1.1)], sim)]
    md = markdown({"summary": summarize(rows), "cases": rows, "measured_on": {"device": "x"}})
    assert md.count("| ring/zigzag/causal/ws4/seq4096/fwd |") == 1
