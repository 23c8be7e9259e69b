"""View 5, when transfers hide: efficiency and exposed communication against tokens per
device and link bandwidth, with the crossover where a full block's compute equals its
transfer over the ring's slowest hop (docs/design.md, fact 5). Draws the table of dashboard.compute.overlap_sweep."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, TEMPLATE, time_unit

LABELS = {
    "title": "When transfers hide ({layout}, overlap {state}, simulated on {gpus} GPUs)",
    "title_slice": "When transfers hide ({layout}, overlap {state}, {gpus} GPUs standing for a ring of {world})",
    "sub": "dashed: a full block's compute equals its transfer over the ring's slowest hop; "
           "orange: the current scenario",
    "on": "on", "off": "off",
    "by_tokens": "against tokens per GPU", "by_bw": "against link bandwidth",
    "by_bw_none": "against link bandwidth (not available with a calibrated profile)",
    "block": "one full block: compute vs transfer time",
    "efficiency": "efficiency", "exposed": "exposed comm / makespan",
    "compute": "block compute", "transfer": "block transfer",
    "at_tokens": " compute = transfer<br> at {tokens} tokens", "at_bw": " compute = transfer<br> at {gbps} GB/s",
    "tokens_axis": "tokens per GPU", "bw_axis": "link GB/s per direction",
    # hover templates: Plotly's placeholders only, numbers in the figure's `separators`
    "h_tokens_pct": "%{x:,} tokens/GPU: %{y:.3g}%", "h_tokens_us": "%{x:,} tokens: %{y:.4g} µs",
    "separators": ".,",
}
"""The figure's texts in English: `overlap_sweep(labels=...)` replaces any of them, and
adds how numbers read (`digits`, `int`) and a layout's name (`layout`)."""
LABEL_BACKGROUND = "rgba(255,255,255,0.85)"
"""Behind the crossovers' labels: the curves and lines they sit on do not strike them through."""


def overlap_sweep(sweep: dict[str, Any], *, labels: dict[str, Any] | None = None) -> go.Figure:
    """Efficiency and exposed communication against tokens per device and link bandwidth.
    `labels`: the texts in the page's language (LABELS)."""
    lab = {**LABELS, "digits": str, "int": lambda x: f"{x:,.0f}", "layout": str, **(labels or {})}
    has_bw = bool(sweep["by_bandwidth"])
    fig = make_subplots(
        rows=2, cols=2, shared_xaxes=False, vertical_spacing=0.16, horizontal_spacing=0.1,
        subplot_titles=(lab["by_tokens"], lab["by_bw"] if has_bw else lab["by_bw_none"], lab["block"], ""))
    fig.update_layout(template=TEMPLATE, height=640, separators=lab["separators"])
    bt = sweep["by_tokens"]
    tokens = [r["tokens"] for r in bt]
    for key, name, color, show in (("efficiency", lab["efficiency"], COLORS["ring"], True),
                                   ("exposed_frac", lab["exposed"], COLORS["exposed"], True)):
        fig.add_trace(go.Scatter(x=tokens, y=[r[key] * 100 for r in bt], name=name,
                                 legendgroup=key, showlegend=show, mode="lines+markers",
                                 line=dict(color=color),
                                 hovertemplate=lab["h_tokens_pct"] + "<extra>" + name + "</extra>"),
                      row=1, col=1)
        if has_bw:
            bb = sweep["by_bandwidth"]
            fig.add_trace(go.Scatter(x=[r["bandwidth_gbps"] for r in bb], y=[r[key] * 100 for r in bb],
                                     name=name, legendgroup=key, showlegend=False,
                                     mode="lines+markers", line=dict(color=color),
                                     hovertemplate="%{x:.4g} GB/s: %{y:.3g}%<extra>" + name + "</extra>"),
                          row=1, col=2)
    scale, unit = time_unit(max(max(r["block_compute_s"], r["block_transfer_s"]) for r in bt))
    for key, name, color in (("block_compute_s", lab["compute"], COLORS["compute"]),
                             ("block_transfer_s", lab["transfer"], COLORS["transfer"])):
        fig.add_trace(go.Scatter(x=tokens, y=[r[key] * 1e6 for r in bt], name=name,
                                 mode="lines+markers", line=dict(color=color, dash="dot"),
                                 hovertemplate=lab["h_tokens_us"] + "<extra>" + name + "</extra>"),
                      row=2, col=1)
    # the crossovers where there are any (none: no size, or no bandwidth, changes the verdict)
    c_star = sweep["crossover_tokens"]
    for row in (1, 2):
        if c_star is not None:
            fig.add_vline(x=c_star, line=dict(color="#444", dash="dash", width=1), row=row, col=1)
        fig.add_vline(x=sweep["tokens_now"], line=dict(color=COLORS["measured"], width=1.5),
                      row=row, col=1)
    if c_star is not None:
        fig.add_annotation(x=np.log10(c_star), y=0.5, xref="x", yref="y domain", showarrow=False,
                           text=lab["at_tokens"].format(tokens=lab["int"](math.ceil(c_star))), xanchor="left",
                           align="left", font=dict(size=11), bgcolor=LABEL_BACKGROUND)
    b_star = sweep["crossover_bandwidth_gbps"]
    if has_bw:
        fig.add_vline(x=sweep["bandwidth_now_gbps"], line=dict(color=COLORS["measured"], width=1.5),
                      row=1, col=2)
    if has_bw and b_star is not None:
        fig.add_vline(x=b_star, line=dict(color="#444", dash="dash", width=1), row=1, col=2)
        fig.add_annotation(x=np.log10(b_star), y=0.5, xref="x2", yref="y2 domain", showarrow=False,
                           text=lab["at_bw"].format(gbps=lab["digits"](f"{b_star:.3g}")), xanchor="left",
                           align="left", font=dict(size=11), bgcolor=LABEL_BACKGROUND)
    fig.update_xaxes(type="log", title_text=lab["tokens_axis"], row=1, col=1)
    fig.update_xaxes(type="log", title_text=lab["tokens_axis"], row=2, col=1)
    fig.update_xaxes(type="log", title_text=lab["bw_axis"], row=1, col=2)
    fig.update_yaxes(title_text="% ", range=[-3, 103], row=1, col=1)
    fig.update_yaxes(range=[-3, 103], row=1, col=2)
    fig.update_yaxes(type="log", title_text="µs", row=2, col=1)
    fig.update_xaxes(visible=False, row=2, col=2)
    fig.update_yaxes(visible=False, row=2, col=2)
    world = sweep.get("world", sweep["n_gpus"])
    title = lab["title" if world == sweep["n_gpus"] else "title_slice"].format(
        layout=lab["layout"](sweep["layout"]), state=lab["on" if sweep["overlap"] else "off"],
        gpus=lab["int"](sweep["n_gpus"]), world=lab["int"](world))
    fig.update_layout(
        title=dict(text=f"{title}<br><sup>{lab['sub']}</sup>", font=dict(size=13)),
        legend=dict(orientation="h", x=0.55, y=0.3, xanchor="left"), margin=dict(t=90),
        meta={"crossover_tokens": c_star, "crossover_bandwidth_gbps": sweep["crossover_bandwidth_gbps"]})
    return fig
