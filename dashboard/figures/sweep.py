"""View 5, when transfers hide: efficiency and exposed communication against tokens per
device and link bandwidth, with the crossover where a full block's compute equals its
transfer over the ring's slowest hop (docs/design.md, fact 5). Draws the table of dashboard.compute.overlap_sweep."""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, LABEL_BACKGROUND, TEMPLATE

LABELS = {
    "title": "When transfers hide ({layout}, overlap {state}, simulated on {gpus} GPUs)",
    "title_slice": "When transfers hide ({layout}, overlap {state}, {gpus} GPUs standing for a ring of {world})",
    "sub": "dashed: a full block's compute equals its transfer over the ring's slowest hop; "
           "orange: the current scenario",
    "on": "on", "off": "off",
    "by_tokens": "against tokens per GPU", "by_bw": "against link bandwidth",
    "by_bw_none": "against link bandwidth (not available with a calibrated profile)",
    "block": "one full block: compute vs transfer time",
    "efficiency": "efficiency", "exposed": "exposed comm / makespan",
    "compute": "block compute", "transfer": "block transfer",
    "at_tokens": " compute = transfer<br> at {tokens} tokens", "at_bw": " compute = transfer<br> at {gbps} GB/s",
    "tokens_axis": "tokens per GPU", "bw_axis": "link GB/s per direction",
    "nccl_note": "block transfer: NCCL's send time; NCCL gives a larger<br>send more channels (twice the bytes, "
                 "twice the<br>channels, up to its limit per peer), so the time<br>can stay flat while the block grows",
    # hover templates: Plotly's placeholders only, numbers in the figure's `separators`
    "h_tokens_pct": "%{x:,} tokens/GPU: %{y:.3g}%", "h_tokens_us": "%{x:,} tokens: %{y:.4g} µs",
    "separators": ".,",
}
"""The figure's texts in English: `overlap_sweep(labels=...)` replaces any of them, and
adds how numbers read (`digits`, `int`) and a layout's name (`layout`)."""
PCT_TOP = 125
"""The top of the percentage panels: the band above 100% holds the crossovers' labels, clear
of the curves (two lines of 11 px text in a panel some 210 px high)."""
MARGIN = dict(t=90, b=45)
"""The figure's margins: the two-line title above, the lower x axis's title below."""


def overlap_sweep(sweep: dict[str, Any], *, labels: dict[str, Any] | None = None) -> go.Figure:
    """Efficiency and exposed communication against tokens per device and link bandwidth.
    `labels`: the texts in the page's language (LABELS)."""
    lab = {**LABELS, "digits": str, "int": lambda x: f"{x:,.0f}", "layout": str, **(labels or {})}
    has_bw = bool(sweep["by_bandwidth"])
    fig = make_subplots(
        rows=2, cols=2, shared_xaxes=False, vertical_spacing=0.16, horizontal_spacing=0.1,
        subplot_titles=(lab["by_tokens"], lab["by_bw"] if has_bw else lab["by_bw_none"], lab["block"], ""))
    fig.update_layout(template=TEMPLATE, height=640, separators=lab["separators"])
    bt = sweep["by_tokens"]
    bb = sweep["by_bandwidth"]
    tokens = [r["tokens"] for r in bt]
    for key, name, color, show in (("efficiency", lab["efficiency"], COLORS["ring"], True),
                                   ("exposed_frac", lab["exposed"], COLORS["exposed"], True)):
        fig.add_trace(go.Scatter(x=tokens, y=[r[key] * 100 for r in bt], name=name,
                                 legendgroup=key, showlegend=show, mode="lines+markers",
                                 line=dict(color=color),
                                 hovertemplate=lab["h_tokens_pct"] + "<extra>" + name + "</extra>"),
                      row=1, col=1)
        if has_bw:     # the bandwidth axis ends at its points: their end markers whole
            fig.add_trace(go.Scatter(x=[r["bandwidth_gbps"] for r in bb], y=[r[key] * 100 for r in bb],
                                     name=name, legendgroup=key, showlegend=False,
                                     mode="lines+markers", line=dict(color=color), cliponaxis=False,
                                     hovertemplate="%{x:.4g} GB/s: %{y:.3g}%<extra>" + name + "</extra>"),
                          row=1, col=2)
    for key, name, color in (("block_compute_s", lab["compute"], COLORS["compute"]),
                             ("block_transfer_s", lab["transfer"], COLORS["transfer"])):
        fig.add_trace(go.Scatter(x=tokens, y=[r[key] * 1e6 for r in bt], name=name,
                                 mode="lines+markers", line=dict(color=color, dash="dot"),
                                 hovertemplate=lab["h_tokens_us"] + "<extra>" + name + "</extra>"),
                      row=2, col=1)
    # the crossovers where there are any (none: no size, or no bandwidth, changes the verdict)
    c_star = sweep["crossover_tokens"]
    for row in (1, 2):
        if c_star is not None:
            fig.add_vline(x=c_star, line=dict(color="#444", dash="dash", width=1), row=row, col=1)
        fig.add_vline(x=sweep["tokens_now"], line=dict(color=COLORS["measured"], width=1.5),
                      row=row, col=1)
        fig.update_xaxes(type="log", title_text=lab["tokens_axis"], row=row, col=1)
    if c_star is not None:
        _crossover_label(fig, c_star, sweep["tokens_now"], log_span(tokens + [c_star]), "x", "y",
                         lab["at_tokens"].format(tokens=lab["int"](math.ceil(c_star))))
    b_star = sweep["crossover_bandwidth_gbps"]
    if has_bw:
        fig.add_vline(x=sweep["bandwidth_now_gbps"], line=dict(color=COLORS["measured"], width=1.5),
                      row=1, col=2)
        # a crossover past the points widens the axis, so that its line shows
        bw_span = log_span([r["bandwidth_gbps"] for r in bb] + ([b_star] if b_star is not None else []))
        fig.update_xaxes(type="log", title_text=lab["bw_axis"], range=bw_span, row=1, col=2)
        if b_star is not None:
            fig.add_vline(x=b_star, line=dict(color="#444", dash="dash", width=1), row=1, col=2)
            _crossover_label(fig, b_star, sweep["bandwidth_now_gbps"], bw_span, "x2", "y2",
                             lab["at_bw"].format(gbps=lab["digits"](f"{b_star:.3g}")))
    else:
        fig.update_xaxes(type="log", title_text=lab["bw_axis"], row=1, col=2)
    for col in (1, 2):
        fig.update_yaxes(range=[-3, PCT_TOP], tickvals=list(range(0, 101, 20)), row=1, col=col)
    fig.update_yaxes(title_text="% ", row=1, col=1)
    fig.update_yaxes(type="log", title_text="µs", exponentformat="none", row=2, col=1)   # 100,000 µs, not 100k
    fig.update_xaxes(visible=False, row=2, col=2)
    fig.update_yaxes(visible=False, row=2, col=2)
    # the empty fourth cell holds the legend, and under it why the transfer can stay flat
    # while the block grows (NCCL gives a larger send more channels: sim/hardware/nccl.py send_recv)
    cell_x, cell_y = fig.layout.xaxis4.domain[0], fig.layout.yaxis4.domain
    if transfer_stays_flat(bt):
        fig.add_annotation(x=cell_x, y=cell_y[0], xref="paper", yref="paper", xanchor="left", yanchor="bottom",
                           align="left", showarrow=False, text=lab["nccl_note"], font=dict(size=11, color="#555"))
    world = sweep.get("world", sweep["n_gpus"])
    title = lab["title" if world == sweep["n_gpus"] else "title_slice"].format(
        layout=lab["layout"](sweep["layout"]), state=lab["on" if sweep["overlap"] else "off"],
        gpus=lab["int"](sweep["n_gpus"]), world=lab["int"](world))
    fig.update_layout(
        title=dict(text=f"{title}<br><sup>{lab['sub']}</sup>", font=dict(size=13)),
        legend=dict(orientation="v", x=cell_x, xanchor="left", y=cell_y[1], yanchor="top", tracegroupgap=0),
        margin=MARGIN,
        meta={"crossover_tokens": c_star, "crossover_bandwidth_gbps": sweep["crossover_bandwidth_gbps"]})
    return fig


def log_span(values: list[float]) -> list[float]:
    """A log axis's range (log10 units) from the least to the largest of `values`."""
    return [math.log10(min(values)), math.log10(max(values))]


def transfer_stays_flat(by_tokens: list[dict[str, Any]]) -> bool:
    """Whether a larger block somewhere transfers in no more time than the one before it."""
    times = [r["block_transfer_s"] for r in by_tokens]
    return any(b <= a for a, b in zip(times, times[1:]))


def _crossover_label(fig: go.Figure, x: float, now: float, span: list[float], xref: str, yref: str,
                     text: str) -> None:
    """A crossover's label at the top of its panel, above the curves' 100%, beside its line:
    on the side away from the current scenario's line where a third of the axis is left
    there, else on the side with more room."""
    at, lo, hi = math.log10(x), *span
    room_right = (hi - at) / (hi - lo) if hi > lo else 0.5
    away = room_right if now < x else 1 - room_right
    right = room_right < 0.5 if away < 1 / 3 else now >= x      # right: the label's right end at the line
    fig.add_annotation(x=at, y=1, xref=xref, yref=f"{yref} domain", xanchor="right" if right else "left",
                       yanchor="top", xshift=-4 if right else 0, showarrow=False, text=text, align="left",
                       font=dict(size=11), bgcolor=LABEL_BACKGROUND)
