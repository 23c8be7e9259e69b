"""GPUs in nodes (sim.hardware.topology): the ports a flow holds, and the flows of collectives,
against counts and closed forms worked out here."""

import numpy as np
import pytest

from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.hardware.topology import Topology
from sim.scenario.config import Scenario, Workload
from tests.sim.reference import cluster


def test_a_flow_holds_the_gpu_ports_inside_a_node_and_the_nics_between_nodes():
    t = Topology(n_gpus=8, gpus_per_node=4, nics_per_node=2)
    names = t.resource_names()
    out, into = t.ports(np.array([0, 0, 5]), np.array([1, 6, 2]))
    assert [names[x] for x in out] == ["GPU 0 link out", "node 0 NIC 0 out", "node 1 NIC 0 out"]
    assert [names[x] for x in into] == ["GPU 1 link in", "node 1 NIC 1 in", "node 0 NIC 1 in"]
    # GPUs 0, 1 share NIC 0 of node 0; 2, 3 NIC 1
    assert t.nic(np.arange(8)).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len(names) == 8 + 8 + 8 + 4 + 4


@pytest.mark.parametrize("members", [list(range(8)), [0, 4, 8, 12], [1, 2, 3, 5, 6], list(range(0, 16, 2))])
def test_each_all_to_all_round_is_a_permutation_and_every_pair_meets_once(members):
    t = Topology(n_gpus=16, gpus_per_node=4, nics_per_node=4)
    rounds = t.all_to_all(np.array([members]))
    assert len(rounds) == len(members) - 1
    pairs = set()
    for src, dst in rounds:
        assert sorted(src.tolist()) == sorted(members) == sorted(dst.tolist())
        assert (src != dst).all()
        pairs |= set(zip(src.tolist(), dst.tolist()))
    assert pairs == {(a, b) for a in members for b in members if a != b}


def test_rounds_that_cross_nodes_send_every_member_across():
    t = Topology(n_gpus=8, gpus_per_node=4, nics_per_node=4)
    for src, dst in t.all_to_all(np.array([list(range(8))])):
        crossing = t.crosses_nodes(src, dst)
        assert crossing.all() or not crossing.any()


def test_two_level_all_gather_sends_every_block_to_every_rank_once():
    t = Topology(n_gpus=12, gpus_per_node=4, nics_per_node=4)
    have = [{r} for r in range(12)]
    sent = np.zeros(12)
    for level, src, dst, blocks in t.all_gather():
        blocks = blocks.reshape(12, -1)
        for s, d, bl in zip(src.tolist(), dst.tolist(), blocks.tolist()):
            assert set(bl) <= have[s], "a rank forwards only what it has"
            assert (t.node(s) == t.node(d)) == (level == 1)
            have[d] |= set(bl)
            sent[s] += len(bl)
    assert all(h == set(range(12)) for h in have)
    assert (sent == 11).all()                           # (N - 1) blocks per rank


def test_two_level_reduce_scatter_sums_every_rank_into_its_block():
    t = Topology(n_gpus=12, gpus_per_node=4, nics_per_node=4)
    # partial[r][b]: the set of ranks whose contribution to block b rank r holds
    partial = [{b: {r} for b in range(12)} for r in range(12)]
    for level, src, dst, blocks in t.reduce_scatter():
        moved = [(d, b, set(partial[s][b])) for s, d, row in zip(src.tolist(), dst.tolist(),
                                                                 blocks.reshape(12, -1).tolist()) for b in row]
        for d, b, contrib in moved:
            assert not (contrib & partial[d][b]), "a contribution is added once"
            partial[d][b] |= contrib
    assert all(partial[r][r] == set(range(12)) for r in range(12))


def test_a_collective_across_nodes_needs_whole_nodes():
    with pytest.raises(RingsimError, match="whole nodes"):
        Topology(n_gpus=6, gpus_per_node=4, nics_per_node=4).all_gather()


@pytest.mark.parametrize("nics", [4, 1])
def test_an_all_to_all_across_two_nodes_is_limited_by_the_nics(nics):
    """Ulysses on 2 nodes x 4 GPUs, no mask: each GPU sends 3 flows over NVLink and 4
    over the network. NVLink is 50x faster: the all-to-all ends when the NICs are done:
    4 flows back to back through each NIC with one NIC per GPU, 16 with one per node."""
    hw = cluster(gpus_per_node=4, nics_per_node=nics, nvlink_gbps=500.0, nic_gbps=10.0,
                 latency_us=1.0, nic_latency_us=3.0)
    w = Workload(seq=8 * 256, heads=8, kv_heads=8, head_dim=16, causal=False)
    trace = simulate(Scenario(workload=w, hardware=hw, n_gpus=8, scheme="ulysses"))
    flow = 256 * (1 + 2) * 16 * 2                         # 256 tokens of Q, K, V on one head
    t_nic = 3e-6 + flow / 10e9
    t_nvl = 1e-6 + flow / 500e9
    assert 3 * t_nvl < 4 * t_nic
    starts = {s.rank: s.start_s for s in trace.spans if s.stream == "compute"}
    per_nic = 4 // nics
    # the last flow through a NIC lands at 4 (or 16) flow times; with a NIC each, on every GPU
    assert max(starts.values()) == pytest.approx(4 * per_nic * t_nic, rel=1e-12)
    if nics == 4:
        assert sorted(starts.values()) == pytest.approx([4 * t_nic] * 8, rel=1e-12)
