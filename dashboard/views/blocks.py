"""The Block map view: which query block meets which K/V block, on which GPU and at which
step (dashboard/figures/block_map.py), with the values and axes in the scheme's own words
(sim.schemes' BlockMap) as the page's language says them.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Output, State

from dashboard import compute, explain
from dashboard.figures.block_map import block_map
from dashboard.figures.style import message_figure
from dashboard.i18n import Translator, layout_label, run_words
from dashboard.served import Served
from dashboard.views.common import graph, only_on, shown
from dashboard.views.labels import figure_labels
from sim.errors import RingsimError
from sim.schemes import DEFAULT as DEFAULT_SCHEME


def view() -> list[Any]:
    return [graph("block-map", 560)]


def register_callbacks(app: dash.Dash, served: Served) -> None:
    @app.callback(Output("block-map", "figure"),
                  State("scenario", "data"), State("profile", "data"), State("tabs", "value"), State("lang", "value"),
                  shown("blocks"))
    def draw_block_map(data, profile_data, tab, lang, _shown):
        only_on("blocks", tab)
        t = Translator(lang)
        try:
            hw, key = served.hardware_of(profile_data)
            sc = served.scenario_of(data)
            return compute.figure("blocks", sc, key, t.lang, lambda: block_map(
                compute.run(sc, hw, key).trace, labels=block_map_labels(t)))
        except RingsimError as e:
            return message_figure(str(e))


def block_map_labels(t: Translator) -> dict[str, Any]:
    def run(config: dict[str, Any]) -> str:
        if config.get("scheme", DEFAULT_SCHEME) == DEFAULT_SCHEME:
            return layout_label(t, config.get("layout", "unknown layout"))
        return run_words(t, config)

    return figure_labels(t, "blocks") | {"run": run, "sim": lambda words: scheme_words(t, words)}


def scheme_words(t: Translator, words: dict[str, Any]) -> str:
    """A scheme's own words for a block map's values or axes (sim.schemes' BlockMap
    value_label and axis_label: sim.reasons clauses) in the page's language."""
    return explain.say(t, words)
