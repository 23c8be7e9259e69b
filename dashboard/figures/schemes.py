"""Which scheme wins: every scheme and ring layout side by side on one workload and
cluster (the rows of `ringsim compare --schemes`, sim.compare.compare_scheme_rows): the
makespan, the worst GPU's exposed communication, bytes sent and peak memory per GPU
(definitions in docs/design.md). A variant the configuration refuses keeps its place, with no
bars; the table beside the figure says why.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, LEGEND_BESIDE, TEMPLATE, scheme_color, time_unit

GIB, MIB = 2 ** 30, 2 ** 20


def run_name(row: dict[str, Any]) -> str:
    """A row's scheme and variant, as `ringsim compare --schemes` prints them."""
    return f"{row['scheme']} ({row['variant']})" if row.get("variant") else row["scheme"]


def fastest(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    ran = [r for r in rows if "refused" not in r]
    return min(ran, key=lambda r: r["makespan_s"]) if ran else None


def scheme_comparison(rows: Sequence[dict[str, Any]], *, current: Sequence[str] | None = None,
                      full_kv_bytes: float | None = None) -> go.Figure:
    """Makespan, exposed communication, bytes sent and peak memory per GPU of every
    scheme variant; the fastest outlined, the run on screen (`current`: scheme, variant)
    marked, the full K/V beside the memory."""
    best = fastest(rows)
    ran = [r for r in rows if "refused" not in r]
    scale, unit = time_unit(max((r["makespan_s"] for r in ran), default=1e-3))
    sent_max = max((r["bytes_sent_per_gpu"] for r in ran), default=0.0)
    b_scale, b_unit = (GIB, "GiB") if sent_max >= GIB else (MIB, "MiB")
    # two lines each: four titles side by side fit the panels' width
    panels = [("makespan_s", f"makespan<br>({unit})", scale),
              ("exposed_comm_s", f"exposed comm,<br>worst GPU ({unit})", scale),
              ("bytes_sent_per_gpu", f"sent per GPU<br>({b_unit})", 1 / b_scale),
              ("peak_mem_bytes", "peak memory<br>per GPU (GiB)", 1 / GIB)]
    labels = []
    for r in rows:
        mark = " ◂" if current is not None and (r["scheme"], r["variant"]) == tuple(current) else ""
        labels.append(run_name(r) + (" — not possible" if "refused" in r else "") + mark)
    fig = make_subplots(rows=1, cols=len(panels), shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=[p[1] for p in panels])
    colors = [scheme_color(r["scheme"]) for r in rows]
    outline = [2.5 if best is not None and r is best else 0 for r in rows]
    for col, (key, label, mult) in enumerate(panels, start=1):
        xs = np.array([np.nan if "refused" in r or r.get(key) is None else r[key] * mult for r in rows])
        fig.add_trace(go.Bar(
            y=labels, x=xs, orientation="h", marker=dict(color=colors, line=dict(color="#222", width=outline)),
            text=[("" if np.isnan(x) else f"{x:.3g}") for x in xs], textposition="auto", showlegend=False,
            customdata=[r.get("explanation") or r.get("refused", "") for r in rows],
            hovertemplate=f"%{{y}}: %{{x:.4g}}<br>%{{customdata}}<extra>{label}</extra>"), row=1, col=col)
    if full_kv_bytes:
        # the contrast with Ring Attention's promise: all-gather's memory reaches the full K/V
        fig.add_trace(go.Scatter(
            x=[full_kv_bytes / GIB] * 2, y=[labels[0], labels[-1]], mode="lines", name="the full K/V on one GPU",
            line=dict(color=COLORS["full"], dash="dash", width=2),
            hovertemplate=f"the full K/V: {full_kv_bytes / GIB:.4g} GiB<extra></extra>"), row=1, col=len(panels))
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_xaxes(rangemode="tozero")
    height = int(max(360, 130 + 34 * len(rows)))
    title = ("Which scheme wins: nothing can run this configuration" if best is None else
             f"Which scheme wins: {run_name(best)}, {best['makespan_s'] * scale:.4g} {unit}")
    fig.update_layout(
        template=TEMPLATE, height=height, bargap=0.25, title=dict(text=title, font=dict(size=13)),
        legend=LEGEND_BESIDE, margin=dict(l=210, t=110),
        meta={"best": None if best is None else [best["scheme"], best["variant"]],
              "rows": [[r["scheme"], r["variant"]] for r in rows],
              "refused": [[r["scheme"], r["variant"]] for r in rows if "refused" in r]})
    return fig
