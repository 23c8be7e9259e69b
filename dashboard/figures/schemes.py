"""Which scheme wins: every scheme and ring layout side by side on one workload and
cluster (the rows of `ringsim compare --schemes`, sim.planning.compare.compare_scheme_rows): the
makespan, the worst GPU's exposed communication, bytes sent and peak memory per GPU
(definitions in docs/design.md). A variant the configuration refuses keeps its place, with no
bars; the table beside the figure says why.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, TEMPLATE, scheme_color, time_unit
from sim.planning.plan import TIE_WITHIN, tied

GIB, MIB = 2 ** 30, 2 ** 20


def run_name(row: dict[str, Any]) -> str:
    """A row's scheme and variant, as `ringsim compare --schemes` prints them."""
    return f"{row['scheme']} ({row['variant']})" if row.get("variant") else row["scheme"]


def sent_unit(rows: list[dict[str, Any]]) -> tuple[int, str]:
    """The unit of the bytes each GPU sends, for the chart and the table alike: GiB from a
    GiB up, else MiB."""
    sent_max = max((r["bytes_sent_per_gpu"] for r in rows if "refused" not in r), default=0.0)
    return (GIB, "GiB") if sent_max >= GIB else (MIB, "MiB")


def fastest(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    ran = [r for r in rows if "refused" not in r]
    return min(ran, key=lambda r: r["makespan_s"]) if ran else None


LABELS = {
    "title": "Which scheme wins: {run}, {time}", "title_none": "Which scheme wins: nothing can run this configuration",
    "title_tie": "Which scheme wins: a tie, {count} runs within the model's error of {error} ({time} to {last})",
    "makespan": "makespan<br>({unit})", "exposed": "exposed comm,<br>worst GPU ({unit})",
    "sent": "sent per GPU<br>({unit})", "memory": "peak memory<br>per GPU (GiB)",
    "refused": " — not possible", "full": "the whole K/V alone (a bar: all a GPU holds)",
    "full_hover": "the full K/V: {gib} GiB",
    "separators": ".,",
}
"""The figure's texts in English: `scheme_comparison(labels=...)` replaces any of them, and
adds how numbers read (`digits`, a share `pct`), a row's name (`run`) and what bounds it or
why it is refused (`why`)."""


def _why(row: dict[str, Any]) -> str:
    return row.get("explanation") or row.get("refused", "")


def scheme_comparison(rows: Sequence[dict[str, Any]], *, current: Sequence[str] | None = None,
                      full_kv_bytes: float | None = None, labels: dict[str, Any] | None = None) -> go.Figure:
    """Makespan, exposed communication, bytes sent and peak memory per GPU of every
    scheme variant; the fastest outlined, the run on screen (`current`: scheme, variant)
    marked, the full K/V beside the memory. `labels`: the texts in the page's language
    (LABELS)."""
    lab = {**LABELS, "digits": str, "pct": lambda v: f"{v:.0%}", "run": run_name, "why": _why, **(labels or {})}
    d = lab["digits"]
    best = fastest(rows)
    ran = [r for r in rows if "refused" not in r]
    scale, unit = time_unit(max((r["makespan_s"] for r in ran), default=1e-3))
    b_scale, b_unit = sent_unit(rows)
    # two lines each: four titles side by side fit the panels' width
    panels = [("makespan_s", lab["makespan"].format(unit=unit), scale),
              ("exposed_comm_s", lab["exposed"].format(unit=unit), scale),
              ("bytes_sent_per_gpu", lab["sent"].format(unit=b_unit), 1 / b_scale),
              ("peak_mem_bytes", lab["memory"], 1 / GIB)]
    labels_y = []
    for r in rows:
        mark = " ◂" if current is not None and (r["scheme"], r["variant"]) == tuple(current) else ""
        labels_y.append(lab["run"](r) + (lab["refused"] if "refused" in r else "") + mark)
    # the panels a little apart and their two-line titles in a smaller type: at 1,280 px the
    # Indonesian ones ran into each other
    fig = make_subplots(rows=1, cols=len(panels), shared_yaxes=True, horizontal_spacing=0.045,
                        subplot_titles=[p[1] for p in panels])
    fig.update_annotations(font_size=11)
    colors = [scheme_color(r["scheme"]) for r in rows]
    outline = [2.5 if best is not None and r is best else 0 for r in rows]
    for col, (key, label, mult) in enumerate(panels, start=1):
        xs = np.array([np.nan if "refused" in r or r.get(key) is None else r[key] * mult for r in rows])
        fig.add_trace(go.Bar(
            y=labels_y, x=xs, orientation="h", marker=dict(color=colors, line=dict(color="#222", width=outline)),
            text=[("" if np.isnan(x) else d(f"{x:.3g}")) for x in xs], textposition="auto", textangle=0, showlegend=False,
            customdata=[lab["why"](r) for r in rows],
            hovertemplate=f"%{{y}}: %{{x:.4g}}<br>%{{customdata}}<extra>{label}</extra>"), row=1, col=col)
    if full_kv_bytes:
        # the contrast with Ring Attention's promise: all-gather's memory reaches the full K/V
        fig.add_trace(go.Scatter(
            x=[full_kv_bytes / GIB] * 2, y=[labels_y[0], labels_y[-1]], mode="lines", name=lab["full"],
            line=dict(color=COLORS["full"], dash="dash", width=2),
            hovertemplate=lab["full_hover"].format(gib=d(f"{full_kv_bytes / GIB:.4g}")) + "<extra></extra>"),
            row=1, col=len(panels))
    # the runs' names take the room they need (Indonesian's hybrid names at 32 x 2 ran past
    # a fixed margin)
    fig.update_yaxes(autorange="reversed", automargin=True, row=1, col=1)
    fig.update_xaxes(rangemode="tozero")
    height = int(max(360, 130 + 34 * len(rows)))
    # runs within the model's own error of the fastest (sim.planning.plan.TIE_WITHIN) are a tie, not a win
    ties = [ran[i] for i in tied([r["makespan_s"] for r in ran])]

    def at(r: dict[str, Any]) -> str:
        return d(f"{r['makespan_s'] * scale:.4g} {unit}")
    title = (lab["title_none"] if best is None else
             lab["title_tie"].format(count=len(ties), error=lab["pct"](TIE_WITHIN), time=at(ties[0]), last=at(ties[-1]))
             if len(ties) > 1 else lab["title"].format(run=lab["run"](best), time=at(best)))
    fig.update_layout(
        template=TEMPLATE, height=height, bargap=0.25, title=dict(text=title, font=dict(size=13)),
        separators=lab["separators"], margin=dict(l=210, t=110, b=70),
        # the one legend item under the panels, not beside them: its long name beside took the
        # width the four panels' titles need (at 1,280 px the Indonesian ones ran into each other)
        legend=dict(orientation="h", x=0, xanchor="left", y=0, yanchor="bottom", yref="container"),
        meta={"best": None if best is None else [best["scheme"], best["variant"]],
              "rows": [[r["scheme"], r["variant"]] for r in rows],
              "refused": [[r["scheme"], r["variant"]] for r in rows if "refused" in r]})
    return fig
