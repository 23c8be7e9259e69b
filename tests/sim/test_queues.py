"""NCCL's one queue of point-to-point batches per device, on schedules small enough to
time by hand."""

import dataclasses
import itertools

import numpy as np

from sim.config import Link, Scenario, Workload
from sim.engine import play, simulate
from sim.queues import queue_batches
from sim.schedule import ComputeOp, Schedule, TransferOp
from sim.schemes import get as get_scheme
from tests.sim.test_calibrate import bench
from sim.calibrate import calibrate


class Seconds:
    """A hardware whose block takes its FLOPs in seconds and whose hop its bytes."""

    def compute_time_s(self, flops, **_):
        return float(flops)

    def transfer_time_s(self, nbytes, src, dst):
        return float(nbytes)

    def rate_flops(self, dtype):
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
