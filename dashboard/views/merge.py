"""The Exact merge view: the online softmax of one query row, step by step, as the ring
brings it each K/V block (sim.scenario.online_softmax's numpy ring on a small example of
at most MERGE_MAX_GPUS GPUs, dashboard/figures/merge.py); the reader picks the row.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboard import compute
from dashboard.figures.merge import HEIGHT as MERGE_HEIGHT
from dashboard.figures.merge import merge_steps
from dashboard.i18n import Translator, layout_label
from dashboard.served import Served
from dashboard.views.common import graph, only_on, shown
from dashboard.views.labels import figure_labels
from sim.layouts import get as get_layout
from sim.scenario.config import Scenario
from sim.scenario.online_softmax import example as merge_example

MERGE_MAX_GPUS = 16
"""The exact-merge view runs the numpy ring on at most this many ranks (small inputs)."""
MERGE_TOKENS_PER_CHUNK = 4


def view() -> list[Any]:
    return [
        html.Div(className="inline", children=[
            html.Label("query token", htmlFor="merge-row", id="merge-row-label"),
            html.Div(dcc.Slider(id="merge-row", min=0, max=63, step=1, value=63,
                                marks=None, tooltip={"placement": "bottom"}), className="slider"),
        ]),
        html.Div(id="merge-note", className="help"),
        graph("merge", MERGE_HEIGHT)]


def register_callbacks(app: dash.Dash, served: Served) -> None:
    @app.callback(Output("merge", "figure"), Output("merge-row", "max"), Output("merge-note", "children"),
                  State("scenario", "data"), Input("merge-row", "value"), State("tabs", "value"), State("lang", "value"),
                  shown("merge"))
    def merge(data, row, tab, lang, _shown):
        only_on("merge", tab)
        t = Translator(lang)
        sc = served.scenario_of(data)
        n = min(sc.n_gpus, MERGE_MAX_GPUS)
        # one sequence of one document: a packed layout is its closed-form twin there
        layout = compute.one_document_layout(sc.layout)
        seq = get_layout(layout).n_chunks(n) * MERGE_TOKENS_PER_CHUNK
        row = seq - 1 if row is None or row >= seq else int(row)
        # a function of the small example only, not of the scenario's sizes or hardware
        fig = compute.figure("merge", Scenario(), None, [n, layout, sc.workload.causal, row, t.lang],
                             lambda: merge_steps(merge_example(
                                 n_ranks=n, layout=layout, causal=sc.workload.causal,
                                 tokens_per_chunk=MERGE_TOKENS_PER_CHUNK, query_row=row), layout,
                                 labels=merge_labels(t)))
        note = t("merge.view.note", tokens=t.int(seq), gpus=t.int(n), layout=layout_label(t, layout),
                 mask=t("fig.causal" if sc.workload.causal else "fig.nomask"))
        return fig, seq - 1, note


def merge_labels(t: Translator) -> dict[str, Any]:
    return figure_labels(t, "merge.view") | {"layout": lambda lay: layout_label(t, lay)}
