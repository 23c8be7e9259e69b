"""Control values, the URL and the scenario they describe."""

from __future__ import annotations

import pytest

from dashboard.state import ControlError, defaults, query_from_values, scenario_from_values, unknown_keys, values_from_query
from sim.engine.play import simulate
from sim.hardware.cluster import Hardware, Link
from sim.scenario.config import scenario_from_config
from sim.schemes.allgather import AllgatherSettings
from sim.schemes.base import Settings
from sim.schemes.hybrid import HybridSettings
from sim.schemes.ulysses import UlyssesSettings
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


def test_keys_the_page_does_not_know_are_named_with_the_nearest_it_does():
    query = "?link-gbps=0&gpus=8&view=memory&unknown=1&link-gbps=2&Seq=4096"
    assert unknown_keys(query, ("view", "q", "lang")) == ["link-gbps (link_gbps?)", "unknown", "Seq (seq?)"]
    assert unknown_keys("?gpus=8&link_gbps=100&view=memory&lang=id", ("view", "q", "lang")) == []


@pytest.mark.parametrize("change, control, words", [
    ({"kv-heads": 7}, "kv-heads", "must divide"),
    ({"seq": 1000}, "seq", "does not divide"),
    ({"gpus": 0}, "gpus", "positive"),
    ({"gpus": 2.5}, "gpus", "whole number"),
    ({"gpus": 4096}, "gpus", "at most 1024 GPUs"),
    ({"heads": None}, "heads", "enter a whole number"),
    ({"efficiency": 2}, "efficiency", "efficiency"),
    ({"gpu": "custom"}, "tflops", "needs its achieved TFLOP/s"),
    ({"link-gbps": -3}, "link-gbps", "--link-gbps must be a positive"),
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


# --- the schemes and the topology ---------------------------------------------------------

def test_scheme_settings_round_trip_through_the_url():
    values = defaults() | {"gpus": 32, "scheme": "hybrid", "ulysses-degree": 4, "ring-degree": 8,
                           "placement": "ring-inner", "layout": "striped"}
    query = query_from_values(values)
    assert "scheme=hybrid" in query and "ulysses_degree=4" in query and "ring_degree=8" in query
    assert "placement=ring-inner" in query
    back, ignored = values_from_query(query)
    assert back == values and ignored == []
    sc = scenario_from_values(back)
    assert (sc.scheme, sc.settings, sc.layout) == (
        "hybrid", HybridSettings(ulysses_degree=4, ring_degree=8, placement="ring-inner"), "striped")
    back, _ = values_from_query("?scheme=allgather&head_groups=4")
    sc = scenario_from_values(back)
    assert (sc.scheme, sc.settings) == ("allgather", AllgatherSettings(head_groups=4))


def test_settings_that_do_not_apply_leave_the_scenario_and_the_url():
    # head groups belong to all-gather, the ring's controls to the schemes with a ring
    values = defaults() | {"scheme": "ulysses", "head-groups": 4, "ulysses-degree": 2, "layout": "striped",
                           "overlap": False}
    sc = scenario_from_values(values)
    assert (sc.settings, sc.layout, sc.overlap) == (UlyssesSettings(), "zigzag", True)
    assert sc.describe()["ulysses_degree"] == 8                # every GPU
    assert query_from_values(values) == "?scheme=ulysses"
    ring = scenario_from_values(values | {"scheme": "ring"})
    assert (ring.settings, ring.layout, ring.overlap) == (Settings(), "striped", False)


def test_a_cluster_preset_sets_the_hardware_as_the_cli_does():
    from sim.cli.main import build_parser
    from sim.cli.options import hardware_from_args

    values, ignored = values_from_query("?cluster=dgx-h100&gpus=32")
    assert ignored == []
    assert (values["gpu"], values["link"], values["inter-link"], values["gpus-per-node"],
            values["nics-per-node"]) == ("H100-SXM", "nvlink4", "ib-ndr", 8, 8)
    hw = scenario_from_values(values).hardware
    cli = hardware_from_args(build_parser().parse_args(["simulate", "--cluster", "dgx-h100"]))
    assert hw == cli
    assert query_from_values(values) == "?cluster=dgx-h100&gpus=32"   # the preset's values are not repeated
    # a value the link gives overrides the preset, and one set back to the plain default stays
    values, _ = values_from_query("?cluster=pcie-a100&gpu=H200&inter_link=same")
    assert (values["gpu"], values["link"], values["inter-link"], values["nics-per-node"]) == (
        "H200", "pcie4", "same", 2)
    assert values_from_query(query_from_values(values))[0] == values


def test_nic_controls_shape_the_hardware():
    sc = scenario_from_values(defaults() | {"inter-link": "ib-ndr", "nic-gbps": 25.0, "nics-per-node": 2})
    hw = sc.hardware
    assert (hw.inter_link.name, hw.inter_link.bandwidth_gbps, hw.nics_per_node) == ("ib-ndr", 25.0, 2)
    assert hw.inter_link.latency_us == Link.preset("ib-ndr").latency_us
    # without a link between nodes, the NIC takes the node's link at the NIC's bandwidth
    hw = scenario_from_values(defaults() | {"nic-gbps": 12.5}).hardware
    assert (hw.inter_link.name, hw.inter_link.bandwidth_gbps) == ("nvlink4", 12.5)
    assert query_from_values(defaults() | {"nic-gbps": 12.5, "nics-per-node": 4}) == "?nics_per_node=4&nic_gbps=12.5"


@pytest.mark.parametrize("change, control, words", [
    ({"scheme": "allgather", "head-groups": 3}, "head-groups", "head groups (3) must divide"),
    ({"scheme": "hybrid", "gpus": 16, "ulysses-degree": 3}, "ulysses-degree", "does not divide"),
    ({"scheme": "hybrid", "gpus": 16, "ulysses-degree": 4, "ring-degree": 2}, "ulysses-degree", "not the 16 GPUs"),
    ({"scheme": "hybrid", "gpus": 16, "ring-degree": 0}, "ring-degree", "positive"),
    # Ulysses's degree is the GPUs: the message stands under them
    ({"scheme": "ulysses", "gpus": 64}, "gpus", "does not divide the 32 query heads"),
    ({"scheme": "allgather", "gpus": 12, "seq": 98304}, "gpus", "whole nodes"),
    ({"scheme": "allgather", "seq": 1000}, "seq", "does not divide"),
    ({"nics-per-node": 3}, "nics-per-node", "must divide"),
    ({"nic-gbps": -1}, "nic-gbps", "--nic-gbps must be a positive"),
    ({"cluster": "dgx-z"}, "cluster", "choose one of"),
])
def test_scheme_and_topology_mistakes_name_their_control(change, control, words):
    with pytest.raises(ControlError) as e:
        scenario_from_values(defaults() | change)
    assert e.value.control == control
    assert words in str(e.value)


@pytest.mark.parametrize("scheme, settings", [("allgather", {"head_groups": 2}), ("ulysses", {}),
                                              ("hybrid", {"ulysses_degree": 2, "placement": "ring-inner"})])
def test_scenario_from_a_non_ring_trace_header(scheme, settings):
    sc = small_scenario(scheme=scheme, pass_="fwdbwd", **settings)
    again = scenario_from_config(simulate(sc).config, Hardware())
    assert again.describe() == sc.describe()
    assert again.scheme == scheme


def test_the_overhead_control_sets_the_kernel_model_s_floor_as_the_flag_does():
    from sim.cli.main import build_parser
    from sim.cli.options import hardware_from_args

    page = scenario_from_values(defaults() | {"overhead-us": 7.0}).hardware.gpu
    cli = hardware_from_args(build_parser().parse_args(["simulate", "--overhead-us", "7"])).gpu
    assert page.floors == cli.floors and (page.floors.fwd_host_us, page.floors.bwd_host_us) == (7.0, 7.0)


@pytest.mark.parametrize("change, control, english, indonesian", [
    ({"kv-heads": 5}, "kv-heads", "K/V heads (5) must divide Query heads (32)",
     "Kepala K/V (5) harus membagi habis Kepala kueri (32)"),
    ({"scheme": "allgather", "head-groups": 3}, "head-groups", "Head groups (3) must divide K/V heads (8)",
     "Kelompok kepala (3) harus membagi habis Kepala K/V (8)"),
    ({"nics-per-node": 3}, "nics-per-node", "NICs per node (3) must divide GPUs per node (8)",
     "NIC per simpul (3) harus membagi habis GPU per simpul (8)"),
    ({"gpus": 2000}, "gpus", "GPUs (2,000): the dashboard simulates at most 1,024 GPUs",
     "GPU (2.000): dasbor ini menyimulasikan paling banyak 1.024 GPU"),
    ({"gpus": 0}, "gpus", "GPUs must be more than 0, got 0", "GPU harus lebih dari 0, bukan 0"),
    ({"seq": 1000}, "seq", "Sequence length 1,000 does not divide into 16 equal chunks (zigzag layout on 8 GPUs)",
     "Panjang urutan 1.000 tidak terbagi menjadi 16 potongan sama besar (tata letak zigzag pada 8 GPU)"),
    ({"scheme": "hybrid", "gpus": 16, "ulysses-degree": 4, "ring-degree": 2}, "ulysses-degree",
     "Ulysses degree 4 × Ring degree 2 = 8, not the 16 GPUs", "Derajat Ulysses 4 × Derajat cincin 2 = 8, bukan 16 GPU"),
    ({"efficiency": 2.0}, "efficiency", "Efficiency must be more than 0 and at most 1, got 2",
     "Efisiensi harus lebih dari 0 dan paling besar 1, bukan 2"),
    ({"docs": "1000"}, "docs", "Documents: the documents (1,000 tokens) do not fill",
     "Dokumen: dokumen (1.000 token) tidak memenuhi"),
    ({"seq": 999_999_999_999}, "seq",
     "Sequence length 999,999,999,999 is longer than the 2,147,483,648 tokens ringsim counts exactly",
     "Panjang urutan 999.999.999.999 melebihi 2.147.483.648 token yang dihitung ringsim secara eksak"),
])
def test_a_message_names_the_controls_as_the_page_labels_them(change, control, english, indonesian):
    """What the page says under a control, in each language, names it (and any other control
    it mentions) by its label, in the language's numbers."""
    from dashboard.i18n import Translator
    from dashboard.state import message

    with pytest.raises(ControlError) as e:
        scenario_from_values(defaults() | change)
    assert e.value.control == control
    assert message(Translator("en"), e.value).startswith(english)
    assert message(Translator("id"), e.value).startswith(indonesian)


def test_a_refusal_the_simulator_gives_a_reason_for_reads_in_the_page_s_language():
    from dashboard.i18n import Translator
    from dashboard.state import message

    with pytest.raises(ControlError) as e:
        scenario_from_values(defaults() | {"scheme": "ulysses", "gpus": 64})
    assert e.value.reason is not None
    said = message(Translator("id"), e.value)
    assert "64" in said and "32" in said and "query heads" not in said
