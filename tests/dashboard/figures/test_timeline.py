"""View 2: the timeline's bars are the trace's spans, over a window of ranks."""

from __future__ import annotations

import re

import numpy as np
import pytest

from dashboard.figures.style import lighter
from dashboard.figures.timeline import LANE_COLORS, rank_starts, timeline
from sim.engine.play import simulate
from sim.schemes import get as get_scheme
from sim.trace.format import COLUMN_TYPES, Span, SpanTable, Trace
from tests.dashboard.conftest import small_scenario


def _trace_named(fig, name):
    return [t for t in fig.data if t.name == name]


def test_timeline_bars_are_the_spans(small_trace):
    fig = timeline(small_trace)
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
    cd = np.asarray(bar.customdata)
    by_rank = {s.rank: s for s in compute_spans if s.step == 0}
    for row in cd[cd[:, 1] == 0]:
        s = by_rank[int(row[0])]
        assert tuple(row[6:8].astype(int)) == s.q_chunks and tuple(row[8:10].astype(int)) == s.kv_chunks


def test_timeline_highlights_exposed_communication():
    # a slow link: transfers cannot hide behind compute
    from sim.hardware.cluster import Hardware, Link
    sc = small_scenario(layout="zigzag", hardware=Hardware(link=Link(bandwidth_gbps=0.5)))
    trace = simulate(sc)
    exposed = [s for s in trace.spans if s.stream == "wait" and s.kind != "idle"]
    assert exposed
    fig = timeline(trace)
    (bar,) = _trace_named(fig, "exposed communication")
    scale = {"s": 1, "ms": 1e3, "µs": 1e6}[fig.layout.meta["unit"]]
    assert sum(bar.x) == pytest.approx(sum(s.end_s - s.start_s for s in exposed) * scale)
    assert bar.marker.color == LANE_COLORS["exposed"]


def test_timeline_names_and_colors_are_the_schemes():
    trace = simulate(small_scenario(pass_="fwdbwd"))
    ops = get_scheme("ring").op_kinds
    fig = timeline(trace)
    (fwd,) = _trace_named(fig, ops["fwd"].label)
    (bwd,) = _trace_named(fig, ops["bwd"].label)
    assert ops["fwd"].color in set(fwd.marker.color) and ops["bwd"].color in set(bwd.marker.color)
    # sends and receives in two colour-blind-safe hues, the second kind a lighter shade
    colours = set()
    for kind, shade in (("kv", 0.0), ("dkv", 0.45)):
        (send,) = _trace_named(fig, f"send {ops[kind].label}")
        (recv,) = _trace_named(fig, f"receive {ops[kind].label}")
        assert send.marker.color == lighter(LANE_COLORS["send"], shade)
        assert recv.marker.color == lighter(LANE_COLORS["recv"], shade)
        colours |= {send.marker.color, recv.marker.color}
    assert len(colours | {LANE_COLORS["exposed"]}) == 5


def test_timeline_legend_sits_between_the_title_and_the_plot(small_trace):
    fig = timeline(small_trace)
    legend = fig.layout.template.layout.legend
    assert (legend.orientation, legend.yanchor, legend.y) == ("h", "bottom", 1.02)
    assert fig.layout.margin.t >= 85           # the title sits above a row of legend items
    title = fig.layout.title
    assert (title.yref, title.y, title.yanchor) == ("container", 1, "top")


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
    fig = timeline(trace)
    assert fig.layout.meta["webgl"] and fig.layout.meta["spans"] == 20_000
    assert {t.type for t in fig.data} == {"scattergl"}
    x = np.asarray(fig.data[0].x)
    assert np.isnan(x[2::3]).all()                    # one segment per span, NaN between
    lines = [t for t in fig.data if t.mode == "lines"]
    assert sum(len(t.x) for t in lines) == 3 * 20_000
    # hover: one invisible point per span, at its middle, carrying the span's data
    points = [t for t in fig.data if t.mode == "markers"]
    assert all(t.hoverinfo == "skip" for t in lines) and not any(t.showlegend for t in points)
    assert sum(len(t.customdata) for t in points) == 20_000
    (compute,) = [t for t in points if t.name == "compute (forward)"]
    cd = np.asarray(compute.customdata)
    assert np.asarray(compute.x) == pytest.approx(cd[:, 2] + cd[:, 3] / 2, rel=1e-6)


def test_timeline_window_narrows_to_the_span_cap():
    trace = _synthetic(10, 300)
    fig = timeline(trace, (2, 9), max_spans=1000)
    assert fig.layout.meta["ranks"] == [2, 4]         # 3 ranks x 300 spans fit under 1000
    assert "GPUs 2–4 of 10" in fig.layout.title.text


def _drawn(fig) -> list[tuple[int, float, float]]:
    """(GPU, start, length) of every bar drawn."""
    out = []
    for t in fig.data:
        out += [(int(y) // 3, b, x) for y, b, x in zip(t.y, t.base, t.x)]
    return sorted(out)


def test_timeline_window_of_a_trace_in_any_order():
    trace = simulate(small_scenario(n_gpus=8, seq=8192))
    shuffled = np.random.default_rng(0).permutation(len(trace))
    other = Trace(trace.source, trace.n_gpus, trace.columns.take(shuffled), trace.config)
    assert rank_starts(other.columns, 8) is None
    a, b = timeline(trace, (2, 5)), timeline(other, (2, 5))
    assert a.layout.meta["ranks"] == b.layout.meta["ranks"] == [2, 5]
    drawn = _drawn(a)
    assert drawn == _drawn(b)
    want = sum(1 for s in trace.spans if 2 <= s.rank <= 5)
    assert a.layout.meta["spans"] == len(drawn) == want
    assert {g for g, _, _ in drawn} == {0, 1, 2, 3}   # lanes counted from the window's first GPU


def test_timeline_of_1024_ranks_draws_its_window_only():
    n, per_rank = 1024, 30
    rank = np.repeat(np.arange(n), per_rank)
    i = np.tile(np.arange(per_rank), n)
    cols = {name: np.zeros(n * per_rank, dtype=dtype) for name, dtype in COLUMN_TYPES.items()}
    cols |= {"rank": rank, "step": i, "start_s": i * 1e-3, "end_s": i * 1e-3 + 9e-4,
             "flops": np.full(n * per_rank, 1e12), "peer": np.full(n * per_rank, -1),
             "q_chunks": rank, "kv_chunks": rank}
    trace = Trace("simulated", n, SpanTable(**cols, chunk_sets=[(r,) for r in range(n)]))
    starts = rank_starts(trace.columns, n)
    assert starts[1000] == 1000 * per_rank and starts[-1] == n * per_rank
    fig = timeline(trace, (1000, 1023), starts=starts)
    assert fig.layout.meta["ranks"] == [1000, 1023] and fig.layout.meta["spans"] == 24 * per_rank
    (bar,) = fig.data
    assert set(np.asarray(bar.customdata)[:, 0].astype(int)) == set(range(1000, 1024))
    assert "GPUs 1000–1023 of 1024" in fig.layout.title.text
    from dashboard.i18n import Translator
    from dashboard.views.labels import figure_labels

    for lang, window in (("en", "GPUs 1,000–1,023 of 1,024"), ("id", "GPU 1.000–1.023 dari 1.024")):
        t = Translator(lang)
        labels = figure_labels(t, "tl") | {"window": t("tl.window")}
        assert window in timeline(trace, (1000, 1023), starts=starts, labels=labels).layout.title.text


def test_collectives_take_the_schemes_names_colors_and_meaning():
    from dashboard.figures.timeline import TRANSFER_MEANING

    trace = simulate(small_scenario(scheme="allgather", pass_="fwdbwd", n_gpus=4))
    ops = get_scheme("allgather").op_kinds
    fig = timeline(trace)
    for kind in ("ag", "rs"):
        (send,) = _trace_named(fig, f"send {ops[kind].label}")
        (recv,) = _trace_named(fig, f"receive {ops[kind].label}")
        assert send.marker.color != recv.marker.color
        assert {send.marker.color, recv.marker.color} <= {lighter(LANE_COLORS[lane], shade)
                                                          for lane in ("send", "recv") for shade in (0.0, 0.45)}
        assert TRANSFER_MEANING[kind] in send.hovertemplate
        sends = [s for s in trace.spans if s.stream == "send" and s.kind == kind]
        assert len(send.x) == len(sends)
    # exposed communication of every kind: red, one legend entry, the hover names the kind
    exposed = _trace_named(fig, "exposed communication")
    assert {t.marker.color for t in exposed} == {LANE_COLORS["exposed"]}
    assert sum(1 for t in exposed if t.showlegend is not False) == 1
    assert any("waits for the all-gather" in t.hovertemplate for t in exposed)
    assert "all-gather, one gather" in fig.layout.title.text


def test_a_wide_chunk_set_reads_as_its_first_last_and_count():
    # all-gather on 8 GPUs: the last query chunk's dense call is against 14 key chunks
    trace = simulate(small_scenario(scheme="allgather", n_gpus=8, seq=8192))
    fig = timeline(trace)
    (bar,) = _trace_named(fig, "compute (forward)")
    at = int(re.search(r"K/V block chunks %\{customdata\[(\d+)\]\}…", bar.hovertemplate)[1])
    assert f"(%{{customdata[{at + 2}]}} chunks)" in bar.hovertemplate
    cd = np.asarray(bar.customdata)
    widest = [s for s in trace.spans if s.stream == "compute" and len(s.kv_chunks) == 14]
    assert widest
    row = cd[(cd[:, 0] == widest[0].rank) & np.isclose(cd[:, 5], widest[0].flops / 1e12, rtol=1e-6)][0]
    assert tuple(row[at:at + 3].astype(int)) == (min(widest[0].kv_chunks), max(widest[0].kv_chunks), 14)


def test_a_short_transfer_is_drawn_wide_enough_to_see_and_keeps_its_length(small_trace):
    from dashboard.figures.timeline import MIN_WIDTH_SHARE

    fig = timeline(small_trace)
    span = max(b + w for t in fig.data if t.type == "bar" for b, w in zip(t.base, t.x))   # the run, and a little
    for bar in (t for t in fig.data if t.type == "bar"):
        cd = np.asarray(bar.customdata)
        drawn = np.asarray(bar.x)
        assert (drawn >= MIN_WIDTH_SHARE * span * 0.99).all()
        # the hover's length is the record's, however wide the bar is drawn
        assert (cd[:, 3] <= drawn * (1 + 1e-5)).all()


def _dense(n_ranks: int, per_rank: int) -> Trace:
    """A run of many short steps per GPU: computes of 0.9 µs every µs (none on GPU 1 for 50
    steps from step 1,500), a send and a receive of 0.3 µs in each, and an exposed wait of
    0.05 µs every 50 steps (far apart at the whole run's scale)."""
    spans = []
    for r in range(n_ranks):
        for i in range(per_rank):
            t = i * 1e-6
            if not (r == 1 and 1500 <= i < 1550):
                spans.append(Span(r, "compute", "fwd", i, t, t + 0.9e-6, q_chunks=(r,), kv_chunks=(r,)))
            spans.append(Span(r, "send", "kv", i, t + 0.1e-6, t + 0.4e-6, q_chunks=(r,), kv_chunks=(r,),
                              peer=(r + 1) % n_ranks, bytes=1e6))
            spans.append(Span(r, "recv", "kv", i, t + 0.1e-6, t + 0.4e-6, q_chunks=(r,), kv_chunks=(r,),
                              peer=(r - 1) % n_ranks, bytes=1e6))
            if i % 50 == 49:
                spans.append(Span(r, "wait", "kv", i, t + 0.9e-6, t + 0.95e-6, q_chunks=(r,), kv_chunks=(r,)))
    return Trace("simulated", n_ranks, spans, {"layout": "contiguous", "overlap": True})


def _raster(intervals, lo: float, width: float, columns: int) -> np.ndarray:
    """The columns of [lo, lo + width] (`columns` of them) whose inside an interval of
    `intervals` ((start, end) pairs) overlaps."""
    covered = np.zeros(columns, dtype=bool)
    w = width / columns
    for s, e in intervals:
        first = max(0, int(np.floor((s - lo) / w)))
        last = min(columns - 1, int(np.ceil((e - lo) / w)) - 1)
        covered[first:last + 1] = True
    return covered


def _drawn_by_lane(fig) -> dict[tuple[str, int], list[tuple[float, float]]]:
    out: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for t in fig.data:
        for y, b, x in zip(t.y, t.base, t.x):
            out.setdefault((t.name, int(round(y))), []).append((b, b + x))
    return out


def test_spans_closer_than_a_pixel_merge_into_marks_that_look_the_same():
    from dashboard.figures.timeline import MIN_WIDTH_SHARE, PIXELS

    trace = _dense(3, 3000)                   # 3,000 steps in 3 ms: a step is two thirds of a column
    fig = timeline(trace)
    meta = fig.layout.meta
    assert meta["spans"] == len(trace) and meta["marks"] < 400 and meta["merged"] > 0
    scale = meta["scale"]
    makespan = (max(s.end_s for s in trace.spans) - min(s.start_s for s in trace.spans)) * scale
    min_width = MIN_WIDTH_SHARE * makespan
    names = {"compute": "compute (forward)", "send": "send K/V", "recv": "receive K/V", "wait": "exposed communication"}
    lanes = {"compute": 0, "send": 1, "recv": 2, "wait": 0}
    drawn = _drawn_by_lane(fig)
    for stream in names:
        for r in range(3):
            spans = [((s.start_s) * scale, max(s.end_s * scale, s.start_s * scale + min_width))
                     for s in trace.spans if s.stream == stream and s.rank == r]
            want = _raster(spans, 0.0, makespan, PIXELS)
            got = _raster(drawn[(names[stream], r * 3 + lanes[stream])], 0.0, makespan, PIXELS)
            assert (got == want).all(), (stream, r)
    # a merged mark's hover and record: how many operations, their steps, how long busy
    (merged,) = [t for t in fig.data if t.name == "compute (forward)" and t.meta["marks"] == "merged"]
    cd = np.asarray(merged.customdata)
    assert cd[:, 6].sum() == 3 * 3000 - 50 and set(cd[:, 0].astype(int)) == {0, 1, 2}
    assert cd[:, 5].sum() == pytest.approx((3 * 3000 - 50) * 0.9e-6 * scale, rel=1e-5)
    assert "zoom in" in merged.hovertemplate
    # as thick as busy: GPU 0's 3,000 computes of 0.9 µs from 0 to 2,999.9 µs
    (gpu0,) = np.flatnonzero(cd[:, 0] == 0)
    thick = 0.8 * 3000 * 0.9 / 2999.9
    assert merged.width[gpu0] == pytest.approx(thick, rel=1e-5)
    assert merged.y[gpu0] - thick / 2 == pytest.approx(-0.4, abs=1e-6)     # from the lane's top


def test_a_zoom_draws_the_stretch_shown_span_by_span():
    trace = _dense(3, 3000)
    fig = timeline(trace, time_range_s=(1000e-6, 1010e-6))
    meta = fig.layout.meta
    assert meta["merged"] == 0 and meta["time_range_s"] == [1000e-6, 1010e-6]
    inside = [s for s in trace.spans if s.end_s >= 1000e-6 and s.start_s <= 1010e-6]
    assert meta["spans"] == meta["marks"] == len(inside)
    assert list(fig.layout.xaxis.range) == pytest.approx([1000e-6 * meta["scale"], 1010e-6 * meta["scale"]])
    # the whole run again: no range of its own, merged as at first
    whole = timeline(trace)
    assert whole.layout.meta["time_range_s"] is None and whole.layout.meta["merged"] > 0


def test_a_wide_span_stays_itself_beside_narrow_ones():
    trace = simulate(small_scenario(n_gpus=8, seq=8192))
    fig = timeline(trace)
    assert fig.layout.meta["merged"] == 0 and fig.layout.meta["marks"] == len(trace)


def test_a_large_window_narrows_to_the_marks_it_draws():
    trace = _dense(12, 3000)
    fig = timeline(trace, max_spans=200)          # about 65 marks a GPU
    lo, hi = fig.layout.meta["ranks"]
    assert lo == 0 and 0 < hi < 11 and fig.layout.meta["marks"] <= 200


def test_every_transfer_kind_of_a_scheme_is_a_visible_shade():
    """A scheme's third transfer kind (the hybrid's all-to-all after K/V and dK/dV) is a shade
    of the send or receive hue that stands out from white: each colour channel at least 40
    below 255 somewhere, and no two kinds alike."""
    from dashboard.figures.timeline import TRANSFER_SHADES
    for lane in ("send", "recv"):
        colors = [lighter(LANE_COLORS[lane], s) for s in TRANSFER_SHADES[:3]]
        assert len(set(colors)) == 3
        for c in colors:
            assert min(int(c[i:i + 2], 16) for i in (1, 3, 5)) <= 215, c


def test_a_window_of_one_gpu_is_named_as_one(small_trace):
    """The title names the GPUs drawn: "GPU 2 of N" for one, not "GPUs 2–2 of N"."""
    n = small_trace.n_gpus
    assert f"(GPU 2 of {n})" in timeline(small_trace, (2, 2)).layout.title.text
    assert f"(GPUs 1–2 of {n})" in timeline(small_trace, (1, 2)).layout.title.text
