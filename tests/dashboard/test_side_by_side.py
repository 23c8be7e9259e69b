"""A comparison's large runs in processes of their own (dashboard/side_by_side.py) give the
rows `ringsim compare` gives, simulated here one after another."""

from __future__ import annotations

import pytest

from dashboard import compute, side_by_side
from dashboard.state import defaults, scenario_from_values
from sim.planning.compare import compare_layout_rows, compare_scheme_rows
from sim.scenario.config import Scenario


def _scenario(**changes) -> Scenario:
    return scenario_from_values(defaults() | {"gpus": 8, "seq": 16384} | changes)


@pytest.fixture()
def every_run_apart(monkeypatch):
    """Every run worth a process of its own, on a machine of (at least) two cores."""
    monkeypatch.setattr(side_by_side, "APART_OPS", 1)
    monkeypatch.setattr(side_by_side, "cores", lambda: 2)
    monkeypatch.setattr(compute, "DISK", None)
    compute.clear_caches()
    yield
    compute.clear_caches()


def test_the_layouts_compared_apart_are_the_commands_rows(every_run_apart):
    sc = _scenario()
    assert len(side_by_side.apart(compute.layout_variants(sc))) == 6
    seen, so_far = [], []
    rows = compute.compare_table(sc, progress=lambda done, total: seen.append((done, total)),
                                 partial=so_far.append)
    assert rows == compare_layout_rows(sc)
    assert seen == [(i, 6) for i in range(1, 7)]
    # as each run ends, the rows done so far: that many, each the command's row, in its order
    assert [len(x) for x in so_far] == [i for i, _ in seen]
    for done in so_far:
        assert all(row in rows for row in done)
        assert [rows.index(row) for row in done] == sorted(rows.index(row) for row in done)
    assert so_far[-1] == rows


def test_the_schemes_compared_apart_are_the_commands_rows(every_run_apart):
    sc = _scenario()
    so_far = []
    rows = compute.scheme_rows(sc, partial=so_far.append)
    want = compare_scheme_rows(compute.scheme_base(sc))
    refused = sum("refused" in r for r in rows)
    assert [sum("refused" not in r for r in x) for x in so_far] == list(range(1, len(rows) - refused + 1))
    assert all(sum("refused" in r for r in x) == refused for x in so_far) and so_far[-1] == rows
    assert [(r["scheme"], r["variant"]) for r in rows] == [(r["scheme"], r["variant"]) for r in want]
    for got, ref in zip(rows, want):
        assert {k: v for k, v in got.items() if k != "refused_clause"} == \
               {k: v for k, v in ref.items() if k != "refused_clause"}


def test_a_worker_that_fails_fails_the_comparison(every_run_apart):
    done = []
    with pytest.raises(AttributeError):                        # the worker's own error, raised here
        side_by_side.run_apart([(_scenario(), "not a hardware model", ("metrics",))] * 2,
                               lambda i, v: done.append(i))
    assert done == []


def test_small_runs_stay_in_the_process():
    small = [_scenario(gpus=4)] * 3
    assert side_by_side.apart(small) == []
    assert 1 <= side_by_side.workers_for(small) <= 3
