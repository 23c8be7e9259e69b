"""View 6, memory: peak bytes per GPU against sequence length and GPU count, beside
the full K/V no GPU needs to hold (DESIGN.md, fact 4). Draws the table of
dashboard.compute.memory_table."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, TEMPLATE


def memory(table: dict[str, Any]) -> go.Figure:
    """Peak memory per GPU against sequence length and GPU count, beside the full K/V."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        f"against sequence length ({table['gpus_now']} GPUs)",
        f"against GPU count ({table['seq_now']:,} tokens)"))
    fig.update_layout(template=TEMPLATE, height=440)
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
                             mode="lines+markers", line=dict(color=COLORS["transfer"]),
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
                             mode="lines+markers", line=dict(color=COLORS["transfer"]),
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
