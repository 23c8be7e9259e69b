"""The ring scheme (sim.schemes.ring) played by the engine, against closed forms and
invariants computed here, and against the per-op reference schedule (tests.sim.reference)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.play import simulate
from sim.engine.schedule import ComputeOp
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.layouts import rank_tokens
from sim.scenario.config import Scenario, Workload
from sim.schemes.ring import build_ring_schedule
from sim.trace.metrics import compute_metrics
from tests.sim.conftest import brute_pairs
from tests.sim.reference import (
    LAYOUTS,
    PerOpHardware,
    block_times,
    hardware,
    reference_ring_ops,
    reference_trace_spans,
    ring_cases,
    ring_scenario,
    scenario,
)


@pytest.mark.parametrize("n", [1, 2, 3, 8])
@pytest.mark.parametrize("gbps", [5.0, 50.0, 5000.0])   # transfer-bound, near balance, compute-bound
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("sync", ["step", "buffered"])
def test_noncausal_ring_matches_closed_forms(n, gbps, layout, sync):
    seq = 2048 * n
    t_c, t_x = block_times(n, seq, 8, 2, 64, 2, 100.0, gbps, 2.0, 3.0)
    hw = hardware(gbps=gbps, overhead_us=3.0)
    on = compute_metrics(simulate(scenario(n=n, seq=seq, layout=layout, hw=hw, sync=sync)))
    off = compute_metrics(simulate(scenario(n=n, seq=seq, layout=layout, hw=hw, overlap=False)))
    assert on.makespan_s == pytest.approx(t_c + (n - 1) * max(t_c, t_x), rel=1e-12)
    assert off.makespan_s == pytest.approx(n * t_c + (n - 1) * t_x, rel=1e-12)
    # without overlap every transfer is exposed; with it, only the excess over compute
    assert sum(r.exposed_comm_s for r in off.ranks) == pytest.approx(n * (n - 1) * t_x, rel=1e-9)
    exposed_on = n * (n - 1) * max(0.0, t_x - t_c)
    assert sum(r.exposed_comm_s for r in on.ranks) == pytest.approx(exposed_on, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("n", [4, 8])
def test_causal_ratio_and_imbalance_when_compute_bound(n):
    seq = 1024 * 2 * n
    hw = hardware(gbps=1e6, latency_us=0.0, overhead_us=0.0)
    full = compute_metrics(simulate(scenario(n=n, seq=seq, hw=hw, causal=False))).makespan_s
    ratio = {}
    for layout in LAYOUTS:
        m = compute_metrics(simulate(scenario(n=n, seq=seq, hw=hw, causal=True, layout=layout)))
        ratio[layout] = m.makespan_s / full
        if layout == "contiguous":
            assert m.load_imbalance == pytest.approx((2 * n - 1) / n, rel=2e-3)
        else:
            assert m.load_imbalance == pytest.approx(1.0, rel=2e-3)
    assert ratio["contiguous"] == pytest.approx((n - 0.5) / n, rel=2e-3)
    assert ratio["striped"] == pytest.approx(0.5, rel=2e-3)
    assert ratio["zigzag"] == pytest.approx(0.5, rel=2e-3)


def coverage_from_trace(trace, layout, seq, n, causal, flops_per_pair):
    """How many times each unmasked (query, key) token pair was computed, from the
    compute spans; checks on the way that each span's FLOPs match its unmasked pairs
    and that no fully masked block was launched."""
    toks = rank_tokens(layout, seq, n)
    chunk_owner = {}
    from sim.layouts import chunks_of_rank
    for r, ch in enumerate(chunks_of_rank(layout, n)):
        chunk_owner[ch] = r
    cover = np.zeros((seq, seq), dtype=np.int64)
    for s in trace.spans:
        if s.stream == "compute":
            q, k = toks[s.rank], toks[chunk_owner[s.kv_chunks]]
            mask = (k[None, :] <= q[:, None]) if causal else np.ones((q.size, k.size), bool)
            assert mask.any(), "a fully masked block was computed"
            factor = 2.5 if s.kind == "bwd" else 1.0
            assert s.flops == pytest.approx(factor * flops_per_pair * mask.sum())
            cover[np.ix_(q, k)] += mask
    return cover


@settings(max_examples=40, deadline=None)
@given(layout=st.sampled_from(LAYOUTS), n=st.integers(1, 6), per=st.integers(1, 4),
       causal=st.booleans(), overlap=st.booleans(), pass_=st.sampled_from(["fwd", "bwd", "fwdbwd"]),
       gbps=st.sampled_from([0.001, 1.0, 1000.0]), sync=st.sampled_from(["step", "buffered"]))
def test_ring_invariants(layout, n, per, causal, overlap, pass_, gbps, sync):
    seq = per * (2 * n if layout == "zigzag" else n)
    hw = hardware(tflops=1e-3, gbps=gbps, overhead_us=1.0)
    sc = scenario(n=n, seq=seq, layout=layout, causal=causal, overlap=overlap, pass_=pass_,
                  hw=hw, heads=2, kv_heads=1, head_dim=4, sync=sync)
    trace = simulate(sc)
    m = compute_metrics(trace)
    phases = 2 if pass_ == "fwdbwd" else 1
    # every unmasked pair exactly once per phase, masked pairs never
    cover = coverage_from_trace(trace, layout, seq, n, causal, 4 * 4 * 2)
    allowed = np.tril(np.ones((seq, seq), dtype=np.int64)) if causal else np.ones((seq, seq), dtype=np.int64)
    assert (cover == phases * allowed).all()
    # FLOPs: 4 d P per head and batch item forward, 2.5x backward
    pairs = int(allowed.sum())
    per_phase = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}[pass_]
    assert m.total_flops == pytest.approx(per_phase * 4 * 4 * 2 * pairs)
    assert m.makespan_s >= m.ideal_s * (1 - 1e-12)
    # bytes on the ring: K/V N-1 hops a phase; backward also N hops of fp32 dK/dV
    kv = 2 * 1 * (seq // n) * 4 * 2
    expect_bytes = phases * n * (n - 1) * kv
    if pass_ != "fwd" and n > 1:
        expect_bytes += n * n * 2 * (seq // n) * 4 * 4
    assert m.total_bytes == expect_bytes
    # sends and receives pair up
    sends = sorted((s.rank, s.peer, s.kind, s.step, s.start_s, s.end_s) for s in trace.spans if s.stream == "send")
    recvs = sorted((s.peer, s.rank, s.kind, s.step, s.start_s, s.end_s) for s in trace.spans if s.stream == "recv")
    assert sends == recvs
    # compute spans never overlap on a rank
    for spans in trace.by_rank("compute"):
        spans.sort(key=lambda s: s.start_s)
        assert all(a.end_s <= b.start_s + 1e-15 for a, b in zip(spans, spans[1:]))
    # overlap is never slower than lock-step exchange
    other = compute_metrics(simulate(sc.with_(overlap=not overlap))).makespan_s
    on, off = (m.makespan_s, other) if overlap else (other, m.makespan_s)
    assert on <= off * (1 + 1e-12)
    # accounting: compute + exposed + idle fills the makespan on every rank
    for r in m.ranks:
        assert r.compute_s + r.exposed_comm_s + r.idle_s == pytest.approx(m.makespan_s, rel=1e-9)
        assert r.exposed_comm_s <= r.comm_s * (1 + 1e-9) + 1e-15


def test_flops_identical_across_layouts():
    totals = {layout: compute_metrics(simulate(scenario(n=4, seq=4096, layout=layout, causal=True))).total_flops
              for layout in LAYOUTS}
    assert len(set(totals.values())) == 1
    assert totals["zigzag"] == 4 * 64 * 8 * brute_pairs("zigzag", 4096, 4, True).sum()


@pytest.mark.parametrize("pass_", ["fwd", "fwdbwd"])
def test_peak_memory_per_rank_independent_of_ranks_at_fixed_shard(pass_):
    per_rank = 2048
    by_n = {}
    for n in (1, 2, 4, 16):
        trace = simulate(scenario(n=n, seq=per_rank * n * 2, layout="zigzag", pass_=pass_))
        by_n[n] = {compute_metrics(trace).ranks[r].peak_mem_bytes for r in range(n)}
    assert all(len(m) == 1 for m in by_n.values())
    assert by_n[4] == by_n[16]                        # from three ranks on, flat at a fixed shard
    # own Q, K, V, the K/V buffers (two; one on a ring of two, none alone), output, fp32
    # accumulator and stats, by hand
    c, h, hk, d = per_rank * 2, 8, 2, 64
    for n, buffers in ((1, 0), (2, 1), (4, 2), (16, 2)):
        fwd = c * h * d * 2 + 2 * c * hk * d * 2 * (1 + buffers) + c * h * d * 2 + c * h * d * 4 + 2 * c * h * 4
        bwd = c * h * d * 2 + c * h * d * 4 + buffers * 2 * c * hk * d * 4
        assert by_n[n] == {fwd + (bwd if pass_ == "fwdbwd" else 0)}, n


def test_gqa_moves_fewer_bytes():
    full = compute_metrics(simulate(scenario(heads=8, kv_heads=8))).total_bytes
    gqa = compute_metrics(simulate(scenario(heads=8, kv_heads=2))).total_bytes
    mqa = compute_metrics(simulate(scenario(heads=8, kv_heads=1))).total_bytes
    assert (full, gqa) == (4 * mqa * 2, mqa * 2)


def test_inter_node_link_slows_only_the_hops_between_nodes():
    hw = Hardware(gpu=Gpu(achieved_tflops=100.0, launch_overhead_us=0.0),
                  link=Link(bandwidth_gbps=400.0, latency_us=0.0),
                  inter_link=Link(bandwidth_gbps=10.0, latency_us=0.0), gpus_per_node=2, comm_cost="link")
    trace = simulate(scenario(n=4, seq=4 * 1024, hw=hw))
    durations = {}
    for s in trace.spans:
        if s.stream == "send":
            durations.setdefault((s.rank, s.peer), []).append(s.duration_s)
    fast = 2 * 2 * 1024 * 64 * 2 / 400e9
    slow = 2 * 2 * 1024 * 64 * 2 / 10e9
    expect = {(0, 1): fast, (1, 2): slow, (2, 3): fast, (3, 0): slow}
    for hop, t in expect.items():
        assert durations[hop] == pytest.approx([t] * 3, rel=1e-12)


def test_tile_granularity_rounds_work_up():
    exact = simulate(scenario(n=4, seq=4096, layout="zigzag", causal=True))
    tiled = simulate(scenario(n=4, seq=4096, layout="zigzag", causal=True).with_(granularity="tile", tile=128))
    fe, ft = compute_metrics(exact).total_flops, compute_metrics(tiled).total_flops
    # 4096 tokens in 128-token tiles: the diagonal tiles are charged whole
    tiles = 4096 // 128
    expect_pairs = (tiles * (tiles + 1) // 2) * 128 * 128
    assert ft == pytest.approx(4 * 64 * 8 * expect_pairs)
    assert fe < ft


def test_step_sync_keeps_ranks_in_lock_step_and_buffering_lets_them_run_ahead():
    # contiguous causal, transfer-bound: rank 0 has almost nothing to compute
    hw = hardware(tflops=100.0, gbps=20.0, overhead_us=0.0, latency_us=0.0)
    step = simulate(scenario(n=4, seq=4 * 4096, layout="contiguous", causal=True, hw=hw, sync="step"))
    buffered = simulate(scenario(n=4, seq=4 * 4096, layout="contiguous", causal=True, hw=hw,
                                 sync="buffered"))
    assert compute_metrics(buffered).makespan_s <= compute_metrics(step).makespan_s
    # step sync: no rank starts a send of step k before every neighbour finished step k-1
    sends = {(s.rank, s.step): s for s in step.spans if s.stream == "send"}
    comp_end = {(s.rank, s.step): s.end_s for s in step.spans if s.stream == "compute"}
    for (r, k), s in sends.items():
        if k >= 1:
            for x in (r, (r + 1) % 4):
                if (x, k - 1) in comp_end:
                    assert s.start_s >= comp_end[x, k - 1] - 1e-15


@settings(max_examples=60, deadline=None)
@given(**ring_cases)
def test_columnar_ring_schedule_lists_the_per_op_schedule(layout, n, causal, overlap, pass_, sync, tile):
    sc = ring_scenario(layout, n, causal, overlap, pass_, sync, tile)
    schedule = build_ring_schedule(sc)
    schedule.check()
    want = reference_ring_ops(sc)
    assert schedule.ops == want
    assert schedule.compute_order == [[op.id for op in want if isinstance(op, ComputeOp) and op.rank == r]
                                      for r in range(n)]


@settings(max_examples=60, deadline=None)
@given(**ring_cases, gbps=st.sampled_from([0.001, 0.3, 1000.0]), overhead_us=st.sampled_from([0.0, 5.0]),
       nodes=st.booleans())
def test_wave_player_gives_the_per_op_recurrence_trace_bit_for_bit(layout, n, causal, overlap, pass_, sync,
                                                                   tile, gbps, overhead_us, nodes):
    hw = Hardware(gpu=Gpu(name="test", achieved_tflops=1e-3, launch_overhead_us=overhead_us),
                  link=Link(bandwidth_gbps=gbps, latency_us=2.0),
                  inter_link=Link(bandwidth_gbps=gbps / 7, latency_us=9.0) if nodes else None,
                  gpus_per_node=2)
    sc = ring_scenario(layout, n, causal, overlap, pass_, sync, tile, hw)
    want = reference_trace_spans(reference_ring_ops(sc), n, hw, sc.workload, queue=True)   # GPUs: NCCL
    assert simulate(sc, player="recurrence").spans == want
    # a model with only per-op methods is asked once per distinct block or hop
    per_op = PerOpHardware(hw)
    assert simulate(sc, per_op, player="recurrence").spans == want
    assert per_op.calls <= len({(op.flops, op.kind, op.mask, op.q_tokens, op.kv_tokens)
                                if isinstance(op, ComputeOp) else
                                (op.nbytes, op.src, op.dst) for op in reference_ring_ops(sc)})


def test_wave_player_at_64_gpus_gives_the_per_op_trace():
    sc = Scenario(n_gpus=64, workload=Workload(seq=64 * 32, pass_="fwdbwd"),   # tokens enumerated by the reference
                  hardware=Hardware(comm_cost="link"))                        # its hops timed one by one
    want = reference_trace_spans(reference_ring_ops(sc), 64, sc.hardware, sc.workload, queue=True)
    assert simulate(sc, player="recurrence").spans == want


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("pass_", ["fwd", "bwd", "fwdbwd"])
@pytest.mark.parametrize("overlap,sync", [(True, "step"), (True, "buffered"), (False, "step")])
def test_a_ring_built_on_threads_a_step_per_pass_lists_the_per_op_schedule(monkeypatch, layout, pass_, overlap,
                                                                           sync):
    """A large ring is built a few steps per pass, its pieces (the block tables, what the
    ops share, the blocks' owners, each table's gathers, each row of dependencies) on
    threads: forced here on a small ring, one step per pass."""
    from sim.engine import threads
    from sim.schemes import ring

    monkeypatch.setattr(ring, "_ROWS", 4)
    monkeypatch.setattr(threads, "WORTH_THREADS", 0)
    sc = ring_scenario(layout, 5, True, overlap, pass_, sync, None)
    schedule = build_ring_schedule(sc)
    schedule.check()
    assert schedule.ops == reference_ring_ops(sc)


@pytest.mark.parametrize("pass_,want", [("fwd", 2 * 25 - 5), ("bwd", 3 * 25 - 5), ("fwdbwd", 5 * 25 - 10)])
def test_the_ring_counts_its_operations_without_building_them(pass_, want):
    """N^2 computes and N(N-1) K/V hops a pass, N^2 dK/dV hops in backward (N = 5)."""
    from sim.schemes.ring import count_ring_ops

    sc = ring_scenario("zigzag", 5, True, True, pass_, "step", None)
    assert count_ring_ops(sc) == want == len(build_ring_schedule(sc))
