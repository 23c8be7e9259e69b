"""The summary over the views: a card per metric of the run on screen (makespan, ideal,
efficiency, load imbalance, overlap efficiency, exposed communication, peak memory; on
the Measured view, of the measured run's configuration simulated), a line naming that run,
the strip of which tokens each GPU holds (dashboard/figures/layout_strip.py), and the
downloads: the trace, the Chrome trace and the metrics (dashboard/export.py).
"""

from __future__ import annotations

import json
from typing import Any

import dash
from dash import Input, Output, State, ctx, dcc, html, no_update

from dashboard import compute, export
from dashboard.contents import SUMMARY_CARDS
from dashboard.figures.layout_strip import layout_strip
from dashboard.figures.style import time_unit
from dashboard.i18n import Translator, run_words
from dashboard.served import Served
from sim.errors import RingsimError
from sim.hardware.presets import link_preset
from sim.scenario.config import Scenario
from sim.schemes import DEFAULT as DEFAULT_SCHEME


def _fmt_s(t: Translator, x: float | None) -> str:
    """A card's time in the page's decimals; from 10,000 of its unit, whole and grouped (a
    sequence of 10^8 tokens read "2.699e+04 s" beside the timeline's "26,995 s")."""
    if x is None:
        return "–"
    scale, unit = time_unit(abs(x) if x else 1e-6)
    if abs(x * scale) >= 1e4:
        return f"{t.int(x * scale)} {unit}"
    return t.digits(f"{x * scale:.4g} {unit}")


def _fmt_pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"


def _card(cid: str, label: str) -> html.Div:
    return html.Div(className="card", children=[html.Div(label, className="card-label", id=f"{cid}-label"),
                                                html.Div("–", id=cid, className="card-value")])


START_HERE = {"questions": "start.questions", "timeline": "start.timeline", "schemes": "start.schemes"}
"""The path a first visit is offered: the questions the simulator answers, the blocks
travelling on the timeline, then the schemes compared (view: the message naming its step)."""


def start_here() -> html.Div:
    """The "start here" path shown on a first visit, until dismissed (remembered by the browser)."""
    t = Translator(None)
    return html.Div(id="start-here", className="start-here", style={"display": "none"}, children=[
        dcc.Store(id="start-here-dismissed", storage_type="local"),
        html.Strong(t("start.title"), id="start-here-title"),
        *[html.Button(t(key), id=f"start-{view}", n_clicks=0, className="start-step")
          for view, key in START_HERE.items()],
        html.Button("×", id="start-here-close", n_clicks=0, className="start-close", title=t("start.close")),
    ])


def view() -> list[Any]:
    """The start-here path, the cards, the line and downloads under them, and the layout strip."""
    return [
        start_here(),
        html.Div(className="cards", children=[_card(cid, label) for cid, label in SUMMARY_CARDS]),
        html.Div(className="exports", children=[
            html.Span(id="scenario-line", className="scenario-line"),
            html.Button("trace (.npz)", id="dl-trace-btn", n_clicks=0),
            html.Button("Chrome trace (Perfetto)", id="dl-chrome-btn", n_clicks=0),
            html.Button("metrics (CSV)", id="dl-csv-btn", n_clicks=0),
            dcc.Download(id="dl-trace"), dcc.Download(id="dl-chrome"), dcc.Download(id="dl-csv"),
        ]),
        dcc.Graph(id="layout-strip", config={"displayModeBar": False}, style={"height": "170px"}),
        dcc.Store(id="layout-strip-drawn"),
    ]


def pcie_words(t: Translator, gpu: str, pcie: Any) -> str:
    """A PCIe node in words (sim.hardware.pcie.Pcie.words), in the page's language."""
    under = (t("line.pcie.own-port") if pcie.gpus_per_switch == 1
             else t("line.pcie.switch", gpus=t.int(pcie.gpus_per_switch)))
    return t("line.pcie", gpu=gpu, gen=pcie.gen, under=under, socket=t.int(pcie.gpus_per_socket),
             p2p=t(f"line.pcie.p2p.{pcie.p2p}"))


def link_words(t: Translator, link: Any) -> str:
    """A link by its preset's name where it is that preset, else by its bandwidth (a preset
    whose bandwidth or latency the controls changed is no longer that link)."""
    try:
        p = link_preset(link.name)
    except RingsimError:
        p = None
    if p is not None and (p.bandwidth_gbps, p.latency_us) == (link.bandwidth_gbps, link.latency_us):
        return link.name
    return t.gbps(link.bandwidth_gbps)


def scenario_line(t: Translator, sc: Any, profile_data: Any, shown: Any) -> str:
    """The run the cards describe, in words and numbers of the page's language."""
    w = sc.workload
    hw = sc.hardware
    hw_name = f"{hw.gpu.name} / {link_words(t, hw.link)}" if hw.pcie is None else pcie_words(t, hw.gpu.name, hw.pcie)
    if profile_data:
        device, name = profile_data.get("device"), profile_data.get("name", "profile")
        hw_name = f"{device} ({name})" if device else name
    if shown is not None and shown[2] is not None:
        hw_name = shown[2].measured_on.get("device") or "its machine's profile"
    nodes = -(-sc.n_gpus // hw.gpus_per_node)
    if nodes > 1 and not profile_data and shown is None:
        between = link_words(t, hw.inter_link if hw.inter_link is not None else hw.link)
        hw_name = t("line.nodes", hardware=hw_name, nodes=t.int(nodes), per_node=t.int(hw.gpus_per_node),
                    between=between)
    line = t("line.scenario", gpus=t.int(sc.n_gpus), hardware=hw_name, run=run_words(t, sc.describe()),
             tokens=t.int(w.seq), per_gpu=t.int(sc.tokens_per_rank), heads=t.int(w.heads),
             kv_heads=t.int(w.kv_heads), head_dim=t.int(w.head_dim), dtype=w.dtype,
             mask=t("line.causal" if w.causal else "line.full"), **{"pass": t(f"opt.pass.{w.pass_}")})
    return t("line.measured", line=line) if shown is not None else line


def _file_name(sc) -> str:
    how = sc.layout if sc.scheme == DEFAULT_SCHEME else sc.scheme
    return f"ringsim-{sc.n_gpus}gpu-{how}-{sc.workload.seq}-{sc.workload.pass_}"


def register_callbacks(app: dash.Dash, served: Served) -> None:
    def on_screen(data, profile_data, tab, measured_data) -> tuple:
        """(scenario, hardware model, cache key, the measured pair or None) of the run the cards,
        the token strip and the downloads are about: on the Measured view with a trace loaded,
        that trace's configuration simulated (served.measured_pair); else the page's scenario on
        its hardware or profile."""
        shown = (served.measured_pair(measured_data, data, profile_data)
                 if tab == "measured" and measured_data else None)
        if shown is not None:
            _, sc, hw, key = shown
            return sc, hw, key, shown
        hw, key = served.hardware_of(profile_data)
        return served.scenario_of(data), hw, key, None

    @app.callback(
        [Output(cid, "children") for cid, _ in SUMMARY_CARDS] + [Output("scenario-line", "children")],
        Input("scenario", "data"), Input("profile", "data"), Input("tabs", "value"), Input("measured", "data"),
        Input("lang", "value"),
    )
    def summary(data, profile_data, tab, measured_data, lang):
        try:
            # the Measured view's cards describe the run it shows: its configuration, simulated
            sc, hw_model, key, shown = on_screen(data, profile_data, tab, measured_data)
            m = compute.metrics(sc, hw_model, key)
        except RingsimError as e:
            return ["–"] * len(SUMMARY_CARDS) + [html.Span(str(e), className="msg")]
        peak = max((r.peak_mem_bytes or 0) for r in m.ranks) or None
        t = Translator(lang)
        line = scenario_line(t, sc, profile_data, shown)
        # the cards' numbers in the page's decimal sign
        cards: list[Any] = [_fmt_s(t, m.makespan_s), _fmt_s(t, m.ideal_s)] + [
            t.digits(x) for x in (_fmt_pct(m.efficiency), f"{m.load_imbalance:.3f}", _fmt_pct(m.overlap_efficiency))
        ] + [_fmt_s(t, max(r.exposed_comm_s for r in m.ranks))]
        # GiB as the Memory view draws it; past the GPU's memory the run does not fit, and says so
        cards.append("–" if peak is None else f"{t.num(peak / 2 ** 30)} GiB")
        capacity = sc.hardware.gpu.memory_gb * 1e9
        if peak is not None and shown is None and not profile_data and peak > capacity:
            cards[-1] = [cards[-1], html.Div(t("card.no-fit", capacity=f"{t.num(capacity / 2 ** 30)} GiB"),
                                             className="no-fit")]
        return cards + [line]

    @app.callback([Output("start-here-title", "children"), Output("start-here-close", "title")]
                  + [Output(f"start-{v}", "children") for v in START_HERE], Input("lang", "value"))
    def start_here_texts(lang):
        t = Translator(lang)
        return [t("start.title"), t("start.close")] + [t(key) for key in START_HERE.values()]

    @app.callback(Output("start-here", "style"), Input("start-here-dismissed", "data"))
    def start_here_shown(dismissed):
        return {"display": "none"} if dismissed else {}

    @app.callback(Output("start-here-dismissed", "data"), Input("start-here-close", "n_clicks"),
                  prevent_initial_call=True)
    def dismiss_start_here(clicks):
        return True if clicks else no_update

    @app.callback(Output("tabs", "value", allow_duplicate=True),
                  [Input(f"start-{v}", "n_clicks") for v in START_HERE], prevent_initial_call=True)
    def follow_start_here(*_):
        view = (ctx.triggered_id or "").removeprefix("start-")
        return view if view in START_HERE else no_update

    @app.callback(Output("layout-strip", "figure"), Output("layout-strip-drawn", "data"),
                  Input("scenario", "data"), Input("lang", "value"), Input("tabs", "value"), Input("measured", "data"),
                  State("profile", "data"), State("layout-strip-drawn", "data"))
    def draw_layout_strip(data, lang, tab, measured_data, profile_data, drawn):
        t = Translator(lang)
        try:
            # the run the cards describe: on the Measured view, the measured run's configuration
            sc = on_screen(data, profile_data, tab, measured_data)[0]
        except RingsimError:
            sc = served.scenario_of(data)          # the cards say what is wrong
        split = compute.token_split(sc, t)
        seq = sc.workload.seq
        labels = {"axis": t("strip.axis"), "hover": t("strip.hover"),
                  "first": t("strip.first"), "first_of": t("strip.first-packed"),
                  "document": t("strip.document"), "documents": t("strip.row.documents"),
                  "holders": t("strip.row.gpus" if split["holders"] is None else "strip.row.positions"),
                  "separators": t.separators(), "number": t.int}

        def make():
            owner, bounds = compute.token_holders(sc, split)
            return layout_strip(split["layout"], seq, split["n"], holders=split["holders"],
                                        title=split["title"], labels=labels, owner=owner, bounds=bounds)

        # a function of the token split (with what packed holders depend on), the length and
        # the language only: other changes reuse it, and leave the strip on the page as drawn
        key = json.dumps([split, seq, t.lang], sort_keys=True, default=str)
        if key == drawn:
            return no_update, no_update
        return compute.figure("strip", Scenario(), None, [split, seq, t.lang], make), key

    def shown_run(data, profile_data, tab, measured_data) -> tuple:
        """(scenario, run) of what the cards describe (`on_screen`): what a download saves."""
        sc, hw, key, _ = on_screen(data, profile_data, tab, measured_data)
        return sc, compute.run(sc, hw, key)

    @app.callback(Output("dl-trace", "data"), Input("dl-trace-btn", "n_clicks"),
                  State("scenario", "data"), State("profile", "data"), State("tabs", "value"),
                  State("measured", "data"), prevent_initial_call=True)
    def download_trace(_, data, profile_data, tab, measured_data):
        sc, res = shown_run(data, profile_data, tab, measured_data)
        return dcc.send_bytes(export.trace_archive(res.trace), _file_name(sc) + ".trace.npz")

    @app.callback(Output("dl-chrome", "data"), Input("dl-chrome-btn", "n_clicks"),
                  State("scenario", "data"), State("profile", "data"), State("tabs", "value"),
                  State("measured", "data"), prevent_initial_call=True)
    def download_chrome(_, data, profile_data, tab, measured_data):
        sc, res = shown_run(data, profile_data, tab, measured_data)
        return dict(content=export.chrome_trace_json(res.trace), filename=_file_name(sc) + ".chrome.json")

    @app.callback(Output("dl-csv", "data"), Input("dl-csv-btn", "n_clicks"),
                  State("scenario", "data"), State("profile", "data"), State("tabs", "value"),
                  State("measured", "data"), prevent_initial_call=True)
    def download_csv(_, data, profile_data, tab, measured_data):
        sc, res = shown_run(data, profile_data, tab, measured_data)
        return dict(content=export.metrics_csv(res.metrics), filename=_file_name(sc) + ".metrics.csv")
