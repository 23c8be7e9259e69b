"""The Compare schemes view: every scheme and ring layout side by side on the page's
workload, hardware and GPUs (the rows of `ringsim compare --schemes all`), or the scheme on
screen as each library runs it (`ringsim compare --impls all`, sim.implementations), as a
chart (dashboard/figures/schemes.py) and a table with the fastest and the run on screen
marked, a refused variant with its reason; above them, why the winner wins.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboard import compute, explain
from dashboard.figures.schemes import GIB, fastest, scheme_comparison, sent_unit
from dashboard.figures.style import message_figure
from dashboard.i18n import Translator, scheme_name
from dashboard.served import Served
from dashboard.state import SCHEMES_MODES
from dashboard.views.background import RowsSoFar, busy_line, long_callback
from dashboard.views.common import cell, graph, only_on, shown, table
from dashboard.views.labels import compared_run, figure_labels
from sim.errors import RingsimError
from sim.planning.plan import TIE_WITHIN, tied
from sim.scenario.memory import full_kv_bytes

SCHEME_TABLE_COLUMNS = ("scheme", "variant", "makespan", "vs_best", "efficiency", "exposed", "sent", "memory",
                        "why")
"""The columns of the schemes' table (message keys sch.col.<column>)."""


def view() -> list[Any]:
    t = Translator(None)
    return [html.Div(className="field", children=[
                html.Label(t("ctl.schemes-mode.label"), id="schemes-mode-label", htmlFor="schemes-mode"),
                dcc.RadioItems(id="schemes-mode", value=SCHEMES_MODES[0], inline=True, className="radio",
                               options=[{"label": t(f"opt.schemes-mode.{x}"), "value": x} for x in SCHEMES_MODES])]),
            busy_line("schemes"), html.Div(id="schemes-why", className="schemes-why"), graph("schemes", 420),
            html.Div(id="schemes-table", className="table")]


def register_callbacks(app: dash.Dash, served: Served) -> None:
    def compared(data, profile_data, mode):
        """(the scenario, its rows' kind and base, its hardware and profile's key): as each
        library runs the scheme on screen, or every scheme from the same base (the scheme on
        screen and its settings do not change those rows, only which one is marked)."""
        hw, key = served.hardware_of(profile_data)
        sc = served.scenario_of(data)
        if mode == "impls":
            return sc, "impl-rows", sc.with_(impl="ideal"), hw, key
        return sc, "scheme-rows", compute.scheme_base(sc), hw, key

    def ready(data, profile_data, tab, lang, mode, _shown) -> bool:
        try:
            _, kind, base, _, key = compared(data, profile_data, mode)
        except RingsimError:
            return True                        # its message is drawn at once
        return compute.rows_ready(kind, base, key)

    @long_callback(app, served.background, "schemes",
                   [Output("schemes", "figure"), Output("schemes-table", "children"), Output("schemes-why", "children")],
                   [State("scenario", "data"), State("profile", "data"), State("tabs", "value"),
                    State("lang", "value"), Input("schemes-mode", "value"), shown("schemes")], ready=ready)
    def schemes(progress, data, profile_data, tab, lang, mode, _shown):
        only_on("schemes", tab)
        t = Translator(lang)

        try:
            sc, kind, base, hw, key = compared(data, profile_data, mode)
            if mode == "impls":
                rows = compute.rows(kind, base, key, lambda: compute.impl_rows(base, hw))
                current = compute.current_impl(sc)
            else:
                current = compute.current_variant(sc)
                so_far = RowsSoFar(progress, t, lambda rows: _schemes_table(rows, current, t))
                rows = compute.rows(kind, base, key, lambda: compute.scheme_rows(
                    sc, hw, key, progress=so_far.counted, partial=so_far.rows))
            fig = compute.figure("schemes", base, key, [mode, current, t.lang], lambda: scheme_comparison(
                rows, current=current, full_kv_bytes=full_kv_bytes(sc.workload), labels=scheme_labels(t)))
        except RingsimError as e:
            return message_figure(str(e)), None, None
        return fig, _schemes_table(rows, current, t), _schemes_why(rows, t)


def scheme_labels(t: Translator) -> dict[str, Any]:
    """The texts of figures.schemes.scheme_comparison in the page's language: a run's name and
    what bounds it (or why it cannot run) as the table beside it says them."""
    def why(row: dict[str, Any]) -> str:
        return (explain.refusal(t, row["refused"], row["refused_clause"]) if "refused" in row
                else explain.row_bound(t, row))

    return figure_labels(t, "schemes") | {"run": lambda row: compared_run(t, row["scheme"], row["variant_clause"]),
                                          "why": why}


def _schemes_table(rows: list[dict[str, Any]], current: Any, t: Translator) -> Any:
    """The rows of `ringsim compare --schemes`, a refused one with its reason; the fastest
    and the run on screen marked."""
    best = fastest(rows)
    head = [t(f"sch.col.{c}") for c in SCHEME_TABLE_COLUMNS]
    # the chart's units (figures.schemes.sent_unit): one unit per quantity on the page
    sent_scale, sent_in = sent_unit(rows)

    def gib(n: float) -> str:
        return f"{t.num(n / GIB)} GiB"
    body = []
    for r in rows:
        here = current is not None and (r["scheme"], r["variant"]) == tuple(current)
        variant = cell(explain.variant(t, r["variant_clause"]), *([" ", ("◂ " + t("sch.current"), "here")] if here else []))
        if "refused" in r:
            cells = [scheme_name(t, r["scheme"]), variant,
                     cell(t("sch.refused", reason=explain.refusal(t, r["refused"], r["refused_clause"])),
                          colspan=7, cls="refused")]
        else:
            eff = "–" if r["efficiency"] is None else t.pct(r["efficiency"])
            peak = "–" if r["peak_mem_bytes"] is None else gib(r["peak_mem_bytes"])
            cells = [scheme_name(t, r["scheme"]), variant, t.time(r["makespan_s"]),
                     t.num(r["makespan_s"] / best["makespan_s"]) + "×", eff,
                     t.time(r["exposed_comm_s"]),
                     f"{t.num(r['bytes_sent_per_gpu'] / sent_scale)} {sent_in}", peak,
                     cell(explain.row_bound(t, r), cls="why")]
        body.append((cells, " ".join(c for c, on in (("best", r is best), ("current", here)) if on) or None))
    return table(head, body)


def _schemes_why(rows: list[dict[str, Any]], t: Translator) -> list[Any]:
    """Why the winner wins: the fastest against the next, and what bounds each (and the
    slowest): the clauses the rows carry (sim.trace.metrics.explain_clauses), each run named
    and said in the page's language."""
    ran = sorted((r for r in rows if "refused" not in r), key=lambda r: r["makespan_s"])
    if not ran:
        return [t("sch.none")]
    best = ran[0]

    def name(r: dict[str, Any]) -> str:
        return compared_run(t, r["scheme"], r["variant_clause"])
    if len(ran) == 1:
        lead = t("sch.only", winner=name(best), time=t.time(best["makespan_s"]))
    else:
        # every run within the model's own error of the fastest (sim.planning.plan.TIE_WITHIN)
        # ties with it: none of them is named the winner
        ties = [ran[i] for i in tied([r["makespan_s"] for r in ran])]
        if len(ties) > 1:
            lead = t("sch.tie", count=len(ties), error=t.pct(TIE_WITHIN, 1), time=t.time(best["makespan_s"]),
                     last=t.time(ties[-1]["makespan_s"]), runs=t("sch.join").join(name(r) for r in ties))
        else:
            nxt = ran[1]
            lead = t("sch.fastest", winner=name(best), time=t.time(best["makespan_s"]), next=name(nxt),
                     margin=t.pct(nxt["makespan_s"] / best["makespan_s"] - 1))
    shown = ran[:2] + ([ran[-1]] if len(ran) > 2 else [])
    out = [html.Strong(lead), html.Ul([html.Li(t("sch.bounds", run=name(r), why=explain.row_bound(t, r)))
                                       for r in shown])]
    # the libraries side by side: the fused kernel the schemes assume is not a bound, and a
    # library that beats it is said to, with what it does otherwise
    ideal = next((r for r in ran if r.get("impl") == "ideal"), None)
    faster = [r for r in ran if r.get("impl") not in (None, "ideal") and ideal is not None
              and r["makespan_s"] < ideal["makespan_s"]]
    if faster:
        out.append(html.P(t("sch.beats_ideal", runs=t("sch.join").join(name(r) for r in faster), ideal=name(ideal),
                            margin=t.pct(ideal["makespan_s"] / faster[0]["makespan_s"] - 1)), className="help"))
    return out
