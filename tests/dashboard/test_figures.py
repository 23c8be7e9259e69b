"""Figure builders against numbers computed independently of the code under test."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cli import compare_rows
from sim.config import Gpu, Hardware, Workload
from sim.engine import simulate
from sim.errors import RingsimError
from sim.metrics import compute_metrics
from sim.online_softmax import example
from sim.trace import Span, Trace

from dashboard import compute, figures
from tests.dashboard.conftest import chunk_tokens, measured_from, owner, small_scenario


def _trace_named(fig, name):
    return [t for t in fig.data if t.name == name]


# --- view 1 -------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_layout_strip_colors_follow_token_owners(layout, n):
    seq = 16 * n
    fig = figures.layout_strip(layout, seq, n)
    bar = fig.data[0]
    base, width, colors = np.asarray(bar.base), np.asarray(bar.x), list(bar.marker.color)
    assert base[0] == 0 and (base[1:] == base[:-1] + width[:-1]).all()   # contiguous cover
    assert base[-1] + width[-1] == seq
    for b, w, c in zip(base, width, colors):
        owners = {owner(layout, seq, n, t) for t in range(int(b), int(b + w))}
        assert len(owners) == 1                     # a run belongs to one GPU
        assert c == figures.rank_color(owners.pop(), n)
    expected_runs = {"contiguous": n, "zigzag": 2 * n - 1, "striped": seq}[layout]
    assert len(base) == expected_runs


def test_layout_strip_truncates_long_striped_sequences():
    fig = figures.layout_strip("striped", 131072, 8)
    assert fig.layout.meta["truncated"] and fig.layout.meta["runs"] == figures.MAX_STRIP_RUNS
    assert fig.layout.meta["tokens_shown"] == figures.MAX_STRIP_RUNS
    assert "pattern repeats" in fig.layout.title.text


# --- view 3 -------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("causal", [True, False])
def test_chunk_pair_work_matches_enumeration(layout, causal):
    n, seq = 4, 64
    work = figures.chunk_pair_work(layout, seq, n, causal)
    chunks = 2 * n if layout == "zigzag" else n
    for i in range(chunks):
        qi = chunk_tokens(layout, seq, n, i)
        for j in range(chunks):
            kj = chunk_tokens(layout, seq, n, j)
            brute = int((kj[None, :] <= qi[:, None]).sum()) if causal else qi.size * kj.size
            assert work[i, j] == brute


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("pass_", ["fwd", "fwdbwd"])
def test_block_map_steps_and_blanks(layout, pass_):
    n, seq = 4, 256
    trace = simulate(small_scenario(layout=layout, n_gpus=n, seq=seq, pass_=pass_))
    grid = figures.block_steps(trace)
    chunks = 2 * n if layout == "zigzag" else n
    assert grid.shape == (chunks, chunks)
    for i in range(chunks):
        qi = chunk_tokens(layout, seq, n, i)
        for j in range(chunks):
            kj = chunk_tokens(layout, seq, n, j)
            if not (kj[None, :] <= qi[:, None]).any():
                assert np.isnan(grid[i, j])          # fully masked: blank
            else:
                # rank r computes the K/V block of rank (r - k) mod n at step k
                r, s = owner(layout, seq, n, int(qi[0])), owner(layout, seq, n, int(kj[0]))
                assert grid[i, j] == (r - s) % n


def test_block_map_work_bars_are_each_gpus_flops():
    n, seq = 4, 256
    sc = small_scenario(layout="contiguous", n_gpus=n, seq=seq)
    fig = figures.block_map(simulate(sc))
    bars = [t for t in fig.data if t.type == "bar"][0]
    w = sc.workload
    for r in range(n):
        pairs = (r * (seq // n)) * (seq // n) + (seq // n) * (seq // n + 1) // 2   # causal, contiguous
        assert bars.y[r] * 1e12 == pytest.approx(4 * w.head_dim * w.heads * w.batch * pairs)
    assert fig.layout.meta["imbalance"] == pytest.approx(max(bars.y) / np.mean(bars.y))


def test_block_map_needs_a_configuration():
    bare = Trace("measured", 2, [Span(0, "compute", "fwd", 0, 0.0, 1.0)])
    with pytest.raises(RingsimError, match="no layout"):
        figures.block_map(bare)


# --- view 2 -------------------------------------------------------------------------

def test_timeline_bars_are_the_spans(small_trace):
    fig = figures.timeline(small_trace)
    assert not fig.layout.meta["webgl"]
    t0 = min(s.start_s for s in small_trace.spans)
    scale = {"s": 1, "ms": 1e3, "µs": 1e6}[fig.layout.meta["unit"]]
    compute_spans = sorted((s for s in small_trace.spans if s.stream == "compute"),
                           key=lambda s: (s.rank, s.start_s))
    (bar,) = _trace_named(fig, "compute (forward)")
    got = sorted(zip((np.asarray(bar.y) // 3).astype(int), bar.base, bar.x))
    want = [(s.rank, (s.start_s - t0) * scale, (s.end_s - s.start_s) * scale) for s in compute_spans]
    assert len(got) == len(want)
    for (r1, b1, x1), (r2, b2, x2) in zip(got, want):
        assert r1 == r2 and b1 == pytest.approx(b2) and x1 == pytest.approx(x2)
    sends = [s for s in small_trace.spans if s.stream == "send"]
    assert len(_trace_named(fig, "send K/V")[0].x) == len(sends)
    # hover data carries the K/V block ids (zigzag: two chunks per block)
    assert "K/V block chunks %{customdata[8]}, %{customdata[9]}" in bar.hovertemplate


def test_timeline_highlights_exposed_communication():
    # a slow link: transfers cannot hide behind compute
    from sim.config import Hardware, Link
    sc = small_scenario(layout="zigzag", hardware=Hardware(link=Link(bandwidth_gbps=0.5)))
    trace = simulate(sc)
    exposed = [s for s in trace.spans if s.stream == "wait" and s.kind != "idle"]
    assert exposed
    fig = figures.timeline(trace)
    (bar,) = _trace_named(fig, "exposed communication")
    scale = {"s": 1, "ms": 1e3, "µs": 1e6}[fig.layout.meta["unit"]]
    assert sum(bar.x) == pytest.approx(sum(s.end_s - s.start_s for s in exposed) * scale)
    assert bar.marker.color == figures.COLORS["exposed"]


def _synthetic(n_ranks: int, per_rank: int) -> Trace:
    spans = []
    for r in range(n_ranks):
        for i in range(per_rank):
            stream = ("compute", "send", "recv")[i % 3]
            kind = "fwd" if stream == "compute" else "kv"
            spans.append(Span(r, stream, kind, i // 3, i * 1e-6, (i + 0.9) * 1e-6,
                              q_chunks=(r,), kv_chunks=(r,), peer=-1 if stream == "compute" else (r + 1) % n_ranks))
    return Trace("simulated", n_ranks, spans, {"layout": "contiguous", "overlap": True})


def test_timeline_switches_to_webgl_past_the_bar_limit():
    trace = _synthetic(40, 500)                       # 20k spans
    fig = figures.timeline(trace)
    assert fig.layout.meta["webgl"] and fig.layout.meta["spans"] == 20_000
    assert {t.type for t in fig.data} == {"scattergl"}
    x = np.asarray(fig.data[0].x)
    assert np.isnan(x[2::3]).all()                    # one segment per span, NaN between
    assert sum(len(t.x) for t in fig.data) == 3 * 20_000


def test_timeline_window_narrows_to_the_span_cap():
    trace = _synthetic(10, 300)
    fig = figures.timeline(trace, (2, 9), max_spans=1000)
    assert fig.layout.meta["ranks"] == [2, 4]         # 3 ranks x 300 spans fit under 1000
    assert "GPUs 2–4 of 10" in fig.layout.title.text


# --- view 4 -------------------------------------------------------------------------

def test_comparison_table_equals_the_cli_comparison():
    sc = small_scenario(n_gpus=4)
    rows = compute.compare_table(sc)
    assert rows == compare_rows(sc)
    fig = figures.comparison(rows)
    best = min(rows, key=lambda r: r["makespan_s"])
    assert fig.layout.meta["best"] == [best["layout"], best["overlap"]]
    on = [t for t in fig.data if t.name == "overlap on" and t.xaxis == "x2"][0]
    assert list(on.y) == pytest.approx([r["efficiency"] * 100 for r in rows if r["overlap"]])


# --- view 5 -------------------------------------------------------------------------

def test_crossover_is_the_design_condition():
    # the closed form holds for the flat model (one rate for every block, no merge)
    sc = small_scenario(hardware=Hardware(gpu=Gpu.preset("H100-SXM", efficiency=0.5)))
    w, hw = sc.workload, sc.hardware
    # DESIGN.md fact 5, per kv head group: 4 c^2 d H / F = 2 c d H_kv b / B
    c_star = w.elem_bytes * hw.gpu.rate_flops(w.dtype) * w.kv_heads / (2 * hw.link.bandwidth_gbps * 1e9 * w.heads)
    assert compute.crossover_tokens(hw, sc) == pytest.approx(c_star, rel=1e-9)
    c = 2048
    b_star = 2 * w.kv_heads * c * w.head_dim * w.elem_bytes / (4 * c * c * w.head_dim * w.heads / hw.gpu.rate_flops(w.dtype))
    assert compute.crossover_bandwidth_gbps(hw, sc, c) * 1e9 == pytest.approx(b_star, rel=1e-9)


def test_sweep_exposes_communication_on_slow_links():
    sc = small_scenario(n_gpus=4)
    sweep = compute.overlap_sweep(sc)
    bw = {r["bandwidth_gbps"]: r for r in sweep["by_bandwidth"]}
    slowest, fastest = bw[min(bw)], bw[max(bw)]
    assert slowest["exposed_frac"] > fastest["exposed_frac"]
    assert slowest["efficiency"] < fastest["efficiency"]
    fig = figures.overlap_sweep(sweep)
    vlines = [s for s in fig.layout.shapes if s.type == "line" and s.line.dash == "dash"]
    assert any(s.x0 == pytest.approx(sweep["crossover_tokens"]) for s in vlines)
    assert any(s.x0 == pytest.approx(sweep["crossover_bandwidth_gbps"]) for s in vlines)


# --- view 6 -------------------------------------------------------------------------

def test_memory_table_against_closed_forms():
    sc = small_scenario(n_gpus=8, seq=8192)
    table = compute.memory_table(sc)
    w = sc.workload
    for r in table["by_seq"]:
        full = 2 * w.batch * w.kv_heads * r["seq"] * w.head_dim * w.elem_bytes
        assert r["full_kv_bytes"] == full
        assert r["ring_kv_bytes"] == 3 * full // sc.n_gpus     # own shard + two blocks in flight
    shard = {r["fixed_shard_bytes"] for r in table["by_gpus"]}
    assert len(shard) == 1                                    # fact 4: flat at a fixed shard
    fig = figures.memory(table)
    assert len(fig.data) >= 6


# --- view 7 -------------------------------------------------------------------------

def test_merge_figure_shows_the_recorded_steps():
    res = example(n_ranks=4, layout="striped", causal=True, query_row=13)
    fig = figures.merge_steps(res, "striped")
    m_line = [t for t in fig.data if t.name == "running max m"][0]
    assert list(m_line.y) == [s.m for s in res.steps]
    factors = [t for t in fig.data if t.name == "rescale factor"][0]
    assert list(factors.y) == [s.rescale for s in res.steps]
    assert fig.layout.meta["max_abs_error"] == res.max_abs_error < 1e-12


# --- view 8 -------------------------------------------------------------------------

def test_step_errors_of_a_uniformly_slower_run(small_trace):
    measured = measured_from(small_trace, factor=1.25)
    rows = compute.step_errors(small_trace, measured)
    assert [r["step"] for r in rows] == list(range(small_trace.world_size))
    for r in rows:
        assert r["measured_s"] == pytest.approx(1.25 * r["simulated_s"])
        assert r["error"] == pytest.approx(1 / 1.25 - 1)
    fig = figures.overlay(small_trace, measured, rows)
    assert fig.layout.meta["makespan_error"] == pytest.approx(1 / 1.25 - 1)
    meas = [t for t in fig.data if t.name == "measured compute"][0]
    assert min(meas.base) == pytest.approx(0.0)          # aligned on its own time 0
    assert {int(y) % 2 for y in meas.y} == {1}           # on the measured lanes


def test_time_unit():
    assert figures.time_unit(2.0) == (1.0, "s")
    assert figures.time_unit(0.02) == (1e3, "ms")
    assert figures.time_unit(2e-5) == (1e6, "µs")


def test_metrics_of_cached_run_equal_direct(small_trace):
    sc = small_scenario(layout="zigzag")
    res = compute.run(sc)
    assert res.metrics == compute_metrics(small_trace)
    assert compute.run(sc) is res                     # second call comes from the cache
