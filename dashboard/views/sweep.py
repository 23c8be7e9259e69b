"""The When transfers hide view: whether a ring's K/V block transfer hides behind its
compute, swept over tokens per GPU and the link (dashboard/figures/sweep.py), simulated on
at most 16 GPUs; the ring's, whatever scheme is on screen.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Output, State

from dashboard import compute
from dashboard.figures.style import message_figure
from dashboard.figures.sweep import overlap_sweep
from dashboard.i18n import Translator, layout_label
from dashboard.served import Served
from dashboard.views.common import graph, only_on, shown
from dashboard.views.labels import figure_labels
from sim.errors import RingsimError


def view() -> list[Any]:
    return [graph("sweep", 640)]


def register_callbacks(app: dash.Dash, served: Served) -> None:
    @app.callback(Output("sweep", "figure"),
                  State("scenario", "data"), State("profile", "data"), State("tabs", "value"), State("lang", "value"),
                  shown("sweep"))
    def sweep(data, profile_data, tab, lang, _shown):
        only_on("sweep", tab)
        t = Translator(lang)
        try:
            hw, key = served.hardware_of(profile_data)
            # whether a ring's block transfer hides behind its compute: the ring's, whatever
            # scheme is on screen
            sc = compute.as_ring(served.scenario_of(data))
            # the table once, a figure per language
            table = compute.figure("sweep-table", sc, key, None, lambda: compute.overlap_sweep(sc, hw, key))
            return compute.figure("sweep", sc, key, t.lang,
                                  lambda: overlap_sweep(table, labels=sweep_labels(t)))
        except RingsimError as e:
            return message_figure(str(e))


def sweep_labels(t: Translator) -> dict[str, Any]:
    return figure_labels(t, "sweep") | {"layout": lambda lay: layout_label(t, lay)}
