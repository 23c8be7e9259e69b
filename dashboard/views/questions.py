"""The Questions view: eight questions on sequence parallelism and Ring Attention, each
answered by a live view of the scenario on screen.

The questions and their four choices are the quiz's as its author wrote them (some in
Bahasa Indonesia, some in English; tests/data/quiz.txt), each shown in the page's
language: the author's words where they are in it, a faithful translation otherwise. Once
answered it says right or wrong, explains why (the catalogs' text) and, beside it, draws
the view that proves it with the numbers the explanation quotes (dashboard/quiz_explain.py).
Question n is docs/design.md's fact n. The score counts first answers; a question can be
answered again to see the other choices' outcome. Answers stay in the browser's session storage; the question, view and
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
from dashboard.views.common import HIDDEN, shown
from dashboard.views.ring_animation import register_ring_stepper, ring_controls, ring_scenario
from sim.errors import RingsimError

ANSWERS = {1: 1, 2: 3, 3: 0, 4: 2, 5: 3, 6: 1, 7: 2, 8: 0}
"""The right choice (0-based, in the author's order) of each question, the one the quiz
means: the token dimension, key/value blocks, online softmax, K/V streamed in blocks,
overlap, later tokens handling more keys, keeping the sums consistent with the running
maximum, later tokens. The questions' and choices' texts are in the catalogs."""
N_CHOICES = 4
LETTERS = "ABCD"
BANDWIDTH_STEP = 0.01
"""Question 5's bandwidth control moves in steps of this many decades."""
QUESTIONS_WITH_BANDWIDTH = (5,)
QUESTIONS_WITH_ROW = (3, 7)


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
            html.Div(id="quiz-right", className="quiz-right", style=HIDDEN, children=[
                html.Div(id="quiz-bw-box", className="inline", style=HIDDEN, children=[
                    html.Label(id="quiz-bw-label", htmlFor="quiz-bw"),
                    html.Div(dcc.Slider(id="quiz-bw", min=0, max=3, step=BANDWIDTH_STEP, value=None,
                                        marks=None, updatemode="mouseup", allow_direct_input=False,
                                        tooltip={"placement": "bottom", "transform": "ringsimGbps"}),
                             className="slider"),
                ]),
                html.Div(id="quiz-row-box", className="inline", style=HIDDEN, children=[
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


def _log10(x: float) -> float:
    return round(math.log10(x), 2)


def _gbps(t: Translator, x: float) -> str:
    """A tick of the bandwidth control: GB/s, three digits, in the page's language."""
    return t.int(x) if x >= 100 else t.num(x, 3)


def register_callbacks(app) -> None:
    @app.callback(Output("quiz-title", "children"), Output("quiz-text", "children"),
                  Output("quiz-choice", "options"), Output("quiz-choice", "value"), Output("quiz-next", "style"),
                  Input("quiz-q", "value"), Input("lang", "value"), State("quiz-answers", "data"))
    def question(q, lang, answers):
        if q not in ANSWERS:
            raise PreventUpdate
        t = Translator(lang)
        last = ((answers or {}).get(str(q)) or {}).get("last")
        options = [{"label": choice_text(t, q, i), "value": i} for i in range(N_CHOICES)]
        # the last question has no next one: Restart, or a number above, goes back
        return (t("quiz.title", n=q, total=N_QUESTIONS), t(f"q{q}.text"), options,
                last if last in range(N_CHOICES) else None, HIDDEN if q == N_QUESTIONS else {})

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
                  State("scenario", "data"), State("lang", "value"), shown("questions"))
    def controls(data, lang, _shown):
        try:
            sc = ring_scenario(data)
        except RingsimError:
            raise PreventUpdate from None
        lo, hi = quiz_explain.bandwidth_range(sc)
        now = sc.hardware.link.bandwidth_gbps
        b_star = compute.crossover_bandwidth_gbps(sc.hardware, sc, sc.tokens_per_rank)
        lo_log, hi_log = math.floor(math.log10(lo) * 100) / 100, math.ceil(math.log10(hi) * 100) / 100
        t = Translator(lang)
        marks = {lo_log: _gbps(t, 10 ** lo_log), hi_log: _gbps(t, 10 ** hi_log), _log10(now): _gbps(t, now)}
        if b_star is not None:          # none: no bandwidth hides this block's transfer, or every one does
            marks[_log10(b_star)] = _gbps(t, b_star)
        _, seq = quiz_explain.merge_size(sc)
        return lo_log, hi_log, marks, math.log10(now), seq - 1, seq - 1

    @app.callback(Output("quiz-verdict", "children"), Output("quiz-verdict", "className"),
                  Output("quiz-why", "children"), Output("quiz-live", "children"),
                  Output("quiz-figure", "figure"), Output("quiz-right", "style"),
                  Output("quiz-bw-box", "style"), Output("quiz-row-box", "style"),
                  Output("quiz-score", "children"), Output("quiz-final", "children"),
                  Output("quiz-ring-box", "style"), Output("quiz-ring-step", "max"),
                  Output("quiz-ring-step", "value"),
                  Input("quiz-answers", "data"), Input("quiz-q", "value"), State("lang", "value"),
                  State("scenario", "data"), Input("quiz-bw", "value"), Input("quiz-row", "value"),
                  State("tabs", "value"), shown("questions"))
    def explanation(answers, q, lang, data, bw_log, row, tab, _shown):
        if tab != "questions" or q not in ANSWERS:
            raise PreventUpdate
        t = Translator(lang)
        right, answered = score(answers)
        score_text = t("quiz.score", right=right, answered=answered, total=N_QUESTIONS)
        final = t("quiz.final", right=right, total=N_QUESTIONS) if answered == N_QUESTIONS else None
        given = ((answers or {}).get(str(q)) or {}).get("last")
        if given not in range(N_CHOICES):
            return (t("quiz.prompt"), "quiz-verdict", None, None, no_update, HIDDEN, HIDDEN,
                    HIDDEN, score_text, final, HIDDEN, no_update, no_update)
        ok = given == ANSWERS[q]
        verdict = ("✓ " + t("quiz.right") if ok else
                   "✗ " + t("quiz.wrong", answer=choice_text(t, q, ANSWERS[q])))
        bw = 10 ** bw_log if isinstance(bw_log, (int, float)) else None
        row = int(row) if isinstance(row, (int, float)) else None
        try:
            sc = ring_scenario(data)
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
                {}, shown if q in QUESTIONS_WITH_BANDWIDTH else HIDDEN,
                shown if q in QUESTIONS_WITH_ROW else HIDDEN, score_text, final,
                shown if steps else HIDDEN, max(steps - 1, 1), 0)

    register_ring_stepper(app, "quiz", "quiz-figure")
