"""Packed documents (docs/packed.md): which layout balances them. Each GPU's work on
every packed layout (sim.layouts.packed.LAYOUTS) for the scenario's documents, and the work
imbalance (max/mean) of each layout, with its spread over seeds when the documents are
drawn. The work of a GPU is the (query, key) pairs its queries keep under the document
mask (`kept_keys`), as the exact block tables count them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, TEMPLATE
from sim.layouts.packed import Packed, rank_tokens


def kept_keys(p: Packed) -> tuple[np.ndarray, np.ndarray]:
    """(S,) each query's first and last key under the mask (sim.scenario.documents): its own
    document's keys, at or before it when causal, within W - 1 tokens with a window."""
    b = np.asarray(p.bounds, dtype=np.int64)
    t = np.arange(p.seq, dtype=np.int64)
    lengths = np.diff(b)
    first = np.repeat(b[:-1], lengths)
    last = np.repeat(b[1:] - 1, lengths)
    lo, hi = first, (t if p.causal else last)
    if p.window is not None:
        lo = np.maximum(lo, t - p.window + 1)
        if not p.causal:
            hi = np.minimum(hi, t + p.window - 1)
    return lo, hi


def gpu_work(p: Packed) -> np.ndarray:
    """(n,) the pairs each GPU's queries keep (block_tables(p).work.sum(axis=1))."""
    lo, hi = kept_keys(p)
    return (hi - lo + 1)[rank_tokens(p)].sum(axis=1)


def imbalance(work: np.ndarray) -> float:
    mean = float(np.mean(work)) if len(work) else 0.0
    return float(np.max(work)) / mean if mean > 0 else 1.0


def _layout_colors(layouts: list[str]) -> dict[str, str]:
    return {lay: qualitative.D3[i % len(qualitative.D3)] for i, lay in enumerate(layouts)}


LABELS = {
    "title": "Which layout balances the documents: {best} (max/mean {value}); {docs}",
    "work": "work per GPU (kept query-key pairs)", "ratio": "work imbalance (max/mean)", "pairs": "pairs",
    "mean": "mean over {seeds} seeds", "worst": "worst of {seeds} seeds", "this": "these documents",
    "separators": ".,",
}
"""The figure's texts in English: `document_balance(labels=...)` replaces any of them, and
adds the documents in words (`docs`), the GPU's word (`gpu`), how a ratio reads and a
layout's name."""


def document_balance(table: dict[str, Any], *, labels: dict[str, Any] | None = None) -> go.Figure:
    """Work per GPU of every packed layout (the chosen one drawn heavier) beside each
    layout's max/mean, and for drawn documents the mean and worst max/mean over seeds.
    `table`: dashboard.compute.document_balance. `labels`: the texts in the page's language
    (LABELS)."""
    lab = {**LABELS, "gpu": "GPU", "ratio_text": lambda x: f"{x:.3f}", "layout": str, **(labels or {})}
    layouts = list(table["work"])
    chosen = table["chosen"]
    colors = _layout_colors(layouts)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.1,
                        subplot_titles=(lab["work"], lab["ratio"]))
    fig.update_layout(template=TEMPLATE, height=470, separators=lab["separators"])
    gpus = np.arange(table["n"])
    for lay in layouts:
        work = np.asarray(table["work"][lay], dtype=np.float64)
        here = lay == chosen
        fig.add_trace(go.Scatter(
            x=gpus, y=work, name=lab["layout"](lay), legendgroup=lay, mode="lines+markers",
            line=dict(color=colors[lay], width=3 if here else 1.2), marker=dict(size=7 if here else 4),
            customdata=work / work.mean() if work.mean() > 0 else np.ones_like(work),
            hovertemplate=(f"{lab['layout'](lay)}, {lab['gpu']} %{{x}}: %{{y:,.0f}} {lab['pairs']} "
                           "(%{customdata:.3f} × mean)<extra></extra>")), row=1, col=1)
    names = [lab["layout"](lay) for lay in layouts]
    ratios = [table["imbalance"][lay] for lay in layouts]
    fig.add_trace(go.Bar(
        x=names, y=ratios, name=lab["this"], showlegend=False,
        marker=dict(color=[colors[lay] for lay in layouts],
                    line=dict(color=["#111" if lay == chosen else "rgba(0,0,0,0)" for lay in layouts], width=2)),
        text=[lab["ratio_text"](r) for r in ratios], textposition="outside",
        hovertemplate="%{x}: %{y:.4f}<extra>" + lab["this"] + "</extra>"), row=1, col=2)
    seeds = table.get("seeds", 0)
    if seeds:
        for key, symbol in (("mean", "circle-open"), ("worst", "diamond")):
            label = lab[key].format(seeds=seeds)
            fig.add_trace(go.Scatter(
                x=names, y=[table["spread"][lay][key] for lay in layouts], mode="markers", name=label,
                marker=dict(symbol=symbol, size=10, color=COLORS["exposed"] if key == "worst" else "#222",
                            line=dict(width=2)),
                hovertemplate="%{x}: %{y:.4f}<extra>" + label + "</extra>"), row=1, col=2)
    fig.update_xaxes(title_text=lab["gpu"], row=1, col=1)
    fig.update_yaxes(rangemode="tozero", tickformat=",.3s", row=1, col=1)
    fig.update_yaxes(range=[1.0, max([*ratios, *(table["spread"][lay]["worst"] for lay in layouts if seeds)])
                            * 1.08 + 0.02], row=1, col=2)
    best = min(layouts, key=lambda lay: table["imbalance"][lay])
    fig.update_layout(
        title=dict(text=lab["title"].format(best=lab["layout"](best), docs=lab.get("docs", table["docs"]),
                                            value=lab["ratio_text"](table["imbalance"][best])),
                   font=dict(size=13)),
        # the legend under the panels, clear of the title and the subplot titles
        legend=dict(orientation="h", x=0, y=-0.2, yanchor="top"), margin=dict(t=90, b=120),
        meta={"best": best, "chosen": chosen, "imbalance": table["imbalance"], "seeds": seeds})
    return fig
