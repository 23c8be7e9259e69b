"""The Plan view's chart: every candidate of `ringsim plan` (sim.planning.plan) as a point, time
per step against memory per GPU, the memory limit drawn as a vertical line; one colour
per scheme, hollow where the candidate does not fit. Each point carries its index in the
candidates list (`customdata`), so a click can load it into the other views. Labels come
in translated (`labels`), the numbers as the plan gives them."""

from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go

from dashboard.figures.style import COLORS, LEGEND_BESIDE, figure, scheme_color, time_unit

GIB = 2 ** 30

DEFAULT_LABELS = {"x": "memory per GPU (GiB)", "y": "attention time per step ({unit})",
                  "limit": "memory limit", "title": "Candidates: time against memory per GPU",
                  "fits": "fits", "not_fit": "does not fit", "separators": ".,"}


def plan_chart(candidates: Sequence[dict[str, Any]], limit_bytes: float,
               labels: dict[str, str] | None = None) -> go.Figure:
    """Time per step against memory per GPU of each candidate, the limit as a line."""
    # "scheme" names a scheme, "point" a candidate's hover line, in the page's language
    lab = {**DEFAULT_LABELS, "scheme": str, "point": lambda c: f"#{c['rank']} {c['scheme']} {c['variant']}",
           "number": lambda x: f"{x:.3g}", **(labels or {})}
    scale, unit = time_unit(max((c["step_s"] for c in candidates), default=1.0))
    fig = figure(height=440, xaxis_title=lab["x"], yaxis_title=lab["y"].format(unit=unit),
                 title=dict(text=lab["title"], font=dict(size=13)), legend=LEGEND_BESIDE,
                 separators=lab["separators"],
                 meta={"limit_gib": limit_bytes / GIB, "points": len(candidates)})
    for scheme in dict.fromkeys(c["scheme"] for c in candidates):
        for fits in (True, False):
            idx = [i for i, c in enumerate(candidates) if c["scheme"] == scheme and c["fits"] == fits]
            if not idx:
                continue
            color = scheme_color(scheme)
            fig.add_trace(go.Scatter(
                x=[candidates[i]["peak_mem_bytes"] / GIB for i in idx],
                y=[candidates[i]["step_s"] * scale for i in idx],
                customdata=idx, mode="markers",
                name=lab["scheme"](scheme) + ("" if fits else f" ({lab['not_fit']})"),
                text=[lab["point"](candidates[i]) for i in idx],
                marker=dict(size=10, color=color, line=dict(color=color, width=2),
                            symbol="circle" if fits else "circle-open"),
                hovertemplate="%{text}<br>%{y:.4g} " + unit + ", %{x:.3g} GiB<extra></extra>"))
    # the range fits the candidates: a limit far past them is named at the edge, not drawn,
    # so that points a few GiB apart are not squeezed into one corner of the chart
    limit = limit_bytes / GIB
    xs = [c["peak_mem_bytes"] / GIB for c in candidates]
    lo, hi = (min(xs), max(xs)) if xs else (0.0, limit)
    pad = max(0.12 * (hi - lo), 0.05 * hi, 1e-3)
    if limit <= hi + 4 * pad or limit <= 1.5 * hi:
        hi = max(hi, limit)
        fig.add_vline(x=limit, line=dict(color=COLORS["capacity"], dash="dash"),
                      annotation_text=lab["limit"], annotation_position="top left")
    else:
        fig.add_annotation(x=1, xref="paper", y=1, yref="paper", xanchor="right", yanchor="bottom",
                           showarrow=False, font=dict(size=11, color=COLORS["capacity"]),
                           text=f"{lab['limit']}: {lab['number'](limit)} GiB →")
    fig.update_xaxes(range=[max(0.0, lo - pad), hi + pad])
    fig.layout.meta["x_range_gib"] = [max(0.0, lo - pad), hi + pad]
    return fig


STEP_PARTS = ("gemm_s", "attention_s", "elementwise_s", "tp_comm_s", "recompute_s", "pp_bubble_s", "pp_comm_s",
              "dp_comm_s", "optimizer_s")
"""The parts of a step (sim.training.step's breakdown), in the order the bars stack them."""
STEP_COLORS = {"gemm_s": "#3a6fd8", "attention_s": "#8e44ad", "elementwise_s": "#7fa7e8", "tp_comm_s": "#e08a1e",
               "recompute_s": "#b07cc6", "pp_bubble_s": "#bdbdbd", "pp_comm_s": "#f2b866", "dp_comm_s": "#d62728",
               "optimizer_s": "#2e9e5b"}
STEP_DEFAULT_LABELS = {"title": "Candidates: what each step is made of (the slowest pipeline stage)",
                       "x": "time per step ({unit})", "separators": ".,",
                       **{k: k.removesuffix("_s").replace("_", " ") for k in STEP_PARTS}}


def step_chart(candidates: Sequence[dict[str, Any]], labels: dict[str, str] | None = None) -> go.Figure:
    """Each candidate's step (`ringsim plan --global-batch`, sim.training.plan) as a bar of its
    parts stacked, the fastest on top; a candidate that does not fit is drawn lighter."""
    lab = {**STEP_DEFAULT_LABELS, **(labels or {})}
    scale, unit = time_unit(max((c["step_s"] for c in candidates), default=1.0))
    # the rank alone beside the bar (the table gives each split; a split's words are too
    # long for the axis), the split in the hover
    names = [f"#{c['rank']}" for c in candidates]
    splits = [c["split"] for c in candidates]
    fig = figure(height=max(320, 60 + 28 * len(candidates)), barmode="stack", legend=LEGEND_BESIDE,
                 xaxis_title=lab["x"].format(unit=unit), title=dict(text=lab["title"], font=dict(size=13)),
                 separators=lab["separators"], meta={"bars": len(candidates)})
    for part in STEP_PARTS:
        values = [c["breakdown"].get(part, 0.0) * scale for c in candidates]
        if not any(values):
            continue
        fig.add_trace(go.Bar(y=names, x=values, orientation="h", name=lab[part], customdata=splits,
                             marker=dict(color=STEP_COLORS[part],
                                         opacity=[1.0 if c["fits"] else 0.45 for c in candidates]),
                             hovertemplate="%{y} %{customdata}<br>" + lab[part] + ": %{x:.4g} " + unit
                                           + "<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    return fig


PIPELINE_DEFAULT_LABELS = {"title": "One step of the fastest candidate, one GPU per pipeline stage",
                           "x": "time ({unit})", "stage": "stage {n}", "fwd": "forward", "bwd": "backward",
                           "pp": "send to the next stage", "from": "from", "separators": ".,"}


def pipeline_chart(spans: dict[str, Any], labels: dict[str, str] | None = None) -> go.Figure:
    """A step's pipeline as the engine played it (sim.training.pipeline): per stage, its forwards,
    backwards and sends over time; idle where nothing runs. `spans`: {"stages": n,
    "rank": [...], "kind": [...], "start_s": [...], "end_s": [...]}."""
    lab = {**PIPELINE_DEFAULT_LABELS, **(labels or {})}
    end = max(spans["end_s"], default=1.0)
    scale, unit = time_unit(end)
    n = spans["stages"]
    rows = [lab["stage"].format(n=s) for s in range(n)]
    fig = figure(height=max(240, 80 + 26 * n), barmode="overlay", legend=LEGEND_BESIDE,
                 xaxis_title=lab["x"].format(unit=unit), title=dict(text=lab["title"], font=dict(size=13)),
                 separators=lab["separators"], meta={"stages": n})
    colors = {"fwd": "#3a6fd8", "bwd": "#8e44ad", "pp": "#e08a1e"}
    for kind in ("fwd", "bwd", "pp"):
        idx = [i for i, k in enumerate(spans["kind"]) if k == kind]
        if not idx:
            continue
        fig.add_trace(go.Bar(
            y=[rows[spans["rank"][i]] for i in idx], x=[(spans["end_s"][i] - spans["start_s"][i]) * scale for i in idx],
            base=[spans["start_s"][i] * scale for i in idx], orientation="h", name=lab[kind],
            width=0.35 if kind == "pp" else 0.8, marker=dict(color=colors[kind]),
            hovertemplate=lab[kind] + ": %{x:.3g} " + unit + f" {lab['from']} %{{base:.4g}} " + unit
                          + "<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    return fig
