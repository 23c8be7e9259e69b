"""PCIe nodes (sim.hardware.pcie): the route each flow takes, its time, and flows that share a
link, against closed forms worked out here by hand."""

import json
import subprocess
import sys

import numpy as np
import pytest

from sim.engine.play import simulate
from sim.engine.players import durations_s, times_simpy, times_waves
from sim.engine.schedule import A2A, ScheduleBuilder
from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.hardware.pcie import PCIE_X16_GBPS, SOCKET_LINKS, STAGED_SHARE, Pcie
from sim.hardware.topology import Topology
from sim.scenario.config import Scenario, Workload
from sim.trace.metrics import compute_metrics
from tests.sim.reference import run_by

MB = 1 << 20
ALPHA = 5e-6                       # the pcie4 / pcie5 link presets' latency
G4, G5 = PCIE_X16_GBPS[4] * 1e9, PCIE_X16_GBPS[5] * 1e9


def node(p2p="on", gen=4, per_switch=2, per_socket=4, socket_link="upi-spr", gpus=8, **more):
    # the fabric's own routes and rates: alpha-beta on each route, not NCCL's costs
    return Hardware(gpu=Gpu.preset("A100-PCIe-80GB"), link=Link.preset(f"pcie{gen}"), gpus_per_node=gpus,
                    comm_cost="link",
                    pcie=Pcie(gen=gen, gpus_per_switch=per_switch, gpus_per_socket=per_socket, p2p=p2p,
                              socket_link=socket_link, **more))


def route_names(hw, src, dst):
    t = Topology.of(hw, hw.gpus_per_node)
    names = t.resource_names()
    return [names[int(r[0])] for r in t.route(np.array([src]), np.array([dst])) if r[0] >= 0]


def test_a_hop_under_one_switch_turns_in_the_switch():
    hw = node()
    assert route_names(hw, 0, 1) == ["GPU 0 pcie4 out", "GPU 1 pcie4 in"]
    assert hw.transfer_time_s(64 * MB, 0, 1) == pytest.approx(ALPHA + 64 * MB / G4, rel=1e-12)


def test_a_hop_across_switches_crosses_both_uplinks_and_the_root_complex():
    hw = node()
    # the root complex forwards both switches' uplinks: two lanes, one per switch
    assert route_names(hw, 0, 2) == ["GPU 0 pcie4 out", "GPU 2 pcie4 in", "node 0 switch 0 uplink up",
                                     "node 0 socket 0 root complex in lane 0",
                                     "node 0 socket 0 root complex out lane 1", "node 0 switch 1 uplink down"]
    # every link on the way is x16 of PCIe 4.0: the hop runs at 31.5 GB/s
    assert hw.transfer_time_s(64 * MB, 0, 2) == pytest.approx(ALPHA + 64 * MB / G4, rel=1e-12)


def test_a_hop_across_sockets_with_peer_to_peer_runs_at_the_socket_link():
    hw = node(p2p="on")
    assert "node 0 socket link 0->1" in route_names(hw, 1, 6)
    # the socket link (22 GB/s as NCCL rates Sapphire Rapids) is the narrowest
    assert hw.transfer_time_s(64 * MB, 1, 6) == pytest.approx(ALPHA + 64 * MB / 22e9, rel=1e-12)


def test_a_hop_across_sockets_without_peer_to_peer_is_staged_through_host_memory():
    hw = node(p2p="socket", socket_link="upi-emr")                 # a 40 GB/s socket link: 1 lane
    staged = STAGED_SHARE * PCIE_X16_GBPS[4]                                   # 22.2 GB/s
    # two copies in series: two latencies, the rate of a staged copy
    assert hw.transfer_time_s(64 * MB, 1, 6) == pytest.approx(2 * ALPHA + 64 * MB / (staged * 1e9), rel=1e-12)
    # on one socket it stays peer to peer
    assert hw.transfer_time_s(64 * MB, 0, 3) == pytest.approx(ALPHA + 64 * MB / G4, rel=1e-12)


def test_without_peer_to_peer_even_a_pair_under_one_switch_goes_up_to_host_memory():
    hw = node(p2p="off")
    names = route_names(hw, 0, 1)
    assert names[2:] == ["node 0 switch 0 uplink up", "node 0 socket 0 root complex in lane 0",
                         "node 0 socket 0 host memory", "node 0 socket 0 root complex out lane 0",
                         "node 0 switch 0 uplink down"]
    assert hw.transfer_time_s(MB, 0, 1) == pytest.approx(2 * ALPHA + MB / (STAGED_SHARE * G4), rel=1e-12)


def test_switch_mode_is_peer_to_peer_under_a_switch_only():
    hw = node(p2p="switch")
    assert not hw.fabric.staged[0, 1] and hw.fabric.staged[0, 2] and hw.fabric.staged[0, 7]


def test_a_wide_link_has_lanes_and_a_narrow_one_one():
    # PCIe 3.0 ports (15.75 GB/s) under a 40 GB/s socket link: two lanes of 20 GB/s;
    # the root complex carries two switches' uplinks: two lanes
    f = node(gen=3, socket_link="upi-emr").fabric
    assert f.lanes == {"uplink": 1, "root": 2, "socket": 2}
    assert sum(n.startswith("socket link 0->1") for n in f.names) == 2
    assert f.rate[0, 4] == pytest.approx(PCIE_X16_GBPS[3])


def _flows(hw, pairs, nbytes):
    """One schedule of flows src -> dst (in order, no dependencies), timed both ways."""
    t = Topology.of(hw, hw.gpus_per_node)
    b = ScheduleBuilder(hw.gpus_per_node, t.resource_names())
    src, dst = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    b.transfers(kind=A2A, src=src, dst=dst, step=0, nbytes=nbytes, resources=t.route(src, dst))
    s = b.build()
    dur = durations_s(s, hw, Workload())
    start, end = times_waves(s, dur)
    _, simpy_end, _ = times_simpy(s, list(dur))
    np.testing.assert_allclose(end, simpy_end, rtol=0, atol=1e-15)
    return start, end


def test_two_flows_sharing_a_switch_uplink_queue_for_it():
    # GPUs 0 and 1 (switch 0) send to 2 and 3 (switch 1) at once: both cross switch 0's
    # uplink, one at a time, each at 31.5 GB/s
    hw = node()
    one = ALPHA + 64 * MB / G4
    start, end = _flows(hw, [(0, 2), (1, 3)], 64 * MB)
    assert start.tolist() == pytest.approx([0.0, one], rel=1e-12)
    assert end.max() == pytest.approx(2 * one, rel=1e-12)
    # under one switch each has its own ports: side by side
    _, end = _flows(hw, [(0, 1), (1, 0)], 64 * MB)
    assert end.tolist() == pytest.approx([one, one], rel=1e-12)


def test_copies_staged_through_one_socket_share_its_host_memory():
    # p2pBandwidthLatencyTest's two copies at once, one each way between two GPUs without
    # peer to peer: each alone at the staged rate, together one after the other through
    # the socket's host memory (the pair moves one copy's bandwidth between them)
    hw = node(p2p="off", per_switch=1)
    one = 2 * ALPHA + 64 * MB / (STAGED_SHARE * G4)
    _, end = _flows(hw, [(0, 1)], 64 * MB)
    assert end.max() == pytest.approx(one, rel=1e-12)
    _, end = _flows(hw, [(0, 1), (1, 0)], 64 * MB)
    assert sorted(end.tolist()) == pytest.approx([one, 2 * one], rel=1e-12)
    # staged through the other socket's memory, a copy does not wait
    _, end = _flows(hw, [(0, 1), (4, 5)], 64 * MB)
    assert end.tolist() == pytest.approx([one, one], rel=1e-12)


def test_an_all_to_all_of_eight_gpus_on_two_sockets_is_bound_by_the_socket_link():
    # PCIe 5.0 (63 GB/s ports and uplinks) on AMD sockets joined at 16 GB/s (one lane):
    # of the 56 flows, 16 cross each way, each alpha + b / 16 GB/s, one at a time: the
    # socket link is busy 16 of those, longer than any GPU port or uplink, and the
    # all-to-all takes at least that. With a socket link as wide as the uplinks the
    # crossings no longer queue there and it is faster.
    hw = node(gen=5, socket_link="xgmi")
    t = Topology.of(hw, 8)
    pairs = [(int(s), int(d)) for src, dst in t.all_to_all(np.array([list(range(8))])) for s, d in zip(src, dst)]
    nb = 16 * MB
    start, end = _flows(hw, pairs, nb)
    one_across = ALPHA + nb / 16e9
    for forward in (True, False):
        across = np.array([(s < 4 <= d) if forward else (d < 4 <= s) for s, d in pairs])
        assert across.sum() == 16
        assert (end - start)[across] == pytest.approx(np.full(16, one_across), rel=1e-12)
        order = np.argsort(start[across])
        assert (start[across][order][1:] >= end[across][order][:-1] - 1e-15).all()      # one at a time
    # every GPU port and uplink carries at most 7 flows of at most one_across, most of
    # them far shorter (alpha + b / 63 GB/s): 16 crossings are the longest queue
    inside = ALPHA + nb / G5
    port_busy = max(sum(one_across if (a < 4) != (b < 4) else inside for a, b in pairs if a == g) for g in range(8))
    assert port_busy < 16 * one_across
    assert end.max() >= 16 * one_across * (1 - 1e-12)
    fast = node(gen=5, socket_link="upi-emr")                      # 40 GB/s: still narrower, less so
    _, end_fast = _flows(fast, pairs, nb)
    assert end_fast.max() < end.max()


def test_the_players_agree_on_every_scheme_over_a_pcie_node():
    hw = node(p2p="switch")
    for scheme, more in [("ring", {}), ("ulysses", {}), ("allgather", {"head_groups": 2}),
                         ("hybrid", {"ulysses_degree": 2, "ring_degree": 4}),
                         ("hybrid", {"ulysses_degree": 4, "ring_degree": 2, "placement": "ring-inner"})]:
        for pass_ in ("fwd", "fwdbwd"):
            sc = Scenario(workload=Workload(seq=16384, pass_=pass_), hardware=hw, n_gpus=8, **run_by(scheme, **more))
            a = compute_metrics(simulate(sc, player="recurrence")).makespan_s
            b = compute_metrics(simulate(sc, player="simpy")).makespan_s
            assert a == pytest.approx(b, rel=1e-12), (scheme, more, pass_)


def test_a_ring_whose_hops_share_an_uplink_waits_for_it():
    # without peer to peer, hops 0 -> 1 and 1 -> 2 both go up switch 0's uplink: a ring
    # step's K/V hops queue there, so the ring is slower than with peer to peer
    w = Workload(seq=65536)
    times = {p2p: compute_metrics(simulate(Scenario(workload=w, hardware=node(p2p=p2p), n_gpus=8, overlap=False),
                                           player="recurrence")).makespan_s for p2p in ("on", "off")}
    assert times["off"] > times["on"]


def test_nvswitch_nodes_are_as_before():
    # without a PCIe fabric a flow holds only its two ports, and times as alpha-beta
    hw = Hardware(comm_cost="link")
    t = Topology.of(hw, 8)
    assert len(t.route(np.array([0]), np.array([5]))) == 2
    assert hw.transfer_time_s(MB, 0, 5) == pytest.approx(3e-6 + MB / 450e9, rel=1e-12)


@pytest.mark.parametrize("fields, message", [
    (dict(gpus_per_switch=3, gpus_per_socket=4), "3 GPUs per PCIe switch do not divide the 4 GPUs per socket"),
    (dict(gen=6), "unknown PCIe generation 6"),
    (dict(p2p="maybe"), "unknown peer-to-peer mode"),
    (dict(socket_link="qpi"), "unknown socket link"),
    (dict(staged_gbps=-1.0), "staged_gbps must be a positive number"),
])
def test_bad_fabrics_are_refused_in_one_line(fields, message):
    with pytest.raises(RingsimError, match=message):
        Pcie(**fields)


def test_a_socket_that_does_not_divide_the_node_is_refused():
    with pytest.raises(RingsimError, match="4 GPUs per socket do not divide the 6 GPUs per node"):
        node(gpus=6)


@pytest.mark.parametrize("flags, message", [
    (["--gpus-per-switch", "3"], "3 GPUs per PCIe switch do not divide the 4 GPUs per socket"),
    (["--pcie-gen", "6"], "--pcie-gen 6: unknown PCIe generation; choose from 3, 4, 5"),
    (["--gpus-per-socket", "3"], "3 GPUs per socket do not divide the 8 GPUs per node"),
    (["--staged-gbps", "0"], "--staged-gbps must be a positive number"),
])
def test_the_cli_refuses_bad_pcie_flags_in_one_line(flags, message):
    r = subprocess.run([sys.executable, "-m", "sim.cli.main", "simulate", "--cluster", "pcie-l20", *flags],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_presets_name_their_sources_and_build():
    from sim.hardware.presets import CLUSTER_PRESETS

    for name in ("pcie-l20", "pcie-4090", "pcie-h100", "pcie-a100"):
        c = CLUSTER_PRESETS[name]
        assert c.pcie is not None and c.source
        Hardware(gpu=Gpu.preset(c.gpu), link=Link.preset(c.link), gpus_per_node=c.gpus_per_node, pcie=c.pcie)
    assert CLUSTER_PRESETS["pcie-4090"].pcie.p2p == "off"
    assert all(s.source for s in SOCKET_LINKS.values())
    assert PCIE_X16_GBPS[4] == pytest.approx(31.5, abs=0.01)


def test_compare_lists_every_split_in_both_placements_on_a_pcie_node():
    from sim.planning.compare import scheme_variants

    sc = Scenario(workload=Workload(seq=32768), hardware=node(p2p="switch"), n_gpus=8)
    hybrid = [v.name for s, v in scheme_variants(sc) if s == "hybrid"]
    assert hybrid == [f"{u} x {8 // u} {p}" for u in (4, 2) for p in ("ulysses-inner", "ring-inner")]
    # the placement decides what the flows cross: 2 x 4 with its all-to-all pairs under
    # one switch is faster than with its rings there
    times = {p: compute_metrics(simulate(sc.with_(**run_by("hybrid", ulysses_degree=2, ring_degree=4, placement=p)),
                                         player="recurrence")).makespan_s for p in ("ulysses-inner", "ring-inner")}
    assert times["ulysses-inner"] < times["ring-inner"]


def test_the_planner_tries_both_placements_on_a_pcie_node():
    from sim.planning.plan import candidates, request_from
    from sim.scenario.models import model_preset as get_model
    from sim.scenario.resolve import hardware_of, workload_of

    def placements(**fields):
        req = request_from(get_model("llama3-8b"), seq="32k", pass_="fwd", **fields)
        base = req.base_options()
        return {v.values["placement"] for s, v in candidates(workload_of(base), hardware_of(base), req.n_gpus)
                if s == "hybrid"}

    assert placements(cluster="pcie-l20") == {"ulysses-inner", "ring-inner"}
    assert placements(cluster="dgx-h100") == {"ulysses-inner"}
    assert placements(cluster="dgx-h100", pcie={"p2p": "switch"}) == {"ulysses-inner", "ring-inner"}


def test_what_bounds_a_run_names_the_pcie_link_its_flows_queue_for():
    from sim.trace.metrics import scheme_row

    # every pair staged through host memory: an all-to-all queues there, not at the ports
    sc = Scenario(workload=Workload(seq=16384), hardware=node(p2p="off"), n_gpus=8, scheme="ulysses")
    trace = simulate(sc, player="recurrence")
    row = scheme_row("ulysses", "degree 8", trace, compute_metrics(trace))
    assert row["busiest_pcie_link_kind"] == "host memory"
    assert row["busiest_pcie_link_s"] > row["busiest_port_s"]
    assert "bound by the PCIe host memory" in row["explanation"]
    # over NVSwitch nothing of the kind is said
    trace = simulate(sc.with_(hardware=Hardware()), player="recurrence")
    row = scheme_row("ulysses", "degree 8", trace, compute_metrics(trace))
    assert "busiest_pcie_link" not in row and "PCIe" not in row["explanation"]


def test_a_pcie_cluster_preset_brings_its_fabric_to_the_dashboard():
    from dashboard.state import cluster_values, defaults, scenario_from_values

    sc = scenario_from_values(defaults() | cluster_values("pcie-l20") | {"cluster": "pcie-l20"})
    assert sc.hardware.pcie == Pcie(gen=4, gpus_per_switch=2, gpus_per_socket=4, p2p="switch", socket_link="upi-spr")
    sc = scenario_from_values(defaults() | cluster_values("pcie-l20") | {"cluster": "pcie-l20", "link": "nvlink4"})
    assert sc.hardware.pcie is None
    # the p2p control: the preset's pairs, or the chosen ones, and only that choice in the URL
    from dashboard.state import query_from_values, values_from_query

    values = defaults() | cluster_values("pcie-l20") | {"cluster": "pcie-l20", "p2p": "off"}
    assert scenario_from_values(values).hardware.pcie.p2p == "off"
    query = query_from_values(values)
    assert "p2p=off" in query and values_from_query(query)[0]["p2p"] == "off"
    assert "p2p" not in query_from_values(defaults() | {"cluster": "pcie-l20"})


def test_the_pcie_flags_are_sweepable_and_each_row_reproduces_its_command(tmp_path):
    from sim.planning.results import read_rows
    from sim.planning.spec import Spec
    from sim.planning.sweep import sweep

    spec = Spec.from_dict({"cluster": "pcie-l20", "seq": 8192, "scheme": "hybrid", "ulysses-degree": 2,
                           "p2p": ["switch", "on", "off"]})
    out = tmp_path / "r.csv"
    r = sweep(list(spec.configs()), str(out), quiet=True)
    assert (r.total, r.failed) == (3, 0)
    rows = {row["p2p"]: row for row in read_rows(str(out))}
    assert rows["on"]["makespan_s"] < rows["switch"]["makespan_s"] < rows["off"]["makespan_s"]
    for row in rows.values():
        args = row["command"].split()[2:]
        r = subprocess.run([sys.executable, "-m", "sim.cli.main", "simulate", *args, "--json"], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["makespan_s"] == pytest.approx(float(row["makespan_s"]), rel=1e-12)
