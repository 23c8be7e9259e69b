"""The engine (sim.engine): it looks the scheme up, plays its schedule, and is
deterministic."""

from sim.engine import simulate
from tests.sim.reference import scenario


def test_same_configuration_gives_identical_trace():
    a = simulate(scenario(n=6, seq=6 * 512, layout="zigzag", causal=True, pass_="fwdbwd"))
    b = simulate(scenario(n=6, seq=6 * 512, layout="zigzag", causal=True, pass_="fwdbwd"))
    assert a.to_dict() == b.to_dict()


def test_small_pages_are_asked_for_while_any_simulation_runs_and_the_setting_restored_after(monkeypatch):
    """simulate turns NumPy's huge-page advice off for its run; overlapping runs (a
    server's threads) share the setting: the last one out restores what the first found."""
    from sim import engine
    from sim.config import Scenario

    state = {"huge": True, "calls": []}

    def setting(value):
        state["calls"].append(value)
        before, state["huge"] = state["huge"], value
        return before

    monkeypatch.setattr(engine, "_madvise_setter", lambda: setting)
    first, second = engine._small_pages(), engine._small_pages()
    first.__enter__()
    second.__enter__()
    assert state["huge"] is False
    first.__exit__(None, None, None)          # the other run still goes on
    assert state["huge"] is False
    second.__exit__(None, None, None)
    assert state["huge"] is True and state["calls"] == [False, True]
    state["huge"] = False                     # a process that had turned it off itself
    engine.simulate(Scenario(n_gpus=4))
    assert state["huge"] is False and state["calls"][-2:] == [False, False]
