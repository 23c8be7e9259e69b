"""View 7: the exact merge's figure shows the steps the numpy ring recorded."""

from __future__ import annotations

from dashboard.figures.merge import merge_steps
from sim.scenario.online_softmax import example


def test_merge_figure_shows_the_recorded_steps():
    res = example(n_ranks=4, layout="striped", causal=True, query_row=13)
    fig = merge_steps(res, "striped")
    m_line = [t for t in fig.data if t.name == "running max m"][0]
    assert list(m_line.y) == [s.m for s in res.steps]
    factors = [t for t in fig.data if t.name == "rescale factor"][0]
    assert list(factors.y) == [s.rescale for s in res.steps]
    assert fig.layout.meta["max_abs_error"] == res.max_abs_error < 1e-12
