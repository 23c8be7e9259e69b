"""The engine (sim.engine): it looks the scheme up, plays its schedule, and is
deterministic."""

from sim.engine import simulate
from tests.sim.reference import scenario


def test_same_configuration_gives_identical_trace():
    a = simulate(scenario(n=6, seq=6 * 512, layout="zigzag", causal=True, pass_="fwdbwd"))
    b = simulate(scenario(n=6, seq=6 * 512, layout="zigzag", causal=True, pass_="fwdbwd"))
    assert a.to_dict() == b.to_dict()
