"""View 8: model against measurement, on a 'measured' trace made from a simulated one."""

from __future__ import annotations

import numpy as np
import pytest

from dashboard import compute
from dashboard.figures.overlay import overlay, trace_summary
from dashboard.figures.style import time_unit
from sim.trace.format import Trace
from tests.dashboard.conftest import measured_from


def test_step_errors_of_a_uniformly_slower_run(small_trace):
    measured = measured_from(small_trace, factor=1.25)
    rows = compute.step_errors(small_trace, measured)
    assert [r["step"] for r in rows] == list(range(small_trace.n_gpus))
    for r in rows:
        assert r["measured_s"] == pytest.approx(1.25 * r["simulated_s"])
        assert r["error"] == pytest.approx(1 / 1.25 - 1)
    fig = overlay(small_trace, measured, rows)
    assert fig.layout.meta["makespan_error"] == pytest.approx(1 / 1.25 - 1)
    meas = [t for t in fig.data if t.name == "measured compute"][0]
    assert min(meas.base) == pytest.approx(0.0)          # aligned on its own time 0
    assert {int(y) % 2 for y in meas.y} == {1}           # on the measured lanes


def _step_durations(trace: Trace) -> dict[tuple[int, int], float]:
    """(rank, step) -> from the end of the rank's previous compute (the trace's first
    event for its first) to the end of this step's last compute, span by span."""
    t0 = min(s.start_s for s in trace.spans)
    ends: dict[int, dict[int, float]] = {}
    for s in trace.spans:
        if s.stream == "compute":
            ends.setdefault(s.rank, {})[s.step] = s.end_s
    out = {}
    for rank, by_step in ends.items():
        prev = t0
        for step in sorted(by_step):
            out[rank, step] = by_step[step] - prev
            prev = by_step[step]
    return out


def test_step_errors_follow_the_validation_definition(small_trace):
    measured = measured_from(small_trace, factor=1.1, noise=0.2, seed=3)
    rows = compute.step_errors(small_trace, measured)
    sim_d, meas_d = _step_durations(small_trace), _step_durations(measured)
    for r in rows:
        pairs = [(sim_d[k], m) for k, m in meas_d.items() if k[1] == r["step"] and k in sim_d]
        errs = [(s - m) / m for s, m in pairs if m > 0]    # a step measured as no time: no error
        assert r["ranks"] == len(pairs)
        assert r["simulated_s"] == pytest.approx(np.median([s for s, _ in pairs]))
        assert r["measured_s"] == pytest.approx(np.median([m for _, m in pairs]))
        assert (r["error"], r["error_min"], r["error_max"]) == pytest.approx(
            (np.median(errs), min(errs), max(errs)))


def test_overlay_lanes_are_the_compute_spans(small_trace):
    measured = measured_from(small_trace, factor=1.5, offset_s=2.0)
    fig = overlay(small_trace, measured, compute.step_errors(small_trace, measured))
    for label, tr, lane in (("simulated", small_trace, 0), ("measured", measured, 1)):
        (bars,) = [t for t in fig.data if t.name == f"{label} compute"]
        comp = [s for s in tr.spans if s.stream == "compute"]
        assert sorted(np.asarray(bars.y).astype(int)) == sorted(2 * s.rank + lane for s in comp)
        scale = {"s": 1, "ms": 1e3, "µs": 1e6}[time_unit(max(small_trace.makespan_s,
                                                                       measured.makespan_s))[1]]
        assert sum(bars.x) == pytest.approx(sum(s.duration_s for s in comp) * scale)


def test_trace_summary_counts_the_spans(small_trace):
    words = list(trace_summary(small_trace))
    assert words[0] == f"simulated trace, 4 ranks, {len(small_trace.spans)} spans"
    assert words[1] == "zigzag layout"
    assert isinstance(small_trace, Trace)


def test_overlay_legend_sits_beside_the_plots_clear_of_the_titles(small_trace):
    measured = measured_from(small_trace, factor=1.2)
    fig = overlay(small_trace, measured, compute.step_errors(small_trace, measured))
    legend = fig.layout.legend
    # right of the plotting area (paper x 1): the titles are centred over the plots
    assert legend.x > 1 and legend.xanchor == "left" and legend.orientation == "v"
    assert all(a.x <= 1 for a in fig.layout.annotations)
