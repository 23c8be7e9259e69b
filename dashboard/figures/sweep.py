"""View 5, when transfers hide: efficiency and exposed communication against tokens per
device and link bandwidth, with the crossover where a full block's compute equals its
transfer (docs/design.md, fact 5). Draws the table of dashboard.compute.overlap_sweep."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, TEMPLATE, time_unit


def overlap_sweep(sweep: dict[str, Any]) -> go.Figure:
    """Efficiency and exposed communication against tokens per device and link bandwidth."""
    has_bw = bool(sweep["by_bandwidth"])
    fig = make_subplots(
        rows=2, cols=2, shared_xaxes=False, vertical_spacing=0.16, horizontal_spacing=0.1,
        subplot_titles=("against tokens per GPU", "against link bandwidth" if has_bw else
                        "against link bandwidth (not available with a calibrated profile)",
                        "one full block: compute vs transfer time", ""))
    fig.update_layout(template=TEMPLATE, height=640)
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
    for key, name, color in (("block_compute_s", "block compute", COLORS["compute"]),
                             ("block_transfer_s", "block transfer", COLORS["transfer"])):
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
