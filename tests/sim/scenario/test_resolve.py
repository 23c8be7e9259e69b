"""sim.scenario.resolve: option values become the Scenario and hardware built here by hand
from the configuration dataclasses and the presets, for the command line and the
dashboard alike."""

from __future__ import annotations

import pytest

from sim.cli.main import build_parser
from sim.cli.options import hardware_from_args, resolve_run, values_from_args
from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.hardware.pcie import Pcie
from sim.hardware.presets import cluster_preset
from sim.scenario.config import Scenario, Workload
from sim.scenario.resolve import (
    CUSTOM,
    OptionError,
    hardware_of,
    resolve,
    scenario_of,
    settings_of,
    vary,
    without_scheme,
)
from sim.schemes.allgather import AllgatherSettings
from sim.schemes.hybrid import HybridSettings


def test_values_left_out_are_the_defaults():
    assert scenario_of({}) == Scenario()
    assert resolve({}).profile is None and resolve({}).hardware == Hardware()


def test_values_become_the_scenario_written_by_hand():
    values = {"gpus": 16, "seq": 65536, "heads": 16, "kv-heads": 4, "pass": "fwdbwd", "scheme": "hybrid",
              "ulysses-degree": 4, "placement": "ring-inner", "layout": "striped", "overlap": False,
              "gpu": "H200", "link": "nvlink4", "inter-link": "ib-ndr", "gpus-per-node": 8, "tile": 64}
    want = Scenario(workload=Workload(seq=65536, heads=16, kv_heads=4, pass_="fwdbwd"),
                    hardware=Hardware(gpu=Gpu.preset("H200"), link=Link.preset("nvlink4"),
                                      inter_link=Link.preset("ib-ndr"), gpus_per_node=8),
                    n_gpus=16, scheme="hybrid", settings=HybridSettings(ulysses_degree=4, placement="ring-inner"),
                    layout="striped", overlap=False, tile=64)
    assert scenario_of(values) == want
    # the command line's flags give the same values, and so the same scenario
    argv = ["simulate", "--gpus", "16", "--seq", "64k", "--heads", "16", "--kv-heads", "4", "--pass", "fwdbwd",
            "--scheme", "hybrid", "--ulysses-degree", "4", "--placement", "ring-inner", "--layout", "striped",
            "--no-overlap", "--gpu", "H200", "--link", "nvlink4", "--inter-link", "ib-ndr",
            "--gpus-per-node", "8", "--tile", "64"]
    assert resolve_run(values_from_args(build_parser().parse_args(argv))).scenario == want


def test_a_cluster_fills_what_is_left_out_and_none_given_is_none():
    c = cluster_preset("dgx-h100")
    hw = hardware_of({"cluster": "dgx-h100"})
    assert (hw.gpu.name, hw.link.name, hw.inter_link.name, hw.gpus_per_node, hw.nics_per_node) == (
        c.gpu, c.link, c.inter_link, c.gpus_per_node, c.nics_per_node)
    # given as None: no link between nodes (the node's everywhere), a NIC per GPU
    hw = hardware_of({"cluster": "dgx-h100", "inter-link": None, "nics-per-node": None})
    assert (hw.inter_link, hw.nics_per_node) == (None, None)
    # the cluster's GPUs per NIC on a node of another size
    assert hardware_of({"cluster": "pcie-l20", "gpus-per-node": 4}).nics_per_node == 1
    with pytest.raises(OptionError, match="--gpus-per-node 6 does not split into the 4 GPUs per NIC") as e:
        hardware_of({"cluster": "pcie-l20", "gpus-per-node": 6})
    assert e.value.option == "gpus-per-node"


def test_a_pcie_node_is_a_fabric_while_its_link_is_pcie():
    own = cluster_preset("pcie-l20").pcie
    assert hardware_of({"cluster": "pcie-l20"}).pcie == own
    assert hardware_of({"cluster": "pcie-l20", "p2p": "off"}).pcie == Pcie(**{**vars(own), "p2p": "off"})
    assert hardware_of({"cluster": "pcie-l20", "link": "nvlink4"}).pcie is None
    # a PCIe option makes a node a fabric: two sockets, two GPUs per switch, pcie4
    assert hardware_of({"gpus-per-switch": 1}).pcie == Pcie(gen=4, gpus_per_switch=1, gpus_per_socket=4)
    assert hardware_of({"pcie-gen": 5}).link.name == "pcie5"


def test_custom_hardware_and_the_overhead_flag():
    hw = hardware_of({"gpu": CUSTOM, "tflops": 300.0, "link": CUSTOM, "link-gbps": 25.0, "nic-gbps": 5.0})
    assert hw.gpu == Gpu(name=CUSTOM, achieved_tflops=300.0)
    assert hw.link == Link(name=CUSTOM, bandwidth_gbps=25.0)
    assert hw.inter_link == Link(name=CUSTOM, bandwidth_gbps=5.0, latency_us=hw.link.latency_us)
    with pytest.raises(OptionError, match="a custom GPU needs its achieved TFLOP/s") as e:
        hardware_of({"gpu": CUSTOM})
    assert e.value.option == "tflops"
    # --overhead-us: the flat model's launch overhead, the block model's host floor of a call
    flat = hardware_of({"kernel": "flat", "overhead-us": 7.0}).gpu
    assert flat.launch_overhead_us == 7.0 and flat.kernel is None
    block = hardware_of({"overhead-us": 7.0}).gpu
    assert (block.floors.fwd_host_us, block.floors.bwd_host_us) == (7.0, 7.0)
    assert block == hardware_from_args(build_parser().parse_args(["simulate", "--overhead-us", "7"])).gpu


def test_a_mistake_names_its_option_as_its_flag():
    with pytest.raises(OptionError) as e:
        scenario_of({"kv-heads": 7})
    assert str(e.value) == "--kv-heads (7) must divide heads (32)" and e.value.option == "kv-heads"
    with pytest.raises(OptionError) as e:
        scenario_of({"link-gbps": -1.0})
    assert str(e.value).startswith("--link-gbps must be") and e.value.option == "link-gbps"
    # a message that names no option: the part being made
    with pytest.raises(OptionError) as e:
        scenario_of({"seq": 1000})
    assert "does not divide" in str(e.value) and (e.value.option, e.value.part) == (None, "gpus")
    with pytest.raises(RingsimError, match="no scenario option --colour"):
        scenario_of({"colour": "red"})


def test_a_scheme_s_settings_and_another_s_options():
    assert settings_of("allgather", {"head-groups": 2, "placement": "ulysses-inner"}) == AllgatherSettings(
        head_groups=2)                       # another scheme's option at its default: not given
    with pytest.raises(OptionError, match=r"--placement \(placement\) does not apply to the allgather scheme"):
        settings_of("allgather", {"placement": "ring-inner"})
    # the base of every scheme's comparison: the default scheme, no scheme's options
    values = {"scheme": "hybrid", "ulysses-degree": 2, "gpus": 16, "head-groups": 1}
    assert without_scheme(values) == {"gpus": 16}


def test_a_variant_of_a_scenario():
    base = Scenario(workload=Workload(seq=8192), n_gpus=8, layout="striped")
    got = vary(base, "hybrid", {"ulysses-degree": 2, "layout": "zigzag"}, n_gpus=4)
    assert got == Scenario(workload=Workload(seq=8192), n_gpus=4, scheme="hybrid",
                           settings=HybridSettings(ulysses_degree=2), layout="zigzag")
    assert vary(got, "ring", {}) == Scenario(workload=Workload(seq=8192), n_gpus=4, layout="zigzag")
