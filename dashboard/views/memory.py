"""The Memory view: peak memory per GPU against sequence length and GPU count, for the
ring and every other scheme from its own memory model, beside the full K/V; under them
each scheme now, item by item (dashboard/figures/memory.py).
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Output, State

from dashboard import compute, explain
from dashboard.figures.memory import memory
from dashboard.i18n import Translator, scheme_name
from dashboard.served import Served
from dashboard.views.common import graph, only_on, shown
from dashboard.views.labels import compared_run, figure_labels


def view() -> list[Any]:
    return [graph("memory", 440)]


def register_callbacks(app: dash.Dash, served: Served) -> None:
    @app.callback(Output("memory", "figure"), State("scenario", "data"), State("tabs", "value"), State("lang", "value"),
                  shown("memory"))
    def draw_memory(data, tab, lang, _shown):
        only_on("memory", tab)
        t = Translator(lang)
        sc = served.scenario_of(data)
        table = compute.figure("memory-table", sc, None, None, lambda: compute.memory_table(sc))
        return compute.figure("memory", sc, None, t.lang, lambda: memory(table, labels=memory_labels(t)))


def memory_labels(t: Translator) -> dict[str, Any]:
    """The texts of figures.memory.memory in the page's language; a scheme's label there is
    dashboard.compute.scheme_memory's: the scheme, or the scheme and its variant."""
    return figure_labels(t, "memory") | {
        "run": lambda v: compared_run(t, v["scheme"], v["variant_clause"]),
        "scheme_name": lambda scheme: scheme_name(t, scheme),
        "refused": lambda r: f"{scheme_name(t, r['scheme'])} ({explain.refusal(t, r['refused'], r['refused_clause'])})"}
