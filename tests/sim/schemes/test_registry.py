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


def test_each_scheme_s_variants_and_candidates_are_runs_of_it():
    """Variants (compare --schemes) and candidates (plan) are option values of the scheme's
    own settings and the common schedule options, and make scenarios of that scheme."""
    from sim.hardware.cluster import Hardware
    from sim.scenario.resolve import vary
    from sim.scenario.schema import SCENARIO_OPTIONS

    schedule = {o.name for o in SCENARIO_OPTIONS if o.group == "schedule"} - {"scheme"}
    base = Scenario(workload=Workload(seq=8192, heads=8, kv_heads=4), hardware=Hardware(gpus_per_node=4), n_gpus=8)
    for name in schemes.names():
        scheme = schemes.get(name)
        tried = scheme.variants(base.workload, base.hardware, 8) + scheme.candidates(base.workload, base.hardware, 8)
        assert tried and all(v.label for v in tried)
        for v in tried:
            assert set(v.values) <= schedule
            try:
                sc = vary(base, name, v.values)
            except RingsimError:
                continue            # a candidate the shapes refuse: listed as not possible
            assert sc.scheme == name and isinstance(sc.settings, scheme.settings_type)
    # the all-gather tries every head-group count that divides the K/V heads, the hybrid
    # every split 1 < u < 8 in both placements (two nodes) and each layout
    ag = schemes.get("allgather").candidates(base.workload, base.hardware, 8)
    assert [v.values["head-groups"] for v in ag] == [1, 2, 4]
    hy = schemes.get("hybrid").candidates(base.workload, base.hardware, 8)
    assert len(hy) == 2 * 2 * 3 and {v.values["ulysses-degree"] * v.values["ring-degree"] for v in hy} == {8}
