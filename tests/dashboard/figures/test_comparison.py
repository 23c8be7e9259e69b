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
