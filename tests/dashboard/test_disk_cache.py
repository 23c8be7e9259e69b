"""The folder the dashboard's server processes share: a trace read back column for column,
a value made once for every process, the budget kept, and another code's values unread."""

from __future__ import annotations

import multiprocessing
import threading
import time

import numpy as np
import pytest

from dashboard import compute
from dashboard.disk_cache import DiskCache
from dashboard.state import defaults, scenario_from_values, scenario_key
from sim.engine.play import simulate
from sim.trace.format import COLUMN_TYPES
from sim.trace.metrics import compute_metrics


def _scenario(gpus=4):
    return scenario_from_values(defaults() | {"gpus": gpus, "seq": 8192})


@pytest.mark.parametrize("on_threads", [False, True])
def test_a_trace_comes_back_column_for_column(tmp_path, monkeypatch, on_threads):
    # a trace of a million spans writes its columns on threads (sim.engine.threads): here a
    # small one as if it were that large
    import sim.engine.threads as threads

    if on_threads:
        monkeypatch.setattr(threads, "WORTH_THREADS", 0)
    sc = _scenario()
    trace = simulate(sc, player="recurrence")
    disk = DiskCache(tmp_path)
    disk.write_trace("k", trace)
    back = DiskCache(tmp_path).read_trace("k")          # another process's view of the folder
    for name in COLUMN_TYPES:
        assert np.array_equal(getattr(back.columns, name), getattr(trace.columns, name)), name
    assert back.columns.chunk_sets == trace.columns.chunk_sets
    assert (back.config, back.hardware, back.n_gpus) == (trace.config, trace.hardware, trace.n_gpus)
    assert compute_metrics(back).makespan_s == compute_metrics(trace).makespan_s


def _job(running, go) -> None:
    running.set()
    go.wait(30)


def test_a_process_forked_while_a_value_is_made_does_not_hold_its_lock(tmp_path):
    """A Dash background job is forked from a server process, perhaps while that process
    makes a value: once the server process lets go of the value's lock, the lock is free,
    though the job still runs (it would hold it to its end, and a job waiting for the value
    would wait on itself)."""
    disk = DiskCache(tmp_path)
    held = disk._lock(disk._name("trace", "k"))
    assert disk.making("trace", "k")
    fork = multiprocessing.get_context("fork")
    running, go = fork.Event(), fork.Event()
    job = fork.Process(target=_job, args=(running, go))
    job.start()
    try:
        assert running.wait(30)                 # the job is past its fork
        assert disk.making("trace", "k")        # the server process holds it still
        held.close()
        assert job.is_alive() and not disk.making("trace", "k")
    finally:
        go.set()
        job.join(30)


def test_a_lock_waited_for_when_the_process_forks_is_not_held_by_the_forked_process(tmp_path):
    """A thread of the server process waits for a value's lock as a job is forked, and takes
    it after the fork: once that thread lets go, the lock is free though the job still runs
    (the job's copy of the waiting thread's file would keep it held)."""
    disk = DiskCache(tmp_path)
    name = disk._name("metrics", "k")
    first = disk._lock(name)
    taken, release = threading.Event(), threading.Event()

    def waiter():
        with disk._lock(name):
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.3)                             # the thread waits in flock
    assert not taken.is_set()
    fork = multiprocessing.get_context("fork")
    running, go = fork.Event(), fork.Event()
    job = fork.Process(target=_job, args=(running, go))
    job.start()
    try:
        assert running.wait(30)
        first.close()
        assert taken.wait(30)                    # the waiting thread took it after the fork
        release.set()
        thread.join(30)
        assert job.is_alive() and not disk.making("metrics", "k")
    finally:
        release.set()
        go.set()
        job.join(30)


def test_a_value_is_made_once_for_every_process(tmp_path):
    made = []
    one, two = DiskCache(tmp_path), DiskCache(tmp_path)
    assert one.get("rows", "k", lambda: made.append(1) or [1, 2]) == [1, 2]
    assert two.get("rows", "k", lambda: made.append(2) or [3]) == [1, 2]
    assert made == [1]


def test_the_least_recently_used_go_past_the_budget(tmp_path):
    disk = DiskCache(tmp_path, budget_bytes=3000)
    for i in range(5):
        disk.write("blob", str(i), b"x" * 1000)
        time.sleep(0.01)                                  # each its own time, oldest first
    disk.looking.join(10)                                 # the writes' own look, then one now
    disk.evict()
    kept = [i for i in range(5) if disk.read("blob", str(i)) is not None]
    assert kept == [3, 4]                                 # 2 x ~1,030 bytes fit 3,000; 3 do not


def test_a_write_looks_over_the_folder_on_a_thread_when_a_look_is_due(tmp_path, monkeypatch):
    # the first write, then each sixteenth of the budget written (EVICT_EVERY); never in the
    # request that writes: a look that takes long does not hold the write up
    disk = DiskCache(tmp_path, budget_bytes=16 * 1000)
    looks = []
    go = threading.Event()

    def look():
        looks.append(threading.current_thread() is not threading.main_thread())
        go.wait(10)
    monkeypatch.setattr(disk, "_look", look)
    sizes = [100, 400, 400, 400, 400, 400, 400, 400]
    due = []
    for i, n in enumerate(sizes):
        before = disk.looking
        disk.write("blob", str(i), b"x" * n)
        due.append(disk.looking is not before)
    go.set()
    disk.looking.join(10)
    # pickled, each write is its bytes and a few more: the first write, then the third after
    # it (~1,200 bytes since), then the third after that
    assert due == [True, False, False, True, False, False, True, False]
    assert looks and all(looks)


def test_an_evicted_values_lock_file_goes_with_it_and_a_stale_one_no_process_holds(tmp_path):
    import fcntl
    import os

    from dashboard.disk_cache import STALE_LOCK_S

    disk = DiskCache(tmp_path, budget_bytes=3000)
    disk.get("blob", "old", lambda: b"x" * 1000)
    time.sleep(0.01)
    disk.get("blob", "new", lambda: b"y" * 1000)
    disk.looking.join(10)
    disk.budget_bytes = 1500                              # now one of the two is too many
    lock_of = {k: disk._name("blob", k).with_suffix(".lock") for k in ("old", "new")}
    assert all(p.exists() for p in lock_of.values())
    long_ago = time.time() - 2 * STALE_LOCK_S
    stale, young, held = (tmp_path / f"blob-{k}.lock" for k in ("stale", "young", "held"))
    for p in (stale, young, held):
        p.touch()
    for p in (stale, held):
        os.utime(p, (long_ago, long_ago))
    with open(held) as f:
        fcntl.flock(f, fcntl.LOCK_EX)                     # a value being made
        disk.evict()
        assert disk.read("blob", "old") is None and not lock_of["old"].exists()
        assert disk.read("blob", "new") == b"y" * 1000 and lock_of["new"].exists()
        assert not stale.exists() and young.exists() and held.exists()


def test_another_codes_values_are_not_read(tmp_path):
    disk = DiskCache(tmp_path)
    disk.write("rows", "k", [1])
    other = DiskCache(tmp_path)
    other.fingerprint = "another"
    assert other.read("rows", "k") is None


def test_the_views_read_a_run_another_process_simulated(tmp_path, monkeypatch):
    sc = _scenario(8)
    key = scenario_key(sc, None)
    trace = simulate(sc, player="recurrence")
    compute.use_disk(DiskCache(tmp_path))
    try:
        compute.clear_caches()
        compute.DISK.write_trace(key, trace)
        with monkeypatch.context() as m:
            m.setattr(compute, "simulate", None)           # read, not simulated
            got = compute.run(sc)
        assert np.array_equal(got.trace.columns.end_s, trace.columns.end_s)
        assert compute.metrics(sc).makespan_s == compute_metrics(trace).makespan_s
        compute.clear_caches()
        rows = compute.compare_table(sc)
        compute.clear_caches()
        assert compute.compare_table(sc) == rows        # the second time from the folder
    finally:
        compute.use_disk(None)
        compute.clear_caches()


def _ask_for_trace(folder: str, log: str, start: float) -> float:
    """One server process asking the shared folder for a scenario's trace: simulating it
    (and noting so in `log`) unless another process has, at `start` (time.time())."""
    import time

    disk = DiskCache(folder)
    time.sleep(max(0.0, start - time.time()))

    def make():
        with open(log, "a") as f:
            f.write("simulated\n")
        time.sleep(0.5)                                   # long enough for the other to ask meanwhile
        return simulate(_scenario(), player="recurrence")

    trace, _ = disk.trace("k", make)
    return float(compute_metrics(trace).makespan_s)


def test_two_processes_asking_at_once_simulate_a_scenario_once(tmp_path):
    import multiprocessing
    import time

    log = tmp_path / "made.log"
    start = time.time() + 1.0
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        spans = pool.starmap(_ask_for_trace, [(str(tmp_path / "shared"), str(log), start)] * 2)
    assert log.read_text().splitlines() == ["simulated"]
    assert spans[0] == spans[1] == compute_metrics(simulate(_scenario(), player="recurrence")).makespan_s


def test_a_failed_simulation_lets_the_next_asker_in(tmp_path):
    disk = DiskCache(tmp_path)

    def fail():
        raise ValueError("no")

    try:
        disk.trace("k", fail)
    except ValueError:
        pass
    trace, made = disk.trace("k", lambda: simulate(_scenario(), player="recurrence"))
    assert made and len(trace.columns)
    back, made_again = DiskCache(tmp_path).trace("k", fail)    # waits for the write, then reads
    assert not made_again and np.array_equal(back.columns.end_s, trace.columns.end_s)


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="a nice value per thread is Linux's")
def test_a_look_runs_behind_requests_and_so_do_the_threads_it_starts():
    import os

    from dashboard.disk_cache import BEHIND_NICE, behind_requests

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    mine = nice()
    seen = {}

    def look():
        behind_requests()
        seen["look"] = nice()
        child = threading.Thread(target=lambda: seen.__setitem__("started by it", nice()))
        child.start()
        child.join()
    t = threading.Thread(target=look)
    t.start()
    t.join()
    assert seen == {"look": max(mine, BEHIND_NICE), "started by it": max(mine, BEHIND_NICE)}
    assert nice() == mine                                 # the request's thread keeps its own


def _write_then_look(disk):
    disk.write("blob", "child", b"x")
    disk.looking.join(10)
    disk.evict()                                          # waits for any look under way


def test_a_forked_process_writes_and_looks_though_a_look_was_under_way_at_the_fork(tmp_path):
    # a Dash background job is forked from a server process, whose threads may hold the
    # folder's look and count locks at that moment: the job starts its looks anew
    disk = DiskCache(tmp_path)
    disk._counting.acquire()
    disk._evicting.acquire()
    try:
        job = multiprocessing.get_context("fork").Process(target=_write_then_look, args=(disk,))
        job.start()
        job.join(30)
        stuck = job.is_alive()
        if stuck:
            job.kill()
        assert not stuck and job.exitcode == 0
    finally:
        disk._counting.release()
        disk._evicting.release()
    assert disk.read("blob", "child") == b"x"
