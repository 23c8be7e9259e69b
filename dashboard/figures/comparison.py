"""View 4, which layout wins: makespan, efficiency, load imbalance and exposed
communication of every layout with overlap on and off (the rows of `ringsim compare`,
sim.trace.metrics.comparison_row; definitions in docs/design.md)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, TEMPLATE, time_unit, wrap_title
from sim.planning.plan import TIE_WITHIN, tied

LABELS = {
    "title": "Which layout wins: {layout} with overlap {state} ({time})", "makespan": "makespan ({unit})",
    "title_tie": "Which layout wins: a tie, {count} runs within the model's error of {error} ({time} to {last})",
    "efficiency": "efficiency (%)", "imbalance": "load imbalance (max/mean)",
    "exposed": "exposed comm,<br>worst GPU ({unit})", "on": "on", "off": "off", "overlap": "overlap {state}",
    "separators": ".,",
}
"""The figure's texts in English: `comparison(labels=...)` replaces any of them, and adds
how a bar's number, a share and a layout's name read."""


HEIGHT = 425
"""The chart's height in px: its panels about 200 px high between the titles and the legend."""
TOOLBAR_PX = 32
"""The top of the chart Plotly's toolbar takes (its buttons at the right), where no title goes."""

MAX_LABELLED_LAYOUTS = 3
"""Past this many layouts side by side the bars carry no number labels (they would collide)."""


def comparison(rows: Sequence[dict[str, Any]], labels: dict[str, Any] | None = None) -> go.Figure:
    """Makespan, efficiency, imbalance and exposed communication of every layout x overlap.
    `labels`: the texts in the page's language (LABELS)."""
    lab = {**LABELS, "num": lambda y: f"{y:.3g}", "pct": lambda v: f"{v:.0%}", "layout": str, **(labels or {})}
    makespans = [r["makespan_s"] for r in rows]
    scale, unit = time_unit(max(makespans))
    panels = [("makespan_s", lab["makespan"].format(unit=unit), scale),
              ("efficiency", lab["efficiency"], 100.0),
              ("load_imbalance", lab["imbalance"], 1.0),
              ("exposed_comm_s", lab["exposed"].format(unit=unit), scale)]
    fig = make_subplots(rows=1, cols=4, subplot_titles=[p[1] for p in panels],
                        horizontal_spacing=0.07)
    # a little room between the bars of a pair: each bar's number is as wide as its bar, and
    # two side by side ran together ("1,861,87" at 1,280 px)
    fig.update_layout(template=TEMPLATE, height=HEIGHT, barmode="group", bargroupgap=0.15, separators=lab["separators"])
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
    # runs within the model's own error of the fastest (sim.planning.plan.TIE_WITHIN) are a tie, not a win
    ties = [rows[i] for i in tied(makespans)]

    def at(r: dict[str, Any]) -> str:
        return f"{lab['num'](r['makespan_s'] * scale)} {unit}"
    title = (lab["title_tie"].format(count=len(ties), error=lab["pct"](TIE_WITHIN), time=at(ties[0]), last=at(ties[-1]))
             if len(ties) > 1 else
             lab["title"].format(layout=lab["layout"](best["layout"]), state=lab["on" if best["overlap"] else "off"],
                                 time=at(best)))
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(
        # the title under the toolbar in lines of figures.style.TITLE_CHARS at most, over the
        # panels' own titles (two lines each at most), and the legend at the bottom, under the
        # layouts' names: above the panels a tie's longer title ran into the legend, and the
        # legend into the last panel's title
        title=dict(text=wrap_title(title), font=dict(size=13), y=1 - TOOLBAR_PX / HEIGHT, yanchor="top",
                   yref="container"),
        legend=dict(x=0.5, xanchor="center", y=0.0, yanchor="bottom", yref="container"),
        # room under the panels for layout names of two words (Bahasa Indonesia's), turned if
        # need be, and the legend under them
        margin=dict(t=110, b=115),
        meta={"best": [best["layout"], best["overlap"]]})
    return fig
