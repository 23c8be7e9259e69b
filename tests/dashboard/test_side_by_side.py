"""A comparison's large runs in processes of their own (dashboard/side_by_side.py) give the
rows `ringsim compare` gives, simulated here one after another."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from dashboard import compute, side_by_side
from dashboard.disk_cache import DiskCache
from dashboard.state import defaults, scenario_from_values
from sim.engine.play import simulate
from sim.planning.compare import compare_layout_rows, compare_scheme_rows
from sim.scenario.config import Scenario
from sim.trace.metrics import compute_metrics


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


def test_the_small_runs_are_made_while_the_large_ones_run_apart(monkeypatch):
    """A comparison's small runs, simulated in the server's process, do not wait for its
    large ones to end in their processes (nor the large ones for the small ones): a small
    run that waits for the large ones to have started goes on at once, and the rows are the
    command's."""
    monkeypatch.setattr(compute, "DISK", None)
    compute.clear_caches()
    sc = _scenario()
    far = [0, 2, 4]
    monkeypatch.setattr(side_by_side, "apart", lambda scenarios: far)
    started, waited = threading.Event(), []
    real_simulated = side_by_side.simulated

    def apart(jobs, done):
        started.set()
        for j, job in enumerate(jobs):
            done(j, real_simulated(*job))

    def simulated(*job):
        waited.append(started.wait(timeout=30))
        return real_simulated(*job)

    monkeypatch.setattr(side_by_side, "run_apart", apart)
    monkeypatch.setattr(side_by_side, "simulated", simulated)
    try:
        assert compute.compare_table(sc) == compare_layout_rows(sc)
    finally:
        compute.clear_caches()
    assert waited == [True, True, True]


def test_the_largest_runs_start_first(monkeypatch):
    """The workers take the largest runs first, so that the last run to start is a small one."""
    sizes = {8: 1, 16: 3, 32: 2}
    jobs = [(_scenario(gpus=n), None, ("metrics",)) for n in sizes]
    submitted = []

    class Pool:
        def __init__(self, **kwargs):
            assert kwargs["initializer"] is side_by_side.lower_priority

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, scenario, profile, what):
            submitted.append(scenario.n_gpus)
            future = Future()
            future.set_result(scenario.n_gpus)
            return future

    monkeypatch.setattr(side_by_side, "ProcessPoolExecutor", Pool)
    monkeypatch.setattr(side_by_side, "operations", lambda sc: sizes[sc.n_gpus])
    got = {}
    side_by_side.run_apart(jobs, lambda i, v: got.setdefault(i, v))
    assert submitted == [16, 32, 8]
    assert got == {0: 8, 1: 16, 2: 32}


def test_small_runs_stay_in_the_process():
    small = [_scenario(gpus=4)] * 3
    assert side_by_side.apart(small) == []
    assert 1 <= side_by_side.workers_for(small) <= 3


@pytest.mark.parametrize("other_makes_it", [True, False])
def test_a_run_another_process_is_making_is_waited_for_not_made_again(monkeypatch, tmp_path, other_makes_it):
    """The page's own run, simulated by a server process for the view beside Compare layouts,
    is one of its rows: the comparison waits for that run's metrics instead of simulating
    it again on the cores the two share, and makes it itself where that process ends
    without it."""
    disk = DiskCache(tmp_path)
    monkeypatch.setattr(compute, "DISK", disk)
    compute.clear_caches()
    sc = _scenario()
    key = compute._key(sc, None, None)
    assert [compute._key(v, None, None) for v in compute.layout_variants(sc)].count(key) == 1
    made = []
    real = side_by_side.simulated
    monkeypatch.setattr(side_by_side, "simulated",
                        lambda s, p, w: made.append(compute._key(s, p, None)) or real(s, p, w))
    other = disk._lock(disk._name("metrics", key))     # the other process, simulating
    assert disk.making("metrics", key)
    got = {}
    comparison = threading.Thread(target=lambda: got.setdefault("rows", compute.compare_table(sc)))
    comparison.start()
    deadline = time.time() + 60
    while len(made) < 5 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    assert len(made) == 5 and key not in made and comparison.is_alive()      # the five others, then waiting
    if other_makes_it:
        disk.write("metrics", key, compute_metrics(simulate(sc)))
    other.close()
    comparison.join(60)
    assert got["rows"] == compare_layout_rows(sc)
    assert (key in made) is not other_makes_it and not disk.making("metrics", key)
    compute.clear_caches()


def test_where_the_server_keeps_runners_smaller_runs_go_to_them(monkeypatch):
    """Without a process to start for them, runs of RUNNER_OPS go apart (APART_OPS without)."""
    from dashboard import runners

    sizes = {8: side_by_side.RUNNER_OPS, 16: side_by_side.RUNNER_OPS, 32: side_by_side.RUNNER_OPS - 1}
    scenarios = [_scenario(gpus=n) for n in sizes]
    monkeypatch.setattr(side_by_side, "operations", lambda sc: sizes[sc.n_gpus])
    monkeypatch.setattr(side_by_side, "cores", lambda: 2)
    assert side_by_side.APART_OPS > side_by_side.RUNNER_OPS
    monkeypatch.setattr(runners, "RUNNERS", None)
    assert side_by_side.apart(scenarios) == []
    monkeypatch.setattr(runners, "RUNNERS", object())
    assert side_by_side.apart(scenarios) == [0, 1]
