"""The implementation control and the Compare schemes view's implementations side by side,
driven over HTTP (Flask's test client); numbers against the simulator's own metrics."""

from __future__ import annotations

import pytest

from dashboard.state import ControlError, defaults, query_from_values, scenario_from_values, values_from_query
from sim import implementations
from sim.engine.play import simulate
from sim.trace.metrics import compute_metrics
from tests.dashboard.test_app_schemes import SMALL, _bars, _cells, _row_classes, _scenario, _store, _unit


def test_the_implementation_round_trips_through_the_url():
    values = defaults() | SMALL | {"impl": "rfa"}
    query = query_from_values(values)
    assert "impl=rfa" in query
    back, ignored = values_from_query(query)
    assert not ignored and back["impl"] == "rfa"
    assert scenario_from_values(back).impl == "rfa"
    assert "impl" not in query_from_values(defaults())         # the ideal one: a link leaves it out


@pytest.mark.parametrize("change, words", [
    ({"scheme": "ulysses", "impl": "rfa"}, "rfa has no ulysses scheme"),
    ({"layout": "striped", "impl": "te"}, "te has no striped layout"),
    ({"causal": False, "layout": "zigzag", "impl": "rfa"}, "only under a causal mask"),
])
def test_a_refusal_is_shown_beside_the_implementation(change, words):
    with pytest.raises(ControlError) as e:
        scenario_from_values(defaults() | SMALL | change)
    assert e.value.control == "impl" and words in str(e.value)


def _impls(client, lang="en", **changes):
    status, out = client.call("schemes.figure", {"scenario.data": _store(**changes), "profile.data": None,
                                                 "tabs.value": "schemes", "lang.value": lang,
                                                 "schemes-mode.value": "impls"}, ["schemes-mode.value"])
    assert status == 200
    return out["schemes"]["figure"], out["schemes-table"]["children"]


def test_compare_schemes_sets_the_implementations_side_by_side(client):
    fig, table = _impls(client, impl="rfa")
    makespan = _bars(fig, 1)
    for impl in implementations.of_scheme("ring"):
        m = compute_metrics(simulate(_scenario(impl=impl.library)))
        assert makespan[f"ring ({impl.library})"] == pytest.approx(m.makespan_s * _unit(fig, 1), rel=1e-9)
    rows = _cells(table)
    assert [r[1].replace(" ◂ on screen", "") for r in rows] == [i.library for i in implementations.of_scheme("ring")]
    current = [r for r, cls in zip(rows, _row_classes(table)) if cls and "current" in cls]
    assert current[0][:2] == ["ring", "rfa ◂ on screen"]


def test_an_implementation_lacking_the_layout_is_listed_with_its_reason(client):
    _, table = _impls(client, layout="striped")
    rows = {r[1]: r for r in _cells(table)}
    assert rows["te"][2] == "not possible: te has no striped layout; it runs zigzag, contiguous"
    _, table = _impls(client, lang="id", layout="striped")
    rows = {r[1]: r for r in _cells(table)}
    assert "te tidak menyediakan tata letak" in rows["te"][2]
