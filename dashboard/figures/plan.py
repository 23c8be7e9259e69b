"""The Plan view's chart: every candidate of `ringsim plan` (sim.plan) as a point, time
per step against memory per GPU, the memory limit drawn as a vertical line; one colour
per scheme, hollow where the candidate does not fit. Each point carries its index in the
candidates list (`customdata`), so a click can load it into the other views. Labels come
in translated (`labels`), the numbers as the plan gives them."""

from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go

from dashboard.figures.style import COLORS, LEGEND_BESIDE, figure, time_unit

SCHEME_COLORS = {"ring": "#3a6fd8", "allgather": "#2e9e5b", "ulysses": "#f28e2b", "hybrid": "#8e44ad"}
GIB = 2 ** 30

DEFAULT_LABELS = {"x": "memory per GPU (GiB)", "y": "attention time per step ({unit})",
                  "limit": "memory limit", "title": "Candidates: time against memory per GPU",
                  "fits": "fits", "not_fit": "does not fit"}


def plan_chart(candidates: Sequence[dict[str, Any]], limit_bytes: float,
               labels: dict[str, str] | None = None) -> go.Figure:
    """Time per step against memory per GPU of each candidate, the limit as a line."""
    lab = {**DEFAULT_LABELS, **(labels or {})}
    scale, unit = time_unit(max((c["step_s"] for c in candidates), default=1.0))
    fig = figure(height=440, xaxis_title=lab["x"], yaxis_title=lab["y"].format(unit=unit),
                 title=dict(text=lab["title"], font=dict(size=13)), legend=LEGEND_BESIDE,
                 meta={"limit_gib": limit_bytes / GIB, "points": len(candidates)})
    for scheme in dict.fromkeys(c["scheme"] for c in candidates):
        for fits in (True, False):
            idx = [i for i, c in enumerate(candidates) if c["scheme"] == scheme and c["fits"] == fits]
            if not idx:
                continue
            color = SCHEME_COLORS.get(scheme, "#555555")
            fig.add_trace(go.Scatter(
                x=[candidates[i]["peak_mem_bytes"] / GIB for i in idx],
                y=[candidates[i]["step_s"] * scale for i in idx],
                customdata=idx, mode="markers",
                name=f"{scheme}" + ("" if fits else f" ({lab['not_fit']})"),
                text=[f"#{candidates[i]['rank']} {scheme} {candidates[i]['variant']}" for i in idx],
                marker=dict(size=10, color=color, line=dict(color=color, width=2),
                            symbol="circle" if fits else "circle-open"),
                hovertemplate="%{text}<br>%{y:.4g} " + unit + ", %{x:.3g} GiB<extra></extra>"))
    fig.add_vline(x=limit_bytes / GIB, line=dict(color=COLORS["capacity"], dash="dash"),
                  annotation_text=lab["limit"], annotation_position="top left")
    fig.update_xaxes(rangemode="tozero")
    return fig
