"""Metrics (sim.trace.metrics) on small traces built by hand, every answer worked out here.

The two ranks below, in seconds:

    rank 0  compute [0, 2] (8 FLOP), wait on K/V [2, 3.5] (exposed), idle [3.5, 4],
            compute [4, 5] (4 FLOP); sends 100 B to rank 1 over [1, 3], receives 60 B
            over [2, 4] (the two overlap: in flight over [1, 4], 3 s, not 4)
    rank 1  compute [0, 1] (4 FLOP), wait on K/V [1, 3] (exposed), compute [3, 4]
            (4 FLOP), idle [4, 5] (a ragged end); receives [1, 3], sends [2, 4]

makespan 5; compute 3 and 2; in flight 3 and 3; exposed 1.5 and 2; idle
5 - 3 - 1.5 = 0.5 and 5 - 2 - 2 = 1; imbalance 3 / 2.5 = 1.2; overlap efficiency
1 - 3.5 / 6; 20 FLOP at 4 FLOP/s per rank: ideal 20 / 8 = 2.5, efficiency 0.5; bytes
sent 160.
"""

import pytest

from sim.trace.format import Span, Trace
from sim.trace.metrics import comparison_row, compute_metrics, explain, scheme_row, step_durations, union_length


def two_ranks(shift=0.0, shuffle=False, source="simulated"):
    def s(rank, stream, kind, step, a, b, flops=0.0, nbytes=0.0, peer=-1):
        return Span(rank, stream, kind, step, a + shift, b + shift, flops, nbytes, (rank,), (0,), peer)

    spans = [
        s(0, "compute", "fwd", 0, 0, 2, flops=8), s(0, "wait", "kv", 1, 2, 3.5),
        s(0, "wait", "idle", 1, 3.5, 4), s(0, "compute", "fwd", 1, 4, 5, flops=4),
        s(0, "send", "kv", 0, 1, 3, nbytes=100, peer=1), s(0, "recv", "kv", 0, 2, 4, nbytes=60, peer=1),
        s(1, "compute", "fwd", 0, 0, 1, flops=4), s(1, "wait", "kv", 1, 1, 3),
        s(1, "compute", "fwd", 1, 3, 4, flops=4), s(1, "wait", "idle", 1, 4, 5),
        s(1, "recv", "kv", 0, 1, 3, nbytes=100, peer=0), s(1, "send", "kv", 0, 2, 4, nbytes=60, peer=0),
    ]
    if shuffle:
        spans = spans[::-1]
    return Trace(source, 2, spans, hardware={"rate_flops": 4.0},
                 meta={"peak_mem_bytes": [1000, 2000]})


@pytest.mark.parametrize("shift,shuffle,source", [(0.0, False, "simulated"), (100.0, True, "measured")])
def test_every_metric_of_the_hand_built_trace(shift, shuffle, source):
    m = compute_metrics(two_ranks(shift, shuffle, source))
    assert m.makespan_s == pytest.approx(5.0)
    assert [r.compute_s for r in m.ranks] == pytest.approx([3.0, 2.0])
    assert [r.comm_s for r in m.ranks] == pytest.approx([3.0, 3.0])
    assert [r.exposed_comm_s for r in m.ranks] == pytest.approx([1.5, 2.0])
    assert [r.idle_s for r in m.ranks] == pytest.approx([0.5, 1.0])
    assert [r.flops for r in m.ranks] == [12.0, 8.0]
    assert [r.peak_mem_bytes for r in m.ranks] == [1000, 2000]
    assert m.load_imbalance == pytest.approx(1.2)
    assert m.overlap_efficiency == pytest.approx(1 - 3.5 / 6)
    assert m.total_flops == 20.0 and m.total_bytes == 160.0
    assert m.bytes_sent == [100.0, 60.0]
    assert m.ideal_s == pytest.approx(2.5) and m.efficiency == pytest.approx(0.5)


def test_spans_out_of_rank_order_where_two_passes_meet_are_still_summed_per_rank(monkeypatch):
    """Metrics read spans that come rank by rank a few ranks at a time; a trace whose
    ranks step back only where two passes of the order check meet (a rank-1 span among
    rank 0's, at the 4th place of 4 per pass) must still be read as a whole."""
    from sim.trace import metrics

    monkeypatch.setattr(metrics, "_SPANS", 4)
    spans = two_ranks().spans
    spans = spans[0:3] + spans[6:7] + spans[3:6] + spans[7:]
    assert [s.rank for s in spans] == [0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1]
    m = compute_metrics(Trace("measured", 2, spans, hardware={"rate_flops": 4.0}))
    assert [r.compute_s for r in m.ranks] == pytest.approx([3.0, 2.0])
    assert [r.comm_s for r in m.ranks] == pytest.approx([3.0, 3.0])
    assert [r.exposed_comm_s for r in m.ranks] == pytest.approx([1.5, 2.0])
    assert [r.flops for r in m.ranks] == [12.0, 8.0]


def test_the_comparison_row_reports_the_worst_rank():
    row = comparison_row("zigzag", True, compute_metrics(two_ranks()))
    assert row["exposed_comm_s"] == pytest.approx(2.0)          # rank 1, not 1.5, not 3.5
    assert (row["layout"], row["overlap"]) == ("zigzag", True)
    assert row["makespan_s"] == pytest.approx(5.0) and "ranks" not in row


def test_without_a_rate_there_is_no_ideal_and_without_transfers_nothing_is_exposed():
    trace = Trace("measured", 1, [Span(0, "compute", "fwd", 0, 1.0, 3.0, 5.0)])
    m = compute_metrics(trace)
    assert (m.ideal_s, m.efficiency) == (None, None)
    assert m.overlap_efficiency == 1.0 and m.ranks[0].comm_s == 0.0
    assert m.ranks[0].idle_s == 0.0 and m.makespan_s == 2.0
    assert m.ranks[0].peak_mem_bytes is None


@pytest.mark.parametrize("intervals,length", [
    ([], 0.0),
    ([(0, 1)], 1.0),
    ([(0, 1), (2, 3)], 2.0),                 # disjoint
    ([(0, 4), (1, 2)], 4.0),                 # nested
    ([(0, 2), (1, 3), (3, 5)], 5.0),         # chained, touching
    ([(5, 6), (0, 1), (0.5, 2)], 3.0),       # out of order
    ([(1, 1), (1, 2)], 1.0),                 # empty interval at a start
])
def test_union_length(intervals, length):
    assert union_length(intervals) == pytest.approx(length)


def test_step_durations_run_from_the_previous_computed_step():
    got = step_durations(two_ranks(shift=10.0, shuffle=True))
    assert got == pytest.approx({(0, 0): 2.0, (0, 1): 3.0, (1, 0): 1.0, (1, 1): 3.0})


def row(**kw):
    base = dict(makespan_s=10.0, exposed_comm_s=0.0, exposed_by_kind_s={}, across_nodes_share={},
                load_imbalance=1.0, compute_s=9.5, efficiency=0.76, peak_mem_bytes=1e9, memory_bytes=80e9)
    return {**base, **kw}


@pytest.mark.parametrize("numbers,sentence", [
    # exposed communication above 5% of the makespan: its largest kind, NIC-limited when
    # most of that kind's time crosses nodes
    (dict(exposed_comm_s=2.0, exposed_by_kind_s={"a2a": 1.5, "kv": 0.5}, across_nodes_share={"a2a": 0.8}),
     "all-to-all exposed 1.500 s of the 2.000 s exposed in all (15% of the makespan), NIC-limited: most of its "
     "time is on flows between nodes"),
    (dict(exposed_comm_s=2.0, exposed_by_kind_s={"ag": 2.0}, across_nodes_share={"ag": 0.5}),
     "all-gather exposed 2.000 s (20% of the makespan)"),
    (dict(exposed_comm_s=1.0, exposed_by_kind_s={"kv": 1.0}, load_imbalance=1.8),
     "K/V ring exposed 1.000 s (10% of the makespan); causal imbalance 1.80x"),
    # below 5%: the imbalance, else compute-bound at the share of the best rate (0.76 / 0.95)
    (dict(exposed_comm_s=0.4, exposed_by_kind_s={"kv": 0.4}, load_imbalance=1.86),
     "causal imbalance: the busiest GPU computes 1.86x the mean"),
    (dict(), "compute-bound: 95% of the makespan computing, at 80% of the kernel's best rate"),
    (dict(compute_s=6.0), "waits on peers: the busiest GPU computes only 60% of the makespan"),
    # a NIC busy half the makespan or more while no GPU is compute-bound
    (dict(compute_s=5.0, busiest_nic_s=5.0),
     "NIC-limited: the busiest NIC carries flows 50% of the makespan, transfers queue for it"),
    (dict(compute_s=9.0, busiest_nic_s=9.0), "compute-bound: 90% of the makespan computing, at 84% of the "
                                             "kernel's best rate"),
    (dict(compute_s=5.0, busiest_nic_s=6.0, exposed_comm_s=1.0, exposed_by_kind_s={"a2a": 1.0},
          across_nodes_share={"a2a": 1.0}),
     "all-to-all exposed 1.000 s (10% of the makespan), NIC-limited: most of its time is on flows between "
     "nodes; the busiest NIC carries flows 60% of the makespan, transfers queue for it"),
    (dict(peak_mem_bytes=100e9), "does not fit (93.13 GiB per GPU, 80 GB); compute-bound: 95% of the makespan "
                                 "computing, at 80% of the kernel's best rate"),
])
def test_the_explanation_follows_from_the_numbers(numbers, sentence):
    assert explain(row(**numbers)) == sentence


def test_an_all_to_all_across_nodes_is_explained_as_nic_limited():
    from sim.engine.play import simulate
    from sim.scenario.config import Scenario, Workload
    from tests.sim.reference import cluster

    hw = cluster(gpus_per_node=4, tflops=100.0, nvlink_gbps=500.0, nic_gbps=1.0)
    trace = simulate(Scenario(workload=Workload(seq=8 * 512, heads=8, kv_heads=8, head_dim=16), hardware=hw,
                              n_gpus=8, scheme="ulysses"))
    r = scheme_row("ulysses", "degree 8", trace, compute_metrics(trace))
    assert r["across_nodes_share"]["a2a"] > 0.9 and r["exposed_comm_s"] > 0.5 * r["makespan_s"]
    assert r["explanation"].startswith("all-to-all exposed") and "NIC-limited" in r["explanation"]
    assert r["bytes_sent_per_gpu"] == max(compute_metrics(trace).bytes_sent)


def test_a_shared_nic_is_explained_by_how_long_it_is_busy():
    """One NIC for 4 GPUs: a Ulysses all-to-all across two nodes queues 16 flows on it."""
    from sim.engine.play import simulate
    from sim.scenario.config import Scenario, Workload
    from tests.sim.reference import cluster

    hw = cluster(gpus_per_node=4, nics_per_node=1, tflops=100.0, nvlink_gbps=500.0, nic_gbps=1.0,
                 nic_latency_us=0.0)
    w = Workload(seq=8 * 512, heads=8, kv_heads=8, head_dim=16)
    trace = simulate(Scenario(workload=w, hardware=hw, n_gpus=8, scheme="ulysses"))
    r = scheme_row("ulysses", "degree 8", trace, compute_metrics(trace))
    # 16 flows of Q, K, V each way through each NIC, then 16 of the output: busy back to back
    flow_in, flow_out = 512 * 3 * 16 * 2 / 1e9, 512 * 1 * 16 * 2 / 1e9
    assert r["busiest_nic_s"] == pytest.approx(16 * (flow_in + flow_out), rel=1e-9)
    assert "the busiest NIC carries flows" in r["explanation"]


@pytest.mark.parametrize("spans_per_pass", [7, 1 << 18])
def test_metrics_summed_a_few_ranks_at_a_time_are_the_per_rank_sums(monkeypatch, spans_per_pass):
    """compute_metrics reads the spans a few ranks at a time: each rank's sums are still
    its spans' durations added in record order, its transfer time the merged runs of its
    sends and receives (sorted by start) added in order, and the bytes a running sum."""
    from sim.engine import threads
    from sim.engine.play import simulate
    from sim.trace import metrics
    from tests.sim.reference import scenario

    monkeypatch.setattr(metrics, "_SPANS", spans_per_pass)
    monkeypatch.setattr(threads, "WORTH_THREADS", 0)      # the rank blocks on threads
    sc = scenario(n=5, seq=5 * 512, layout="zigzag", causal=True, pass_="fwdbwd")
    trace = simulate(sc)
    m = compute_metrics(trace)
    by_rank = trace.by_rank()
    for r, spans in enumerate(by_rank):
        compute = exposed = 0.0
        for s in spans:
            if s.stream == "compute":
                compute += s.end_s - s.start_s
            elif s.stream == "wait" and s.kind != "idle":
                exposed += s.end_s - s.start_s
        moves = sorted(((s.start_s, s.end_s) for s in spans if s.stream in ("send", "recv")),
                       key=lambda x: x[0])
        comm, run_start, reach = 0.0, None, None
        for a, b in moves:
            if run_start is None or a > reach:
                if run_start is not None:
                    comm += reach - run_start
                run_start, reach = a, b
            else:
                reach = max(reach, b)
        if run_start is not None:
            comm += reach - run_start
        assert (m.ranks[r].compute_s, m.ranks[r].exposed_comm_s, m.ranks[r].comm_s) == (compute, exposed, comm)
    total = 0.0
    for s in trace.spans:
        if s.stream == "send":
            total += s.bytes
    assert m.total_bytes == total
