"""The Questions view: eight questions on sequence parallelism and Ring Attention, each
answered by a live view of the scenario on screen.

A question shows four choices. Once answered it says right or wrong, explains why
(the catalogs' text) and, beside it, draws the view that proves it with the numbers the
explanation quotes (dashboard/quiz_explain.py). Question n is docs/design.md's fact n. The
score counts first answers; a question can be answered again to see the other choices'
outcome. Answers stay in the browser's session storage; the question, view and
language are in the URL (dashboard/nav.py).
"""

from __future__ import annotations

import math
from typing import Any

from dash import Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dashboard import compute, quiz_explain, quiz_figures
from dashboard.i18n import Translator
from dashboard.nav import N_QUESTIONS
from dashboard.state import defaults, ring_values, scenario_from_values
from sim.errors import RingsimError
from sim.scenario.config import Scenario
from sim.schemes import DEFAULT as DEFAULT_SCHEME

ANSWERS = {1: 1, 2: 0, 3: 2, 4: 3, 5: 1, 6: 0, 7: 3, 8: 2}
"""The right choice (0-based) of each question; the choices' texts are in the catalogs."""
N_CHOICES = 4
LETTERS = "ABCD"
BANDWIDTH_STEP = 0.01
"""Question 5's bandwidth control moves in steps of this many decades."""
QUESTIONS_WITH_BANDWIDTH = (5,)
QUESTIONS_WITH_ROW = (3, 7)
_HIDDEN = {"display": "none"}
RING_STEP_MS = 900
"""The ring animation's pace: one hop per this many milliseconds."""


def choice_text(t: Translator, q: int, i: int) -> str:
    return f"{LETTERS[i]}. {t(f'q{q}.choice.{i}')}"


def score(answers: dict[str, Any] | None) -> tuple[int, int]:
    """(first answers that were right, questions answered)."""
    answers = answers or {}
    right = sum(1 for q, a in answers.items()
                if q.isdigit() and int(q) in ANSWERS and a.get("first") == ANSWERS[int(q)])
    return right, sum(1 for q in answers if q.isdigit() and int(q) in ANSWERS)


def stores() -> list[Any]:
    """The answers, kept for the browser tab's session (mounted whatever the open view)."""
    return [dcc.Store(id="quiz-answers", storage_type="session", data={})]


def view() -> html.Div:
    return html.Div(className="quiz", children=[
        html.Div(className="quiz-nav", children=[
            html.Span(id="quiz-nav-label", className="quiz-nav-label"),
            dcc.RadioItems(id="quiz-q", value=1, inline=True, className="quiz-steps",
                           options=[{"label": str(i), "value": i} for i in range(1, N_QUESTIONS + 1)]),
            html.Span(id="quiz-score", className="quiz-score", role="status"),
        ]),
        html.Div(className="quiz-body", children=[
            html.Div(className="quiz-left", children=[
                html.H3(id="quiz-title", className="quiz-title"),
                html.P(id="quiz-text", className="quiz-question"),
                dcc.RadioItems(id="quiz-choice", options=[], value=None, className="quiz-choices"),
                html.Div(id="quiz-verdict", className="quiz-verdict", role="status"),
                html.P(id="quiz-why", className="quiz-why"),
                html.P(id="quiz-live", className="quiz-live"),
                html.Div(id="quiz-final", className="quiz-final"),
                html.Div(className="quiz-buttons", children=[
                    html.Button(id="quiz-next", n_clicks=0),
                    html.Button(id="quiz-restart", n_clicks=0, className="small"),
                ]),
            ]),
            html.Div(id="quiz-right", className="quiz-right", style=_HIDDEN, children=[
                html.Div(id="quiz-bw-box", className="inline", style=_HIDDEN, children=[
                    html.Label(id="quiz-bw-label", htmlFor="quiz-bw"),
                    html.Div(dcc.Slider(id="quiz-bw", min=0, max=3, step=BANDWIDTH_STEP, value=None,
                                        marks=None, updatemode="mouseup", allow_direct_input=False,
                                        tooltip={"placement": "bottom", "transform": "ringsimGbps"}),
                             className="slider"),
                ]),
                html.Div(id="quiz-row-box", className="inline", style=_HIDDEN, children=[
                    html.Label(id="quiz-row-label", htmlFor="quiz-row"),
                    html.Div(dcc.Slider(id="quiz-row", min=0, max=63, step=1, value=None, marks=None,
                                        tooltip={"placement": "bottom"}), className="slider"),
                ]),
                ring_controls("quiz"),
                dcc.Loading(dcc.Graph(id="quiz-figure", config={"displaylogo": False},
                                      style={"minHeight": "440px"}), type="dot", delay_show=300),
            ]),
        ]),
    ])


def _scenario(data: Any) -> Scenario:
    """The page's scenario as a ring: the questions are about Ring Attention, whatever
    scheme the other views show."""
    values = (data or {}).get("values") if isinstance(data, dict) else None
    return scenario_from_values(ring_values(values or defaults()))


def _log10(x: float) -> float:
    return round(math.log10(x), 2)


def _gbps(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def register_callbacks(app) -> None:
    @app.callback(Output("quiz-title", "children"), Output("quiz-text", "children"),
                  Output("quiz-choice", "options"), Output("quiz-choice", "value"),
                  Input("quiz-q", "value"), Input("lang", "value"), State("quiz-answers", "data"))
    def question(q, lang, answers):
        if q not in ANSWERS:
            raise PreventUpdate
        t = Translator(lang)
        last = ((answers or {}).get(str(q)) or {}).get("last")
        options = [{"label": choice_text(t, q, i), "value": i} for i in range(N_CHOICES)]
        return (t("quiz.title", n=q, total=N_QUESTIONS), t(f"q{q}.text"), options,
                last if last in range(N_CHOICES) else None)

    @app.callback(Output("quiz-answers", "data"),
                  Output("quiz-q", "value", allow_duplicate=True),
                  Output("quiz-choice", "value", allow_duplicate=True),
                  Input("quiz-choice", "value"), Input("quiz-next", "n_clicks"),
                  Input("quiz-restart", "n_clicks"),
                  State("quiz-q", "value"), State("quiz-answers", "data"), prevent_initial_call=True)
    def answer(choice, _next, _restart, q, answers):
        if ctx.triggered_id == "quiz-restart":
            return {}, 1, None
        if q not in ANSWERS:
            raise PreventUpdate
        if ctx.triggered_id == "quiz-next":
            return no_update, q % N_QUESTIONS + 1, no_update
        if choice not in range(N_CHOICES):
            raise PreventUpdate
        answers = dict(answers or {})
        old = answers.get(str(q))
        new = {"first": old["first"] if old else choice, "last": choice}
        if old == new:
            raise PreventUpdate
        answers[str(q)] = new
        return answers, no_update, no_update

    @app.callback(Output("quiz-bw", "min"), Output("quiz-bw", "max"), Output("quiz-bw", "marks"),
                  Output("quiz-bw", "value"), Output("quiz-row", "max"), Output("quiz-row", "value"),
                  Input("scenario", "data"))
    def controls(data):
        try:
            sc = _scenario(data)
        except RingsimError:
            raise PreventUpdate from None
        lo, hi = quiz_explain.bandwidth_range(sc)
        now = sc.hardware.link.bandwidth_gbps
        b_star = compute.crossover_bandwidth_gbps(sc.hardware, sc, sc.tokens_per_rank)
        lo_log, hi_log = math.floor(math.log10(lo) * 100) / 100, math.ceil(math.log10(hi) * 100) / 100
        marks = {lo_log: _gbps(10 ** lo_log), hi_log: _gbps(10 ** hi_log),
                 _log10(b_star): _gbps(b_star), _log10(now): _gbps(now)}
        _, seq = quiz_explain.merge_size(sc)
        return lo_log, hi_log, marks, math.log10(now), seq - 1, seq - 1

    @app.callback(Output("quiz-verdict", "children"), Output("quiz-verdict", "className"),
                  Output("quiz-why", "children"), Output("quiz-live", "children"),
                  Output("quiz-figure", "figure"), Output("quiz-right", "style"),
                  Output("quiz-bw-box", "style"), Output("quiz-row-box", "style"),
                  Output("quiz-score", "children"), Output("quiz-final", "children"),
                  Output("quiz-ring-box", "style"), Output("quiz-ring-step", "max"),
                  Output("quiz-ring-step", "value"),
                  Input("quiz-answers", "data"), Input("quiz-q", "value"), Input("lang", "value"),
                  Input("scenario", "data"), Input("quiz-bw", "value"), Input("quiz-row", "value"),
                  Input("tabs", "value"))
    def explanation(answers, q, lang, data, bw_log, row, tab):
        if tab != "questions" or q not in ANSWERS:
            raise PreventUpdate
        t = Translator(lang)
        right, answered = score(answers)
        score_text = t("quiz.score", right=right, answered=answered, total=N_QUESTIONS)
        final = t("quiz.final", right=right, total=N_QUESTIONS) if answered == N_QUESTIONS else None
        given = ((answers or {}).get(str(q)) or {}).get("last")
        if given not in range(N_CHOICES):
            return (t("quiz.prompt"), "quiz-verdict", None, None, no_update, _HIDDEN, _HIDDEN,
                    _HIDDEN, score_text, final, _HIDDEN, no_update, no_update)
        ok = given == ANSWERS[q]
        verdict = ("✓ " + t("quiz.right") if ok else
                   "✗ " + t("quiz.wrong", answer=choice_text(t, q, ANSWERS[q])))
        bw = 10 ** bw_log if isinstance(bw_log, (int, float)) else None
        row = int(row) if isinstance(row, (int, float)) else None
        try:
            sc = _scenario(data)
            key = [q, t.lang, float(f"{bw:.4g}") if bw and q == 5 else None,
                   row if q in QUESTIONS_WITH_ROW else None]
            ex = compute.figure("quiz", sc, None, key, lambda: quiz_explain.explain(
                q, sc, t, bandwidth_gbps=bw, query_row=row))
            live, fig = ex.live, ex.figure
        except RingsimError as e:
            live, fig = str(e), quiz_figures.message(str(e))
        shown = {"display": "flex"}
        steps = len(fig.frames or ())
        return (verdict, "quiz-verdict " + ("right" if ok else "wrong"), t(f"q{q}.why"), live, fig,
                {}, shown if q in QUESTIONS_WITH_BANDWIDTH else _HIDDEN,
                shown if q in QUESTIONS_WITH_ROW else _HIDDEN, score_text, final,
                shown if steps else _HIDDEN, max(steps - 1, 1), 0)

    # the ring animation under the timeline
    @app.callback(Output("timeline-ring", "figure"), Output("timeline-ring-step", "max"),
                  Output("timeline-ring-step", "value"), Output("timeline-ring-section", "style"),
                  Input("scenario", "data"), Input("lang", "value"), Input("tabs", "value"))
    def timeline_ring(data, lang, tab):
        if tab != "timeline":
            raise PreventUpdate
        values = (data or {}).get("values") if isinstance(data, dict) else None
        if (values or {}).get("scheme", DEFAULT_SCHEME) != DEFAULT_SCHEME:
            # the animation is the ring's: another scheme's timeline stands alone
            return no_update, no_update, no_update, _HIDDEN
        try:
            n = _scenario(data).n_gpus
        except RingsimError:
            raise PreventUpdate from None
        t = Translator(lang)
        fig = compute.figure("ring", Scenario(), None, [n, t.lang],
                             lambda: quiz_explain.ring_figure(n, t, {"gpus": n}, height=420))
        return fig, len(fig.frames) - 1, 0, {}

    for prefix, graph in (("timeline", "timeline-ring"), ("quiz", "quiz-figure")):
        _register_ring_stepper(app, prefix, graph)


# The ring's steps play in the browser: a timer advances the step slider, and the step
# picks its frame out of the figure. No request reaches the server while it plays.
_PLAY = """
function(n, stopped, step, last) {
    const nu = window.dash_clientside.no_update;
    if (!n) { return [true, "▶", nu]; }
    if (stopped) { return [false, "❚❚", (step || 0) >= last ? 0 : nu]; }
    return [true, "▶", nu];
}
"""
_TICK = """
function(n, step, last) {
    const nu = window.dash_clientside.no_update;
    const next = Math.min((step || 0) + 1, last);
    const done = next >= last;
    return [next, done ? true : nu, done ? "▶" : nu];
}
"""
_DRAW = """
function(step, fig) {
    if (!fig || !fig.frames || !fig.frames.length) { return window.dash_clientside.no_update; }
    const frame = fig.frames[Math.max(0, Math.min(step || 0, fig.frames.length - 1))];
    const data = fig.data.slice();
    (frame.traces || []).forEach(function (index, i) {
        data[index] = Object.assign({}, data[index], frame.data[i]);
    });
    return Object.assign({}, fig, {data: data, layout: Object.assign({}, fig.layout, frame.layout || {})});
}
"""


def _register_ring_stepper(app, prefix: str, graph: str) -> None:
    play, timer, step = f"{prefix}-ring-play", f"{prefix}-ring-timer", f"{prefix}-ring-step"
    app.clientside_callback(_PLAY, Output(timer, "disabled"), Output(play, "children"),
                            Output(step, "value", allow_duplicate=True),
                            Input(play, "n_clicks"), State(timer, "disabled"), State(step, "value"),
                            State(step, "max"), prevent_initial_call=True)
    app.clientside_callback(_TICK, Output(step, "value", allow_duplicate=True),
                            Output(timer, "disabled", allow_duplicate=True),
                            Output(play, "children", allow_duplicate=True),
                            Input(timer, "n_intervals"), State(step, "value"), State(step, "max"),
                            prevent_initial_call=True)
    app.clientside_callback(_DRAW, Output(graph, "figure", allow_duplicate=True),
                            Input(step, "value"), State(graph, "figure"), prevent_initial_call=True)


def ring_controls(prefix: str) -> html.Div:
    """Play/pause and the step of a ring animation drawn by `ring_steps`."""
    return html.Div(id=f"{prefix}-ring-box", className="inline ring-controls", children=[
        html.Button("\u25b6", id=f"{prefix}-ring-play", n_clicks=0, className="small ring-play"),
        html.Label(id=f"{prefix}-ring-step-label", htmlFor=f"{prefix}-ring-step"),
        html.Div(dcc.Slider(id=f"{prefix}-ring-step", min=0, max=7, step=1, value=0,
                            allow_direct_input=False, tooltip={"placement": "bottom"}),
                 className="slider"),
        dcc.Interval(id=f"{prefix}-ring-timer", interval=RING_STEP_MS, disabled=True),
    ])


def timeline_ring() -> html.Div:
    """The ring-stepping animation, shown under the timeline."""
    return html.Div(className="ring-box", id="timeline-ring-section", children=[
        html.Div(id="timeline-ring-label", className="help"),
        ring_controls("timeline"),
        dcc.Graph(id="timeline-ring", config={"displaylogo": False, "displayModeBar": False},
                  style={"maxWidth": "640px"}),
    ])
