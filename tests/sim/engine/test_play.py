"""The engine (sim.engine.play): it looks the scheme up, plays its schedule, and is
deterministic."""

import subprocess
import sys
from pathlib import Path

import pytest

from sim.engine.play import simulate
from tests.sim.reference import scenario


def test_same_configuration_gives_identical_trace():
    a = simulate(scenario(n=6, seq=6 * 512, layout="zigzag", causal=True, pass_="fwdbwd"))
    b = simulate(scenario(n=6, seq=6 * 512, layout="zigzag", causal=True, pass_="fwdbwd"))
    assert a.to_dict() == b.to_dict()


def test_small_pages_are_asked_for_while_any_simulation_runs_and_the_setting_restored_after(monkeypatch):
    """simulate turns NumPy's huge-page advice off for its run; overlapping runs (a
    server's threads) share the setting: the last one out restores what the first found."""
    from sim.engine import host_memory, play
    from sim.scenario.config import Scenario

    state = {"huge": True, "calls": []}

    def setting(value):
        state["calls"].append(value)
        before, state["huge"] = state["huge"], value
        return before

    monkeypatch.setattr(host_memory, "madvise_setter", lambda: setting)
    first, second = host_memory.small_pages(), host_memory.small_pages()
    first.__enter__()
    second.__enter__()
    assert state["huge"] is False
    first.__exit__(None, None, None)          # the other run still goes on
    assert state["huge"] is False
    second.__exit__(None, None, None)
    assert state["huge"] is True and state["calls"] == [False, True]
    state["huge"] = False                     # a process that had turned it off itself
    play.simulate(Scenario(n_gpus=4))
    assert state["huge"] is False and state["calls"][-2:] == [False, False]


_FAULTS = r"""
import resource, sys
import numpy as np
from sim.engine import play
if sys.argv[1] == "simulate":
    from sim.scenario.config import Scenario
    play.simulate(Scenario(n_gpus=2))                  # a simulation keeps freed memory from then on
a = np.ones(3_000_000); del a                           # 24 MB, as a 1,024-GPU ring's columns
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    a = np.ones(3_000_000); b = a * 2; del a, b
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_after_a_simulation_freed_arrays_are_reused_not_faulted_in_afresh():
    """sim.engine.host_memory.keep_freed_memory: ten 24 MB arrays made and freed in turn fault
    their pages in once, not each time (counted in fresh interpreters, with and without a
    simulation first)."""
    def faults(first: str) -> int:
        out = subprocess.run([sys.executable, "-c", _FAULTS, first], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parents[3])
        return int(out.stdout.split()[-1])

    alone, after = faults("none"), faults("simulate")
    assert alone > 2_000                  # 5,860 pages an array: the default gives most of them back
    assert after < alone / 5


@pytest.mark.parametrize("pass_", ["fwd", "fwdbwd"])
def test_a_play_that_owns_its_schedule_lets_each_column_go_and_records_the_same_trace(monkeypatch, pass_):
    """play(own=True) releases the schedule's columns as it is done with them (the times
    too, inside the record); the trace is the one a play that keeps them records, on
    threads or not."""
    import numpy as np

    from sim.engine import threads
    from sim.engine.play import play
    from sim.engine.record import record_owned
    from sim.schemes import get

    sc = scenario(n=6, seq=6 * 64, layout="zigzag", causal=True, pass_=pass_)
    kept = play(get("ring").build_schedule(sc), sc.hardware, sc.workload)
    for worth in (threads.WORTH_THREADS, 0):
        monkeypatch.setattr(threads, "WORTH_THREADS", worth)
        schedule = get("ring").build_schedule(sc)
        owned = play(schedule, sc.hardware, sc.workload, own=True)
        assert owned.spans == kept.spans
        released = [name for name in ("pairs", "q_tokens", "kv_tokens", "kv_rank", "resource", "after", "kind",
                                      "step", "flops", "nbytes", "q_chunks", "kv_chunks", "peer", "rank")
                    if getattr(schedule, name) is None]
        assert len(released) == 14
    fresh = get("ring").build_schedule(sc)
    times = [np.zeros(len(fresh)), np.zeros(len(fresh))]
    record_owned(fresh, times, release=False)
    assert times == [] and fresh.kind is not None      # taken over; nothing let go
