"""The engine against closed forms and invariants computed here, and against the per-op
implementations the columnar schedule and the wave player replaced; not by the engine."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sim.config import Gpu, Hardware, Link, Scenario, Workload
from sim.engine import simulate
from sim.layouts import rank_tokens
from sim.memory import peak_memory_bytes
from sim.metrics import compute_metrics
from tests.sim.conftest import brute_extents, brute_pairs

LAYOUTS = ["contiguous", "striped", "zigzag"]


def hardware(tflops=100.0, gbps=100.0, latency_us=2.0, overhead_us=0.0):
    return Hardware(gpu=Gpu(name="test", achieved_tflops=tflops, launch_overhead_us=overhead_us),
                    link=Link(bandwidth_gbps=gbps, latency_us=latency_us))


def scenario(n=4, seq=4096, layout="contiguous", overlap=True, causal=False, pass_="fwd",
             hw=None, heads=8, kv_heads=2, head_dim=64, dtype="bf16", batch=1, sync="step"):
    w = Workload(batch=batch, seq=seq, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                 dtype=dtype, causal=causal, pass_=pass_)
    return Scenario(workload=w, hardware=hw or hardware(), n_gpus=n, layout=layout,
                    overlap=overlap, sync=sync)


def block_times(n, seq, heads, kv_heads, head_dim, elem_bytes, tflops, gbps, latency_us,
                overhead_us, batch=1):
    c = seq // n
    t_c = overhead_us * 1e-6 + 4 * c * c * head_dim * heads * batch / (tflops * 1e12)
    t_x = latency_us * 1e-6 + 2 * batch * kv_heads * c * head_dim * elem_bytes / (gbps * 1e9)
    return t_c, t_x


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
    mems = set()
    for n in (1, 2, 4, 16):
        trace = simulate(scenario(n=n, seq=per_rank * n * 2, layout="zigzag", pass_=pass_))
        mems.update(compute_metrics(trace).ranks[r].peak_mem_bytes for r in range(n))
    assert len(mems) == 1
    # own Q, K, V, two K/V buffers, output, fp32 accumulator and stats, by hand
    c, h, hk, d = per_rank * 2, 8, 2, 64
    fwd = c * h * d * 2 + 2 * c * hk * d * 2 * 3 + c * h * d * 2 + c * h * d * 4 + 2 * c * h * 4
    bwd = c * h * d * 2 + c * h * d * 4 + 2 * 2 * c * hk * d * 4
    assert mems.pop() == fwd + (bwd if pass_ == "fwdbwd" else 0)


def test_gqa_moves_fewer_bytes():
    full = compute_metrics(simulate(scenario(heads=8, kv_heads=8))).total_bytes
    gqa = compute_metrics(simulate(scenario(heads=8, kv_heads=2))).total_bytes
    mqa = compute_metrics(simulate(scenario(heads=8, kv_heads=1))).total_bytes
    assert (full, gqa) == (4 * mqa * 2, mqa * 2)


def test_same_configuration_gives_identical_trace():
    a = simulate(scenario(n=6, seq=6 * 512, layout="zigzag", causal=True, pass_="fwdbwd"))
    b = simulate(scenario(n=6, seq=6 * 512, layout="zigzag", causal=True, pass_="fwdbwd"))
    assert a.to_dict() == b.to_dict()


def test_inter_node_link_slows_only_the_hops_between_nodes():
    hw = Hardware(gpu=Gpu(achieved_tflops=100.0, launch_overhead_us=0.0),
                  link=Link(bandwidth_gbps=400.0, latency_us=0.0),
                  inter_link=Link(bandwidth_gbps=10.0, latency_us=0.0), gpus_per_node=2)
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


@settings(max_examples=40, deadline=None)
@given(layout=st.sampled_from(LAYOUTS), n=st.integers(1, 7), causal=st.booleans(),
       overlap=st.booleans(), pass_=st.sampled_from(["fwd", "bwd", "fwdbwd"]),
       gbps=st.sampled_from([0.001, 0.3, 1000.0]), overhead_us=st.sampled_from([0.0, 5.0]),
       sync=st.sampled_from(["step", "buffered"]))
def test_recurrence_player_gives_the_simpy_trace_bit_for_bit(layout, n, causal, overlap, pass_,
                                                            gbps, overhead_us, sync):
    hw = hardware(tflops=1e-3, gbps=gbps, overhead_us=overhead_us)
    sc = scenario(n=n, seq=4 * n, layout=layout, causal=causal, overlap=overlap, pass_=pass_,
                  hw=hw, heads=2, kv_heads=1, head_dim=4, sync=sync)
    a, b = simulate(sc), simulate(sc, player="recurrence")
    assert a.spans == b.spans


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


# --- The wave player against the per-op implementations it replaced -------------------
#
# The ring schedule used to be built one operation at a time and played by a per-op
# max-plus recurrence; the references below are that code, kept as the independent
# computation the columnar schedule and the wave player must reproduce bit for bit
# (operations, times and spans, in order).

from operator import attrgetter  # noqa: E402

from sim.config import BWD_FLOPS_FACTOR  # noqa: E402
from sim.engine import play  # noqa: E402
from sim.layouts import block_masks, block_work, chunks_of_rank  # noqa: E402
from sim.ring import build_ring_schedule  # noqa: E402
from sim.schedule import ComputeOp, Schedule, TransferOp  # noqa: E402
from sim.trace import Span  # noqa: E402


def reference_ring_ops(scenario):
    """The ring schedule's operations, built one by one (sim/ring.py's rules)."""
    w, n, c = scenario.workload, scenario.n_gpus, scenario.tokens_per_rank
    work = block_work(scenario.layout, w.seq, n, w.causal, scenario.granularity, scenario.tile).tolist()
    masks = block_masks(scenario.layout, w.seq, n, w.causal).tolist()
    chunks = chunks_of_rank(scenario.layout, n)
    extents = brute_extents(scenario.layout, w.seq, n, w.causal)
    ops = []
    gate = None
    phases = {"fwd": ["fwd"], "bwd": ["bwd"], "fwdbwd": ["fwd", "bwd"]}[w.pass_]
    for i, phase in enumerate(phases):
        gate = _reference_phase(ops, scenario, phase, work, masks, chunks, c, extents, i * n, gate)
    return ops


def _reference_phase(ops, scenario, phase, work, masks, chunks, c, extents, step0, gate):
    w, n, overlap = scenario.workload, scenario.n_gpus, scenario.overlap
    stepped = overlap and scenario.sync == "step"
    bwd = phase == "bwd"
    flops_per_pair = (1.0 if phase == "fwd" else BWD_FLOPS_FACTOR) * w.fwd_flops(1)
    comp, kv, dkv = [], [], []
    prev = [(r - 1) % n for r in range(n)]
    nxt = [(r + 1) % n for r in range(n)]

    def gated(*ranks):
        return tuple(gate[r] for r in ranks) if gate is not None else ()

    def reach(r, k):
        if k == 0:
            return []
        out = [comp[k - 1][r], kv[k - 1][r], kv[k - 1][prev[r]]]
        if bwd and k >= 2:
            out += [dkv[k - 2][r], dkv[k - 2][prev[r]]]
        return out

    def post_dkv(r, k):
        return [comp[k][r]] + ([dkv[k - 1][r], dkv[k - 1][prev[r]]] if k >= 1 else [])

    for k in range(n):
        row = []
        for r in range(n):
            owner = (r - k) % n
            pairs = work[r][owner]
            if stepped:
                after = reach(r, k)
            elif k == 0:
                after = []
            elif not overlap:
                after = [kv[k - 1][prev[r]], kv[k - 1][r]]
                if bwd:
                    after += [dkv[k - 1][prev[r]], dkv[k - 1][r]]
            elif pairs > 0:
                after = [kv[k - 1][prev[r]]]
            else:
                after = []
            row.append(len(ops))
            ops.append(ComputeOp(len(ops), r, phase, step0 + k, owner, pairs, flops_per_pair * pairs,
                                 masks[r][owner], extents[r][owner][0], extents[r][owner][1], chunks[r],
                                 chunks[owner], tuple(after)))
        comp.append(row)
        row = []
        if k <= n - 2:
            for r in range(n):
                dst = nxt[r]
                if stepped:
                    after = list(dict.fromkeys(reach(r, k) + reach(dst, k)))
                elif not overlap:
                    after = [comp[k][r], comp[k][dst]]
                else:
                    after = [kv[k - 1][prev[r]]] if k >= 1 else []
                    if k >= 2:
                        after += [comp[k - 1][dst], kv[k - 1][dst]]
                owner = (r - k) % n
                row.append(len(ops))
                ops.append(TransferOp(len(ops), r, dst, "kv", step0 + k, owner, w.kv_bytes(c),
                                      chunks[owner], tuple(after) + gated(r, dst)))
        kv.append(row)
        row = []
        if bwd and n > 1:
            for r in range(n):
                dst = nxt[r]
                if stepped:
                    after = list(dict.fromkeys(post_dkv(r, k) + post_dkv(dst, k)))
                else:
                    after = [comp[k][r]]
                    if k >= 1:
                        after.append(dkv[k - 1][prev[r]])
                    if overlap and k >= 2:
                        after.append(dkv[k - 1][dst])
                    if not overlap:
                        after.append(comp[k][dst])
                owner = (r - k) % n
                row.append(len(ops))
                ops.append(TransferOp(len(ops), r, dst, "dkv", step0 + k, owner, w.dkv_bytes(c),
                                      chunks[owner], tuple(after) + gated(r, dst)))
        dkv.append(row)
    return comp[n - 1]


def reference_durations(ops, hardware, workload):
    out = []
    for op in ops:
        if isinstance(op, TransferOp):
            out.append(hardware.transfer_time_s(op.nbytes, op.src, op.dst))
        elif op.mask == "empty":
            out.append(0.0)
        else:
            out.append(hardware.compute_time_s(op.flops, dtype=workload.dtype, kind=op.kind,
                                               mask=op.mask, q_tokens=op.q_tokens, kv_tokens=op.kv_tokens))
    return out


def reference_times(ops, dur):
    """Per op in schedule order: start at the later of the stream's free time and the
    dependencies' ends; the stream is free again at the op's end."""
    start, end, free = [0.0] * len(ops), [0.0] * len(ops), {}
    for op in ops:
        key = op.rank if isinstance(op, ComputeOp) else (op.src, op.dst)
        t = free.get(key, 0.0)
        for d in op.after:
            if end[d] > t:
                t = end[d]
        start[op.id] = t
        end[op.id] = free[key] = t + dur[op.id] if dur[op.id] > 0 else t
    return start, end


def reference_spans(ops, n, start, end):
    spans, last, last_step = [], [0.0] * n, [0] * n
    for rank in range(n):
        free = 0.0
        for op in (op for op in ops if isinstance(op, ComputeOp) and op.rank == rank):
            t0 = start[op.id]
            if t0 > free:
                _reference_wait_spans(spans, op, ops, free, t0, start, end)
            if op.mask != "empty":
                free = end[op.id]
                spans.append(Span(rank, "compute", op.kind, op.step, t0, free, op.flops, 0.0,
                                  op.q_chunks, op.kv_chunks))
            else:
                free = t0
            last_step[rank] = op.step
        last[rank] = free
    for op in ops:
        if isinstance(op, TransferOp):
            t0, t1, b = start[op.id], end[op.id], float(op.nbytes)
            spans.append(Span(op.src, "send", op.kind, op.step, t0, t1, 0.0, b, (), op.kv_chunks, op.dst))
            spans.append(Span(op.dst, "recv", op.kind, op.step, t0, t1, 0.0, b, (), op.kv_chunks, op.src))
            for r in (op.src, op.dst):
                last[r] = max(last[r], t1)
                last_step[r] = max(last_step[r], op.step)
    makespan = max(last, default=0.0)
    for r in range(n):
        if last[r] < makespan:
            spans.append(Span(r, "wait", "idle", last_step[r], last[r], makespan))
    spans.sort(key=attrgetter("start_s", "rank", "stream"))
    return spans


def _reference_wait_spans(spans, op, ops, t0, t1, start, end):
    def add(a, b, kind):
        if b > a:
            spans.append(Span(op.rank, "wait", kind, op.step, a, b, 0.0, 0.0, op.q_chunks, op.kv_chunks))

    flights = sorted((max(start[d], t0), min(end[d], t1), ops[d].kind)
                     for d in op.after if isinstance(ops[d], TransferOp))
    t = t0
    for s, e, kind in flights:
        if e <= t:
            continue
        s = max(s, t)
        add(t, s, "idle")
        add(s, e, kind)
        t = e
    add(t, t1, "idle")


def reference_trace_spans(ops, n, hardware, workload):
    start, end = reference_times(ops, reference_durations(ops, hardware, workload))
    return reference_spans(ops, n, start, end)


class PerOpHardware:
    """A hardware model with only the per-op methods (as a calibrated profile or a user's
    model may be), counting the calls."""

    def __init__(self, hw):
        self.hw, self.calls = hw, 0

    def compute_time_s(self, flops, *, dtype, kind, mask, q_tokens, kv_tokens):
        self.calls += 1
        assert type(flops) is float and type(q_tokens) is int and type(kind) is str
        return self.hw.compute_time_s(flops, dtype=dtype, kind=kind, mask=mask, q_tokens=q_tokens,
                                      kv_tokens=kv_tokens)

    def transfer_time_s(self, nbytes, src, dst):
        self.calls += 1
        assert type(nbytes) is int and type(src) is int
        return self.hw.transfer_time_s(nbytes, src, dst)

    def rate_flops(self, dtype):
        return self.hw.rate_flops(dtype)

    def describe(self):
        return {"kind": "per-op test model"}


ring_cases = dict(
    layout=st.sampled_from(LAYOUTS), n=st.integers(1, 7), causal=st.booleans(),
    overlap=st.booleans(), pass_=st.sampled_from(["fwd", "bwd", "fwdbwd"]),
    sync=st.sampled_from(["step", "buffered"]), tile=st.sampled_from([None, 1, 3]))


def ring_scenario(layout, n, causal, overlap, pass_, sync, tile, hw=None):
    sc = scenario(n=n, seq=12 * n, layout=layout, causal=causal, overlap=overlap, pass_=pass_,
                  hw=hw, heads=2, kv_heads=1, head_dim=4, sync=sync)
    return sc if tile is None else sc.with_(granularity="tile", tile=tile)


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
    want = reference_trace_spans(reference_ring_ops(sc), n, hw, sc.workload)
    assert simulate(sc, player="recurrence").spans == want
    # a model with only per-op methods is asked once per distinct block or hop
    per_op = PerOpHardware(hw)
    assert simulate(sc, per_op, player="recurrence").spans == want
    assert per_op.calls <= len({(op.flops, op.kind, op.mask, op.q_tokens, op.kv_tokens)
                                if isinstance(op, ComputeOp) else
                                (op.nbytes, op.src, op.dst) for op in reference_ring_ops(sc)})


def test_wave_player_at_64_gpus_gives_the_per_op_trace():
    sc = Scenario(n_gpus=64, workload=Workload(pass_="fwdbwd"))
    want = reference_trace_spans(reference_ring_ops(sc), 64, sc.hardware, sc.workload)
    assert simulate(sc, player="recurrence").spans == want


@st.composite
def any_schedule(draw):
    """Operations on a few ranks in any pattern: several links per rank, zero-duration
    ops, transfers waiting on transfers, dependencies anywhere earlier."""
    n = draw(st.integers(1, 4))
    ops = []
    for i in range(draw(st.integers(0, 40))):
        after = tuple(sorted(set(draw(st.lists(st.integers(0, i - 1), max_size=4))))) if i else ()
        step, kind = draw(st.integers(0, 5)), draw(st.sampled_from(["fwd", "bwd", "kv", "dkv"]))
        if kind in ("kv", "dkv") and n > 1:
            src, dst = draw(st.permutations(range(n)))[:2]
            ops.append(TransferOp(i, src, dst, kind, step, src, draw(st.sampled_from([0, 8, 64])),
                                  (src,), after))
        else:
            r = draw(st.integers(0, n - 1))
            flops = float(draw(st.sampled_from([0, 1000, 5000])))
            mask = "empty" if flops == 0 else draw(st.sampled_from(["full", "diagonal"]))
            ops.append(ComputeOp(i, r, "fwd" if kind == "fwd" else "bwd", step, (r + 1) % n,
                                 int(flops), flops, mask, 4, 4, (r,), ((r + 1) % n,), after))
    return n, ops


@settings(max_examples=150, deadline=None)
@given(case=any_schedule(), overhead_us=st.sampled_from([0.0, 3.0]), latency_us=st.sampled_from([0.0, 2.0]))
def test_any_schedule_plays_the_same_on_waves_per_op_and_simpy(case, overhead_us, latency_us):
    n, ops = case
    hw = hardware(tflops=1e-3, gbps=0.01, latency_us=latency_us, overhead_us=overhead_us)
    w = Workload()
    schedule = Schedule.from_ops(n, ops)
    schedule.check()
    assert schedule.ops == ops
    rebuilt = Schedule.from_ops(n, list(ops))
    rebuilt._ops = None              # materialized again from the columns
    assert rebuilt.ops == ops
    want = reference_trace_spans(ops, n, hw, w)
    assert play(schedule, hw, w, player="recurrence").spans == want
    assert play(schedule, hw, w, player="simpy").spans == want


def test_from_ops_refuses_dependencies_on_later_operations():
    ops = [ComputeOp(0, 0, "fwd", 0, 0, 1, 1.0, "full", 1, 1, (0,), (0,), (1,)),
           ComputeOp(1, 0, "fwd", 0, 0, 1, 1.0, "full", 1, 1, (0,), (0,), ())]
    with pytest.raises(ValueError, match="dependencies must come first"):
        Schedule.from_ops(1, ops)


def test_check_refuses_waves_the_engine_could_not_time_at_once():
    ops = [ComputeOp(0, 0, "fwd", 0, 0, 1, 1.0, "full", 1, 1, (0,), (0,), ()),
           ComputeOp(1, 1, "fwd", 0, 1, 1, 1.0, "full", 1, 1, (1,), (1,), ()),
           TransferOp(2, 0, 1, "kv", 0, 0, 8, (0,), (0,))]
    schedule = Schedule.from_ops(2, ops)
    assert schedule.wave_starts.tolist() == [0, 2, 3]      # the hop waits on op 0
    schedule.check()
    schedule.wave_starts = np.array([0, 3])
    with pytest.raises(ValueError, match="its own wave"):
        schedule.check()
    same_rank = Schedule.from_ops(2, [ops[0], ops[0]._replace(id=1)])
    assert same_rank.wave_starts.tolist() == [0, 1, 2]     # one compute stream: two waves
    same_rank.wave_starts = np.array([0, 2])
    with pytest.raises(ValueError, match="share a stream"):
        same_rank.check()
