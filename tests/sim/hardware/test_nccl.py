"""NCCL's tuning model (sim.hardware.nccl) against values worked out by hand from NCCL's
formulas (NVIDIA/nccl v2.30.7-1, src/graph/tuning.cc, src/enqueue.cc), and NCCL's pull on
the compute beside a transfer (sim.hardware.contention.GpuPull) against its closed form."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from sim.engine.play import simulate
from sim.engine.players import times_simpy, transfer_groups
from sim.engine.schedule import ComputeOp, Schedule, TransferOp
from sim.hardware import nccl
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.hardware.contention import HBM_PASSES, Contention, GpuPull, Sharing
from sim.hardware.pcie import PCIE_X16_GBPS
from sim.hardware.presets import CLUSTER_PRESETS
from sim.scenario.config import Scenario, Workload
from sim.trace.format import COMPUTE, SEND
from sim.trace.metrics import compute_metrics

MB, GB = 1 << 20, 1 << 30
H100_NVLINK = 450.0 * 20.6 / 25.0       # 18 NVLinks at NCCL's SM90_NVLINK_BW


def h100_node(ranks=8, nodes=1):
    return nccl.Comm(ranks=ranks, nodes=nodes, arch="hopper", intra="nvlink", channel_gbps=H100_NVLINK,
                     nic_gbps=50.0, nics_per_node=8, nvls=True)


def test_eight_h100_ring_graph_is_twelve_channels_of_30_gbps():
    # search: 60 GB/s fits 6 channels in 370.8 (360); 50 x 7, 40 x 9 and 30 x 12 do not beat
    # it; 24 / 60 < 0.49 ends the search. DupChannels: 60 >= 50 -> 12 x 30. Postset: 24 CTAs.
    c = h100_node()
    assert nccl.ring_graph(c) == nccl.Graph(12, 30.0, 30.0)
    assert nccl.comm_channels(c) == 24


@pytest.mark.parametrize("nbytes,algorithm,protocol,time_us", [
    # ring LL: bus min(141, 360 x 0.5) x 8/7; latency 6.6 + 7 x 0.6
    (MB, "ring", "LL", 6.6 + 7 * 0.6 + MB / (1000 * 141.0 * 8 / 7)),
    # ring Simple: bus 12 x 30 x 8/7; latency 8.4 + 7 x 3.4
    (GB, "ring", "Simple", 8.4 + 7 * 3.4 + GB / (1000 * 360.0 * 8 / 7)),
])
def test_all_gather_on_eight_h100(nbytes, algorithm, protocol, time_us):
    call = nccl.collective(h100_node(), "all_gather", nbytes)
    assert (call.algorithm, call.protocol) == (algorithm, protocol)
    assert call.time_s == pytest.approx(time_us * 1e-6, rel=1e-9)
    assert call.channels == 24          # 1 MB >= 24 x 512 threads x 8 bytes x 8 ranks: no fewer


def test_the_other_candidates_for_one_megabyte_cost_what_their_formulas_say():
    c = h100_node()
    ll128 = 14.0 + 7 * 1.9 + MB / (1000 * min(360 * 0.92, 12 * 36.7) * 8 / 7)
    simple = 8.4 + 7 * 3.4 + MB / (1000 * 360.0 * 8 / 7)
    # NVLS: one channel per GPU at 50 GB/s (8 x 50 <= 370.8 x 8/7), 0.85 efficient, 7/8 of
    # the channels, 7/8 for a gather, and no bus-to-algorithm factor for a gather that is not
    # the ring's; latency its hardware latency alone, 25 us
    nvls = 25.0 + MB / (1000 * 8 * 50 * 0.85 * 7 / 8 * 7 / 8)
    assert nccl.algo_time_us(c, "all_gather", "ring", "LL128", MB) == pytest.approx(ll128, rel=1e-9)
    assert nccl.algo_time_us(c, "all_gather", "ring", "Simple", MB) == pytest.approx(simple, rel=1e-9)
    assert nccl.algo_time_us(c, "all_gather", "nvls", "Simple", MB) == pytest.approx(nvls, rel=1e-9)
    assert nccl.algo_time_us(c, "all_gather", "tree", "Simple", MB) is None      # no tree all-gather


def test_two_nodes_over_infiniband():
    # 16 H100 over 8 NDR NICs a node: the inter-node search keeps 45 GB/s x 8 channels (one
    # NIC each; 48 fits only 7 in 370.8), not doubled (Hopper, < 50 GB/s, > 4 channels)
    c = h100_node(ranks=16, nodes=2)
    assert nccl.ring_graph(c) == nccl.Graph(8, 45.0, 45.0)
    assert nccl.comm_channels(c) == 16
    call = nccl.collective(c, "all_gather", GB)
    # 15 steps: 14 on NVLink (3.4 us, above the 3 x 1 us network post) and 1 over the
    # network (14 us); bus 8 x 45 x 16/15
    assert (call.algorithm, call.protocol) == ("ring", "Simple")
    assert call.time_s == pytest.approx((8.4 + 14 * 3.4 + 14.0 + GB / (1000 * 360.0 * 16 / 15)) * 1e-6, rel=1e-9)


def test_small_calls_take_low_latency_protocols_and_large_ones_bandwidth():
    c = h100_node()
    assert nccl.collective(c, "all_gather", 1024).protocol == "LL"
    assert nccl.collective(c, "all_gather", GB).protocol == "Simple"
    assert nccl.collective(c, "all_reduce", GB).algorithm == "nvls"
    small = nccl.collective(c, "all_reduce", 1024)
    assert (small.algorithm, small.protocol) in {("ring", "LL"), ("tree", "LL")}
    assert small.channels < nccl.comm_channels(c)        # a tiny call runs on fewer CTAs


@pytest.mark.parametrize("function", nccl.FUNCTIONS)
@pytest.mark.parametrize("comm", [h100_node(), h100_node(16, 2)])
def test_time_never_falls_as_the_message_grows(function, comm):
    sizes = [1 << k for k in range(4, 33)]
    times = [nccl.collective(comm, function, s).time_s for s in sizes]
    assert all(b >= a for a, b in zip(times, times[1:]))


def test_send_recv_as_nccl_splits_it():
    c = h100_node()
    # 32 p2p channels, 32 per peer (2 x 18 NVLinks, a power of two); 8 ranks -> 4 a send
    assert nccl.p2p_channels_per_peer(c) == (32, 32)
    big = nccl.send_recv(c, 32 * MB)
    assert (big.protocol, big.channels) == ("Simple", 4)
    assert big.latency_s == pytest.approx((8.4 + 3.4) * 1e-6)
    assert big.bandwidth_gbps == pytest.approx(4 * 20.6 / 2)      # 4 channels of half an NVLink each
    small = nccl.send_recv(c, 4096)
    assert (small.protocol, small.channels) == ("LL", 1)            # one 64 KiB part; under 16 KiB a channel
    assert small.latency_s == pytest.approx((6.6 + 0.6) * 1e-6)
    assert small.bandwidth_gbps == pytest.approx(20.6 / 2 * 0.5)  # LL: half of it
    # parts over 32 x 512 KiB double the channels
    assert nccl.send_recv(c, 128 * MB).channels == 8
    assert nccl.send_recv(h100_node(ranks=2), 32 * MB).channels == 16


def test_pcie_all_to_all_through_host_memory():
    # 8 x L20, 2 a PCIe 4.0 switch, 4 a socket: NCCL's default P2P level keeps P2P under a
    # switch and stages the rest through host memory
    c = CLUSTER_PRESETS["pcie-l20"]
    hw = Hardware(gpu=Gpu.preset(c.gpu), link=Link.preset(c.link), gpus_per_node=8, pcie=c.pcie)
    comm = hw.nccl_comm(np.arange(8))
    # a ring channel crosses the socket link (22 GB/s): one channel of 20 GB/s, 2 CTAs
    assert comm.channel_gbps == pytest.approx(22.0)
    assert nccl.ring_graph(comm) == nccl.Graph(1, 20.0, 20.0)
    b = 4 * MB
    src, dst = np.array([0, 0, 0]), np.array([1, 2, 4])
    members = [np.arange(8)]
    t, ctas = hw.group_transfer_times_s(np.array(["a2a"] * 3), np.full(3, float(b)), src, dst, members,
                                        np.zeros(3, dtype=np.int64))
    latency = (8.4 + 5.7) * 1e-6           # ring Simple over PCI, shared by the 7 rounds
    # 2 P2P channels in the communicator (a power of two over its 2 CTAs), 2 per PCIe peer,
    # 1 a send at 8 ranks: the kernel's 2 CTAs carry every peer, each half of NCCL's 24 GB/s
    ctas_gbps = 2 * 24.0 / 2
    staged_gbps = 22.2 / 31.5 * PCIE_X16_GBPS[4]
    assert t[0] == pytest.approx(latency / 7 + b / (ctas_gbps * 1e9), rel=1e-9)            # P2P in the switch
    assert t[1] == pytest.approx(2 * latency / 7 + b / (staged_gbps * 1e9), rel=1e-9)      # two copies
    assert t[2] == pytest.approx(2 * latency / 7 + b / (min(22.0, staged_gbps) * 1e9), rel=1e-9)
    assert (ctas == 1.0).all()              # the kernel's 2 CTAs, half at each end


def test_a_ring_hop_runs_in_its_ring_communicator():
    # hops of one step close the ring: every hop's group is the ring's ranks
    kind = np.array([2] * 8 + [2] * 8)
    step = np.repeat([0, 1], 8)
    rank = np.tile(np.arange(8), 2)
    peer = (rank + 1) % 8
    members, group_of = transfer_groups(kind, step, rank, peer)
    assert len(members) == 1 and members[0].tolist() == list(range(8)) and (group_of == 0).all()


def test_link_model_is_kept_on_request_and_for_gpus_nccl_does_not_run_on():
    link = Hardware(comm_cost="link")
    assert link.transfer_time_s(MB, 0, 1) == pytest.approx(3e-6 + MB / 450e9)
    assert not Hardware(gpu=Gpu.preset("MI300X"), link=Link.preset("xgmi-mi300x")).times_groups
    hw = Hardware()
    assert hw.times_groups and hw.gpu_pull == GpuPull(sms=132, hbm_gbps=hw.gpu.memory_bandwidth_gbps)


# --- NCCL's pull on the compute --------------------------------------------------------------

def _one_compute_beside_one_transfer(work_s, transfer_s, ctas, bytes_per_s, memory_share, pull):
    """A compute of `work_s` on rank 0 and a transfer 0 -> 1 of `transfer_s`, starting together."""
    ops = [ComputeOp(0, 0, "fwd", 0, 0, 1, 1.0, "full", 1, 1, (0,), (0,), ()),
           TransferOp(1, 0, 1, "kv", 0, 0, 1, (0,), ())]
    schedule = Schedule.from_ops(2, ops)
    start, end, _ = times_simpy(schedule, [work_s, transfer_s], Contention(gpu=pull), None, None, 0.0,
                                ([0.0, ctas], [0.0, bytes_per_s], [memory_share, 0.0]))
    return end


@pytest.mark.parametrize("memory_share", [0.0, 0.3, 1.0])
def test_a_compute_beside_a_transfer_finishes_at_the_closed_form(memory_share):
    pull = GpuPull(sms=132, hbm_gbps=3350.0)
    work, transfer, ctas, rate = 1e-3, 4e-4, 8.0, 300e9
    end = _one_compute_beside_one_transfer(work, transfer, ctas, rate, memory_share, pull)
    sm = ctas / 132
    hbm = rate * HBM_PASSES / 3350e9
    r = 1.0 / ((1 - memory_share) / (1 - sm) + memory_share / (1 - hbm))
    # while the transfer runs the compute progresses at r, then at 1: it ends D (1 - r) late
    assert end[0] == pytest.approx(work + transfer * (1 - r), rel=1e-12)
    assert end[1] == pytest.approx(transfer, rel=1e-12)          # the transfer keeps its time


def test_a_compute_inside_a_transfer_stretches_by_the_whole_factor():
    pull = GpuPull(sms=100, hbm_gbps=1000.0)
    end = _one_compute_beside_one_transfer(1e-4, 1e-3, 20.0, 0.0, 0.0, pull)
    assert end[0] == pytest.approx(1e-4 / (1 - 0.2), rel=1e-12)


def test_sharing_sums_the_pull_of_two_transfers_on_one_gpu():
    env = simpy.Environment()
    pull = GpuPull(sms=100, hbm_gbps=1000.0)
    sharing = Sharing(env, 3, Contention(gpu=pull), pull=([0, 10.0, 15.0], [0, 0.0, 0.0], [0.0, 0, 0]))
    ends = {}

    def run(body, op):
        yield from body
        ends[op] = env.now

    env.process(run(sharing.compute(0, 0, 1.0), 0))
    env.process(run(sharing.transfer(1, 0, 1, 2.0), 1))      # rank 0 sends
    env.process(run(sharing.transfer(2, 2, 0, 2.0), 2))      # and receives
    env.run()
    assert ends[0] == pytest.approx(1.0 / (1 - 0.25))


class _WithoutPull(Hardware):
    """NCCL's transfer times without its pull on the compute."""

    gpu_pull = None


def test_a_ring_on_h100_under_nccl_pays_the_pull():
    w = Workload(seq=8 * 8192, heads=32, kv_heads=8, head_dim=128, causal=True, pass_="fwdbwd")
    pulled = simulate(Scenario(workload=w, hardware=Hardware(), n_gpus=8, scheme="ring", layout="zigzag"))
    free = simulate(Scenario(workload=w, hardware=_WithoutPull(), n_gpus=8, scheme="ring", layout="zigzag"))
    assert pulled.meta["player"] == "pull" and pulled.meta["contention"]["gpu"]["sms"] == 132
    a, b = pulled.columns, free.columns
    send = a.stream == SEND
    # the same transfers (their durations, to the rounding of times that start elsewhere)
    assert np.allclose(a.end_s[send] - a.start_s[send], b.end_s[send] - b.start_s[send], rtol=0, atol=1e-15)
    busy = a.stream == COMPUTE
    grew = (a.end_s - a.start_s)[busy].sum() - (b.end_s - b.start_s)[busy].sum()
    # a compute beside a transfer ends at most overlap x (1 - rate) later; the slowest rate
    # is with a send and a receive in flight (8 CTAs, both copies) on a wholly compute- or
    # memory-bound block; each transfer overlaps computes on its two GPUs for its duration
    hw = Hardware()
    pull = hw.gpu_pull
    moved = 2 * max(a.bytes[send] / (a.end_s - a.start_s)[send])
    worst = min(pull.rate(8.0, moved, 0.0), pull.rate(8.0, moved, 1.0))
    bound = 2 * (a.end_s - a.start_s)[send].sum() * (1 - worst)
    assert 0 < grew
    assert compute_metrics(pulled).makespan_s > compute_metrics(free).makespan_s
    assert grew <= bound
