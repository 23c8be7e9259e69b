"""Figure builders: pure functions from a trace, a metrics table or a small result to a
Plotly figure. No Dash here, no simulation: callers pass in what to draw, so each
builder can be tested on its own.

Definitions (exposed communication, idle, efficiency, imbalance, work of a block) are
those of DESIGN.md; the trace record is that of sim/trace.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative, sample_colorscale
from plotly.subplots import make_subplots

from sim.errors import RingsimError
from sim.layouts import rank_of_token
from sim.online_softmax import RingMerge
from sim.trace import Span, Trace

MAX_BAR_SPANS = 10_000
"""Past this many spans a timeline draws WebGL line segments instead of SVG bars."""
MAX_DRAWN_SPANS = 60_000
"""A timeline draws at most this many spans; it narrows its window of ranks to fit."""
MAX_STRIP_RUNS = 512
"""The layout strip draws at most this many runs of tokens (the rest repeats)."""
MAX_HOVER_CELLS = 128 * 128
"""The block map carries per-cell hover data up to this many cells."""

_TEMPLATE = go.layout.Template(layout=dict(
    font=dict(family="Inter, Helvetica, Arial, sans-serif", size=12, color="#222"),
    paper_bgcolor="white", plot_bgcolor="white",
    xaxis=dict(gridcolor="#ececec", zeroline=False, linecolor="#999", ticks="outside"),
    yaxis=dict(gridcolor="#ececec", zeroline=False, linecolor="#999", ticks="outside"),
    margin=dict(l=70, r=20, t=50, b=45),
    legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    hoverlabel=dict(font_size=12),
))

COLORS = {
    "fwd": "#3a6fd8", "fwd alt": "#7ea3ea", "bwd": "#8e44ad", "bwd alt": "#b98bd0", "exposed": "#e0302a", "idle": "#d7d7d7",
    "send kv": "#2e9e5b", "send dkv": "#8ab833", "recv kv": "#1aa3a3", "recv dkv": "#7fc9c9",
    "simulated": "#3a6fd8", "simulated alt": "#7ea3ea", "measured": "#f28e2b",
    "measured alt": "#f7b877", "ring": "#3a6fd8", "full": "#e0302a",
    "capacity": "#777777", "on": "#3a6fd8", "off": "#f28e2b",
}


def _figure(**layout: Any) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(template=_TEMPLATE, **layout)
    return fig


def time_unit(seconds: float) -> tuple[float, str]:
    """Scale and label that show `seconds` with a few digits before the point."""
    if seconds >= 1:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


@lru_cache(maxsize=32)
def rank_colors(n: int) -> tuple[str, ...]:
    """One color per rank: distinct hues up to 24 ranks, a continuous scale past that."""
    if n <= 10:
        return tuple(qualitative.Plotly[:n])
    if n <= 24:
        return tuple(qualitative.Dark24[:n])
    return tuple(sample_colorscale("Turbo", [r / (n - 1) for r in range(n)]))


def rank_color(rank: int, n: int) -> str:
    return rank_colors(n)[rank]


def message_figure(text: str, height: int = 300) -> go.Figure:
    """An empty figure that says why there is nothing to draw."""
    fig = _figure(height=height, xaxis=dict(visible=False), yaxis=dict(visible=False))
    fig.add_annotation(text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=14, color="#666"))
    return fig


# --- view 1: which tokens each device holds -------------------------------------------

def layout_strip(layout: str, seq: int, n: int) -> go.Figure:
    """The sequence as a strip of runs of consecutive tokens, colored by the rank holding them."""
    owner = rank_of_token(layout, seq, n)
    cuts = np.flatnonzero(np.diff(owner)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [seq]])
    truncated = len(starts) > MAX_STRIP_RUNS
    if truncated:
        starts, ends = starts[:MAX_STRIP_RUNS], ends[:MAX_STRIP_RUNS]
    ranks = owner[starts]
    shown = int(ends[-1])
    fig = _figure(height=170, barmode="overlay", showlegend=False,
                  margin=dict(l=70, r=20, t=40, b=40))
    fig.add_trace(go.Bar(
        x=ends - starts, base=starts, y=np.zeros(len(starts)), orientation="h", width=0.9,
        marker=dict(color=np.asarray(rank_colors(n), dtype=object)[ranks], line=dict(width=0)),
        customdata=np.column_stack([starts, ends - 1, ranks]),
        text=[f"{r}" for r in ranks] if len(starts) <= 64 else None,
        textposition="inside", insidetextanchor="middle",
        hovertemplate="tokens %{customdata[0]:,}–%{customdata[1]:,} → GPU %{customdata[2]}<extra></extra>",
    ))
    title = f"Which tokens each GPU holds: {layout} layout, {seq:,} tokens over {n} GPUs"
    if truncated:
        title += f" (first {shown:,} tokens; the pattern repeats)"
    fig.update_layout(
        title=dict(text=title, font=dict(size=13)),
        xaxis=dict(title="token", range=[0, shown], tickformat=","),
        yaxis=dict(visible=False, range=[-0.5, 0.5]),
        meta={"runs": len(starts), "tokens_shown": shown, "truncated": bool(truncated)},
    )
    return fig


# --- view 2: how K/V blocks travel ----------------------------------------------------

LANES = ("compute", "send", "recv")


def _series_of(s: Span) -> str:
    if s.stream == "compute":
        return s.kind
    if s.stream == "wait":
        return "idle" if s.kind == "idle" else "exposed"
    return f"{s.stream} {s.kind}"


_SERIES_NAMES = {
    "fwd": "compute (forward)", "bwd": "compute (backward)", "exposed": "exposed communication",
    "idle": "idle", "send kv": "send K/V", "send dkv": "send dK/dV", "recv kv": "receive K/V",
    "recv dkv": "receive dK/dV",
}
_SERIES_LANE = {"fwd": 0, "bwd": 0, "exposed": 0, "idle": 0, "send kv": 1, "send dkv": 1,
                "recv kv": 2, "recv dkv": 2}


SERIES = ("idle", "fwd", "bwd", "exposed", "send kv", "send dkv", "recv kv", "recv dkv")


@dataclass(frozen=True)
class SpanColumns:
    """A trace's spans as numpy columns (one row per span), for fast figure building."""

    rank: np.ndarray
    series: np.ndarray
    """Index into SERIES."""
    step: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    amount: np.ndarray
    """TFLOP for compute, MB for transfers, 0 for waits."""
    peer: np.ndarray
    q_chunks: np.ndarray
    """(spans, widest) chunk ids, -1 padded."""
    kv_chunks: np.ndarray


def span_columns(trace: Trace) -> SpanColumns:
    spans = trace.spans
    n = len(spans)
    code = {name: i for i, name in enumerate(SERIES)}
    nq = max((len(s.q_chunks) for s in spans), default=0)
    nk = max((len(s.kv_chunks) for s in spans), default=0)
    q = np.full((n, nq), -1, dtype=np.int32)
    k = np.full((n, nk), -1, dtype=np.int32)
    for i, s in enumerate(spans):
        if s.q_chunks:
            q[i, :len(s.q_chunks)] = s.q_chunks
        if s.kv_chunks:
            k[i, :len(s.kv_chunks)] = s.kv_chunks
    return SpanColumns(
        rank=np.fromiter((s.rank for s in spans), np.int32, n),
        series=np.fromiter((code[_series_of(s)] for s in spans), np.int8, n),
        step=np.fromiter((s.step for s in spans), np.int32, n),
        start_s=np.fromiter((s.start_s for s in spans), np.float64, n),
        end_s=np.fromiter((s.end_s for s in spans), np.float64, n),
        amount=np.fromiter(((s.flops / 1e12) if s.stream == "compute" else s.bytes / 1e6
                            for s in spans), np.float64, n),
        peer=np.fromiter((s.peer for s in spans), np.int32, n),
        q_chunks=q, kv_chunks=k)


def _hover(series: str, nq: int, nk: int, unit: str) -> str:
    base = 6
    q = ", ".join(f"%{{customdata[{base + i}]}}" for i in range(nq))
    k = ", ".join(f"%{{customdata[{base + nq + i}]}}" for i in range(nk))
    when = (f"start %{{customdata[2]:.4g}} {unit}, lasts %{{customdata[3]:.4g}} {unit}")
    if series in ("fwd", "bwd"):
        lines = [f"GPU %{{customdata[0]}} computes, step %{{customdata[1]}}",
                 f"query chunks {q} × K/V block chunks {k}", when,
                 "%{customdata[5]:.4g} TFLOP"]
    elif series == "exposed":
        lines = ["GPU %{customdata[0]} waits for a transfer (exposed), step %{customdata[1]}",
                 f"needs K/V block chunks {k}", when]
    elif series == "idle":
        lines = ["GPU %{customdata[0]} idle, step %{customdata[1]}", when]
    else:
        arrow = "→" if series.startswith("send") else "←"
        lines = [f"GPU %{{customdata[0]}} {arrow} GPU %{{customdata[4]}}, step %{{customdata[1]}}",
                 f"{_SERIES_NAMES[series]}: block chunks {k}", when, "%{customdata[5]:.4g} MB"]
    return "<br>".join(lines) + "<extra></extra>"


def _window(cols: SpanColumns, n: int, ranks: tuple[int, int] | None, limit: int
            ) -> tuple[int, int, np.ndarray]:
    lo, hi = ranks if ranks is not None else (0, n - 1)
    lo, hi = max(0, min(int(lo), n - 1)), max(0, min(int(hi), n - 1))
    if hi < lo:
        lo, hi = hi, lo
    per_rank = np.bincount(cols.rank, minlength=n)
    cum = np.cumsum(per_rank[lo:hi + 1])
    if cum.size and cum[-1] > limit:
        hi = lo + max(0, int(np.searchsorted(cum, limit, side="right")) - 1)
    return lo, hi, (cols.rank >= lo) & (cols.rank <= hi)


def timeline(trace: Trace, ranks: tuple[int, int] | None = None, *,
             max_bar_spans: int = MAX_BAR_SPANS, max_spans: int = MAX_DRAWN_SPANS,
             title: str | None = None, columns: SpanColumns | None = None) -> go.Figure:
    """Per GPU, three lanes (compute, send, receive); exposed communication in red.

    `ranks` is an inclusive window; it narrows further if it holds more than
    `max_spans` spans. Past `max_bar_spans` spans the lanes are WebGL line segments.
    `columns` is span_columns(trace), when the caller keeps it.
    """
    cols = columns if columns is not None else span_columns(trace)
    lo, hi, in_window = _window(cols, trace.world_size, ranks, max_spans)
    n_spans = int(in_window.sum())
    use_gl = n_spans > max_bar_spans
    t0 = float(cols.start_s.min()) if cols.start_s.size else 0.0
    makespan = float(cols.end_s.max()) - t0 if cols.end_s.size else 0.0   # trace.makespan_s, from the columns
    scale, unit = time_unit(makespan or 1e-6)
    shown = hi - lo + 1
    rows = shown * len(LANES)
    height = int(min(1400, max(320, 110 + rows * 11)))
    lane_px = (height - 110) / rows
    fig = _figure(height=height, barmode="overlay", bargap=0)
    for code, series in enumerate(SERIES):
        sel = in_window & (cols.series == code)
        if not sel.any():
            continue
        start, end = (cols.start_s[sel] - t0) * scale, (cols.end_s[sel] - t0) * scale
        y = (cols.rank[sel] - lo) * len(LANES) + _SERIES_LANE[series]
        qc, kc = cols.q_chunks[sel], cols.kv_chunks[sel]
        cd = np.column_stack([cols.rank[sel], cols.step[sel], start, end - start, cols.peer[sel],
                              cols.amount[sel], qc, kc]).astype(np.float32)
        hover = _hover(series, qc.shape[1], kc.shape[1], unit)
        name = _SERIES_NAMES[series]
        if use_gl:
            nan = np.full(len(start), np.nan)
            fig.add_trace(go.Scattergl(
                x=np.column_stack([start, end, nan]).ravel().astype(np.float32),
                y=np.column_stack([y, y, nan]).ravel().astype(np.float32), mode="lines", name=name,
                line=dict(color=COLORS[series], width=float(np.clip(0.75 * lane_px, 1, 12))),
                customdata=np.repeat(cd, 3, axis=0), hovertemplate=hover, connectgaps=False))
        else:
            color: Any = COLORS[series]
            if series in ("fwd", "bwd"):
                # alternate shades by step so that back-to-back blocks stay distinguishable
                color = np.where(cols.step[sel] % 2 == 1, COLORS[series + " alt"], COLORS[series])
            fig.add_trace(go.Bar(
                x=end - start, base=start, y=y.astype(np.float32), orientation="h",
                width=0.8, name=name, marker=dict(color=color, line=dict(width=0)),
                customdata=cd, hovertemplate=hover))
    step = max(1, shown // 32)
    tick_ranks = list(range(lo, hi + 1, step))
    if title is None:
        cfg = trace.config
        title = (f"{trace.source.capitalize()} timeline: {trace.world_size} GPUs"
                 + (f", {cfg['layout']} layout, overlap {'on' if cfg.get('overlap') else 'off'}"
                    if "layout" in cfg else "")
                 + f" — makespan {makespan * scale:.4g} {unit}")
    if (lo, hi) != (0, trace.world_size - 1):
        title += f" (GPUs {lo}–{hi} of {trace.world_size})"
    fig.update_layout(
        title=dict(text=title, font=dict(size=13)),
        xaxis=dict(title=f"time ({unit})", rangemode="tozero"),
        yaxis=dict(autorange="reversed", tickmode="array",
                   tickvals=[(r - lo) * len(LANES) + 1 for r in tick_ranks],
                   ticktext=[f"GPU {r}" for r in tick_ranks], showgrid=False,
                   range=[rows - 0.5, -0.5]),
        meta={"ranks": [lo, hi], "webgl": use_gl, "spans": n_spans, "unit": unit},
        hovermode="closest", margin=dict(t=85),   # room for the title above the legend
    )
    if shown <= 64:
        # separators between GPUs as minor grid lines: one array, where 63 layout shapes
        # cost ~20 ms of validation on a 64-GPU figure
        fig.update_yaxes(minor=dict(tickmode="array", ticks="", showgrid=True, gridcolor="#bbb",
                                    gridwidth=0.5,
                                    tickvals=[r * len(LANES) - 0.5 for r in range(1, shown)]))
    return fig


# --- view 3: who computes which block when --------------------------------------------

def chunk_pair_work(layout: str, seq: int, n: int, causal: bool) -> np.ndarray:
    """Unmasked (query, key) pairs between every pair of the layout's chunks.

    Chunks are those of the trace's q_chunks/kv_chunks: equal runs of consecutive tokens
    in token order for contiguous (N) and zigzag (2N); for striped, chunk r is the
    stripe of tokens congruent to r mod N.
    """
    chunks = 2 * n if layout == "zigzag" else n
    size = seq // chunks
    if not causal:
        return np.full((chunks, chunks), size * size, dtype=np.int64)
    i = np.arange(chunks)[:, None]
    j = np.arange(chunks)[None, :]
    if layout == "striped":
        # query r + a*n, key s + b*n: key <= query iff b < a, or b == a and s <= r
        return size * (size - 1) // 2 + np.where(j <= i, size, 0).astype(np.int64)
    return np.where(j < i, size * size, np.where(j == i, size * (size + 1) // 2, 0)).astype(np.int64)


def _config_of(trace: Trace) -> tuple[str, int, bool]:
    try:
        w = trace.config["workload"]
        return trace.config["layout"], int(w["seq"]), bool(w["causal"])
    except (KeyError, TypeError, ValueError):
        raise RingsimError("the trace's header has no layout or workload to draw the block map") from None


def block_steps(trace: Trace) -> np.ndarray:
    """(chunks, chunks): the ring step (within its pass) at which each chunk pair is
    computed, NaN where the pair is fully masked or never computed."""
    layout, seq, causal = _config_of(trace)
    n = trace.world_size
    work = chunk_pair_work(layout, seq, n, causal)
    grid = np.full(work.shape, np.nan)
    computes = [s for s in trace.spans if s.stream == "compute"]
    first = "fwd" if any(s.kind == "fwd" for s in computes) else "bwd"
    for s in computes:
        if s.kind != first:
            continue
        for qc in s.q_chunks:
            for kc in s.kv_chunks:
                if qc < work.shape[0] and kc < work.shape[1]:
                    grid[qc, kc] = s.step % n
    grid[work == 0] = np.nan
    return grid


def block_map(trace: Trace) -> go.Figure:
    """Query chunk x key chunk, colored by ring step; masked blank; work per GPU beside."""
    layout, seq, causal = _config_of(trace)
    n = trace.world_size
    work = chunk_pair_work(layout, seq, n, causal)
    grid = block_steps(trace)
    chunks = grid.shape[0]
    size = seq // chunks
    owner = np.array([c if c < n else 2 * n - 1 - c for c in range(chunks)])
    fig = make_subplots(rows=1, cols=2, column_widths=[0.58, 0.42], horizontal_spacing=0.1,
                        subplot_titles=("query chunk × key chunk: ring step of its compute",
                                        "work per GPU"))
    fig.update_layout(template=_TEMPLATE, height=560)
    if n <= 24:
        palette = qualitative.Plotly if n <= 10 else qualitative.Dark24
        colorscale = []
        for k in range(n):
            colorscale += [[k / n, palette[k]], [(k + 1) / n, palette[k]]]
        zmin, zmax = -0.5, n - 0.5
    else:
        colorscale, zmin, zmax = "Viridis", 0, n - 1
    custom = None
    hover = "query chunk %{y} × key chunk %{x}<br>ring step %{z}<extra></extra>"
    if chunks * chunks <= MAX_HOVER_CELLS:
        frac = work / float(size * size)
        # a typed 3-D array: plotly.js decodes it without a nested list per cell
        custom = np.stack([np.broadcast_to(owner[:, None], work.shape),
                           np.broadcast_to(owner[None, :], work.shape), work, frac * 100],
                          axis=-1).astype(np.float64)
        hover = ("query chunk %{y} (GPU %{customdata[0]}) × key chunk %{x} "
                 "(K/V of GPU %{customdata[1]})<br>ring step %{z}<br>"
                 "%{customdata[2]:,} unmasked pairs (%{customdata[3]:.1f}% of the block)"
                 "<extra></extra>")
    fig.add_trace(go.Heatmap(
        z=grid, colorscale=colorscale, zmin=zmin, zmax=zmax, customdata=custom,
        hovertemplate=hover, hoverongaps=False, xgap=1 if chunks <= 64 else 0,
        ygap=1 if chunks <= 64 else 0,
        colorbar=dict(title="ring step", x=0.52, len=0.9,
                      tickvals=list(range(n)) if n <= 24 else None)), row=1, col=1)
    axis = "stripe (tokens ≡ r mod N)" if layout == "striped" else "chunk (token order)"
    fig.update_xaxes(title_text=f"key {axis}", row=1, col=1, showgrid=False)
    fig.update_yaxes(title_text=f"query {axis}", autorange="reversed", row=1, col=1,
                     showgrid=False, scaleanchor="x", constrain="domain")
    flops = np.zeros(n)
    computes = [s for s in trace.spans if s.stream == "compute"]
    for s in computes:
        flops[s.rank] += s.flops
    mean = flops.mean() if n else 0.0
    fig.add_trace(go.Bar(x=np.arange(n), y=flops / 1e12, marker_color=list(rank_colors(n)),
                         hovertemplate="GPU %{x}: %{y:.4g} TFLOP<extra></extra>", showlegend=False),
                  row=1, col=2)
    fig.add_hline(y=mean / 1e12, line=dict(color="#444", dash="dash", width=1), row=1, col=2,
                  annotation_text="mean", annotation_position="top left")
    imbalance = flops.max() / mean if mean > 0 else 1.0
    fig.update_xaxes(title_text="GPU", row=1, col=2)
    fig.update_yaxes(title_text="TFLOP computed", row=1, col=2)
    fig.update_layout(
        title=dict(text=f"Who computes which block when: {layout}, {'causal' if causal else 'no mask'}, "
                        f"{n} GPUs — work imbalance max/mean {imbalance:.3f}", font=dict(size=13)),
        meta={"imbalance": float(imbalance)})
    return fig


# --- view 4: which layout wins --------------------------------------------------------

def comparison(rows: Sequence[dict[str, Any]]) -> go.Figure:
    """Makespan, efficiency, imbalance and exposed communication of every layout x overlap."""
    makespans = [r["makespan_s"] for r in rows]
    scale, unit = time_unit(max(makespans))
    panels = [("makespan_s", f"makespan ({unit})", scale),
              ("efficiency", "efficiency (%)", 100.0),
              ("load_imbalance", "load imbalance (max/mean)", 1.0),
              ("exposed_comm_s", f"exposed comm, worst GPU ({unit})", scale)]
    fig = make_subplots(rows=1, cols=4, subplot_titles=[p[1] for p in panels],
                        horizontal_spacing=0.07)
    fig.update_layout(template=_TEMPLATE, height=380, barmode="group")
    layouts = list(dict.fromkeys(r["layout"] for r in rows))
    for overlap in (True, False):
        sub = {r["layout"]: r for r in rows if r["overlap"] == overlap}
        if not sub:
            continue
        for col, (key, label, mult) in enumerate(panels, start=1):
            ys = [(sub[lay][key] if sub.get(lay) and sub[lay][key] is not None else np.nan) * mult
                  for lay in layouts]
            fig.add_trace(go.Bar(
                x=layouts, y=ys, name=f"overlap {'on' if overlap else 'off'}",
                legendgroup=str(overlap), showlegend=col == 1,
                marker_color=COLORS["on" if overlap else "off"],
                text=[f"{y:.3g}" for y in ys], textposition="outside",
                hovertemplate=f"%{{x}}, overlap {'on' if overlap else 'off'}: %{{y:.4g}}<extra>{label}</extra>"),
                row=1, col=col)
    best = min(rows, key=lambda r: r["makespan_s"])
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(
        title=dict(text=f"Which layout wins: {best['layout']} with overlap "
                        f"{'on' if best['overlap'] else 'off'} "
                        f"({best['makespan_s'] * scale:.4g} {unit})", font=dict(size=13)),
        legend=dict(y=1.12), margin=dict(t=90),
        meta={"best": [best["layout"], best["overlap"]]})
    return fig


# --- view 5: when transfers hide ------------------------------------------------------

def overlap_sweep(sweep: dict[str, Any]) -> go.Figure:
    """Efficiency and exposed communication against tokens per device and link bandwidth."""
    has_bw = bool(sweep["by_bandwidth"])
    fig = make_subplots(
        rows=2, cols=2, shared_xaxes=False, vertical_spacing=0.16, horizontal_spacing=0.1,
        subplot_titles=("against tokens per GPU", "against link bandwidth" if has_bw else
                        "against link bandwidth (not available with a calibrated profile)",
                        "one full block: compute vs transfer time", ""))
    fig.update_layout(template=_TEMPLATE, height=640)
    bt = sweep["by_tokens"]
    tokens = [r["tokens"] for r in bt]
    for key, name, color, show in (("efficiency", "efficiency", COLORS["ring"], True),
                                   ("exposed_frac", "exposed comm / makespan", COLORS["exposed"], True)):
        fig.add_trace(go.Scatter(x=tokens, y=[r[key] * 100 for r in bt], name=name,
                                 legendgroup=key, showlegend=show, mode="lines+markers",
                                 line=dict(color=color),
                                 hovertemplate="%{x:,} tokens/GPU: %{y:.3g}%<extra>" + name + "</extra>"),
                      row=1, col=1)
        if has_bw:
            bb = sweep["by_bandwidth"]
            fig.add_trace(go.Scatter(x=[r["bandwidth_gbps"] for r in bb], y=[r[key] * 100 for r in bb],
                                     name=name, legendgroup=key, showlegend=False,
                                     mode="lines+markers", line=dict(color=color),
                                     hovertemplate="%{x:.4g} GB/s: %{y:.3g}%<extra>" + name + "</extra>"),
                          row=1, col=2)
    scale, unit = time_unit(max(max(r["block_compute_s"], r["block_transfer_s"]) for r in bt))
    for key, name, color in (("block_compute_s", "block compute", COLORS["fwd"]),
                             ("block_transfer_s", "block transfer", COLORS["send kv"])):
        fig.add_trace(go.Scatter(x=tokens, y=[r[key] * 1e6 for r in bt], name=name,
                                 mode="lines+markers", line=dict(color=color, dash="dot"),
                                 hovertemplate="%{x:,} tokens: %{y:.4g} µs<extra>" + name + "</extra>"),
                      row=2, col=1)
    c_star = sweep["crossover_tokens"]
    for row in (1, 2):
        fig.add_vline(x=c_star, line=dict(color="#444", dash="dash", width=1), row=row, col=1)
        fig.add_vline(x=sweep["tokens_now"], line=dict(color=COLORS["measured"], width=1.5),
                      row=row, col=1)
    fig.add_annotation(x=np.log10(c_star), y=0.5, xref="x", yref="y domain", showarrow=False,
                       text=f" compute = transfer<br> at {c_star:,.0f} tokens", xanchor="left",
                       align="left", font=dict(size=11))
    if has_bw:
        b_star = sweep["crossover_bandwidth_gbps"]
        fig.add_vline(x=b_star, line=dict(color="#444", dash="dash", width=1), row=1, col=2)
        fig.add_vline(x=sweep["bandwidth_now_gbps"], line=dict(color=COLORS["measured"], width=1.5),
                      row=1, col=2)
        fig.add_annotation(x=np.log10(b_star), y=0.5, xref="x2", yref="y2 domain", showarrow=False,
                           text=f" compute = transfer<br> at {b_star:.3g} GB/s", xanchor="left",
                           align="left", font=dict(size=11))
    fig.update_xaxes(type="log", title_text="tokens per GPU", row=1, col=1)
    fig.update_xaxes(type="log", title_text="tokens per GPU", row=2, col=1)
    fig.update_xaxes(type="log", title_text="link GB/s per direction", row=1, col=2)
    fig.update_yaxes(title_text="% ", range=[-3, 103], row=1, col=1)
    fig.update_yaxes(range=[-3, 103], row=1, col=2)
    fig.update_yaxes(type="log", title_text="µs", row=2, col=1)
    fig.update_xaxes(visible=False, row=2, col=2)
    fig.update_yaxes(visible=False, row=2, col=2)
    fig.update_layout(
        title=dict(text=f"When transfers hide ({sweep['layout']}, overlap "
                        f"{'on' if sweep['overlap'] else 'off'}, simulated on {sweep['n_gpus']} GPUs)"
                        "<br><sup>dashed: a full block's compute equals its transfer (launch overhead "
                        "and link latency aside); orange: the current scenario</sup>",
                   font=dict(size=13)),
        legend=dict(orientation="h", x=0.55, y=0.3, xanchor="left"), margin=dict(t=90),
        meta={"crossover_tokens": c_star, "crossover_bandwidth_gbps": sweep["crossover_bandwidth_gbps"]})
    return fig


# --- view 6: memory ---------------------------------------------------------------------

def memory(table: dict[str, Any]) -> go.Figure:
    """Peak memory per GPU against sequence length and GPU count, beside the full K/V."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        f"against sequence length ({table['gpus_now']} GPUs)",
        f"against GPU count ({table['seq_now']:,} tokens)"))
    fig.update_layout(template=_TEMPLATE, height=440)
    gib = 2 ** 30
    bs, bg = table["by_seq"], table["by_gpus"]
    cap = table["capacity_bytes"] / gib
    fig.add_trace(go.Scatter(x=[r["seq"] for r in bs], y=[r["ring_bytes"] / gib for r in bs],
                             name="ring: peak per GPU", legendgroup="ring", mode="lines+markers",
                             line=dict(color=COLORS["ring"]),
                             hovertemplate="%{x:,} tokens: %{y:.4g} GiB per GPU<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=[r["seq"] for r in bs], y=[r["ring_kv_bytes"] / gib for r in bs],
                             name="ring: K/V held per GPU (own shard + 2 in flight)", legendgroup="ringkv",
                             mode="lines+markers", line=dict(color=COLORS["send kv"]),
                             marker=dict(symbol="square", size=5),
                             hovertemplate="%{x:,} tokens: K/V held %{y:.4g} GiB per GPU<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=[r["seq"] for r in bs], y=[r["one_gpu_bytes"] / gib for r in bs],
                             name="one GPU, whole sequence (no ring)", mode="lines",
                             line=dict(color="#555555", dash="dot"),
                             hovertemplate="%{x:,} tokens on one GPU: %{y:.4g} GiB<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=[r["seq"] for r in bs], y=[r["full_kv_bytes"] / gib for r in bs],
                             name="the full K/V on one GPU", legendgroup="full", mode="lines",
                             line=dict(color=COLORS["full"], dash="dash"),
                             hovertemplate="%{x:,} tokens: full K/V %{y:.4g} GiB<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=[r["gpus"] for r in bg], y=[r["ring_bytes"] / gib for r in bg],
                             name="ring: peak per GPU", legendgroup="ring", showlegend=False,
                             mode="lines+markers", line=dict(color=COLORS["ring"]),
                             hovertemplate="%{x} GPUs: %{y:.4g} GiB per GPU<extra></extra>"),
                  row=1, col=2)
    fig.add_trace(go.Scatter(x=[r["gpus"] for r in bg], y=[r["ring_kv_bytes"] / gib for r in bg],
                             name="ring: K/V held per GPU", legendgroup="ringkv", showlegend=False,
                             mode="lines+markers", line=dict(color=COLORS["send kv"]),
                             marker=dict(symbol="square", size=5),
                             hovertemplate="%{x} GPUs: K/V held %{y:.4g} GiB per GPU<extra></extra>"),
                  row=1, col=2)
    fig.add_trace(go.Scatter(x=[r["gpus"] for r in bg], y=[r["fixed_shard_bytes"] / gib for r in bg],
                             name=f"ring, {table['tokens_per_rank']:,} tokens per GPU (sequence grows)",
                             mode="lines+markers", line=dict(color="#8e44ad", dash="dot"),
                             hovertemplate="%{x} GPUs: %{y:.4g} GiB per GPU<extra></extra>"),
                  row=1, col=2)
    fig.add_trace(go.Scatter(x=[r["gpus"] for r in bg], y=[r["full_kv_bytes"] / gib for r in bg],
                             name="the full K/V on one GPU", legendgroup="full", showlegend=False,
                             mode="lines", line=dict(color=COLORS["full"], dash="dash"),
                             hovertemplate="full K/V %{y:.4g} GiB<extra></extra>"),
                  row=1, col=2)
    # the capacity as a trace: an annotated hline would be placed in log10 units on a log axis
    for col, xs in ((1, [bs[0]["seq"], bs[-1]["seq"]]), (2, [bg[0]["gpus"], bg[-1]["gpus"]])):
        fig.add_trace(go.Scatter(x=xs, y=[cap, cap], mode="lines", name=f"GPU memory ({cap:.0f} GiB)",
                                 legendgroup="cap", showlegend=col == 1,
                                 line=dict(color=COLORS["capacity"], width=1, dash="dashdot"),
                                 hovertemplate=f"GPU memory {cap:.0f} GiB<extra></extra>"),
                      row=1, col=col)
    fig.add_vline(x=table["seq_now"], line=dict(color=COLORS["measured"], width=1.5), row=1, col=1)
    fig.add_vline(x=table["gpus_now"], line=dict(color=COLORS["measured"], width=1.5), row=1, col=2)
    fig.update_xaxes(type="log", title_text="sequence length (tokens)", row=1, col=1)
    fig.update_xaxes(type="log", title_text="GPUs in the ring", row=1, col=2)
    fig.update_yaxes(type="log", title_text="GiB", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    items = table["items"]
    detail = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in items.items() if k != "total")
    fig.update_layout(
        title=dict(text=f"Why no GPU needs the full K/V: {items['total'] / gib:.3g} GiB per GPU now, "
                        f"the full K/V would take {bs[[r['seq'] for r in bs].index(table['seq_now'])]['full_kv_bytes'] / gib:.3g} GiB"
                        f"<br><sup>{detail}</sup>", font=dict(size=13)),
        legend=dict(orientation="h", yanchor="top", y=-0.2, x=0), margin=dict(t=80, b=130), height=540)
    return fig


# --- view 7: why the merge is exact ---------------------------------------------------

def merge_steps(merge: RingMerge, layout: str) -> go.Figure:
    """For one query row: running max, normalizer and rescale factor at each ring step."""
    steps = merge.steps
    x = [s.step for s in steps]
    masked = [s.unmasked_keys == 0 for s in steps]
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=("running maximum m (× block maximum)",
                                        "normalizer l (relative to m)",
                                        "rescale factor exp(m_old − m_new): below 1 when the "
                                        "maximum rises, 1 when it holds (grey: block masked "
                                        "for this row), 0 at the first keys"))
    fig.update_layout(template=_TEMPLATE, height=620)
    hover_extra = [f"K/V of GPU {s.kv_rank}, {s.unmasked_keys} keys unmasked"
                   + (" (block skipped for this row)" if s.unmasked_keys == 0 else "") for s in steps]
    fig.add_trace(go.Scatter(x=x, y=[s.m for s in steps], mode="lines+markers", name="running max m",
                             line=dict(color=COLORS["ring"]), text=hover_extra,
                             hovertemplate="step %{x}: m = %{y:.4f}<br>%{text}<extra></extra>"),
                  row=1, col=1)
    bx = [s.step for s in steps if np.isfinite(s.block_max)]
    by = [s.block_max for s in steps if np.isfinite(s.block_max)]
    fig.add_trace(go.Scatter(x=bx, y=by, mode="markers", name="block row max",
                             marker=dict(symbol="x", size=9, color=COLORS["measured"]),
                             hovertemplate="step %{x}: block max %{y:.4f}<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=[s.l for s in steps], mode="lines+markers", name="normalizer l",
                             line=dict(color="#2e9e5b"), text=hover_extra,
                             hovertemplate="step %{x}: l = %{y:.5g}<br>%{text}<extra></extra>"),
                  row=2, col=1)
    fig.add_trace(go.Bar(x=x, y=[s.rescale for s in steps], name="rescale factor",
                         marker_color=["#cccccc" if m else COLORS["exposed"] for m in masked],
                         hovertext=hover_extra,
                         hovertemplate="step %{x}: factor %{y:.5g}<br>%{hovertext}<extra></extra>"),
                  row=3, col=1)
    fig.update_yaxes(range=[0, 1.08], row=3, col=1)
    fig.update_xaxes(title_text="ring step", dtick=1 if len(steps) <= 32 else None, row=3, col=1)
    err = merge.max_abs_error
    fig.update_layout(
        title=dict(text=f"Why the merge is exact: query token {merge.query_row} on GPU "
                        f"{merge.query_rank} ({layout}, {len(steps)} GPUs, {merge.output.shape[0]} "
                        f"tokens, head dim {merge.output.shape[1]}) — max |ring − full attention| "
                        f"= {err:.2e} ({merge.output.dtype})", font=dict(size=13)),
        showlegend=False, meta={"max_abs_error": err})
    return fig


# --- view 8: model against measurement ------------------------------------------------

def overlay(simulated: Trace, measured: Trace, errors: Sequence[dict[str, float]]) -> go.Figure:
    """Simulated and measured compute on paired lanes, each from its own time 0, and
    the per-step error."""
    n = max(simulated.world_size, measured.world_size)
    makespan = max(simulated.makespan_s, measured.makespan_s)
    scale, unit = time_unit(makespan or 1e-6)
    fig = make_subplots(rows=2, cols=1, row_heights=[0.64, 0.36], vertical_spacing=0.16,
                        subplot_titles=("compute (bars) and exposed communication (red) per GPU",
                                        "per-step time, median over GPUs: simulated (blue) vs "
                                        "measured (orange), label: median error"))
    height = int(min(1300, max(660, 300 + n * 2 * 16)))
    fig.update_layout(template=_TEMPLATE, height=height, barmode="overlay")
    total = len(simulated.spans) + len(measured.spans)
    use_gl = total > MAX_BAR_SPANS
    for offset, tr, label in ((0, simulated, "simulated"), (1, measured, "measured")):
        t0 = min((s.start_s for s in tr.spans), default=0.0)
        for kind, color, name in (("compute", COLORS[label], f"{label} compute"),
                                  ("exposed", COLORS["exposed"], f"{label} exposed comm")):
            g = [s for s in tr.spans if (s.stream == "compute" if kind == "compute"
                                         else (s.stream == "wait" and s.kind != "idle"))]
            if not g:
                continue
            start = np.array([(s.start_s - t0) * scale for s in g])
            end = np.array([(s.end_s - t0) * scale for s in g])
            y = np.array([s.rank * 2 + offset for s in g], dtype=float)
            cd = np.array([[s.rank, s.step, e - b] for s, b, e in zip(g, start, end)])
            hover = (f"{label}: GPU %{{customdata[0]}}, step %{{customdata[1]}}<br>"
                     f"lasts %{{customdata[2]:.4g}} {unit}<extra></extra>")
            if use_gl:
                nan = np.full(len(g), np.nan)
                fig.add_trace(go.Scattergl(
                    x=np.column_stack([start, end, nan]).ravel(), y=np.column_stack([y, y, nan]).ravel(),
                    mode="lines", name=name, line=dict(color=color, width=6),
                    customdata=np.repeat(cd, 3, axis=0), hovertemplate=hover), row=1, col=1)
            else:
                shade: Any = color
                if kind == "compute":
                    shade = np.where(np.array([s.step % 2 for s in g]) == 1,
                                     COLORS[label + " alt"], color)
                fig.add_trace(go.Bar(x=end - start, base=start, y=y, orientation="h", width=0.8,
                                     name=name, marker=dict(color=shade, line=dict(width=0)),
                                     opacity=1.0 if kind == "compute" else 0.9,
                                     customdata=cd, hovertemplate=hover), row=1, col=1)
    ticks = list(range(0, 2 * n))
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=ticks,
                     ticktext=[f"GPU {t // 2} {'sim' if t % 2 == 0 else 'meas'}" for t in ticks],
                     showgrid=False, automargin=True, row=1, col=1)
    fig.update_xaxes(title_text=f"time from each run's start ({unit})", row=1, col=1)
    steps = [r["step"] for r in errors]
    fig.add_trace(go.Bar(x=steps, y=[r["simulated_s"] * scale for r in errors], name="simulated step",
                         marker_color=COLORS["simulated"], showlegend=False,
                         hovertemplate=f"step %{{x}}: simulated %{{y:.4g}} {unit}<extra></extra>"),
                  row=2, col=1)
    fig.add_trace(go.Bar(x=steps, y=[r["measured_s"] * scale for r in errors], name="measured step",
                         marker_color=COLORS["measured"], showlegend=False,
                         text=[f"{r['error'] * 100:+.0f}%" if np.isfinite(r["error"]) else ""
                               for r in errors], textposition="outside",
                         customdata=[[r["error"] * 100, r["error_min"] * 100, r["error_max"] * 100]
                                     for r in errors],
                         hovertemplate=(f"step %{{x}}: measured %{{y:.4g}} {unit} (median over GPUs)"
                                        "<br>error %{customdata[0]:+.1f}% (GPUs from "
                                        "%{customdata[1]:+.1f}% to %{customdata[2]:+.1f}%)<extra></extra>")),
                  row=2, col=1)
    fig.update_layout(barmode="overlay")
    fig.update_traces(selector=dict(name="simulated step"), offsetgroup="sim", width=0.4, offset=-0.4)
    fig.update_traces(selector=dict(name="measured step"), offsetgroup="meas", width=0.4, offset=0.0)
    fig.update_xaxes(title_text="ring step", dtick=1 if len(steps) <= 40 else None,
                     row=2, col=1)
    fig.update_yaxes(title_text=unit, row=2, col=1)
    err_total = (simulated.makespan_s - measured.makespan_s) / measured.makespan_s if measured.makespan_s else float("nan")
    finite = [abs(r["error"]) for r in errors if np.isfinite(r["error"])]
    fig.update_layout(
        title=dict(text=f"Model vs measurement: makespan simulated {simulated.makespan_s * scale:.4g} {unit}, "
                        f"measured {measured.makespan_s * scale:.4g} {unit} ({err_total * 100:+.1f}%); "
                        f"median |step error| {np.median(finite) * 100 if finite else float('nan'):.1f}%",
                   font=dict(size=13), y=0.985),
        legend=dict(orientation="h", x=1, xanchor="right", y=1.0, yanchor="bottom"),
        margin=dict(l=100, t=110),
        meta={"makespan_error": err_total, "steps": len(errors)})
    return fig


def trace_summary(trace: Trace) -> Iterable[str]:
    """A few words per header field, for the upload's status line."""
    cfg = trace.config
    yield f"{trace.source} trace, {trace.world_size} ranks, {len(trace.spans)} spans"
    if "layout" in cfg:
        yield f"{cfg['layout']} layout"
