"""View 1, which tokens each device holds: the sequence as a strip of runs of
consecutive tokens, coloured by the rank that holds them (sim.layouts; packed documents:
sim.layouts.packed, with the documents drawn above the ranks and their boundaries across). A
scheme whose token shards follow a layout at another level (the hybrid's ring positions,
each shared by a group of GPUs) names its holders and says so in the title."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import DISTINCT_RANKS, RANK_SCALE, figure, rank_colors, wrap_title
from sim.layouts import segments

MAX_STRIP_RUNS = 512
"""The layout strip draws at most this many runs of tokens (the rest repeats), and as
many documents."""
DOCUMENT_SHADES = ("#cfd6df", "#8d99a8")
"""Documents alternate between these two greys."""


def layout_strip(layout: str, seq: int, n: int, *, holders: list[str] | None = None,
                 title: str | None = None, labels: dict[str, str] | None = None,
                 owner: np.ndarray | None = None, bounds: Sequence[int] | None = None) -> go.Figure:
    """The sequence as a strip of runs of consecutive tokens, colored by the rank holding
    them (the n holders of a layout on n ranks; `holders` names each, GPU r otherwise;
    `owner`, the holder of each token where the layout is not sim.layouts' own). With
    `bounds` (cumulative document lengths) the documents in a row above, shaded in turn,
    their boundaries drawn across both rows. `labels`: the axis, hover and row words, the
    truncation's sentence ({title}, {shown}, {tokens}), Plotly's `separators` (decimal
    point, then thousands) and how a number reads, in the page's language."""
    lab = {"axis": "token", "hover": "tokens", "first": "{title} (first {shown} tokens; the pattern repeats)",
           "first_of": "{title} (first {shown} tokens of {tokens})",
           "document": "document", "holders": "GPU", "documents": "documents",
           "separators": ".,", "number": lambda x: f"{x:,}", **(labels or {})}
    if owner is None:
        starts, ends, ranks = layout_runs(layout, seq, n, MAX_STRIP_RUNS + 1)
    else:
        cuts = np.flatnonzero(np.diff(owner)) + 1
        starts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [seq]])
        ranks = owner[starts]
    truncated = len(starts) > MAX_STRIP_RUNS or int(ends[-1]) < seq
    if len(starts) > MAX_STRIP_RUNS:
        starts, ends, ranks = starts[:MAX_STRIP_RUNS], ends[:MAX_STRIP_RUNS], ranks[:MAX_STRIP_RUNS]
    shown = int(ends[-1])
    docs = None if bounds is None or len(bounds) <= 2 else np.asarray(bounds, dtype=np.int64)
    if docs is not None and len(docs) - 1 > MAX_STRIP_RUNS and docs[MAX_STRIP_RUNS] < shown:
        shown, truncated = int(docs[MAX_STRIP_RUNS]), True
        keep = starts < shown
        starts, ends, ranks = starts[keep], np.minimum(ends[keep], shown), ranks[keep]
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
    if n > DISTINCT_RANKS:
        # the holders' colours run along a scale: a colour bar says which is which (no trace's
        # points: a scatter of two unseen markers carries it)
        fig.add_trace(go.Scatter(
            x=[0, 0], y=[0, 0], mode="markers", hoverinfo="skip", showlegend=False,
            marker=dict(size=0, opacity=0, color=[0, n - 1], cmin=0, cmax=n - 1, colorscale=RANK_SCALE,
                        showscale=True, colorbar=dict(title=dict(text=lab["holders"], side="right"), thickness=10,
                                                      len=1.0, xpad=4, tickformat=",", outlinewidth=0))))
        fig.update_layout(margin=dict(r=80))
    rows = dict(visible=False, range=[-0.5, 0.5])
    meta = {"runs": len(starts), "tokens_shown": shown, "truncated": bool(truncated)}
    if docs is not None:
        meta["doc_bounds"] = _documents(fig, docs, shown, lab)
        rows = dict(range=[-0.5, 1.5], tickvals=[0, 1], ticktext=[lab["holders"], lab["documents"]],
                    showgrid=False, ticks="")
    if title is None:
        title = f"Which tokens each GPU holds: {layout} layout, {seq:,} tokens over {n} GPUs"
    if truncated:
        # "the pattern repeats" only where it does (striped; zigzag's second half mirrors its first)
        repeats = docs is None and _repeats(layout, seq, n, shown, owner)
        title = lab["first" if repeats else "first_of"].format(title=title, shown=lab["number"](shown),
                                                               tokens=lab["number"](seq))
    # a long title (a hybrid's ring positions, a truncated strip) on two lines, not cut at both
    # ends; the strip gives it room from its bars (the page holds the figure at its height)
    title = wrap_title(title)
    if "<br>" in title:
        fig.update_layout(margin=dict(t=58))
    fig.update_layout(
        title=dict(text=title, font=dict(size=13)), separators=lab["separators"],
        xaxis=dict(title=lab["axis"], range=[0, shown], tickformat=","), yaxis=rows, meta=meta)
    return fig


def _repeats(layout: str, seq: int, n: int, shown: int, owner: np.ndarray | None) -> bool:
    """Whether the tokens' holders repeat with a period of `shown` tokens over the whole
    sequence (`owner`) or, from the layout's segments, over its first two periods."""
    if seq % shown:
        return False
    if owner is not None:
        return bool(np.all(owner.reshape(-1, shown) == owner[:shown]))
    starts, ends, ranks = layout_runs(layout, seq, n, 2 * MAX_STRIP_RUNS + 2)
    first = starts < shown
    k = int(first.sum())
    if int(ends[-1]) < min(seq, 2 * shown) or len(starts) < 2 * k:
        return False
    return bool(np.array_equal(starts[k:2 * k], starts[:k] + shown) and np.array_equal(ranks[k:2 * k], ranks[:k]))


def layout_runs(layout: str, seq: int, n: int, most: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first runs of consecutive tokens held by one rank (at least `most` of them, or
    all): their starts, ends and ranks, read from the layout's segments (sim.layouts) so
    that a sequence of a billion tokens costs no array of a billion owners."""
    pieces = []
    for rank, segs in enumerate(segments(layout, seq, n)):
        for g in segs:
            if g.stride == 1 or g.count == 1:
                pieces.append(np.array([[g.start, g.start + g.count, rank]], dtype=np.int64))
            else:
                # a strided segment is one-token runs: the first `most` of them reach far enough
                t = g.start + g.stride * np.arange(min(g.count, most), dtype=np.int64)
                pieces.append(np.column_stack([t, t + 1, np.full(len(t), rank)]))
    runs = np.concatenate(pieces)
    runs = runs[np.argsort(runs[:, 0], kind="stable")]
    gap = np.flatnonzero(runs[1:, 0] != runs[:-1, 1])      # where a cut-short segment leaves tokens out
    if gap.size:
        runs = runs[:gap[0] + 1]
    # neighbouring pieces of one rank are one run
    first = np.ones(len(runs), dtype=bool)
    first[1:] = runs[1:, 2] != runs[:-1, 2]
    starts = runs[first, 0]
    ends = np.append(starts[1:], runs[-1, 1])
    return starts, ends, runs[first, 2]


def _documents(fig: go.Figure, bounds: np.ndarray, shown: int, lab: dict) -> list[int]:
    """The documents that begin before token `shown`, as a row of bars shaded in turn, and
    a line across the strip where each of them after the first begins. Returns those
    tokens."""
    k = np.flatnonzero(bounds[:-1] < shown)
    starts, ends = bounds[k], bounds[k + 1]
    fig.add_trace(go.Bar(
        x=np.minimum(ends, shown) - starts, base=starts, y=np.ones(len(k)), orientation="h", width=0.9,
        marker=dict(color=np.asarray(DOCUMENT_SHADES, dtype=object)[k % 2], line=dict(width=0)),
        customdata=np.column_stack([k, starts, ends - 1, ends - starts]),
        hovertemplate=(lab["document"] + " %{customdata[0]:,}: " + lab["hover"]
                       + " %{customdata[1]:,}–%{customdata[2]:,} (%{customdata[3]:,})<extra></extra>"),
    ))
    cuts = starts[1:]
    x = np.repeat(cuts, 3).astype(np.float64)
    x[2::3] = np.nan
    fig.add_trace(go.Scatter(x=x, y=np.tile([-0.5, 1.5, np.nan], len(cuts)), mode="lines",
                             line=dict(color="#111", width=1), hoverinfo="skip"))
    return cuts.tolist()
