"""NCCL's one queue of point-to-point batches per device, on schedules small enough to
time by hand."""

import dataclasses
import itertools

import numpy as np
import pytest

from sim.calibration.calibrate import calibrate
from sim.engine.play import play, simulate
from sim.engine.queues import queue_batches
from sim.engine.schedule import KINDS, ComputeOp, Schedule, TransferOp
from sim.hardware.cluster import Hardware, Link
from sim.hardware.model import HardwareModel
from sim.scenario.config import Scenario, Workload
from sim.schemes import get as get_scheme
from tests.sim.calibration.test_calibrate import bench
from tests.sim.reference import reference_trace_spans


class Seconds(HardwareModel):
    """A hardware whose block takes its FLOPs in seconds and whose hop its bytes."""

    def compute_time_s(self, flops, **_):
        return float(flops)

    def transfer_time_s(self, nbytes, src, dst):
        return float(nbytes)

    def rate_flops(self, dtype, head_dim=None):
        return 1.0

    def describe(self):
        return {"kind": "test"}


def hop(i, src, dst, kind, step, seconds, after=()):
    return TransferOp(i, src, dst, kind, step, src, seconds, (), tuple(after))


def block(i, rank, seconds, after=()):
    return ComputeOp(i, rank, "bwd", 1, rank, 1, float(seconds), "full", 1, 1, (), (), tuple(after))


def times(schedule, player="recurrence"):
    t = play(schedule, Seconds(), Workload(seq=8, heads=1, kv_heads=1, head_dim=8), player=player)
    c = t.columns
    return {(int(r), int(s), int(k), int(st)): (float(a), float(b))
            for r, s, k, st, a, b in zip(c.rank, c.stream, c.kind, c.step, c.start_s, c.end_s) if s in (0, 1)}


def test_a_hop_waits_for_the_batch_its_receiver_posted_before():
    # rank 1 posts its K/V batch of step 0 (a 5 s send to rank 2) before its dK/dV batch
    # of step 0, into which rank 0's 1 s dK/dV hop arrives: on one queue that hop starts
    # when the K/V send ends (5 s), and the block waiting on it runs 6..8 s, not 1..3 s
    ops = [hop(0, 1, 2, "kv", 0, 5), hop(1, 0, 1, "dkv", 0, 1), block(2, 0, 2, after=[1])]
    plain = Schedule.from_ops(3, ops)
    queued = queue_batches(plain)
    assert times(plain)[(0, 0, 1, 1)] == (1.0, 3.0)
    for player in ("recurrence", "simpy"):
        t = times(queued, player)
        assert t[(0, 1, 3, 0)] == (5.0, 6.0)         # the dK/dV send of rank 0
        assert t[(0, 0, 1, 1)] == (6.0, 8.0)         # the block after it
        assert t[(1, 1, 2, 0)] == (0.0, 5.0)         # a rank's first batch waits on nothing


def test_batches_follow_step_then_kind_and_only_earlier_posts():
    # rank 0: K/V of step 0, dK/dV of step 0, K/V of step 1 -- each behind the one before
    ops = [hop(0, 0, 1, "kv", 0, 3), hop(1, 1, 0, "dkv", 0, 2), hop(2, 0, 1, "kv", 1, 1)]
    t = times(queue_batches(Schedule.from_ops(2, ops)))
    assert t[(0, 1, 2, 0)] == (0.0, 3.0)
    assert t[(1, 1, 3, 0)] == (3.0, 5.0)              # behind the K/V batch of both its ranks
    assert t[(0, 1, 2, 1)] == (5.0, 6.0)              # K/V of step 1 behind the dK/dV batch


def test_forward_rings_and_schedules_without_hops_are_unchanged():
    for layout, causal in itertools.product(("contiguous", "zigzag"), (True, False)):
        sc = Scenario(workload=Workload(seq=6144, heads=8, kv_heads=8, head_dim=64, causal=causal), n_gpus=3,
                      layout=layout)
        hw = Scenario(workload=sc.workload).hardware
        slow = dataclasses.replace(hw, link=Link(name="slow", bandwidth_gbps=5.0, latency_us=10.0))
        s = get_scheme("ring").build_schedule(sc)
        a, b = play(s, slow, sc.workload), play(queue_batches(s), slow, sc.workload)
        assert np.array_equal(a.columns.start_s, b.columns.start_s)
        assert np.array_equal(a.columns.end_s, b.columns.end_s)
    only = Schedule.from_ops(1, [block(0, 0, 1)])
    assert queue_batches(only) is only


def test_gpu_presets_and_nccl_profiles_queue_gloo_profiles_do_not():
    sc = Scenario(workload=Workload(seq=6144, heads=8, kv_heads=8, head_dim=64, pass_="bwd"), n_gpus=3)
    assert simulate(sc).meta["p2p_queue"] is True
    b = bench()
    assert calibrate(b).p2p_queue is False
    b["device"]["backend"] = "nccl"
    assert calibrate(b).p2p_queue is True
    assert simulate(Scenario(workload=Workload(seq=6144, heads=8, kv_heads=8, head_dim=64, dtype="fp32"),
                             n_gpus=3), calibrate(bench())).meta["p2p_queue"] is False


@pytest.mark.parametrize("layout,causal,n,sync,overlap,nodes", [
    ("zigzag", True, 4, "step", True, False), ("contiguous", True, 3, "step", True, False),
    ("striped", False, 8, "step", True, True), ("zigzag", True, 8, "step", False, True),
    ("contiguous", False, 3, "buffered", False, False),
])
def test_where_the_ring_says_its_batches_are_in_order_the_queue_adds_no_dependency(
        layout, causal, n, sync, overlap, nodes):
    """The ring's claim (batches_in_order) against the queue's own dependencies."""
    w = Workload(seq=24 * n, heads=2, kv_heads=2, head_dim=8, causal=causal)
    hw = Hardware(link=Link(bandwidth_gbps=100.0), inter_link=Link(bandwidth_gbps=5.0) if nodes else None,
                  gpus_per_node=2)
    sc = Scenario(workload=w, hardware=hw, n_gpus=n, layout=layout, sync=sync, overlap=overlap)
    ring = get_scheme("ring")
    assert ring.batches_in_order(sc)
    s = ring.build_schedule(sc)
    q = queue_batches(s)
    before: list[set[int]] = []            # every op's ancestors in the schedule as built
    for op in range(len(s)):
        deps = set(s.after[:, op].tolist()) - {-1}
        before.append(deps.union(*(before[d] for d in deps)))
    for op in range(len(s)):               # every added dependency was implied already
        new = set(q.after[s.after.shape[0]:, op].tolist()) - {-1}
        assert new <= before[op]
    # backward, and forward with a buffered double buffer, are not in order by construction
    assert not ring.batches_in_order(Scenario(workload=Workload(seq=24 * n, heads=2, kv_heads=2, head_dim=8,
                                                                pass_="bwd"), n_gpus=n))
    assert not ring.batches_in_order(Scenario(workload=w, n_gpus=n, sync="buffered"))


def test_in_backward_the_queue_adds_what_the_ring_does_not_imply():
    sc = Scenario(workload=Workload(seq=96, heads=2, kv_heads=2, head_dim=8, pass_="bwd"), n_gpus=4)
    s = get_scheme("ring").build_schedule(sc)
    q = queue_batches(s)
    before: list[set[int]] = []
    for op in range(len(s)):
        deps = set(s.after[:, op].tolist()) - {-1}
        before.append(deps.union(*(before[d] for d in deps)))
    added = [(op, d) for op in range(len(s)) for d in set(q.after[s.after.shape[0]:, op].tolist()) - {-1}
             if d not in before[op]]
    # K/V hop k behind dK/dV hop k-1 (and dK/dV hop k behind K/V hop k), on both ranks
    assert added and {(KINDS[s.kind[op]], KINDS[s.kind[d]]) for op, d in added} == {("kv", "dkv"), ("dkv", "kv")}


def test_batches_of_several_hops_queue_as_the_op_by_op_reference_does():
    # rank 0 sends two K/V hops at step 0 (to 1 and 2) and receives one: one batch of three
    ops = [hop(0, 0, 1, "kv", 0, 2), hop(1, 0, 2, "kv", 0, 3), hop(2, 2, 0, "kv", 0, 1),
           hop(3, 1, 2, "dkv", 0, 1), hop(4, 2, 0, "dkv", 0, 2), hop(5, 0, 1, "kv", 1, 1),
           block(6, 0, 1, after=[5])]
    s = Schedule.from_ops(3, ops)
    w = Workload(seq=8, heads=1, kv_heads=1, head_dim=8)
    want = reference_trace_spans(ops, 3, Seconds(), w, queue=True)
    assert play(queue_batches(s), Seconds(), w).spans == want
    assert play(s, Seconds(), w).spans != want           # the queue changes this schedule
