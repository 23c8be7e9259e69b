"""The Inference view: a long prompt prefilled with context parallelism and its tokens
decoded (sim.inference, docs/inference.md). Three charts for one model on TP 8 x CP GPUs:
one attention layer of the prefill as pass-KV and as pass-Q play it, rank by rank; the
prefill's time under each scheme as the cached share of the context grows, with the share
where the paper's rule (arXiv 2411.01783) turns from pass-KV to pass-Q; and the time per
output token as the context grows. Its controls are its own (the model, the cluster, the
nodes, the context and the new tokens); the figures are pure functions of the model's
answers (`prefill_timelines`, `crossover`, `decode_curve`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import dash
import numpy as np
import plotly.graph_objects as go
from dash import Input, Output, dcc, html
from plotly.subplots import make_subplots

from dashboard.figures.style import LEGEND_BESIDE, TEMPLATE, message_figure, time_unit
from dashboard.i18n import Translator
from dashboard.served import Served
from dashboard.views.common import graph, only_on
from sim.errors import RingsimError
from sim.inference.work import ALL_GATHER, PASS_KV, PASS_Q, SCHEMES
from sim.trace.format import A2A, AG, COMPUTE, KV, SEND, Trace

MODELS = ("llama3-8b", "llama3-70b", "llama3-405b")
CLUSTERS = ("dgx-h100", "dgx-a100")
NODES = (1, 2, 4, 8, 16)
CONTEXTS = (32768, 131072, 262144, 1048576)
NEW_SHARES = (1.0, 0.5, 0.125, 0.0625)
"""The new tokens offered, as shares of the context (1: a prefill of the whole prompt)."""
CACHED_SHARES = (0.0, 0.5, 0.75, 0.875, 0.9375, 0.96875, 0.984375)
"""The crossover chart's cached shares P / (P + T)."""
DECODE_CONTEXTS = tuple(2 ** k for k in range(13, 21))
DECODE_OUTPUT = 128
TP = 8
COLOR = {PASS_KV: "#3a6fd8", PASS_Q: "#f28e2b", ALL_GATHER: "#2e9e5b", "compute": "#3a6fd8",
         "hop": "#2e9e5b", "a2a": "#b04fc4"}


def view() -> list[Any]:
    def pick(cid: str, options, value) -> html.Div:
        return html.Div(className="inline", children=[
            html.Label(cid, htmlFor=cid, id=f"{cid}-label"),
            dcc.Dropdown(id=cid, options=[{"label": str(o), "value": o} for o in options], value=value,
                         clearable=False, style={"minWidth": "9em"})])
    return [
        html.Div(className="inline wrap", children=[
            pick("inf-model", MODELS, "llama3-70b"), pick("inf-cluster", CLUSTERS, "dgx-h100"),
            pick("inf-nodes", NODES, 4), pick("inf-context", CONTEXTS, 131072), pick("inf-new", NEW_SHARES, 0.0625)]),
        html.Div(id="inf-note", className="help"),
        graph("inf-prefill", 520), graph("inf-crossover", 420), graph("inf-decode", 380)]


def register_callbacks(app: dash.Dash, served: Served) -> None:
    @app.callback(Output("inf-prefill", "figure"), Output("inf-crossover", "figure"),
                  Output("inf-decode", "figure"), Output("inf-note", "children"),
                  Output("inf-model-label", "children"), Output("inf-cluster-label", "children"),
                  Output("inf-nodes-label", "children"), Output("inf-context-label", "children"),
                  Output("inf-new-label", "children"), Output("inf-new", "options"), Output("inf-context", "options"),
                  Input("inf-model", "value"), Input("inf-cluster", "value"), Input("inf-nodes", "value"),
                  Input("inf-context", "value"), Input("inf-new", "value"), Input("tabs", "value"),
                  Input("lang", "value"))
    def draw(model, cluster, nodes, context, share, tab, lang):
        only_on("inference", tab)
        t = Translator(lang)
        controls = [t("inf.ctl.model"), t("inf.ctl.cluster"), t("inf.ctl.nodes"), t("inf.ctl.context"),
                    t("inf.ctl.new")]
        options = [{"label": t.pct(s), "value": s} for s in NEW_SHARES]
        contexts = [{"label": t.int(c), "value": c} for c in CONTEXTS]      # grouped as the page writes tokens
        new = max(1, int(context * share))
        try:
            traces, rule, chosen = _prefill_pair(model, cluster, nodes, context, new)
            timeline = prefill_timelines(traces, timeline_labels(t))
            rows, threshold = _crossover(model, cluster, nodes, context)
            cross = crossover(rows, threshold, crossover_labels(t))
            dec = decode_curve(_decode(model, cluster, nodes), decode_labels(t))
            for fig in (timeline, cross, dec):           # the page's decimal and grouping signs
                fig.update_layout(separators=t.separators())
            note = t("inf.note", model=model, gpus=t.int(nodes * 8), cp=t.int(nodes * 8 // TP),
                     new=t.int(new), cached=t.int(context - new), rule=t(f"inf.scheme.{rule}"),
                     chosen=t(f"inf.scheme.{chosen}"))
        except RingsimError as e:
            timeline = cross = dec = message_figure(str(e))
            note = str(e)
        return timeline, cross, dec, note, *controls, options, contexts


# --- the model's answers, kept for the next reader of the same inputs --------------------

def _serving(model: str, cluster: str, nodes: int):
    from sim.hardware.presets import cluster_preset
    from sim.inference.serve import Serving
    from sim.scenario.models import model_preset
    from sim.scenario.resolve import hardware_of

    hw = hardware_of({"cluster": cluster})
    c = cluster_preset(cluster)
    gpus = nodes * c.gpus_per_node
    # Llama 3 405B's weights fit 8 GPUs of 80 GB only in FP8, as the paper runs its linear layers
    dtype = "fp8" if model == "llama3-405b" else "bf16"
    return Serving(model=model_preset(model), hardware=hw, tp=TP, cp=gpus // TP, dtype=dtype)


@lru_cache(maxsize=32)
def _prefill_pair(model: str, cluster: str, nodes: int, context: int, new: int
                  ) -> tuple[dict[str, Trace], str, str]:
    from sim.inference.serve import prefill

    serving = _serving(model, cluster, nodes)
    runs = {s: prefill(serving, context - new, new, scheme=s) for s in ("pass-kv", "pass-q")}
    first = runs["pass-kv"]
    return {s: r.trace for s, r in runs.items()}, first.rule_scheme, first.chosen_scheme


@lru_cache(maxsize=32)
def _crossover(model: str, cluster: str, nodes: int, context: int) -> tuple[list[dict[str, float]], float]:
    from sim.inference.serve import prefill
    from sim.inference.work import rule_threshold

    serving = _serving(model, cluster, nodes)
    rows = []
    for share in CACHED_SHARES:
        new = max(1, int(round(context * (1 - share))))
        r = prefill(serving, context - new, new)
        others = r.prefill_s - r.parts["attention_s"]
        rows.append({"cached_share": (context - new) / context,
                     **{s: others + serving.model.layers * v for s, v in r.scheme_attention_s.items()}})
    return rows, rule_threshold(serving.heads, serving.kv_heads)


@lru_cache(maxsize=32)
def _decode(model: str, cluster: str, nodes: int) -> list[dict[str, float]]:
    from sim.inference.serve import decode

    serving = _serving(model, cluster, nodes)
    rows = []
    for context in DECODE_CONTEXTS:
        try:
            d = decode(serving, [context - DECODE_OUTPUT], DECODE_OUTPUT)
        except RingsimError:
            break                      # longer contexts do not fit either
        rows.append({"context": context, "tpot_s": d.tpot_s, "attention_s": d.parts["attention_s"],
                     "merge_s": d.parts["merge_comm_s"] + d.parts["merge_s"]})
    return rows


# --- the figures -------------------------------------------------------------------------

TIMELINE_LABELS = {"title": "One attention layer of the prefill, CP rank by CP rank", "pass-kv": "pass-KV",
                   "pass-q": "pass-Q", "compute": "attention", "hop": "ring hop", "a2a": "partials returned",
                   "rank": "CP rank {rank}", "time": "time ({unit})"}


def timeline_labels(t: Translator) -> dict[str, str]:
    return {"title": t("inf.timeline.title"), "pass-kv": t("inf.scheme.pass-kv"), "pass-q": t("inf.scheme.pass-q"),
            "compute": t("inf.timeline.compute"), "hop": t("inf.timeline.hop"), "a2a": t("inf.timeline.a2a"),
            "rank": t("inf.timeline.rank"), "time": t("inf.timeline.time")}


def prefill_timelines(traces: dict[str, Trace], labels: dict[str, str] = TIMELINE_LABELS) -> go.Figure:
    """A lane per rank for each scheme (one row each): its attention calls, and under them
    what it sends (ring hops, pass-Q's partials going back)."""
    end = max(float(tr.columns.end_s.max(initial=0.0)) for tr in traces.values())
    scale, unit = time_unit(end)
    fig = make_subplots(rows=len(traces), cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[labels[s] for s in traces])
    shown = set()
    for row, trace in enumerate(traces.values(), 1):
        c = trace.columns
        for what, sel, offset in (("compute", c.stream == COMPUTE, 0.0),
                                  ("hop", (c.stream == SEND) & ((c.kind == KV) | (c.kind == AG)), 0.3),
                                  ("a2a", (c.stream == SEND) & (c.kind == A2A), 0.3)):
            sel &= c.end_s > c.start_s
            if not sel.any():
                continue
            fig.add_trace(go.Bar(
                orientation="h", base=c.start_s[sel] * scale, x=(c.end_s[sel] - c.start_s[sel]) * scale,
                y=c.rank[sel] + offset, width=0.28 if offset else 0.55, marker_color=COLOR[what],
                name=labels[what], legendgroup=what, showlegend=what not in shown,
                hovertemplate="%{base:.3g} + %{x:.3g} " + unit + "<extra>" + labels[what] + "</extra>"),
                row=row, col=1)
            shown.add(what)
        n = trace.n_gpus
        ticks = list(range(0, n, max(1, n // 8)))
        # the margin grows to the rank labels ("kelompok CP 0" is wider than "rank 0" was)
        fig.update_yaxes(autorange="reversed", tickvals=ticks, ticktext=[labels["rank"].format(rank=r) for r in ticks],
                         automargin=True, row=row, col=1)
    fig.update_xaxes(title_text=labels["time"].format(unit=unit), row=len(traces), col=1)
    fig.update_layout(template=TEMPLATE, title=labels["title"], barmode="overlay", legend=LEGEND_BESIDE,
                      margin=dict(t=80))
    return fig


CROSSOVER_LABELS = {"title": "Prefill time as the cached share grows", "x": "cached share P / (P + T)",
                    "y": "prefill ({unit})", PASS_KV: "pass-KV", PASS_Q: "pass-Q", ALL_GATHER: "all-gather",
                    "rule": "the paper's rule: pass-Q beyond"}


def crossover_labels(t: Translator) -> dict[str, str]:
    return {"title": t("inf.cross.title"), "x": t("inf.cross.x"), "y": t("inf.cross.y"),
            PASS_KV: t("inf.scheme.pass-kv"), PASS_Q: t("inf.scheme.pass-q"), ALL_GATHER: t("inf.scheme.allgather"),
            "rule": t("inf.cross.rule")}


def crossover(rows: list[dict[str, float]], threshold: float,
              labels: dict[str, str] = CROSSOVER_LABELS) -> go.Figure:
    """Each scheme's prefill against the cached share, and the share 1 - 2 H_kv / H where the
    rule turns to pass-Q (T / (T + P) below 2 H_kv / H)."""
    top = max(max(r[s] for s in SCHEMES if s in r) for r in rows)
    scale, unit = time_unit(top)
    fig = go.Figure()
    x = [r["cached_share"] for r in rows]
    for s in SCHEMES:
        if all(s in r for r in rows):
            fig.add_trace(go.Scatter(x=x, y=[r[s] * scale for r in rows], mode="lines+markers", name=labels[s],
                                     line=dict(color=COLOR[s])))
    turn = 1.0 - threshold
    if 0.0 <= turn <= 1.0:
        fig.add_vline(x=turn, line=dict(color="#777", dash="dash"))
        fig.add_annotation(x=turn, y=1.0, yref="paper", text=labels["rule"], showarrow=False, xanchor="right",
                           yanchor="bottom", font=dict(size=11, color="#555"))
    fig.update_layout(template=TEMPLATE, title=labels["title"], xaxis_title=labels["x"],
                      yaxis_title=labels["y"].format(unit=unit), legend=LEGEND_BESIDE, margin=dict(t=80))
    return fig


DECODE_LABELS = {"title": "Time per output token as the context grows", "x": "context (tokens)",
                 "y": "time per token ({unit})", "tpot": "a token", "attention": "attention",
                 "merge": "merging the ranks' partials"}


def decode_labels(t: Translator) -> dict[str, str]:
    return {"title": t("inf.decode.title"), "x": t("inf.decode.x"), "y": t("inf.decode.y"),
            "tpot": t("inf.decode.tpot"), "attention": t("inf.decode.attention"), "merge": t("inf.decode.merge")}


def decode_curve(rows: list[dict[str, float]], labels: dict[str, str] = DECODE_LABELS) -> go.Figure:
    """The whole step and its attention and merge parts (every layer) against the context."""
    if not rows:
        return message_figure(labels["title"])
    scale, unit = time_unit(max(r["tpot_s"] for r in rows))
    fig = go.Figure()
    x = np.array([r["context"] for r in rows])
    for key, name, color in (("tpot_s", "tpot", "#222"), ("attention_s", "attention", COLOR["pass-kv"]),
                             ("merge_s", "merge", COLOR["a2a"])):
        fig.add_trace(go.Scatter(x=x, y=[r[key] * scale for r in rows], mode="lines+markers", name=labels[name],
                                 line=dict(color=color)))
    fig.update_layout(template=TEMPLATE, title=labels["title"], xaxis=dict(title=labels["x"], type="log"),
                      yaxis_title=labels["y"].format(unit=unit), legend=LEGEND_BESIDE, margin=dict(t=80))
    return fig
