"""View 7, why the merge is exact: for one query row, the running maximum, normalizer
and rescale factor of the online softmax at each ring step (docs/design.md, facts 3 and 7;
sim.online_softmax)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, TEMPLATE
from sim.online_softmax import RingMerge


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
    fig.update_layout(template=TEMPLATE, height=620)
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
                        f"tokens, head dim {merge.output.shape[1]})<br>max |ring − full attention| "
                        f"= {err:.2e} ({merge.output.dtype})", font=dict(size=13)),
        showlegend=False, margin=dict(t=90), meta={"max_abs_error": err})
    return fig
