"""View 1, which tokens each device holds: the sequence as a strip of runs of
consecutive tokens, coloured by the rank that holds them (sim.layouts). A scheme whose
token shards follow a layout at another level (the hybrid's ring positions, each shared
by a group of GPUs) names its holders and says so in the title."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import figure, rank_colors
from sim.layouts import rank_of_token

MAX_STRIP_RUNS = 512
"""The layout strip draws at most this many runs of tokens (the rest repeats)."""


def layout_strip(layout: str, seq: int, n: int, *, holders: list[str] | None = None,
                 title: str | None = None, labels: dict[str, str] | None = None) -> go.Figure:
    """The sequence as a strip of runs of consecutive tokens, colored by the rank holding
    them (the n holders of a layout on n ranks; `holders` names each, GPU r otherwise).
    `labels`: the axis and hover words, the truncation's sentence, Plotly's `separators`
    (decimal point, then thousands) and how a number reads, in the page's language."""
    lab = {"axis": "token", "hover": "tokens", "first": "{title} (first {shown} tokens; the pattern repeats)",
           "separators": ".,", "number": lambda x: f"{x:,}", **(labels or {})}
    owner = rank_of_token(layout, seq, n)
    cuts = np.flatnonzero(np.diff(owner)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [seq]])
    truncated = len(starts) > MAX_STRIP_RUNS
    if truncated:
        starts, ends = starts[:MAX_STRIP_RUNS], ends[:MAX_STRIP_RUNS]
    ranks = owner[starts]
    shown = int(ends[-1])
    fig = figure(height=170, barmode="overlay", showlegend=False,
                 margin=dict(l=70, r=20, t=40, b=40))
    names = np.asarray(holders if holders is not None else [f"GPU {r}" for r in range(n)], dtype=object)
    fig.add_trace(go.Bar(
        x=ends - starts, base=starts, y=np.zeros(len(starts)), orientation="h", width=0.9,
        marker=dict(color=np.asarray(rank_colors(n), dtype=object)[ranks], line=dict(width=0)),
        customdata=np.column_stack([starts, ends - 1, ranks]), hovertext=names[ranks],
        text=[f"{r}" for r in ranks] if len(starts) <= 64 else None,
        textposition="inside", insidetextanchor="middle",
        hovertemplate=lab["hover"] + " %{customdata[0]:,}–%{customdata[1]:,} → %{hovertext}<extra></extra>",
    ))
    if title is None:
        title = f"Which tokens each GPU holds: {layout} layout, {seq:,} tokens over {n} GPUs"
    if truncated:
        title = lab["first"].format(title=title, shown=lab["number"](shown))
    fig.update_layout(
        title=dict(text=title, font=dict(size=13)), separators=lab["separators"],
        xaxis=dict(title=lab["axis"], range=[0, shown], tickformat=","),
        yaxis=dict(visible=False, range=[-0.5, 0.5]),
        meta={"runs": len(starts), "tokens_shown": shown, "truncated": bool(truncated)},
    )
    return fig
