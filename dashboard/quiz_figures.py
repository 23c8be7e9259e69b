"""Figures of the Questions view: pure functions from numbers to a Plotly figure.

Each builder draws the point one question makes, from numbers its caller got from the
simulator (dashboard/quiz_explain.py), with every text through a `Translator`
(dashboard/i18n.py). The numbers the explanation quotes travel in `layout.meta`, so a
test can read them beside the picture. Definitions are docs/design.md's.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures import style
from dashboard.figures.style import wrap_title
from dashboard.i18n import Translator, layout_label

MAX_RING_DRAWN = 16
"""The ring animation draws at most this many GPUs (the pattern is the same for more)."""
MAX_RUNS = 512
"""The token strip draws at most this many runs of consecutive tokens."""
TITLE_CHARS = 76
"""A quiz figure's title line longer than this is broken: beside the question at 1,280 px
the figure is some 550 px wide, about 78 characters of a 13 px title."""
PANEL_TITLE_CHARS = 28
"""The same for a panel's title (11 px) over one of two panels side by side."""
STACKED_TITLE_CHARS = 60
"""The same for a panel's title (11 px) over a panel the figure's width, less its margins."""
TOOLBAR_PX = 40
"""The height of the plot's toolbar, at the figure's top right."""

# the other views' template, the legend below the plot (the title takes the top)
TEMPLATE = go.layout.Template(style.TEMPLATE)
TEMPLATE.layout.update(margin=dict(l=70, r=20, t=80, b=50),
                       legend=dict(orientation="h", yanchor="top", y=-0.18, x=0))
BLUE, ORANGE, RED, GREEN, GREY = "#3a6fd8", "#f28e2b", "#e0302a", "#2e9e5b", "#777777"


def _title(text: str, sub: str | None = None) -> dict[str, Any]:
    return dict(text=text + (f"<br><sup>{sub}</sup>" if sub else ""), font=dict(size=13), x=0.01)


def _under_toolbar(title: dict[str, Any], height: int) -> dict[str, Any]:
    """`title` placed from the top down, below the plot's toolbar (a figure `height` px high):
    a long or broken title would run beneath the toolbar or down into the panels' titles."""
    return {**title, "yref": "container", "y": 1 - TOOLBAR_PX / height, "yanchor": "top"}


def message(text: str, height: int = 300) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, height=height, xaxis=dict(visible=False),
                      yaxis=dict(visible=False))
    fig.add_annotation(text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=14, color="#666"))
    return fig


# --- question 1: the sequence is cut along its tokens ---------------------------------

def token_split(owner: np.ndarray, heads: int, head_dim: int, t: Translator,
                meta: dict[str, Any]) -> go.Figure:
    """The sequence as runs of tokens colored by the GPU holding them; each run is as tall
    as the whole hidden size, because that is not split."""
    seq = owner.size
    n = int(owner.max()) + 1
    cuts = np.flatnonzero(np.diff(owner)) + 1
    starts = np.concatenate([[0], cuts])[:MAX_RUNS]
    ends = np.concatenate([cuts, [seq]])[:MAX_RUNS]
    ranks = owner[starts]
    hidden = heads * head_dim
    colors = np.asarray(list(style.rank_colors(n)), dtype=object)[ranks]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        x=ends - starts, base=starts, y=[hidden / 2] * len(starts), width=hidden,
        orientation="h", marker=dict(color=colors, line=dict(width=0.5, color="white")),
        customdata=np.column_stack([starts, ends - 1, ranks]),
        text=[t("fig.gpu", gpu=int(r)) for r in ranks] if len(starts) <= 32 else None,
        textposition="inside", insidetextanchor="middle",
        hovertemplate=t("q1.fig.hover") + "<extra></extra>", showlegend=False))
    fig.update_layout(
        template=TEMPLATE, height=300, bargap=0,
        title=_title(t("q1.fig.title", tokens=t.int(seq), gpus=n),
                     t("q1.fig.sub", heads=heads, head_dim=head_dim)),
        xaxis=dict(title=t("fig.token"), range=[0, int(ends[-1])], tickformat=","),
        yaxis=dict(title=t("q1.fig.hidden", hidden=t.int(hidden)), range=[0, hidden]),   # two lines: the plot is short
        separators=_separators(t), meta=meta)
    return fig


def _separators(t: Translator) -> str:
    """Plotly's decimal and thousands separators for the language."""
    return ",." if t.lang == "id" else ".,"


# --- question 2 (and the timeline): K/V blocks step around the ring ---------------------

def _ring_xy(n: int, radius: float) -> tuple[np.ndarray, np.ndarray]:
    angle = math.pi / 2 - 2 * math.pi * np.arange(n) / n      # clockwise from the top
    return radius * np.cos(angle), radius * np.sin(angle)


def ring_steps(n: int, t: Translator, meta: dict[str, Any], *, height: int = 440,
               note: str | None = None) -> go.Figure:
    """GPUs on a ring; at step k GPU r holds the K/V block of GPU (r - k) mod n. Frame k
    moves every block k hops along the ring (trace 2) and names the step (the title)."""
    colors = list(style.rank_colors(n))
    gx, gy = _ring_xy(n, 1.0)
    qx, qy = _ring_xy(n, 0.62)
    bx, by = _ring_xy(n, 1.36)
    big = n > 10
    fig = go.Figure()
    # the ring's links, one arrow per hop r -> r+1
    for r in range(n):
        s = (r + 1) % n
        fig.add_annotation(x=gx[s] * 0.93 + gx[r] * 0.07, y=gy[s] * 0.93 + gy[r] * 0.07,
                           ax=gx[r] * 0.93 + gx[s] * 0.07, ay=gy[r] * 0.93 + gy[s] * 0.07,
                           xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=3, arrowsize=1.2, arrowwidth=1.5, arrowcolor="#9ca3af", text="")
    fig.add_trace(go.Scatter(
        x=gx, y=gy, mode="markers+text", marker=dict(size=34 if not big else 22, color="#1f2937"),
        text=[str(r) for r in range(n)], textfont=dict(color="white", size=12 if not big else 9),
        hovertext=[t("fig.gpu", gpu=r) for r in range(n)], hoverinfo="text", showlegend=False))
    fig.add_trace(go.Scatter(
        x=qx, y=qy, mode="markers+text" if not big else "markers",
        marker=dict(size=16 if not big else 10, color=colors, symbol="circle-open", line=dict(width=3)),
        text=[f"Q{r}" for r in range(n)], textposition="middle center",
        textfont=dict(size=10), hovertext=[t("ring.queries", gpu=r) for r in range(n)],
        hoverinfo="text", name=t("ring.legend.q")))

    def blocks(k: int) -> go.Scatter:
        at = [(j + k) % n for j in range(n)]     # block j sits on GPU j + k
        return go.Scatter(
            x=bx[at], y=by[at], mode="markers+text" if not big else "markers",
            marker=dict(size=26 if not big else 14, color=colors, symbol="square",
                        line=dict(width=1, color="#333")),
            text=[f"K/V{j}" for j in range(n)], textposition="middle center",
            textfont=dict(size=9, color="white"),
            hovertext=[t("ring.holds", gpu=at[j], block=j) for j in range(n)], hoverinfo="text",
            name=t("ring.legend.kv"))

    fig.add_trace(blocks(0))

    def title(k: int) -> dict[str, Any]:
        lead = t("ring.step0", last=n - 1) if k == 0 else t("ring.step", step=k, last=n - 1)
        # a step's line ran beneath the toolbar at 1,280 px
        return _under_toolbar(_title(lead, t("ring.sub", hops=n - 1) + (f"<br>{note}" if note else "")), height)

    # the frames hold each step's blocks and title; the page steps through them
    # (dashboard/views/ring_animation.py: a play button and a step slider, in the browser)
    fig.frames = [go.Frame(name=str(k), data=[blocks(k)], traces=[2], layout=dict(title=title(k)))
                  for k in range(n)]
    lim = 1.62
    fig.update_layout(
        template=TEMPLATE, height=height, title=title(0), showlegend=True,
        legend=dict(orientation="h", yanchor="top", y=-0.02, x=0.5, xanchor="center"),
        xaxis=dict(visible=False, range=[-lim, lim], scaleanchor="y", constrain="domain"),
        yaxis=dict(visible=False, range=[-lim, lim]),
        margin=dict(l=20, r=20, t=70 + TOOLBAR_PX, b=40), meta=meta)
    return fig


# --- questions 3 and 7: the merge of one query row ---------------------------------------

def merge_trace(steps: Sequence[Any], t: Translator, meta: dict[str, Any],
                highlight: int | None = None) -> go.Figure:
    """Running maximum, block maxima and rescale factor of one query row, step by step."""
    x = [s.step for s in steps]
    # the panels' titles broken where long (the Indonesian rescale title was cut at 1,280 px)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.14,
                        subplot_titles=tuple(wrap_title(t(k), STACKED_TITLE_CHARS)
                                             for k in ("merge.fig.max", "merge.fig.rescale")))
    hover = [t("merge.fig.hover", block=s.kv_rank, keys=s.unmasked_keys) for s in steps]
    fig.add_trace(go.Scatter(x=x, y=[s.m for s in steps], mode="lines+markers",
                             name=t("merge.fig.m"), line=dict(color=BLUE), text=hover,
                             hovertemplate="%{x}: m = %{y:.4f}<br>%{text}<extra></extra>"),
                  row=1, col=1)
    finite = [s for s in steps if math.isfinite(s.block_max)]
    fig.add_trace(go.Scatter(x=[s.step for s in finite], y=[s.block_max for s in finite],
                             mode="markers", name=t("merge.fig.blockmax"),
                             marker=dict(symbol="x", size=10, color=ORANGE),
                             hovertemplate="%{x}: %{y:.4f}<extra></extra>"), row=1, col=1)
    colors = ["#cccccc" if s.unmasked_keys == 0 else (RED if i == highlight else "#f08c88")
              for i, s in enumerate(steps)]
    fig.add_trace(go.Bar(x=x, y=[s.rescale for s in steps], name=t("merge.fig.factor"),
                         marker=dict(color=colors, line=dict(
                             color=["#222" if i == highlight else "rgba(0,0,0,0)"
                                    for i in range(len(steps))], width=2)),
                         hovertext=hover,
                         hovertemplate="%{x}: %{y:.5f}<br>%{hovertext}<extra></extra>",
                         showlegend=False), row=2, col=1)
    fig.update_yaxes(range=[0, 1.1], row=2, col=1)
    fig.update_xaxes(title_text=t("fig.step"), dtick=1, row=2, col=1)
    fig.update_layout(template=TEMPLATE, height=460, separators=_separators(t),
                      title=_title(meta["title"], meta.get("subtitle")), meta=meta,
                      legend=dict(orientation="h", yanchor="top", y=-0.16, x=0),
                      margin=dict(t=90, b=80))
    return fig


# --- question 4: the K/V a GPU holds against the whole K/V ------------------------------

def kv_memory(rows: Sequence[dict[str, Any]], gpus_now: int, t: Translator,
              meta: dict[str, Any]) -> go.Figure:
    """Against the ring's size: the K/V a GPU holds (own shard + the blocks in flight)
    and the K/V of the whole sequence."""
    gib = 2 ** 30
    g = [str(r["gpus"]) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=g, y=[r["kv_held_bytes"] / gib for r in rows], name=t("q4.fig.held"),
                         marker_color=[ORANGE if r["gpus"] == gpus_now else GREEN for r in rows],
                         hovertemplate="%{x}: %{y:.4g} GiB<extra></extra>"))
    fig.add_trace(go.Scatter(x=g, y=[r["full_kv_bytes"] / gib for r in rows], name=t("q4.fig.full"),
                             mode="lines", line=dict(color=RED, dash="dash"),
                             hovertemplate="%{y:.4g} GiB<extra></extra>"))
    fig.update_layout(template=TEMPLATE, height=420, separators=_separators(t),
                      title=_title(meta["title"], meta.get("subtitle")),
                      xaxis=dict(title=t("q4.fig.gpus"), type="category"),
                      yaxis=dict(title="GiB", type="log"), meta=meta)
    return fig


# --- question 5: when a block's compute covers its transfer -----------------------------

def crossover(by_tokens: dict[str, Sequence[float]], by_bw: dict[str, Sequence[float]],
              t: Translator, meta: dict[str, Any]) -> go.Figure:
    """Left: one block's compute (∝ c²) and transfer (∝ c) against tokens per GPU, at the
    chosen bandwidth, the crossover dashed and the current block marked. Right: the same
    block against link bandwidth, the crossover bandwidth dashed and the chosen one marked."""
    # wide apart, each subplot title on its own panel in a smaller type: side by side at 1,280
    # px they would meet, and the longer one would run past the figure's edge
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16, subplot_titles=(
        t("q5.fig.by_tokens", bw=t.gbps(meta["bandwidth_gbps"])),
        t("q5.fig.by_bw", tokens=t.int(meta["tokens"]))))
    fig.update_annotations(font_size=11)
    us = 1e6
    for col, data, xkey, hover in ((1, by_tokens, "tokens", "%{x:,}: %{y:.4g} µs"),
                                   (2, by_bw, "gbps", "%{x:.3g} GB/s: %{y:.4g} µs")):
        for key, name, color in (("compute_s", t("q5.fig.compute"), BLUE),
                                 ("transfer_s", t("q5.fig.transfer"), GREEN)):
            fig.add_trace(go.Scatter(x=list(data[xkey]), y=[v * us for v in data[key]], name=name,
                                     legendgroup=key, showlegend=col == 1, mode="lines",
                                     line=dict(color=color),
                                     hovertemplate=hover + "<extra>" + name + "</extra>"),
                          row=1, col=col)
    c_now, c_star, b_star = meta["tokens"], meta["crossover_tokens"], meta["crossover_bandwidth_gbps"]
    if c_star is not None:              # none: no block size changes the verdict
        fig.add_vline(x=c_star, line=dict(color="#444", dash="dash", width=1), row=1, col=1)
    fig.add_trace(go.Scatter(x=[c_now, c_now], y=[meta["compute_s"] * us, meta["transfer_s"] * us],
                             mode="markers", name=t("q5.fig.now"), legendgroup="now",
                             marker=dict(color=ORANGE, size=11, symbol="diamond"),
                             hovertemplate="%{x:,}: %{y:.4g} µs<extra></extra>"), row=1, col=1)
    if b_star is not None:              # none: no bandwidth changes it
        fig.add_vline(x=b_star, line=dict(color="#444", dash="dash", width=1), row=1, col=2)
    fig.add_vline(x=meta["bandwidth_gbps"], line=dict(color=ORANGE, width=2), row=1, col=2)
    if c_star is not None:
        fig.add_annotation(x=math.log10(c_star), y=1, xref="x", yref="y domain", yanchor="top",
                           showarrow=False, xanchor="left", align="left", font=dict(size=11),
                           text=" " + t("q5.fig.cross_tokens", tokens=t.int(math.ceil(c_star))),
                           bgcolor=style.LABEL_BACKGROUND)
    if b_star is not None:
        fig.add_annotation(x=math.log10(b_star), y=1, xref="x2", yref="y2 domain", yanchor="top",
                           showarrow=False, xanchor="left", align="left", font=dict(size=11),
                           text=" " + t("q5.fig.cross_bw", bw=t.gbps(b_star)), bgcolor=style.LABEL_BACKGROUND)
    fig.update_xaxes(type="log", title_text=t("q5.fig.tokens_axis"), row=1, col=1)
    fig.update_xaxes(type="log", title_text=t("q5.fig.bw_axis"), row=1, col=2)
    fig.update_yaxes(type="log", title_text="µs", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(template=TEMPLATE, height=440, separators=_separators(t),
                      title=_title(meta["title"], meta.get("subtitle")), meta=meta,
                      margin=dict(t=100, b=60),
                      legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))
    return fig


# --- questions 6 and 8: causal work per GPU and per token -------------------------------

def causal_work(per_gpu: dict[str, Sequence[float]], seq: int, n: int, t: Translator,
                meta: dict[str, Any], mark_last: bool = False) -> go.Figure:
    """Left: each GPU's share of the causal work, contiguous against a balanced layout.
    Right: keys each query token attends to along the sequence (t + 1), with the
    contiguous shards shaded and each shard's mean."""
    # the right panel's axis title needs the room of the left panel's tick labels and its own
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.17, column_widths=[0.5, 0.5],
                        subplot_titles=(wrap_title(t("q6.fig.per_gpu"), PANEL_TITLE_CHARS),
                                        wrap_title(t("q6.fig.per_token"), PANEL_TITLE_CHARS)))
    fig.update_annotations(font_size=11)
    gpus = list(range(n))
    for key, color in (("contiguous", RED), (meta["balanced"], BLUE)):
        fig.add_trace(go.Bar(x=gpus, y=[v * 100 for v in per_gpu[key]], name=layout_label(t, key),
                             marker_color=color,
                             hovertemplate="GPU %{x}: %{y:.3g}%<extra>" + layout_label(t, key) + "</extra>"),
                      row=1, col=1)
    fig.add_hline(y=100 / n, line=dict(color="#444", dash="dash", width=1), row=1, col=1,
                  annotation_text=t("q6.fig.even"), annotation_position="top left",
                  # over the bars that reach the line: read on a light ground
                  annotation_bgcolor=style.LABEL_BACKGROUND)
    c = seq // n
    shades = ("rgba(224,48,42,0.07)", "rgba(224,48,42,0.15)")
    step = max(1, n // 16)
    # the panel's axes named outright: add_vrect(row=, col=) skips a panel with no data yet
    for r in range(n):
        fig.add_shape(type="rect", xref="x2", yref="y2 domain", x0=r * c, x1=(r + 1) * c, y0=0,
                      y1=1, fillcolor=shades[r % 2], line_width=0, layer="below")
    fig.add_trace(go.Scatter(x=[0, seq - 1], y=[1, seq], mode="lines", name=t("q6.fig.keys"),
                             line=dict(color="#222"),
                             hovertemplate="%{x:,} → %{y:,}<extra></extra>"), row=1, col=2)
    mids = [(r + 0.5) * c for r in range(n)]
    means = [r * c + (c + 1) / 2 for r in range(n)]
    fig.add_trace(go.Scatter(x=mids[::step], y=means[::step], mode="markers+text",
                             text=[f"GPU {r}" for r in range(0, n, step)], textposition="top center",
                             textfont=dict(size=10), marker=dict(color=RED, size=8),
                             name=t("q6.fig.shard_mean"),
                             hovertemplate="%{text}: %{y:,.0f}<extra></extra>"), row=1, col=2)
    if mark_last:
        # below the line, where no shard's label is (those sit above its points); the arrows'
        # tails in data units, so the labels keep their place in a panel of any size
        fig.add_annotation(x=seq - 1, y=seq, xref="x2", yref="y2", axref="x2", ayref="y2",
                           ax=seq - 1, ay=0.4 * seq, xanchor="right", align="right",
                           showarrow=True, arrowhead=2, font=dict(size=11),
                           text=t("q8.fig.last", keys=t.int(seq)))
        fig.add_annotation(x=0, y=1, xref="x2", yref="y2", axref="x2", ayref="y2",
                           ax=0.3 * seq, ay=0.03 * seq, xanchor="left", yanchor="bottom",
                           align="left", showarrow=True, arrowhead=2, font=dict(size=11),
                           text=t("q8.fig.first"))
    fig.update_xaxes(title_text="GPU", dtick=step, row=1, col=1)
    fig.update_yaxes(title_text=t("q6.fig.share_axis"), row=1, col=1)
    fig.update_xaxes(title_text=t("q6.fig.token_axis"), tickformat=",", row=1, col=2)
    fig.update_yaxes(title_text=t("q6.fig.keys_axis"), tickformat=",", row=1, col=2)
    # broken in two lines, the title would otherwise grow into the panels' titles, themselves two lines
    height = 500
    title = _under_toolbar(_title(wrap_title(meta["title"], TITLE_CHARS), meta.get("subtitle")), height)
    fig.update_layout(template=TEMPLATE, height=height, barmode="group", separators=_separators(t),
                      title=title, meta=meta, margin=dict(t=130, b=115),
                      legend=dict(orientation="h", yanchor="top", y=-0.3, x=0))
    return fig
