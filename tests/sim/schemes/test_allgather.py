"""All-gather context parallelism (sim.schemes.allgather) against closed forms written
here: the bytes each GPU sends, the exposed gather and its pipelining, memory that grows
with S, every pair once."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.scenario.config import Scenario, Workload
from sim.scenario.resolve import settings_of
from sim.schemes.allgather import AllgatherSettings
from sim.schemes.hybrid import HybridSettings
from sim.trace.metrics import compute_metrics
from tests.sim.reference import chunk_tokens, cluster, hardware, head_coverage, scenario


def allgather(n=4, seq=1024, heads=8, kv_heads=2, head_dim=16, causal=True, pass_="fwd", hw=None, head_groups=1,
              **kw):
    w = Workload(seq=seq, heads=heads, kv_heads=kv_heads, head_dim=head_dim, causal=causal, pass_=pass_)
    return Scenario(workload=w, hardware=hw or hardware(), n_gpus=n, scheme="allgather",
                    settings=AllgatherSettings(head_groups=head_groups), **kw)


@pytest.mark.parametrize("n,per_node,nics", [(4, 8, None), (8, 4, None), (8, 4, 1), (12, 4, 2), (8, 1, None)])
@pytest.mark.parametrize("pass_", ["fwd", "bwd", "fwdbwd"])
def test_bytes_each_gpu_sends_follow_the_closed_form(n, per_node, nics, pass_):
    seq, hk, d = 32 * n, 2, 16
    hw = cluster(gpus_per_node=per_node, nics_per_node=nics)
    m = compute_metrics(simulate(allgather(n=n, seq=seq, kv_heads=hk, head_dim=d, pass_=pass_, hw=hw,
                                           head_groups=2)))
    # forward: the ring's volume, (N-1) * (S/N) * 2 * H_kv * d * b; backward gathers again
    # and reduce-scatters fp32 dK/dV, the same count of elements
    kv = (n - 1) * (seq / n) * 2 * hk * d
    want = {"fwd": kv * 2, "bwd": kv * (2 + 4), "fwdbwd": kv * (2 + 2 + 4)}[pass_]
    assert m.bytes_sent == pytest.approx([want] * n, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_one_gather_is_exposed_then_one_call_of_the_local_queries(n):
    """No mask, one node: the ring all-gather's N-1 steps back to back, then one dense call
    of the rank's 2 chunks against all S keys; every rank waits for the whole gather."""
    seq, heads, hk, d = 64 * n, 8, 2, 16
    hw = hardware(tflops=0.5, gbps=3.0, latency_us=2.0, overhead_us=4.0)
    m = compute_metrics(simulate(allgather(n=n, seq=seq, heads=heads, kv_heads=hk, head_dim=d, causal=False,
                                           hw=hw)))
    t_x = 2e-6 + 2 * hk * (seq // n) * d * 2 / 3e9
    t_c = 4e-6 + 4 * d * (seq // n) * seq * heads / 0.5e12
    assert m.makespan_s == pytest.approx((n - 1) * t_x + t_c, rel=1e-12)
    for r in m.ranks:
        assert r.exposed_comm_s == pytest.approx((n - 1) * t_x, rel=1e-9)


def test_pipelined_gather_hides_all_but_the_first_group():
    """G head groups, compute-bound: the first group's gather is exposed, each next one
    runs behind the compute of the group before."""
    n, seq, heads, hk, d, groups = 4, 1024, 8, 4, 16, 4
    hw = hardware(tflops=0.05, gbps=3.0, latency_us=2.0, overhead_us=4.0)
    one = compute_metrics(simulate(allgather(n=n, seq=seq, heads=heads, kv_heads=hk, head_dim=d, causal=False,
                                             hw=hw)))
    m = compute_metrics(simulate(allgather(n=n, seq=seq, heads=heads, kv_heads=hk, head_dim=d, causal=False,
                                           hw=hw, head_groups=groups)))
    t_x = 2e-6 + 2 * (hk // groups) * (seq // n) * d * 2 / 3e9
    t_c = 4e-6 + 4 * d * (seq // n) * seq * (heads // groups) / 0.05e12
    assert t_c >= (n - 1) * t_x
    assert m.makespan_s == pytest.approx((n - 1) * t_x + groups * t_c, rel=1e-12)
    assert m.makespan_s < one.makespan_s
    for r in m.ranks:
        assert r.exposed_comm_s == pytest.approx((n - 1) * t_x, rel=1e-9)


def test_peak_memory_grows_with_the_sequence_and_the_rings_with_the_shard():
    """At a fixed S/N the ring's memory per GPU stays put, the all-gather's grows with S
    (it holds the whole K/V); at a fixed S both hold less as N grows, the ring in
    proportion."""
    c = 256
    ring, ag = [], []
    for n in (2, 4, 8):
        ring.append(compute_metrics(simulate(scenario(n=n, seq=c * n, layout="zigzag"))).ranks[0].peak_mem_bytes)
        ag.append(compute_metrics(simulate(allgather(n=n, seq=c * n))).ranks[0].peak_mem_bytes)
    # from three ranks on (a ring of two holds one block in flight, not two)
    assert len(set(ring[1:])) == 1 and ring[0] < ring[1]
    def kv_full(seq):
        return 2 * 2 * seq * 16 * 2                                 # K and V, 2 heads of 16, bf16

    assert [b - a for a, b in zip(ag, ag[1:])] == [kv_full(c * 4) - kv_full(c * 2), kv_full(c * 8) - kv_full(c * 4)]
    # by hand at n = 4: own Q, K, V, the gathered K/V, output, fp32 accumulator and stats
    n, seq, h, hk, d = 4, 1024, 8, 2, 16
    q = (seq // n) * h * d
    assert ag[1] == q * 2 + (seq // n) * 2 * hk * d * 2 + kv_full(seq) + q * 2 + q * 4 + 2 * (seq // n) * h * 4
    # pipelined: two groups' worth of the gathered K/V
    two = compute_metrics(simulate(allgather(n=n, seq=seq, kv_heads=2, head_groups=2))).ranks[0].peak_mem_bytes
    assert two == ag[1]
    four = compute_metrics(simulate(allgather(n=n, seq=seq, kv_heads=4, head_groups=4))).ranks[0].peak_mem_bytes
    assert four == q * 2 + (seq // n) * 2 * 4 * d * 2 + 2 * 4 * seq * d * 2 // 2 + q * 2 + q * 4 + 2 * (seq // n) * h * 4


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), causal=st.booleans(), pass_=st.sampled_from(["fwd", "bwd", "fwdbwd"]),
       groups=st.sampled_from([1, 2]), tile=st.booleans())
def test_every_unmasked_pair_is_computed_once_per_head_and_pass(n, causal, pass_, groups, tile):
    seq, heads, d = 8 * n, 4, 4
    sc = allgather(n=n, seq=seq, heads=heads, kv_heads=2, head_dim=d, causal=causal, pass_=pass_,
                   head_groups=groups)
    trace = simulate(sc)
    cover = head_coverage(trace, chunk_tokens("allgather", seq, n), seq, causal, d)
    allowed = np.tril(np.ones((seq, seq), dtype=np.int64)) if causal else np.ones((seq, seq), dtype=np.int64)
    for grid in cover.values():
        assert (grid == heads * allowed).all()
    m = compute_metrics(trace)
    if not causal:
        assert m.load_imbalance == 1.0
    if tile and causal:       # a diagonal tile costs its whole area
        tiled = compute_metrics(simulate(sc.with_(granularity="tile", tile=3))).total_flops
        assert tiled >= m.total_flops


@pytest.mark.parametrize("kw,match", [
    (dict(n=4, seq=1020), "2N|8 equal chunks"),
    (dict(n=4, kv_heads=2, head_groups=4), "must divide the 2 K/V heads"),
    (dict(n=6, seq=1200, hw=cluster(gpus_per_node=4)), "whole nodes"),
    (dict(n=4, head_groups=0), "head_groups must be a positive integer"),
])
def test_configurations_allgather_cannot_run_are_refused_in_one_line(kw, match):
    with pytest.raises(RingsimError, match=match):
        allgather(**kw)


def test_another_scheme_s_settings_do_not_apply():
    with pytest.raises(RingsimError, match="--ulysses-degree .* does not apply to the allgather scheme"):
        settings_of("allgather", {"ulysses-degree": 4})
    assert settings_of("allgather", {"ulysses-degree": None, "head-groups": 2}) == AllgatherSettings(head_groups=2)
    with pytest.raises(RingsimError, match="settings of the allgather scheme are a AllgatherSettings"):
        Scenario(scheme="allgather", settings=HybridSettings())


def test_the_allgather_counts_its_operations_without_building_them():
    """16 GPUs in 2 nodes of 8: a gather is 16 ranks x (1 step across + 7 inside) = 128
    flows, each taken in by its receiver; 4 kernel calls per rank under the mask."""
    from sim.hardware.cluster import Hardware
    from sim.schemes.allgather import build_allgather_schedule, count_allgather_ops

    def sc(n, pass_, causal=True, groups=1, per_node=8):
        return Scenario(workload=Workload(seq=n * 256, pass_=pass_, causal=causal), n_gpus=n, scheme="allgather",
                        layout="zigzag", settings=AllgatherSettings(head_groups=groups),
                        hardware=Hardware(gpus_per_node=per_node))

    assert count_allgather_ops(sc(16, "fwd")) == 2 * 128 + 16 * 4 == 320
    assert count_allgather_ops(sc(16, "fwdbwd", groups=2)) == 2 * (320 + 320 + 2 * 128)
    for n, per_node in ((1, 8), (2, 8), (8, 4), (16, 4)):
        for pass_ in ("fwd", "bwd", "fwdbwd"):
            for causal in (True, False):
                for groups in (1, 2):
                    s = sc(n, pass_, causal, groups, per_node)
                    assert count_allgather_ops(s) == len(build_allgather_schedule(s)), (n, per_node, pass_, causal)


def test_a_group_s_gather_waits_for_the_compute_that_frees_its_buffer():
    """Double-buffered: group h+1's gather goes out behind group h's compute, but only once
    group h-1's compute has freed the buffer it fills, at both ends. With transfers far
    faster than compute, every gather of group h+1 >= 1 starts at or after the end of group
    h-1's compute on its sender and on its receiver."""
    n, seq, heads, hk, d, groups = 4, 1024, 8, 4, 16, 4
    hw = hardware(tflops=0.05, gbps=300.0, latency_us=1.0, overhead_us=0.0)
    t = simulate(allgather(n=n, seq=seq, heads=heads, kv_heads=hk, head_dim=d, causal=False, hw=hw,
                           head_groups=groups))
    compute_end = {}
    for s in t.spans:
        if s.stream == "compute" and s.end_s > s.start_s:
            compute_end[s.rank, s.step] = max(compute_end.get((s.rank, s.step), 0.0), s.end_s)
    sends = [s for s in t.spans if s.stream == "send" and s.kind == "ag"]
    checked = 0
    for s in sends:
        if s.step >= 2:             # group h + 1 = s.step: needs group h - 1 = s.step - 2 done
            for rank in (s.rank, s.peer):
                assert s.start_s >= compute_end[rank, s.step - 2] - 1e-12
            checked += 1
    assert checked > 0
    # and not later than it must: the gather of group 2 starts while group 1 computes
    first = min(s.start_s for s in sends if s.step == 2)
    assert first < max(compute_end[r, 1] for r in range(n))
