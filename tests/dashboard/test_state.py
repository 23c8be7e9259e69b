"""Control values, the URL and the scenario they describe."""

from __future__ import annotations

import pytest

from dashboard.state import (ControlError, defaults, query_from_values, scenario_from_config,
                             scenario_from_values, values_from_query)
from sim.config import Hardware
from sim.engine import simulate
from tests.dashboard.conftest import small_scenario


def test_default_scenario_is_the_issue_default():
    sc = scenario_from_values(defaults())
    w = sc.workload
    assert (sc.n_gpus, sc.hardware.gpu.name, sc.hardware.link.name) == (8, "H100-SXM", "nvlink4")
    assert (w.seq, w.heads, w.kv_heads, w.head_dim, w.dtype, w.causal) == (131072, 32, 8, 128, "bf16", True)
    assert query_from_values(defaults()) == ""


def test_url_round_trip():
    values = defaults() | {"gpus": 64, "layout": "striped", "overlap": False, "seq": 262144,
                           "sync": "buffered",
                           "link": "ib-ndr", "efficiency": 0.4, "pass": "fwdbwd"}
    query = query_from_values(values)
    assert "gpus=64" in query and "overlap=0" in query and "eff=0.4" in query
    back, ignored = values_from_query(query)
    assert back == values and ignored == []
    assert scenario_from_values(back).describe() == scenario_from_values(values).describe()


def test_unreadable_url_parameters_are_ignored_and_reported():
    values, ignored = values_from_query("?gpus=abc&layout=spiral&seq=4096&unknown=1")
    assert values["gpus"] == 8 and values["layout"] == "zigzag" and values["seq"] == 4096
    assert ignored == ["gpus=abc", "layout=spiral"]


@pytest.mark.parametrize("change, control, words", [
    ({"kv-heads": 7}, "kv-heads", "must divide"),
    ({"seq": 1000}, "seq", "does not divide"),
    ({"gpus": 0}, "gpus", "positive"),
    ({"gpus": 2.5}, "gpus", "whole number"),
    ({"gpus": 4096}, "gpus", "at most 1024 GPUs"),
    ({"heads": None}, "heads", "enter a whole number"),
    ({"efficiency": 2}, "efficiency", "efficiency"),
    ({"gpu": "custom"}, "tflops", "needs its achieved TFLOP/s"),
    ({"link-gbps": -3}, "link-gbps", "bandwidth"),
    ({"link-latency-us": -1}, "link-latency-us", "latency"),
    ({"link": "custom"}, "link-gbps", "bandwidth"),
    ({"tile": 0}, "tile", "positive"),
    ({"layout": "spiral"}, "layout", "choose one of"),
])
def test_mistakes_name_their_control(change, control, words):
    with pytest.raises(ControlError) as e:
        scenario_from_values(defaults() | change)
    assert e.value.control == control
    assert words in str(e.value)


def test_custom_hardware():
    sc = scenario_from_values(defaults() | {"gpu": "custom", "tflops": 300, "link": "custom",
                                            "link-gbps": 25, "inter-link": "ib-ndr"})
    assert sc.hardware.gpu.rate_flops("bf16") == 300e12
    assert sc.hardware.link.bandwidth_gbps == 25
    assert sc.hardware.inter_link.name == "ib-ndr"


def test_scenario_from_a_trace_header():
    sc = small_scenario(layout="striped", pass_="fwdbwd", sync="buffered")
    trace = simulate(sc)
    again = scenario_from_config(trace.config, Hardware())
    assert again.describe() == sc.describe()
    with pytest.raises(Exception, match="no usable configuration"):
        scenario_from_config({}, Hardware())
