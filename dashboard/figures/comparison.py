"""View 4, which layout wins: makespan, efficiency, load imbalance and exposed
communication of every layout with overlap on and off (the rows of `ringsim compare`,
sim.metrics.comparison_row; definitions in docs/design.md)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, TEMPLATE, time_unit


def comparison(rows: Sequence[dict[str, Any]]) -> go.Figure:
    """Makespan, efficiency, imbalance and exposed communication of every layout x overlap."""
    makespans = [r["makespan_s"] for r in rows]
    scale, unit = time_unit(max(makespans))
    panels = [("makespan_s", f"makespan ({unit})", scale),
              ("efficiency", "efficiency (%)", 100.0),
              ("load_imbalance", "load imbalance (max/mean)", 1.0),
              ("exposed_comm_s", f"exposed comm, worst GPU ({unit})", scale)]
    fig = make_subplots(rows=1, cols=4, subplot_titles=[p[1] for p in panels],
                        horizontal_spacing=0.07)
    fig.update_layout(template=TEMPLATE, height=380, barmode="group")
    layouts = list(dict.fromkeys(r["layout"] for r in rows))
    for overlap in (True, False):
        sub = {r["layout"]: r for r in rows if r["overlap"] == overlap}
        if not sub:
            continue
        for col, (key, label, mult) in enumerate(panels, start=1):
            ys = [(sub[lay][key] if sub.get(lay) and sub[lay][key] is not None else np.nan) * mult
                  for lay in layouts]
            fig.add_trace(go.Bar(
                x=layouts, y=ys, name=f"overlap {'on' if overlap else 'off'}",
                legendgroup=str(overlap), showlegend=col == 1,
                marker_color=COLORS["on" if overlap else "off"],
                text=[f"{y:.3g}" for y in ys], textposition="outside",
                hovertemplate=f"%{{x}}, overlap {'on' if overlap else 'off'}: %{{y:.4g}}<extra>{label}</extra>"),
                row=1, col=col)
    best = min(rows, key=lambda r: r["makespan_s"])
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(
        title=dict(text=f"Which layout wins: {best['layout']} with overlap "
                        f"{'on' if best['overlap'] else 'off'} "
                        f"({best['makespan_s'] * scale:.4g} {unit})", font=dict(size=13)),
        legend=dict(y=1.12), margin=dict(t=90),
        meta={"best": [best["layout"], best["overlap"]]})
    return fig
