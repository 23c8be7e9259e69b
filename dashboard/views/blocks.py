"""The Block map view: which query block meets which K/V block, on which GPU and at which
step (dashboard/figures/block_map.py), with the values and axes in the scheme's own words
(sim.schemes' BlockMap) as the page's language says them.
"""

from __future__ import annotations

import re
from typing import Any

import dash
from dash import Input, Output

from dashboard import compute, figures
from dashboard.i18n import DEFAULT_LANG, Translator, catalog, layout_label
from dashboard.served import Served
from dashboard.views.common import graph, only_on
from dashboard.views.labels import figure_labels, run_words
from sim.errors import RingsimError

SCHEME_WORDS = ("fig.step", "blocks.sim.kernel-call", "blocks.sim.every-pair", "blocks.sim.rings",
                "blocks.sim.chunk", "blocks.sim.stripe", "blocks.sim.shard")
"""The schemes' own words for a block map's values and axes (sim.schemes' BlockMap
value_label and axis_label), as the catalogs say them."""


def view() -> list[Any]:
    return [graph("block-map", 560)]


def register_callbacks(app: dash.Dash, served: Served) -> None:
    @app.callback(Output("block-map", "figure"),
                  Input("scenario", "data"), Input("profile", "data"), Input("tabs", "value"), Input("lang", "value"))
    def block_map(data, profile_data, tab, lang):
        only_on("blocks", tab)
        t = Translator(lang)
        try:
            hw, key = served.hardware_of(profile_data)
            sc = served.scenario_of(data)
            return compute.figure("blocks", sc, key, t.lang, lambda: figures.block_map(
                compute.run(sc, hw, key).trace, labels=block_map_labels(t)))
        except RingsimError as e:
            return figures.message_figure(str(e))


def block_map_labels(t: Translator) -> dict[str, Any]:
    def run(config: dict[str, Any]) -> str:
        if config.get("scheme", "ring") == "ring":
            return layout_label(t, config.get("layout", "unknown layout"))
        return run_words(t, config)

    return figure_labels(t, "blocks") | {"run": run, "sim": lambda text: scheme_words(t, text)}


def scheme_words(t: Translator, text: str) -> str:
    """A scheme's own words for a block map's values or axes (SCHEME_WORDS, whole numbers
    in them) in the page's language; words the catalogs do not know stay as they are."""
    for key in SCHEME_WORDS:
        pattern, named = "", set()
        for i, part in enumerate(re.split(r"{(\w+)}", catalog(DEFAULT_LANG)[key])):
            if i % 2 == 0:
                pattern += re.escape(part)
            else:
                pattern += f"(?P={part})" if part in named else rf"(?P<{part}>\d+)"
                named.add(part)
        m = re.fullmatch(pattern, text)
        if m is not None:
            return t(key, **{name: t.int(int(value)) for name, value in m.groupdict().items()})
    return text
