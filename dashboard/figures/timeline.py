"""View 2, how K/V blocks travel: per GPU three lanes (compute, send, receive), exposed
communication in red on the compute lane (docs/design.md, Definitions).

The figure reads the trace's columns (sim.trace.format.SpanTable) over a window of ranks. A
simulated trace lists its spans rank by rank, so a window is one contiguous slice of
every column, found by binary search; a trace in another order is sorted by rank once.
The names and colours of computes and transfers are those of the trace's scheme
(`op_kinds`): the ring's K/V and dK/dV hops, and the flows of the collectives
(all-gather, reduce-scatter, all-to-all); a hover says what the operation is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import COLORS, TEMPLATE, lighter, run_label, scheme_of, time_unit, wrap_title
from sim.schemes.base import Scheme
from sim.trace.format import COMPUTE, KIND_NAMES, KINDS, STREAMS, SpanTable, Trace

LANE_COLORS = {"send": "#009E73", "recv": "#56B4E9", "exposed": "#D55E00"}
"""Sends, receives and exposed waits in three hues of Okabe and Ito's palette, told apart with
every common form of colour blindness (Okabe & Ito 2008, "Color Universal Design"); a
scheme's second transfer kind (the ring's dK/dV) in a lighter shade of the same hue."""
MIN_WIDTH_SHARE = 0.002
"""A span is drawn at least this share of the run wide (about 2 px of a 1,000 px chart), so
that a transfer of a microsecond in a run of a second is still seen and clicked; its hover
and details give its true length."""
MAX_BAR_SPANS = 10_000
"""Past this many spans a timeline draws WebGL line segments instead of SVG bars."""
MAX_DRAWN_SPANS = 20_000
"""A timeline draws at most this many spans; it narrows its window of ranks to fit (a whole
ring up to 64 GPUs, about 4 GPUs of 1,024 GPUs' 1,024 steps). Headless Chromium took about
1.8 s longer to draw 60,000 than 20,000 (bench/speed/dashboard_latency.py, 1,024 GPUs, warm:
4.1 s against 2.3 s)."""

LANES = ("compute", "send", "recv")
MAX_LISTED_CHUNKS = 4
"""A hover lists up to this many chunks of an operation; a wider set (an all-gather's
flow, a call against the whole gathered K/V) reads as its first, last and count."""

TRANSFER_MEANING = {
    "kv": "a K/V block passed one hop around the ring",
    "dkv": "dK/dV accumulators passed one hop behind the K/V",
    "ag": "a flow of the all-gather of K/V (every GPU ends with every token's K/V)",
    "rs": "a flow of the reduce-scatter of dK/dV partial sums (fp32) to the GPUs that hold those tokens",
    "a2a": "a flow of the all-to-all between token shards and head shards (Q, K, V in, the output back)",
}
"""What a transfer of each kind is, for its hover (the name and colour are the scheme's)."""
CARRIES = {"kv": "block chunks", "dkv": "dK/dV of chunks", "ag": "K/V of chunks",
           "rs": "dK/dV of chunks", "a2a": "tokens of chunks"}
LABELS = {
    "idle": "idle", "exposed": "exposed communication", "send": "send {label}", "recv": "receive {label}",
    "op.fwd": "compute (forward)", "op.bwd": "compute (backward)",
    "h_compute": "GPU %{{customdata[0]}} computes, step %{{customdata[1]}}",
    "h_chunks": "query chunks {q} × K/V block chunks {k}",
    "h_when": "start %{{customdata[2]:.4g}} {unit}, lasts %{{customdata[3]:.4g}} {unit}",
    "h_wait": "GPU %{{customdata[0]}} waits for the {label} (exposed communication), step %{{customdata[1]}}",
    "h_needs": "needs {carries} {k}", "h_idle": "GPU %{{customdata[0]}} idle, step %{{customdata[1]}}",
    "h_transfer": "GPU %{{customdata[0]}} {arrow} GPU %{{customdata[4]}}, step %{{customdata[1]}}",
    "h_carries": "{name}: {carries} {k}", "h_summary": "{first}…{last} ({count} chunks)", "h_chunks_of": "chunks",
    **{f"carries.{k}": v for k, v in CARRIES.items()}, **{f"meaning.{k}": v for k, v in TRANSFER_MEANING.items()},
}
"""The figure's texts in English (`timeline(labels=...)` replaces any of them; the page's are
the catalogs' `tl.<name>`): series names, the hovers' lines (Plotly's placeholders doubled
braces) and what each kind of transfer carries and is."""


def _series_table() -> tuple[tuple[str, ...], np.ndarray]:
    """The timeline's series, in drawing order, and the series of each (stream code,
    kind code): a compute's kind, "idle" for a wait on nothing in flight, "exposed
    <kind>" for a wait on a transfer, "<stream> <kind>" for a transfer."""
    names = ["idle", *KINDS["compute"], *[f"exposed {k}" for k in KINDS["wait"] if k != "idle"]]
    names += [f"{s} {k}" for s in ("send", "recv") for k in KINDS[s]]
    table = np.full((len(STREAMS), len(KIND_NAMES)), -1, dtype=np.int8)
    for stream, kinds in KINDS.items():
        for kind in kinds:
            if stream == "compute":
                name = kind
            elif stream == "wait":
                name = "idle" if kind == "idle" else f"exposed {kind}"
            else:
                name = f"{stream} {kind}"
            table[STREAMS.index(stream), KIND_NAMES.index(kind)] = names.index(name)
    return tuple(names), table


SERIES, _SERIES_OF = _series_table()
_LANE_OF = {name: LANES.index(name.split()[0]) if name.split()[0] in LANES else 0 for name in SERIES}


def series_styles(scheme: Scheme, labels: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Legend name and colour of each series: a compute or transfer as the scheme names
    and colours its operation kind (a compute in `labels`' words, LABELS), exposed
    communication and idle as everywhere."""
    lab = {**LABELS, **(labels or {})}
    out = {"idle": (lab["idle"], COLORS["idle"])}
    for kind in KINDS["wait"]:
        if kind != "idle":
            out[f"exposed {kind}"] = (lab["exposed"], LANE_COLORS["exposed"])
    for kind in KINDS["compute"]:
        op = scheme.op_kinds.get(kind)
        name = lab.get(f"op.{kind}", op.label if op else f"compute ({kind})")
        out[kind] = (name, op.color if op else COLORS["compute"])
    transfer_kinds = [k for k in KINDS["send"] if k in scheme.op_kinds]
    for kind in KINDS["send"]:
        op = scheme.op_kinds.get(kind)
        label = op.label if op else kind
        # one hue for sends and one for receives; a scheme's later kinds lighter shades of it
        shade = 0.45 * transfer_kinds.index(kind) if kind in transfer_kinds else 0.0
        out[f"send {kind}"] = (lab["send"].format(label=label), lighter(LANE_COLORS["send"], shade))
        out[f"recv {kind}"] = (lab["recv"].format(label=label), lighter(LANE_COLORS["recv"], shade))
    return out


def rank_starts(columns: SpanTable, n: int) -> np.ndarray | None:
    """Where each rank's spans begin (n + 1 offsets into the columns) when the spans are
    grouped by rank in ascending order, as a simulated trace's are; None otherwise."""
    r = columns.rank
    if len(r) > 1 and not (r[1:] >= r[:-1]).all():
        return None
    return np.searchsorted(r, np.arange(n + 1, dtype=r.dtype))


def _window(columns: SpanTable, n: int, ranks: tuple[int, int] | None, limit: int,
            starts: np.ndarray | None) -> tuple[int, int, slice | np.ndarray]:
    """The inclusive window of ranks (narrowed to at most `limit` spans) and the rows it
    holds: a slice when the columns are grouped by rank, positions otherwise."""
    lo, hi = ranks if ranks is not None else (0, n - 1)
    lo, hi = max(0, min(int(lo), n - 1)), max(0, min(int(hi), n - 1))
    if hi < lo:
        lo, hi = hi, lo
    order = None
    if starts is None:
        starts = rank_starts(columns, n)
    if starts is None:
        order = np.argsort(columns.rank, kind="stable")
        starts = np.searchsorted(columns.rank[order], np.arange(n + 1))
    held = starts[lo + 1:hi + 2] - starts[lo]          # spans of ranks lo..r, for each r
    if held.size and held[-1] > limit:
        hi = lo + max(0, int(np.searchsorted(held, limit, side="right")) - 1)
    rows = slice(int(starts[lo]), int(starts[hi + 1]))
    return lo, hi, rows if order is None else order[rows]


def _chunk_ids(sets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(rows, widest) chunk ids of the rows' chunk-set ids, -1 padded; `sets` is the
    (sets + 1, widest) padded table, its last row the empty set (id -1)."""
    used = np.unique(ids)
    width = int((sets[used] >= 0).sum(axis=1).max(initial=0))
    return sets[ids, :width]


def _chunk_columns(sets: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, bool]:
    """The hover columns of the rows' chunk sets: the ids themselves (-1 padded) up to
    MAX_LISTED_CHUNKS wide, else (first, last, count); and whether they are the latter."""
    chunks = _chunk_ids(sets, ids)
    if chunks.shape[1] <= MAX_LISTED_CHUNKS:
        return chunks, False
    held = chunks >= 0
    first = np.where(held, chunks, np.iinfo(chunks.dtype).max).min(axis=1, initial=np.iinfo(chunks.dtype).max)
    last = chunks.max(axis=1, initial=-1)
    return np.column_stack([np.where(held.any(axis=1), first, -1), last, held.sum(axis=1)]), True


def _set_table(columns: SpanTable) -> np.ndarray:
    sets = columns.chunk_sets
    table = np.full((len(sets) + 1, max((len(s) for s in sets), default=0)), -1, dtype=np.int32)
    for i, chunks in enumerate(sets):
        table[i, :len(chunks)] = chunks
    return table


def _chunk_text(at: int, n: int, summary: bool, lab: dict[str, str] = LABELS) -> str:
    if summary:
        return lab["h_summary"].format(first=f"%{{customdata[{at}]}}", last=f"%{{customdata[{at + 1}]}}",
                                       count=f"%{{customdata[{at + 2}]}}")
    return ", ".join(f"%{{customdata[{at + i}]}}" for i in range(n))


def _hover(series: str, name: str, nq: int, nk: int, unit: str, q_summary: bool = False,
           kv_summary: bool = False, op_labels: dict[str, str] | None = None,
           labels: dict[str, str] | None = None) -> str:
    lab = {**LABELS, **(labels or {})}
    base = 6
    q = _chunk_text(base, nq, q_summary, lab)
    k = _chunk_text(base + nq, nk, kv_summary, lab)
    when = lab["h_when"].format(unit=unit)
    kind = series.split()[-1]
    carries = lab.get(f"carries.{kind}", lab["h_chunks_of"])
    if series in KINDS["compute"]:
        lines = [lab["h_compute"].format(), lab["h_chunks"].format(q=q, k=k), when,
                 "%{customdata[5]:.4g} TFLOP"]
    elif series.startswith("exposed"):
        label = (op_labels or {}).get(kind, kind)
        lines = [lab["h_wait"].format(label=label), lab["h_needs"].format(carries=carries, k=k), when]
    elif series == "idle":
        lines = [lab["h_idle"].format(), when]
    else:
        arrow = "→" if series.startswith("send") else "←"
        lines = [lab["h_transfer"].format(arrow=arrow), lab["h_carries"].format(name=name, carries=carries, k=k),
                 when, "%{customdata[5]:.4g} MB"]
        if f"meaning.{kind}" in lab:
            lines.append(f"<i>{lab[f'meaning.{kind}']}</i>")
    return "<br>".join(lines) + "<extra></extra>"


def timeline(trace: Trace, ranks: tuple[int, int] | None = None, *,
             max_bar_spans: int = MAX_BAR_SPANS, max_spans: int = MAX_DRAWN_SPANS,
             title: str | None = None, starts: np.ndarray | None = None,
             labels: dict[str, str] | None = None) -> go.Figure:
    """Per GPU, three lanes (compute, send, receive); exposed communication in red.

    `labels` (the page's language): "window", the window's note with {lo}, {hi} and {n};
    "time", the time axis with {unit}; "separators", Plotly's decimal and grouping signs;
    and any of LABELS, the series' names and the hovers' lines.

    `ranks` is an inclusive window; it narrows further if it holds more than
    `max_spans` spans. Past `max_bar_spans` spans the lanes are WebGL line segments.
    `starts` is rank_starts(trace.columns, trace.n_gpus), when the caller keeps it.
    """
    c = trace.columns
    lo, hi, rows = _window(c, trace.n_gpus, ranks, max_spans, starts)
    n_spans = len(c.rank[rows])
    use_gl = n_spans > max_bar_spans
    t0 = float(c.start_s.min()) if len(c) else 0.0
    makespan = float(c.end_s.max()) - t0 if len(c) else 0.0   # trace.makespan_s, one pass each
    scale, unit = time_unit(makespan or 1e-6)
    shown = hi - lo + 1
    n_rows = shown * len(LANES)
    height = int(min(1400, max(320, 110 + n_rows * 11)))
    traces = _lane_traces(c, rows, lo, t0, scale, unit, scheme_of(trace), use_gl, lane_px=(height - 110) / n_rows,
                          labels=labels)
    if title is None:
        what = run_label(trace.config)
        title = (f"{trace.source.capitalize()} timeline: {trace.n_gpus} GPUs"
                 + (f", {what}" if what else "") + f" — makespan {makespan * scale:.4g} {unit}")
    lab = {"window": " (GPUs {lo}–{hi} of {n})", "time": "time ({unit})", "separators": ".,", **(labels or {})}
    if (lo, hi) != (0, trace.n_gpus - 1):
        title += lab["window"].format(lo=lo, hi=hi, n=trace.n_gpus)
    title = wrap_title(title)
    lines = title.count("<br>")
    layout: dict[str, Any] = dict(
        template=TEMPLATE, height=height, barmode="overlay", bargap=0,
        # the title at the top, the legend (the template's: bottom-anchored at y=1.02)
        # between it and the plot, in a top margin that holds both
        title=dict(text=title, font=dict(size=13), y=1, yref="container", yanchor="top",
                   pad=dict(t=16)),      # at 10 px the first line's ascenders touched the edge
        # the hover points would pad an automatic range: the run is the range
        separators=lab["separators"],
        xaxis=dict(title=lab["time"].format(unit=unit), rangemode="tozero",
                   **({"range": [0, makespan * scale]} if use_gl else {})),
        yaxis=_gpu_axis(lo, hi),
        meta={"ranks": [lo, hi], "webgl": use_gl, "spans": n_spans, "unit": unit},
        hovermode="closest", margin=dict(t=90 + 16 * lines),
    )
    # one constructor call: plotly validates the layout once instead of once per update
    fig = go.Figure(data=traces, layout=layout)
    return fig


def _lane_traces(c: SpanTable, rows: slice | np.ndarray, lo: int, t0: float, scale: float, unit: str, scheme: Scheme,
                 use_gl: bool, lane_px: float, labels: dict[str, str] | None = None) -> list:
    """The spans `rows` of the columns `c` on their GPUs' lanes from GPU `lo` down, a
    trace (or with `use_gl` a pair) per series, times from `t0` in `unit`."""
    styles = series_styles(scheme, labels)
    op_labels = {k: op.label for k, op in scheme.op_kinds.items()}
    rank, stream, kind = c.rank[rows], c.stream[rows], c.kind[rows]
    start = (c.start_s[rows] - t0) * scale
    end = (c.end_s[rows] - t0) * scale
    step, peer = c.step[rows], c.peer[rows]
    amount = np.where(stream == COMPUTE, c.flops[rows] / 1e12, c.bytes[rows] / 1e6)
    sets = _set_table(c)
    q_ids, kv_ids = c.q_chunks[rows], c.kv_chunks[rows]
    series_of = _SERIES_OF[stream, kind]
    span_end = float(end.max(initial=0.0))
    min_width = MIN_WIDTH_SHARE * (span_end - float(start.min(initial=0.0)))
    traces = []
    legend_shown: set[str] = set()       # exposed communication of every kind: one legend entry
    for code, series in enumerate(SERIES):
        sel = np.flatnonzero(series_of == code)
        if not sel.size:
            continue
        s, true_end = start[sel], end[sel]
        e = np.maximum(true_end, s + min_width)          # drawn at least MIN_WIDTH_SHARE wide
        y = (rank[sel] - lo) * len(LANES) + _LANE_OF[series]
        (qc, q_sum), (kc, kv_sum) = _chunk_columns(sets, q_ids[sel]), _chunk_columns(sets, kv_ids[sel])
        # the last column names the series: the details on click read it
        cd = np.column_stack([rank[sel], step[sel], s, true_end - s, peer[sel], amount[sel], qc, kc,
                              np.full(len(sel), code)]).astype(np.float32)
        name, color = styles[series]
        hover = _hover(series, name, qc.shape[1], kc.shape[1], unit, q_sum, kv_sum, op_labels, labels)
        group = "exposed" if series.startswith("exposed") else series
        legend = group not in legend_shown
        legend_shown.add(group)
        if use_gl:
            # the spans as line segments (start, end, gap) that do not hover, and their
            # middles as invisible points that do: hover data once per span, not thrice
            nan = np.full(len(s), np.nan)
            traces.append(go.Scattergl(
                x=np.column_stack([s, e, nan]).ravel().astype(np.float32),
                y=np.column_stack([y, y, nan]).ravel().astype(np.float32), mode="lines", name=name,
                line=dict(color=color, width=float(np.clip(0.75 * lane_px, 1, 12))),
                connectgaps=False, hoverinfo="skip", legendgroup=group, showlegend=legend))
            traces.append(go.Scattergl(
                x=((s + true_end) / 2).astype(np.float32), y=y.astype(np.float32), mode="markers",
                name=name, marker=dict(color=color, opacity=0, size=4), customdata=cd,
                hovertemplate=hover, legendgroup=group, showlegend=False))
        else:
            shade: Any = color
            if series in KINDS["compute"]:
                # alternate shades by step so that back-to-back blocks stay distinguishable
                shade = np.where(step[sel] % 2 == 1, lighter(color), color)
            traces.append(go.Bar(
                x=e - s, base=s, y=y.astype(np.float32), orientation="h",
                width=0.8, name=name, marker=dict(color=shade, line=dict(width=0)),
                customdata=cd, hovertemplate=hover, legendgroup=group, showlegend=legend))
    return traces


def _gpu_axis(lo: int, hi: int) -> dict[str, Any]:
    """The lanes' axis: GPUs lo to hi down the page, a label on every GPU's middle lane
    (on one in `shown // 32` past 32 of them)."""
    shown = hi - lo + 1
    n_rows = shown * len(LANES)
    tick_ranks = list(range(lo, hi + 1, max(1, shown // 32)))
    axis = dict(autorange="reversed", tickmode="array",
                tickvals=[(r - lo) * len(LANES) + 1 for r in tick_ranks],
                ticktext=[f"GPU {r}" for r in tick_ranks], showgrid=False,
                range=[n_rows - 0.5, -0.5])
    if shown <= 64:
        # separators between GPUs as minor grid lines: one array, where 63 layout shapes
        # cost ~20 ms of validation on a 64-GPU figure
        axis["minor"] = dict(tickmode="array", ticks="", showgrid=True, gridcolor="#bbb",
                             gridwidth=0.5,
                             tickvals=[r * len(LANES) - 0.5 for r in range(1, shown)])
    return axis
