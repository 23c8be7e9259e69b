"""The plug-in point (sim.schemes): a scheme is a module, found by its name."""

import sys
import textwrap

import pytest

import sim.schemes as schemes
from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.scenario.config import Scenario, Workload


def test_the_ring_is_a_scheme_and_unknown_names_are_one_line_errors():
    assert schemes.names()[0] == "ring"
    ring = schemes.get("ring")
    assert ring.name == "ring" and set(ring.op_kinds) >= {"fwd", "kv"}
    with pytest.raises(RingsimError, match="unknown scheme 'tree'; choose one of ring"):
        schemes.get("tree")
    with pytest.raises(RingsimError, match="unknown scheme"):
        Scenario(scheme="tree")


def test_a_new_module_is_a_new_scheme(tmp_path, monkeypatch):
    """Adding a scheme is adding a module: a copy of the ring under another name plays
    through the engine without any other change."""
    module = tmp_path / "copy_of_ring.py"
    module.write_text(textwrap.dedent('''
        from dataclasses import replace
        from sim.schemes.ring import SCHEME as RING
        SCHEME = replace(RING, name="copy_of_ring", summary="the ring again")
    '''))
    monkeypatch.setattr(schemes, "__path__", [*schemes.__path__, str(tmp_path)])
    schemes.names.cache_clear()
    schemes.get.cache_clear()
    try:
        assert "copy_of_ring" in schemes.names()
        sc = Scenario(workload=Workload(seq=4096), n_gpus=4, scheme="copy_of_ring")
        got = simulate(sc)
        want = simulate(sc.with_(scheme="ring"))
        assert got.meta["schedule"] == "copy_of_ring" and got.config["scheme"] == "copy_of_ring"
        assert got.spans == want.spans
    finally:
        schemes.names.cache_clear()
        schemes.get.cache_clear()
        sys.modules.pop("sim.schemes.copy_of_ring", None)
