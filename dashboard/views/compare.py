"""The Compare layouts view: every layout of the ring with overlap on and off, as a chart
(dashboard/figures/comparison.py) and as `ringsim compare`'s table; for packed documents,
above them, how evenly each layout spreads the documents' work over the GPUs
(dashboard/figures/documents.py). A scheme without a ring is compared as the ring.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Output, State, html, no_update

from dashboard import compute
from dashboard.figures.comparison import HEIGHT, comparison
from dashboard.figures.documents import document_balance
from dashboard.figures.style import message_figure
from dashboard.i18n import Translator, layout_label
from dashboard.served import Served
from dashboard.state import RING_SCHEMES
from dashboard.views.background import RowsSoFar, busy_line, long_callback
from dashboard.views.common import FOLDED, graph, only_on, shown, table
from dashboard.views.labels import figure_labels
from sim.errors import RingsimError
from sim.scenario.config import Scenario


def view() -> list[Any]:
    return [html.Div(id="documents-section", style=FOLDED, children=[graph("documents", 420)]),
            busy_line("compare"), graph("compare", HEIGHT), html.Div(id="compare-table", className="table")]


def register_callbacks(app: dash.Dash, served: Served) -> None:
    def compared(data, profile_data):
        """(the ring scenario whose layouts are compared, its hardware, its profile's key)."""
        hw, key = served.hardware_of(profile_data)
        sc = served.scenario_of(data)
        if sc.scheme not in RING_SCHEMES:
            sc = compute.as_ring(sc)          # a scheme without a ring: the ring's layouts
        # one layout/overlap pair is as good as another for the key: all six are drawn
        return sc, sc.with_(layout="zigzag", overlap=True), hw, key

    def ready(data, profile_data, tab, lang, _shown) -> bool:
        try:
            _, keyed, _, key = compared(data, profile_data)
        except RingsimError:
            return True                        # its message is drawn at once
        return compute.rows_ready("compare-rows", keyed, key)

    @long_callback(app, served.background, "compare",
                   [Output("compare", "figure"), Output("compare-table", "children")],
                   [State("scenario", "data"), State("profile", "data"), State("tabs", "value"), State("lang", "value"),
                    shown("compare")],
                   ready=ready)
    def compare(progress, data, profile_data, tab, lang, _shown):
        only_on("compare", tab)
        t = Translator(lang)
        try:
            sc, keyed, hw, key = compared(data, profile_data)
            so_far = RowsSoFar(progress, t, lambda rows: _compare_table(rows, t))
            rows = compute.rows("compare-rows", keyed, key, lambda: compute.compare_table(
                sc, hw, key, progress=so_far.counted, partial=so_far.rows))
        except RingsimError as e:
            return message_figure(str(e)), None
        return comparison(rows, comparison_labels(t)), _compare_table(rows, t)

    @app.callback(Output("documents", "figure"), Output("documents-section", "style"),
                  State("scenario", "data"), State("tabs", "value"), State("lang", "value"), shown("compare"))
    def documents(data, tab, lang, _shown):
        only_on("compare", tab)
        sc = served.scenario_of(data)
        if not sc.packed:
            return no_update, FOLDED
        t = Translator(lang)
        try:
            if sc.scheme not in RING_SCHEMES:
                sc = compute.as_ring(sc)          # as the layouts' comparison beside it
            fig = compute.figure("documents", sc, None, t.lang,
                                 lambda: document_balance(compute.document_balance(sc),
                                                                  labels=document_labels(t, sc)))
        except RingsimError as e:
            fig = message_figure(str(e))
        return fig, {}


def documents_words(t: Translator, scenario: Scenario) -> str:
    """The scenario's documents in a few words of the page's language: how many, their
    median and longest length, and the window."""
    w = scenario.workload
    d = compute.length_summary(w)
    words = (t("docs.one") if d["count"] == 1 else
             t("docs.many", count=t.int(d["count"]), median=t.int(d["median"]), longest=t.int(d["longest"])))
    return words if w.window is None else t("docs.window", docs=words, window=t.int(w.window))


def document_labels(t: Translator, scenario: Scenario) -> dict[str, Any]:
    """The texts of figures.documents.document_balance in the page's language."""
    return figure_labels(t, "docs") | {"gpu": t("ctl.gpu.label"), "docs": documents_words(t, scenario),
                                       "ratio_text": lambda x: t.num(x, 4), "layout": lambda lay: layout_label(t, lay)}


def comparison_labels(t: Translator) -> dict[str, Any]:
    """The texts of figures.comparison.comparison in the page's language."""
    return figure_labels(t, "cmp") | {"num": lambda y: t.num(y), "layout": lambda lay: layout_label(t, lay)}


def _compare_table(rows: list[dict[str, Any]], t: Translator) -> Any:
    """The rows of `ringsim compare`: every layout with overlap on and off, in the page's language."""
    best = min(r["makespan_s"] for r in rows)
    head = [t("cmp.col.layout"), t("cmp.col.overlap"), t("sch.col.makespan"), t("sch.col.vs_best"),
            t("sch.col.efficiency"), t("card.m-imbalance"), t("card.m-overlap"), t("sch.col.exposed")]
    body = [[layout_label(t, r["layout"]), t("cmp.on" if r["overlap"] else "cmp.off"), t.time(r["makespan_s"]),
             t.num(r["makespan_s"] / best) + "×", "–" if r["efficiency"] is None else t.pct(r["efficiency"]),
             t.num(r["load_imbalance"], 4), t.pct(r["overlap_efficiency"]),
             t.time(r["exposed_comm_s"])] for r in rows]
    return table(head, [(row, None) for row in body])
