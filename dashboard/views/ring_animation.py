"""The ring stepping its K/V blocks one hop per step, as the Questions view (question 2)
and the timeline (under it, for the ring) animate it (dashboard/quiz_explain.ring_figure):
the page's scenario as a ring, which both draw; an animation's play/pause button, step
slider and timer; and the clientside callbacks that play it in the browser.
"""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State, dcc, html

from dashboard.state import defaults, ring_values, scenario_from_values
from sim.scenario.config import Scenario

RING_STEP_MS = 900
"""The ring animation's pace: one hop per this many milliseconds."""


def ring_scenario(data: Any) -> Scenario:
    """The page's scenario as a ring: the questions are about Ring Attention, whatever
    scheme the other views show."""
    values = (data or {}).get("values") if isinstance(data, dict) else None
    return scenario_from_values(ring_values(values or defaults()))


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


def register_ring_stepper(app, prefix: str, graph: str) -> None:
    """Play the ring animation of `prefix`'s controls (ring_controls) in `graph`."""
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
    """Play/pause and the step of a ring animation drawn by quiz_figures.ring_steps."""
    return html.Div(id=f"{prefix}-ring-box", className="inline ring-controls", children=[
        html.Button("\u25b6", id=f"{prefix}-ring-play", n_clicks=0, className="small ring-play"),
        html.Label(id=f"{prefix}-ring-step-label", htmlFor=f"{prefix}-ring-step"),
        html.Div(dcc.Slider(id=f"{prefix}-ring-step", min=0, max=7, step=1, value=0,
                            allow_direct_input=False, tooltip={"placement": "bottom"}),
                 className="slider"),
        dcc.Interval(id=f"{prefix}-ring-timer", interval=RING_STEP_MS, disabled=True),
    ])
