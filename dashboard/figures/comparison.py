"""View 4, which layout wins: makespan, efficiency, load imbalance and exposed
communication of every layout with overlap on and off (the rows of `ringsim compare`,
sim.trace.metrics.comparison_row; definitions in docs/design.md)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, TEMPLATE, time_unit

LABELS = {
    "title": "Which layout wins: {layout} with overlap {state} ({time})", "makespan": "makespan ({unit})",
    "efficiency": "efficiency (%)", "imbalance": "load imbalance (max/mean)",
    "exposed": "exposed comm,<br>worst GPU ({unit})", "on": "on", "off": "off", "overlap": "overlap {state}",
    "separators": ".,",
}
"""The figure's texts in English: `comparison(labels=...)` replaces any of them, and adds
how a bar's number and a layout's name read."""


MAX_LABELLED_LAYOUTS = 3
"""Past this many layouts side by side the bars carry no number labels (they would collide)."""


def comparison(rows: Sequence[dict[str, Any]], labels: dict[str, Any] | None = None) -> go.Figure:
    """Makespan, efficiency, imbalance and exposed communication of every layout x overlap.
    `labels`: the texts in the page's language (LABELS)."""
    lab = {**LABELS, "num": lambda y: f"{y:.3g}", "layout": str, **(labels or {})}
    makespans = [r["makespan_s"] for r in rows]
    scale, unit = time_unit(max(makespans))
    panels = [("makespan_s", lab["makespan"].format(unit=unit), scale),
              ("efficiency", lab["efficiency"], 100.0),
              ("load_imbalance", lab["imbalance"], 1.0),
              ("exposed_comm_s", lab["exposed"].format(unit=unit), scale)]
    fig = make_subplots(rows=1, cols=4, subplot_titles=[p[1] for p in panels],
                        horizontal_spacing=0.07)
    fig.update_layout(template=TEMPLATE, height=380, barmode="group", separators=lab["separators"])
    layouts = list(dict.fromkeys(r["layout"] for r in rows))
    names = [lab["layout"](lay) for lay in layouts]
    for overlap in (True, False):
        sub = {r["layout"]: r for r in rows if r["overlap"] == overlap}
        if not sub:
            continue
        name = lab["overlap"].format(state=lab["on" if overlap else "off"])
        for col, (key, label, mult) in enumerate(panels, start=1):
            ys = [(sub[lay][key] if sub.get(lay) and sub[lay][key] is not None else np.nan) * mult
                  for lay in layouts]
            fig.add_trace(go.Bar(
                x=names, y=ys, name=name, legendgroup=str(overlap), showlegend=col == 1,
                marker_color=COLORS["on" if overlap else "off"],
                # a label on each of six bars a panel; with the documents' layouts (ten) they
                # would run into each other: the hover gives each number
                text=[lab["num"](y) for y in ys] if len(layouts) <= MAX_LABELLED_LAYOUTS else None,
                textposition="outside",
                hovertemplate=f"%{{x}}, {name}: %{{y:.4g}}<extra>{label}</extra>"),
                row=1, col=col)
    best = min(rows, key=lambda r: r["makespan_s"])
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(
        title=dict(text=lab["title"].format(layout=lab["layout"](best["layout"]),
                                            state=lab["on" if best["overlap"] else "off"],
                                            time=f"{lab['num'](best['makespan_s'] * scale)} {unit}"),
                   font=dict(size=13)),
        # room under the panels for layout names of two words (Bahasa Indonesia's), turned if need be
        legend=dict(y=1.12), margin=dict(t=90, b=90),
        meta={"best": [best["layout"], best["overlap"]]})
    return fig
