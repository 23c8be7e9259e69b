"""The Timeline view: every compute and transfer of every GPU over time
(dashboard/figures/timeline.py), on a window of GPUs the reader chooses (the first
TIMELINE_DEFAULT_RANKS of a ring past 64 GPUs at first); for the ring, the ring stepping
its K/V blocks one hop at a time under it (play, or drag the step).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import dash
from dash import Input, Output, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dashboard import compute, quiz_explain
from dashboard.figures.style import message_figure, scheme_of, time_unit
from dashboard.figures.timeline import SERIES, series_styles, timeline
from dashboard.i18n import Translator, run_words
from dashboard.served import Served
from dashboard.state import defaults
from dashboard.views.common import HIDDEN, graph, only_on, shown
from dashboard.views.labels import figure_labels
from dashboard.views.ring_animation import register_ring_stepper, ring_controls, ring_scenario
from sim.errors import RingsimError
from sim.scenario.config import Scenario
from sim.schemes import DEFAULT as DEFAULT_SCHEME

TIMELINE_DEFAULT_RANKS = 32
"""Rings larger than 64 GPUs open their timeline on the first this-many GPUs."""


def ring_section() -> html.Div:
    """The ring-stepping animation, shown under the timeline."""
    return html.Div(className="ring-box", id="timeline-ring-section", children=[
        html.Div(id="timeline-ring-label", className="help"),
        ring_controls("timeline"),
        dcc.Graph(id="timeline-ring", config={"displaylogo": False, "displayModeBar": False},
                  style={"maxWidth": "640px"}),
    ])


def view() -> list[Any]:
    d = defaults()
    return [
        html.Div(className="inline", children=[
            html.Label("GPUs shown", htmlFor="ranks", id="ranks-label"),
            html.Div(dcc.RangeSlider(id="ranks", min=0, max=d["gpus"] - 1, step=1,
                                     value=[0, d["gpus"] - 1], allowCross=False,
                                     tooltip={"placement": "bottom"}), className="slider"),
        ]),
        html.Div(id="timeline-hidden", className="timeline-hidden", style=HIDDEN, children=[
            html.Span(id="timeline-hidden-text"),
            html.Button(id="timeline-show-contiguous", n_clicks=0, className="link-button")]),
        graph("timeline", 420),
        dcc.Store(id="timeline-zoom"),
        html.Div(id="timeline-details", className="timeline-details", role="region"),
        ring_section()]


def register_callbacks(app: dash.Dash, served: Served) -> None:
    @app.callback(Output("ranks", "max"), Output("ranks", "value"), Output("ranks", "marks"),
                  State("scenario", "data"), State("ranks", "max"), State("ranks", "value"), shown("timeline"))
    def rank_window(data, old_max, current, _shown):
        n = served.scenario_of(data).n_gpus
        step = max(1, n // 8)
        marks = {r: str(r) for r in range(0, n, step)} | {n - 1: str(n - 1)}
        if old_max == n - 1 and current:
            return no_update, no_update, no_update   # same ring: keep the user's window
        hi = n - 1 if n <= 64 else TIMELINE_DEFAULT_RANKS - 1
        return n - 1, [0, hi], marks

    @app.callback(Output("timeline", "figure"), Output("ranks", "value", allow_duplicate=True),
                  State("scenario", "data"), State("profile", "data"), Input("ranks", "value"),
                  State("tabs", "value"), State("lang", "value"), Input("timeline-zoom", "data"), shown("timeline"),
                  prevent_initial_call="initial_duplicate")
    def draw_timeline(data, profile_data, ranks, tab, lang, zoom, _shown):
        fig = _draw_timeline(data, profile_data, ranks, tab, lang, zoom)
        # the slider shows the GPUs drawn: a window narrowed to fit MAX_DRAWN_SPANS says so
        drawn = ((fig.layout.meta or {}).get("ranks") if hasattr(fig, "layout") else None)
        same = not drawn or not ranks or list(drawn) == list(ranks)
        return fig, no_update if same else list(drawn)

    # a zoom on the time axis draws that stretch again at its own scale (spans merged
    # where they are closer than a pixel come apart); a double-click shows the whole run
    # (the range is kept in the chart's unit, which follows from the run: the figure itself,
    # megabytes at 20,000 spans, stays in the page)
    @app.callback(Output("timeline-zoom", "data"), Input("timeline", "relayoutData"),
                  State("scenario", "data"), State("profile", "data"), prevent_initial_call=True)
    def zoom(relayout, data, profile_data):
        shown = zoomed_range(relayout)
        if shown is False:
            raise PreventUpdate
        return {"run": run_of(data, profile_data), "range": shown}

    def _draw_timeline(data, profile_data, ranks, tab, lang, zoom):
        only_on("timeline", tab)
        window = tuple(ranks) if ranks else None
        # a zoom holds for the run it was made on: a new run opens whole
        shown = (zoom or {}).get("range") if (zoom or {}).get("run") == run_of(data, profile_data) else None
        shown = tuple(shown) if shown else None
        t = Translator(lang)
        try:
            hw, key = served.hardware_of(profile_data)
            sc = served.scenario_of(data)

            def make():
                res = compute.run(sc, hw, key)
                tr = res.trace
                c = tr.columns
                makespan = float(c.end_s.max() - c.start_s.min()) if len(c) else 0.0   # no metrics needed
                title = t("tl.title", gpus=t.int(tr.n_gpus), run=run_words(t, tr.config),
                          makespan=t.time(makespan, 4))
                labels = figure_labels(t, "tl") | {"window": t("tl.window"), "window_one": t("tl.window-one"),
                                                   "time": t("tl.time")}
                scale, _ = time_unit(makespan or 1e-6)            # the chart's unit, as the figure picks it
                return timeline(tr, window, starts=res.rank_starts, title=title, labels=labels,
                                time_range_s=None if shown is None else (shown[0] / scale, shown[1] / scale))

            return compute.figure("timeline", sc, key, [window, t.lang, shown], make)
        except RingsimError as e:
            return message_figure(str(e))

    # the details of the span clicked: its record's fields, as a trace viewer lists them. The
    # page's click names the chart's trace and point, not the point's data (dcc.Graph leaves
    # out a typed array's rows), so the row is read from the figure drawn, kept in the cache
    @app.callback(Output("timeline-details", "children"),
                  Input("timeline", "clickData"), Input("lang", "value"),
                  State("scenario", "data"), State("profile", "data"), State("ranks", "value"),
                  State("timeline-zoom", "data"))
    def details(click, lang, data, profile_data, ranks, zoom):
        t = Translator(lang)
        points = (click or {}).get("points") or []
        if not points:
            return html.Span(t("tl.detail.hint"), className="help")
        try:
            hw, key = served.hardware_of(profile_data)
            tr = compute.run(served.scenario_of(data), hw, key).trace
            cd, merged = _clicked_row(_draw_timeline(data, profile_data, ranks, "timeline", lang, zoom), points[0])
        except RingsimError as e:
            return html.Span(str(e), className="msg")
        if cd is None:
            return html.Span(t("tl.detail.hint"), className="help")
        c = tr.columns
        scale, unit = time_unit(float(c.end_s.max() - c.start_s.min()) or 1e-6)
        series = SERIES[int(cd[-1])]
        name = series_styles(scheme_of(tr), figure_labels(t, "tl"))[series][0]
        if merged:
            rows = [(t("tl.detail.op"), name), (t("ctl.gpu.label"), t.int(int(cd[0]))),
                    (t("tl.detail.count"), t.int(int(cd[6]))),
                    (t("tl.detail.steps"), f"{t.int(int(cd[1]))}–{t.int(int(cd[4]))}"),
                    (t("tl.detail.start"), t.time(cd[2] / scale, 4)), (t("tl.detail.span"), t.time(cd[3] / scale, 4)),
                    (t("tl.detail.busy"), t.time(cd[5] / scale, 4))]
            return [html.Strong(t("tl.detail.merged")),
                    html.Table(html.Tbody([html.Tr([html.Th(k), html.Td(v)]) for k, v in rows])),
                    html.P(t("tl.detail.zoom"), className="help")]
        compute_span = not (series.startswith(("send", "recv", "exposed")) or series == "idle")
        rows = [(t("tl.detail.op"), name), (t("ctl.gpu.label"), t.int(int(cd[0]))),
                (t("tl.detail.step"), t.int(int(cd[1]))),
                (t("tl.detail.start"), t.time(cd[2] / scale, 4)), (t("tl.detail.duration"), t.time(cd[3] / scale, 4))]
        if series.startswith(("send", "recv")):
            rows.append((t("tl.detail.peer"), t.int(int(cd[4]))))
            rows.append((t("tl.detail.bytes"), f"{t.num(cd[5])} MiB"))
        elif compute_span:
            rows.append((t("tl.detail.flops"), f"{t.num(cd[5])} TFLOP"))
        return [html.Strong(t("tl.detail.title")),
                html.Table(html.Tbody([html.Tr([html.Th(k), html.Td(v)]) for k, v in rows]))]

    # a run whose transfers all hide shows nothing exposed: say so, and offer the layout that does
    @app.callback(Output("timeline-hidden", "style"), Output("timeline-hidden-text", "children"),
                  Output("timeline-show-contiguous", "children"),
                  State("scenario", "data"), State("profile", "data"), State("tabs", "value"), State("lang", "value"),
                  shown("timeline"))
    def nothing_exposed(data, profile_data, tab, lang, _shown):
        only_on("timeline", tab)
        t = Translator(lang)
        try:
            sc = served.scenario_of(data)
            m = served.metrics_of(data, profile_data)
        except RingsimError:
            return HIDDEN, None, None
        exposed = max((r.exposed_comm_s for r in m.ranks), default=0.0)
        if exposed > 0 or sc.scheme != DEFAULT_SCHEME or sc.layout == "contiguous" or sc.packed:
            return HIDDEN, None, None
        return {}, t("tl.hidden.note"), t("tl.hidden.button")

    @app.callback(Output("layout", "value", allow_duplicate=True), Input("timeline-show-contiguous", "n_clicks"),
                  prevent_initial_call=True)
    def show_contiguous(clicks):
        if not clicks:
            raise PreventUpdate
        return "contiguous"

    # the ring animation under the timeline
    @app.callback(Output("timeline-ring", "figure"), Output("timeline-ring-step", "max"),
                  Output("timeline-ring-step", "value"), Output("timeline-ring-section", "style"),
                  State("scenario", "data"), State("lang", "value"), State("tabs", "value"), shown("timeline"))
    def timeline_ring(data, lang, tab, _shown):
        if tab != "timeline":
            raise PreventUpdate
        values = (data or {}).get("values") if isinstance(data, dict) else None
        if (values or {}).get("scheme", DEFAULT_SCHEME) != DEFAULT_SCHEME:
            # the animation is the ring's: another scheme's timeline stands alone
            return no_update, no_update, no_update, HIDDEN
        try:
            n = ring_scenario(data).n_gpus
        except RingsimError:
            raise PreventUpdate from None
        t = Translator(lang)
        fig = compute.figure("ring", Scenario(), None, [n, t.lang],
                             lambda: quiz_explain.ring_figure(n, t, {"gpus": n}, height=420))
        return fig, len(fig.frames) - 1, 0, {}

    register_ring_stepper(app, "timeline", "timeline-ring")


def _clicked_row(fig: Any, point: dict[str, Any]) -> tuple[list[float] | None, bool]:
    """The record (figures.timeline's customdata row) of the point clicked on `fig`, or None
    where the point carries none (a message, a span's line rather than its point); and
    whether it is a mark of merged spans."""
    curve, index = point.get("curveNumber"), point.get("pointNumber")
    data = getattr(fig, "data", ())
    if not isinstance(curve, int) or not isinstance(index, int) or not 0 <= curve < len(data):
        return None, False
    rows = data[curve].customdata
    if rows is None or not 0 <= index < len(rows):
        return None, False
    return [float(x) for x in rows[index]], (data[curve].meta or {}).get("marks") == "merged"


def run_of(data: Any, profile_data: Any) -> str:
    """A name of the run on screen (its scenario and profile), for a zoom to hold to."""
    return hashlib.sha1(json.dumps([data, profile_data], sort_keys=True, default=str).encode()).hexdigest()


def zoomed_range(relayout: dict[str, Any] | None) -> list[float] | None | bool:
    """The stretch of time (in the chart's unit, from the run's start) a change of the
    chart's axes shows, from Plotly's relayout event: None for the whole run (a
    double-click, an autorange), False where the time axis did not change (a resize)."""
    r = relayout or {}
    if r.get("xaxis.autorange"):
        return None
    lo_hi = r.get("xaxis.range") or [r.get("xaxis.range[0]"), r.get("xaxis.range[1]")]
    if any(not isinstance(x, (int, float)) for x in lo_hi):
        return False
    lo, hi = sorted(float(x) for x in lo_hi)
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= max(lo, 0.0):
        return False
    return [max(lo, 0.0), hi]
