"""View 7, why the merge is exact: for one query row, the running maximum, normalizer
and rescale factor of the online softmax at each ring step (docs/design.md, facts 3 and 7;
sim.scenario.online_softmax)."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, TEMPLATE, wrap_title
from sim.scenario.online_softmax import RingMerge

LABELS = {
    "title": "Why the merge is exact: query token {row} on GPU {rank} ({layout}, {gpus} GPUs, {tokens} tokens, "
             "head dim {dim})<br>max |ring − full attention| = {err} ({dtype})",
    "max": "running maximum m (× block maximum)", "normalizer": "normalizer l (relative to m)",
    "rescale": "rescale factor exp(m_old − m_new): below 1 when the maximum rises, 1 when it holds (grey: "
               "block masked for this row), 0 at the first keys",
    "block": "K/V of GPU {gpu}, {keys} keys unmasked", "skipped": " (block skipped for this row)",
    "m": "running max m", "block_max": "block row max", "l": "normalizer l", "factor": "rescale factor",
    "step_axis": "ring step",
    # hover templates: Plotly's placeholders only, numbers in the figure's `separators`
    "h_m": "step %{x}: m = %{y:.4f}", "h_block_max": "step %{x}: block max %{y:.4f}",
    "h_l": "step %{x}: l = %{y:.5g}", "h_factor": "step %{x}: factor %{y:.5g}",
    "separators": ".,",
}
"""The figure's texts in English: `merge_steps(labels=...)` replaces any of them, and
adds how numbers read (`digits`) and a layout's name (`layout`)."""


HEIGHT = 660
"""The chart's height in px (three panels of about 150 px each)."""
TITLE_LINE = 100
"""A panel title's lines at most this many characters: the chart is about 870 px wide at
1,280 px, and a panel title's character about 7 px."""
SPACING_PER_LINE = 0.045
"""The space between panels for each line of the longest panel title, as a fraction of the
plot's height (two lines: 0.09, some 45 px: at 0.07 a two-line title touched the ticks of
the panel above)."""


def merge_steps(merge: RingMerge, layout: str, *, labels: dict[str, Any] | None = None) -> go.Figure:
    """For one query row: running max, normalizer and rescale factor at each ring step.
    `labels`: the texts in the page's language (LABELS)."""
    lab = {**LABELS, "digits": str, "layout": str, **(labels or {})}
    steps = merge.steps
    x = [s.step for s in steps]
    masked = [s.unmasked_keys == 0 for s in steps]
    # a long title in lines of at most TITLE_LINE characters (at 1,280 px one line ran past the
    # chart's edge), and the panels as far apart as the longest takes lines: the Indonesian
    # rescale title's third line lay over the panel above
    titles = tuple(wrap_title(lab[k], TITLE_LINE) for k in ("max", "normalizer", "rescale"))
    lines = max(t.count("<br>") + 1 for t in titles)
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=SPACING_PER_LINE * max(2, lines),
                        subplot_titles=titles)
    fig.update_layout(template=TEMPLATE, height=HEIGHT, separators=lab["separators"])
    hover_extra = [lab["block"].format(gpu=s.kv_rank, keys=s.unmasked_keys)
                   + (lab["skipped"] if s.unmasked_keys == 0 else "") for s in steps]
    fig.add_trace(go.Scatter(x=x, y=[s.m for s in steps], mode="lines+markers", name=lab["m"],
                             line=dict(color=COLORS["ring"]), text=hover_extra,
                             hovertemplate=lab["h_m"] + "<br>%{text}<extra></extra>"),
                  row=1, col=1)
    bx = [s.step for s in steps if np.isfinite(s.block_max)]
    by = [s.block_max for s in steps if np.isfinite(s.block_max)]
    fig.add_trace(go.Scatter(x=bx, y=by, mode="markers", name=lab["block_max"],
                             marker=dict(symbol="x", size=9, color=COLORS["measured"]),
                             hovertemplate=lab["h_block_max"] + "<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=[s.l for s in steps], mode="lines+markers", name=lab["l"],
                             line=dict(color="#2e9e5b"), text=hover_extra,
                             hovertemplate=lab["h_l"] + "<br>%{text}<extra></extra>"),
                  row=2, col=1)
    fig.add_trace(go.Bar(x=x, y=[s.rescale for s in steps], name=lab["factor"],
                         marker_color=["#cccccc" if m else COLORS["exposed"] for m in masked],
                         hovertext=hover_extra,
                         hovertemplate=lab["h_factor"] + "<br>%{hovertext}<extra></extra>"),
                  row=3, col=1)
    fig.update_yaxes(range=[0, 1.08], row=3, col=1)
    fig.update_xaxes(title_text=lab["step_axis"], dtick=1 if len(steps) <= 32 else None, row=3, col=1)
    err = merge.max_abs_error
    fig.update_layout(
        title=dict(text=lab["title"].format(row=merge.query_row, rank=merge.query_rank, layout=lab["layout"](layout),
                                            gpus=len(steps), tokens=merge.output.shape[0],
                                            dim=merge.output.shape[1], err=lab["digits"](f"{err:.2e}"),
                                            dtype=merge.output.dtype), font=dict(size=13)),
        showlegend=False, margin=dict(t=100), meta={"max_abs_error": err})
    return fig
