"""View 3, who computes which block when: the scheme's block map (query chunk x key
chunk, sim.schemes.base.BlockMap) beside the work each GPU computed (docs/design.md, "Work
of a block"). The scheme says what a cell's value is and which rank holds each chunk;
this module only draws it.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from dashboard.figures.style import TEMPLATE, rank_colors, run_label, scheme_of
from sim.trace import COMPUTE, Trace

MAX_HOVER_CELLS = 128 * 128
"""The block map carries per-cell hover data up to this many cells."""
MAX_MAP_CHUNKS = 512
"""Past this many chunks a side, the map shows every k-th chunk (a screen has no more
pixels than that; the JSON would pass 10 MB at 2048 chunks)."""
MAX_DISCRETE_VALUES = 24
"""Integer values 0..k-1 with k up to this get one distinct colour each."""


def _colorscale(value: np.ndarray) -> tuple[object, float, float, list[int] | None]:
    finite = value[np.isfinite(value)]
    top = float(finite.max()) if finite.size else 0.0
    k = int(top) + 1
    if finite.size and (finite == np.rint(finite)).all() and finite.min() >= 0 and k <= MAX_DISCRETE_VALUES:
        palette = qualitative.Plotly if k <= 10 else qualitative.Dark24
        scale = []
        for i in range(k):
            scale += [[i / k, palette[i]], [(i + 1) / k, palette[i]]]
        return scale, -0.5, k - 0.5, list(range(k))
    return "Viridis", float(finite.min()) if finite.size else 0.0, top, None


def _what(cfg: dict) -> str:
    """The run in a few words: a ring's layout, another scheme's name and settings."""
    if cfg.get("scheme", "ring") == "ring":
        return cfg.get("layout", "unknown layout")
    return run_label(cfg)


def block_map(trace: Trace) -> go.Figure:
    """Query chunk x key chunk, colored by the scheme's value (the ring: the step of its
    compute); masked blank; work per GPU beside."""
    bm = scheme_of(trace).block_map(trace)
    n = trace.world_size
    chunks = bm.value.shape[0]
    stride = -(-chunks // MAX_MAP_CHUNKS)
    ids = np.arange(0, chunks, stride)
    value = bm.value[::stride, ::stride]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.58, 0.42], horizontal_spacing=0.1,
                        subplot_titles=(f"query chunk × key chunk: {bm.value_label} of its compute",
                                        "work per GPU"))
    fig.update_layout(template=TEMPLATE, height=560)
    colorscale, zmin, zmax, tickvals = _colorscale(value)
    custom = None
    hover = f"query chunk %{{y}} × key chunk %{{x}}<br>{bm.value_label} %{{z}}<extra></extra>"
    if value.size <= MAX_HOVER_CELLS:
        work = bm.work[::stride, ::stride]
        owner = bm.owner[ids]
        frac = work / float(bm.chunk_size * bm.chunk_size)
        # a typed 3-D array: plotly.js decodes it without a nested list per cell
        custom = np.stack([np.broadcast_to(owner[:, None], work.shape),
                           np.broadcast_to(owner[None, :], work.shape), work, frac * 100],
                          axis=-1).astype(np.float64)
        hover = ("query chunk %{y} (GPU %{customdata[0]}) × key chunk %{x} "
                 f"(K/V of GPU %{{customdata[1]}})<br>{bm.value_label} %{{z}}<br>"
                 "%{customdata[2]:,} unmasked pairs (%{customdata[3]:.1f}% of the block)"
                 "<extra></extra>")
    fig.add_trace(go.Heatmap(
        z=value.astype(np.float32), x=ids if stride > 1 else None, y=ids if stride > 1 else None,
        colorscale=colorscale, zmin=zmin, zmax=zmax, customdata=custom,
        hovertemplate=hover, hoverongaps=False, xgap=1 if chunks <= 64 else 0,
        ygap=1 if chunks <= 64 else 0,
        colorbar=dict(title=bm.value_label, x=0.52, len=0.9, tickvals=tickvals)), row=1, col=1)
    shown = "" if stride == 1 else f" (one chunk in {stride} of {chunks} shown)"
    fig.update_xaxes(title_text=f"key {bm.axis_label}{shown}", row=1, col=1, showgrid=False)
    fig.update_yaxes(title_text=f"query {bm.axis_label}", autorange="reversed", row=1, col=1,
                     showgrid=False, scaleanchor="x", constrain="domain")
    c = trace.columns
    comp = c.stream == COMPUTE
    flops = np.bincount(c.rank[comp], c.flops[comp], minlength=n)[:n]
    mean = flops.mean() if n else 0.0
    fig.add_trace(go.Bar(x=np.arange(n), y=flops / 1e12, marker_color=list(rank_colors(n)),
                         hovertemplate="GPU %{x}: %{y:.4g} TFLOP<extra></extra>", showlegend=False),
                  row=1, col=2)
    fig.add_hline(y=mean / 1e12, line=dict(color="#444", dash="dash", width=1), row=1, col=2,
                  annotation_text="mean", annotation_position="top left")
    imbalance = flops.max() / mean if mean > 0 else 1.0
    fig.update_xaxes(title_text="GPU", row=1, col=2)
    fig.update_yaxes(title_text="TFLOP computed", row=1, col=2)
    cfg = trace.config
    causal = bool(cfg.get("workload", {}).get("causal", True))
    fig.update_layout(
        # two lines: one would run under the plot's toolbar at the top right
        title=dict(text=f"Who computes which block when: {_what(cfg)}, "
                        f"{'causal' if causal else 'no mask'}, {n} GPUs<br>work imbalance max/mean "
                        f"{imbalance:.3f}", font=dict(size=13)),
        margin=dict(t=90), meta={"imbalance": float(imbalance), "chunks": chunks, "stride": stride})
    return fig
