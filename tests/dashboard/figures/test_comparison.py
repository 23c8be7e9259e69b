"""View 4: the layout comparison is `ringsim compare`'s table, drawn."""

from __future__ import annotations

import pytest

from dashboard import compute
from dashboard.figures.comparison import comparison
from sim.planning.compare import compare_layout_rows
from tests.dashboard.conftest import small_scenario


def test_comparison_table_equals_the_cli_comparison():
    sc = small_scenario(n_gpus=4)
    rows = compute.compare_table(sc)                  # cached runs, the wave player
    assert rows == compare_layout_rows(sc)            # `ringsim compare`'s, SimPy
    fig = comparison(rows)
    best = min(rows, key=lambda r: r["makespan_s"])
    assert fig.layout.meta["best"] == [best["layout"], best["overlap"]]
    on = [t for t in fig.data if t.name == "overlap on" and t.xaxis == "x2"][0]
    assert list(on.y) == pytest.approx([r["efficiency"] * 100 for r in rows if r["overlap"]])


def _layout_row(layout, overlap, makespan):
    return {"layout": layout, "overlap": overlap, "makespan_s": makespan, "efficiency": 0.5,
            "load_imbalance": 1.0, "exposed_comm_s": 0.0}


def test_layouts_within_the_models_error_of_the_fastest_are_called_a_tie():
    """Two runs 4% apart tie (the model's error is about 5%, sim.planning.plan.TIE_WITHIN);
    6% apart the faster wins."""
    tie = comparison([_layout_row("zigzag", True, 1.0e-3), _layout_row("striped", True, 1.04e-3),
                      _layout_row("contiguous", True, 1.5e-3)])
    assert tie.layout.title.text == "Which layout wins: a tie, 2 runs within the model's error of 5% (1 ms to 1.04 ms)"
    win = comparison([_layout_row("zigzag", True, 1.0e-3), _layout_row("striped", True, 1.06e-3)])
    assert win.layout.title.text == "Which layout wins: zigzag with overlap on (1 ms)"
