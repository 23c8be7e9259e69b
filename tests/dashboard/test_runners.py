"""The comparisons' runners (dashboard/runners.py): processes kept for the server's life
give the rows `ringsim compare` gives, raise a run's error where the comparison runs,
leave a run no runner could take to the comparison, serve the next comparison after one
that stopped, let only their user in, and end with the server."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time
from multiprocessing.connection import Client
from multiprocessing.context import AuthenticationError

import pytest

from dashboard import compute, runners, side_by_side
from dashboard.state import defaults, scenario_from_values
from sim.engine.play import simulate
from sim.planning.compare import compare_layout_rows
from sim.scenario.config import Scenario
from sim.trace.metrics import compute_metrics


def _scenario(**changes) -> Scenario:
    return scenario_from_values(defaults() | {"gpus": 8, "seq": 16384} | changes)


def _jobs(n: int = 4) -> list[tuple]:
    return [(_scenario(gpus=g), None, ("metrics",)) for g in (4, 8, 16, 2)[:n]]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a child that ended and was not yet reaped is a zombie: ended all the same
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.fixture()
def two_runners(monkeypatch):
    """Two runners of this process; every comparison's run worth one, on two cores; a
    comparison that would start processes of its own fails the test."""
    monkeypatch.setattr(side_by_side, "APART_OPS", 1)
    monkeypatch.setattr(side_by_side, "RUNNER_OPS", 1)
    monkeypatch.setattr(side_by_side, "cores", lambda: 2)
    monkeypatch.setattr(compute, "DISK", None)

    def spawned(*args):
        raise AssertionError("a comparison started processes of its own beside the runners")
    monkeypatch.setattr(side_by_side, "_spawned", spawned)
    compute.clear_caches()
    started = runners.start(2)
    yield started
    runners.stop()
    compute.clear_caches()


def test_the_runners_give_the_commands_rows(two_runners):
    sc = _scenario()
    seen = []
    assert compute.compare_table(sc, progress=lambda done, total: seen.append(done)) == compare_layout_rows(sc)
    assert seen == list(range(1, 7))
    # a second comparison on the same runners, each run its own
    got = {}
    side_by_side.run_apart(_jobs(), lambda i, v: got.setdefault(i, v))
    assert sorted(got) == [0, 1, 2, 3]
    for i, (sc, _, _) in enumerate(_jobs()):
        assert got[i] == compute_metrics(simulate(sc, player="recurrence"))


def test_a_runs_error_is_raised_where_the_comparison_runs(two_runners):
    done = []
    with pytest.raises(AttributeError):                        # the run's own error, raised here
        side_by_side.run_apart([(_scenario(), "not a hardware model", ("metrics",))] * 2,
                               lambda i, v: done.append(i))
    assert done == []
    # the runners go on serving
    got = {}
    side_by_side.run_apart(_jobs(2), lambda i, v: got.setdefault(i, v))
    assert sorted(got) == [0, 1]


def test_a_runner_gone_leaves_its_share_to_the_others_then_to_the_comparison(two_runners, monkeypatch):
    first, second = two_runners.processes
    first.kill()
    first.wait()
    got = {}
    assert two_runners.run(_jobs(), [1, 0, 2, 3], 2, lambda i, v: got.setdefault(i, v)) == []
    assert sorted(got) == [0, 1, 2, 3]
    second.kill()
    second.wait()
    assert two_runners.run(_jobs(), [1, 0, 2, 3], 2, lambda i, v: None) == [1, 0, 2, 3]
    # the comparison makes them itself
    made = []
    monkeypatch.setattr(side_by_side, "_spawned", lambda jobs, order, most, done: made.extend(order))
    side_by_side.run_apart(_jobs(), lambda i, v: None)
    assert sorted(made) == [0, 1, 2, 3]


def test_a_comparison_does_not_wait_for_a_runner_busy_with_another(two_runners):
    key = two_runners.key()
    other = Client(two_runners.addresses[0], family="AF_UNIX", authkey=key)    # holds runner 0
    try:
        got = {}
        start = time.monotonic()
        assert two_runners.run(_jobs(), [0, 1, 2, 3], 2, lambda i, v: got.setdefault(i, v)) == []
        assert sorted(got) == [0, 1, 2, 3] and time.monotonic() - start < 60
    finally:
        other.close()


def test_a_stopped_comparison_frees_its_runner_for_the_next(two_runners):
    key = two_runners.key()
    for address in two_runners.addresses:
        stopped = Client(address, family="AF_UNIX", authkey=key)
        stopped.send(_jobs(1)[0])                  # a run asked for, its answer never read
        stopped.close()
    got = {}
    assert two_runners.run(_jobs(), [0, 1, 2, 3], 2, lambda i, v: got.setdefault(i, v)) == []
    assert sorted(got) == [0, 1, 2, 3]


def test_only_the_user_with_the_key_gets_in(two_runners):
    folder = two_runners.folder
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / runners.KEY_FILE).stat().st_mode) == 0o600
    with pytest.raises(AuthenticationError):
        Client(two_runners.addresses[0], family="AF_UNIX", authkey=b"not the key")
    got = {}
    assert two_runners.run(_jobs(2), [0, 1], 2, lambda i, v: got.setdefault(i, v)) == []
    assert sorted(got) == [0, 1]


def test_the_runners_end_with_the_server(tmp_path):
    """A server killed outright (no exit hooks run) takes its runners and their folder with
    it, as one that exits does. A process forked from the server (a server process under
    gunicorn) that exits leaves them to the server."""
    script = textwrap.dedent("""
        import atexit, os, sys, time
        from dashboard import runners
        r = runners.start(2)
        atexit.register(runners.stop)      # as `ringsim dashboard` does
        print(" ".join(str(p.pid) for p in r.processes), r.folder, flush=True)
        child = os.fork()
        if child == 0:
            sys.exit(0)                    # a forked server process ending with its exit hooks
        os.waitpid(child, 0)
        time.sleep(1)
        print("forked one ended", all(p.poll() is None for p in r.processes) and r.folder.exists(), flush=True)
        sys.stdin.readline()               # until the test has seen the runners alive
        if sys.argv[1] == "exit":
            sys.exit(0)
        time.sleep(120)
    """)
    for how in ("kill", "exit"):
        server = subprocess.Popen([sys.executable, "-c", script, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=os.environ | {"PYTHONPATH": runners._root()})
        *pids, folder = server.stdout.readline().split()
        assert server.stdout.readline().strip() == "forked one ended True"
        pids = [int(p) for p in pids]
        assert all(_alive(p) for p in pids)
        server.stdin.write("go\n")
        server.stdin.flush()
        if how == "kill":
            server.kill()
        server.wait(timeout=30)
        deadline = time.monotonic() + 20
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
        while os.path.exists(folder) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(folder)


def test_one_runner_takes_the_smallest_runs_first_the_others_the_largest(tmp_path, monkeypatch):
    """The first rows show at once: one runner starts on the smallest run while the other
    starts on the largest; a lone runner takes the largest first. (Runners that answer each
    run after a fifth of a second, in the order they were given their runs.)"""
    given = []

    class Runner:
        def __init__(self, address, family, authkey):
            self.address = address

        def send(self, job):
            given.append((self.address, job[0].n_gpus))

        def recv(self):
            time.sleep(0.2)
            return True, None

        def close(self):
            pass

    monkeypatch.setattr(runners, "Client", Runner)
    (tmp_path / runners.KEY_FILE).write_bytes(b"key")
    two = runners.Runners(tmp_path, 2)
    jobs = [(_scenario(gpus=g), None, ("metrics",)) for g in (32, 16, 8, 2)]
    assert two.run(jobs, [0, 1, 2, 3], 2, lambda i, v: None) == []
    first, second = two.addresses
    assert [g for a, g in given if a == first] == [2, 8] and [g for a, g in given if a == second] == [32, 16]
    given.clear()
    assert two.run(jobs, [0, 1, 2, 3], 1, lambda i, v: None) == []
    assert given == [(first, 32), (first, 16), (first, 8), (first, 2)]
