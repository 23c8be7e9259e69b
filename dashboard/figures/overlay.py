"""View 8, model against measurement: simulated and measured compute (and exposed
communication) on paired lanes per GPU, each run from its own time 0, and the per-step
error (the table of dashboard.compute.step_errors). Reads the traces' columns."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, LEGEND_BESIDE, TEMPLATE, time_unit, wrap_title
from dashboard.figures.timeline import MAX_BAR_SPANS
from sim.trace.format import COMPUTE, IDLE, WAIT, Trace

LABELS = {
    "title": "Model vs measurement: makespan simulated {simulated}, measured {measured} ({error})<br>"
             "median |step error| {median}",
    "lanes": "compute (bars, every other step lighter) and exposed communication (red) per GPU",
    "steps": "per-step time, median over GPUs: simulated (blue) vs measured (orange), label: median error",
    "simulated": "simulated", "measured": "measured",
    "compute": "{run} compute", "exposed": "{run} exposed comm",
    "sim_lane": "GPU {gpu} sim", "meas_lane": "GPU {gpu} meas",
    "time_axis": "time from each run's start ({unit})", "step_axis": "ring step",
    "sim_step": "simulated step", "meas_step": "measured step",
    # hover templates: Plotly's placeholders only (a unit after them), numbers in the
    # figure's `separators`
    "h_span": "GPU %{customdata[0]}, step %{customdata[1]}<br>lasts %{customdata[2]:.4g}",
    "h_sim_step": "step %{x}: simulated %{y:.4g}",
    "h_meas_step": "step %{x}: measured %{y:.4g} {unit} (median over GPUs)<br>error %{customdata[0]:+.1f}% "
                   "(GPUs from %{customdata[1]:+.1f}% to %{customdata[2]:+.1f}%)",
    "separators": ".,",
}
"""The figure's texts in English: `overlay(labels=...)` replaces any of them, and adds how
numbers read (`digits`)."""


def overlay(simulated: Trace, measured: Trace, errors: Sequence[dict[str, float]], *,
            labels: dict[str, Any] | None = None) -> go.Figure:
    """Simulated and measured compute on paired lanes, each from its own time 0, and
    the per-step error. `labels`: the texts in the page's language (LABELS)."""
    lab = {**LABELS, "digits": str, **(labels or {})}
    d = lab["digits"]
    n = max(simulated.n_gpus, measured.n_gpus)
    makespan = max(simulated.makespan_s, measured.makespan_s)
    scale, unit = time_unit(makespan or 1e-6)
    fig = make_subplots(rows=2, cols=1, row_heights=[0.64, 0.36], vertical_spacing=0.16,
                        subplot_titles=(lab["lanes"], lab["steps"]))
    height = int(min(1300, max(660, 300 + n * 2 * 16)))
    fig.update_layout(template=TEMPLATE, height=height, barmode="overlay", separators=lab["separators"])
    use_gl = len(simulated) + len(measured) > MAX_BAR_SPANS
    for offset, tr, label in ((0, simulated, "simulated"), (1, measured, "measured")):
        _add_lanes(fig, tr, offset, label, lab, scale, unit, use_gl)
    ticks = list(range(0, 2 * n))
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=ticks,
                     ticktext=[lab["sim_lane" if t % 2 == 0 else "meas_lane"].format(gpu=t // 2) for t in ticks],
                     showgrid=False, automargin=True, row=1, col=1)
    fig.update_xaxes(title_text=lab["time_axis"].format(unit=unit), row=1, col=1)
    _add_step_errors(fig, errors, lab, scale, unit)
    err_total = (simulated.makespan_s - measured.makespan_s) / measured.makespan_s if measured.makespan_s else float("nan")
    finite = [abs(r["error"]) for r in errors if np.isfinite(r["error"])]
    median = np.median(finite) * 100 if finite else float("nan")
    title = lab["title"].format(simulated=d(f"{simulated.makespan_s * scale:.4g} {unit}"),
                                measured=d(f"{measured.makespan_s * scale:.4g} {unit}"),
                                error=d(f"{err_total * 100:+.1f}%"), median=d(f"{median:.1f}%"))
    fig.update_layout(
        # from the top edge down, clear of it (two lines centred at y=0.985 ran past it), and from
        # the left, clear of the toolbar at the top right
        title=dict(text=wrap_title(title, 80), font=dict(size=13), y=1, yref="container", yanchor="top",
                   pad=dict(t=14), x=0, xref="paper", xanchor="left"),
        # beside the plots: above them it would cover the first subplot's title
        legend=LEGEND_BESIDE,
        margin=dict(l=100, t=100),
        meta={"makespan_error": err_total, "steps": len(errors)})
    return fig


def _add_lanes(fig: go.Figure, tr: Trace, offset: int, label: str, lab: dict[str, Any], scale: float, unit: str,
               use_gl: bool) -> None:
    """One run's compute and exposed communication on its lane of every GPU (the
    simulated run's lanes at offset 0, the measured run's at 1), from its own time 0."""
    c = tr.columns
    t0 = float(c.start_s.min()) if len(c) else 0.0
    is_exposed = (c.stream == WAIT) & (c.kind != IDLE)
    run = lab[label]
    for kind, rows, color, name in (
            ("compute", c.stream == COMPUTE, COLORS[label], lab["compute"].format(run=run)),
            ("exposed", is_exposed, COLORS["exposed"], lab["exposed"].format(run=run))):
        rows = np.flatnonzero(rows)
        if not rows.size:
            continue
        start = (c.start_s[rows] - t0) * scale
        end = (c.end_s[rows] - t0) * scale
        y = (c.rank[rows] * 2 + offset).astype(float)
        cd = np.column_stack([c.rank[rows], c.step[rows], end - start])
        hover = f"{run}: {lab['h_span']} {unit}<extra></extra>"
        if use_gl:
            nan = np.full(len(rows), np.nan)
            fig.add_trace(go.Scattergl(
                x=np.column_stack([start, end, nan]).ravel(), y=np.column_stack([y, y, nan]).ravel(),
                mode="lines", name=name, line=dict(color=color, width=6),
                customdata=np.repeat(cd, 3, axis=0), hovertemplate=hover), row=1, col=1)
        else:
            shade: Any = color
            if kind == "compute":
                shade = np.where(c.step[rows] % 2 == 1, COLORS[label + " alt"], color)
            fig.add_trace(go.Bar(x=end - start, base=start, y=y, orientation="h", width=0.8,
                                 name=name, marker=dict(color=shade, line=dict(width=0)),
                                 opacity=1.0 if kind == "compute" else 0.9,
                                 customdata=cd, hovertemplate=hover), row=1, col=1)


def _add_step_errors(fig: go.Figure, errors: Sequence[dict[str, float]], lab: dict[str, Any], scale: float,
                     unit: str) -> None:
    """The per-step times, simulated beside measured, each measured bar labelled with
    its median error."""
    d = lab["digits"]
    steps = [r["step"] for r in errors]
    fig.add_trace(go.Bar(x=steps, y=[r["simulated_s"] * scale for r in errors], name=lab["sim_step"],
                         marker_color=COLORS["simulated"], showlegend=False,
                         hovertemplate=f"{lab['h_sim_step']} {unit}<extra></extra>"),
                  row=2, col=1)
    fig.add_trace(go.Bar(x=steps, y=[r["measured_s"] * scale for r in errors], name=lab["meas_step"],
                         marker_color=COLORS["measured"], showlegend=False,
                         text=[d(f"{r['error'] * 100:+.0f}%") if np.isfinite(r["error"]) else ""
                               for r in errors], textposition="outside",
                         customdata=[[r["error"] * 100, r["error_min"] * 100, r["error_max"] * 100]
                                     for r in errors],
                         hovertemplate=lab["h_meas_step"].replace("{unit}", unit) + "<extra></extra>"),
                  row=2, col=1)
    fig.update_layout(barmode="overlay")
    fig.update_traces(selector=dict(name=lab["sim_step"]), offsetgroup="sim", width=0.4, offset=-0.4)
    fig.update_traces(selector=dict(name=lab["meas_step"]), offsetgroup="meas", width=0.4, offset=0.0)
    fig.update_xaxes(title_text=lab["step_axis"], dtick=1 if len(steps) <= 40 else None,
                     row=2, col=1)
    fig.update_yaxes(title_text=unit, row=2, col=1)


def trace_summary(trace: Trace) -> Iterable[str]:
    """A few words per header field, for the upload's status line."""
    cfg = trace.config
    yield f"{trace.source} trace, {trace.n_gpus} ranks, {len(trace)} spans"
    if "layout" in cfg:
        yield f"{cfg['layout']} layout"
