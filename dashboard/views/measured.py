"""The Measured vs simulated view: a measured trace (an example run shipped with the
package, dashboard/measured.py, or an upload) and its configuration simulated again, on
the loaded profile or the hardware chosen on the left, drawn on paired lanes per GPU with
the per-step error (dashboard/figures/overlay.py); a notice where the trace ran on
another machine than the one simulated, with a button that loads the examples' profile
where it was measured on the trace's machine.
"""

from __future__ import annotations

import hashlib
from typing import Any

import dash
from dash import Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dashboard import compute, export, i18n, measured
from dashboard.figures.overlay import overlay, trace_summary
from dashboard.figures.style import message_figure
from dashboard.i18n import Translator
from dashboard.served import EXAMPLE_PROFILE_TOKEN, MAX_UPLOAD_BYTES, Served
from dashboard.views.common import HIDDEN, graph, only_on, shown
from dashboard.views.labels import figure_labels
from sim.errors import RingsimError


def view(first_example: str | None = None) -> list[Any]:
    """The view's components, on the example run `first_example` (its token), if any."""
    return [
        html.Div(className="inline", children=[
            html.Label("Example run", htmlFor="measured-example", id="measured-example-label"),
            html.Div(dcc.Dropdown(id="measured-example", options=measured.example_options(i18n.DEFAULT_LANG),
                                  value=first_example, clearable=False,
                                  searchable=False, placeholder="your uploaded trace"),
                     className="slider"),
        ]),
        dcc.Upload(id="trace-upload", max_size=MAX_UPLOAD_BYTES,
                   accept=".json,.npz,application/json,application/zip",
                   className="upload wide", children=html.Div([
                       "drop or ", html.A("choose"), " a measured trace (a ringsim trace from ",
                       html.Code("ringsim hw"), ", .json or .npz, at most 50 MB); it is re-simulated on the "
                       "hardware chosen on the left"])),
        html.Div(id="trace-upload-status", className="help"),
        html.Div(id="trace-upload-msg", className="msg", role="alert"),
        html.Div(className="notice", role="status", children=[
            html.Span(id="trace-notice"),
            html.Button(id="profile-example", n_clicks=0, className="small", style=HIDDEN)]),
        graph("overlay", 560)]


def register_callbacks(app: dash.Dash, served: Served) -> None:
    # The view opens on the first example shipped with the package; an upload replaces
    # it (and clears the example chosen), choosing an example brings one back.
    @app.callback(Output("measured", "data"), Output("measured-example", "value"),
                  Output("trace-upload-status", "children"), Output("trace-upload-msg", "children"),
                  Input("trace-upload", "contents"), Input("measured-example", "value"), Input("lang", "value"),
                  State("trace-upload", "filename"), State("measured", "data"))
    def trace_source(contents, example_token, lang, filename, current):
        if ctx.triggered_id == "trace-upload":
            try:
                raw = export.decode_upload(contents, filename, MAX_UPLOAD_BYTES)
                trace = export.parse_trace_upload(contents, filename, MAX_UPLOAD_BYTES)
            except RingsimError as e:
                return no_update, no_update, no_update, str(e)
            token = "trace-" + hashlib.sha256(raw).hexdigest()[:16]
            served.uploaded_traces.put(token, trace)
            name = filename if isinstance(filename, str) else "trace"
            return ({"token": token, "name": name}, None,
                    f"{name}: " + ", ".join(trace_summary(trace)), "")
        if ctx.triggered_id == "lang" and not measured.is_example((current or {}).get("token")):
            raise PreventUpdate          # an upload's status has no words to translate
        if example_token is None:
            raise PreventUpdate
        try:
            ex = measured.example(example_token)
        except RingsimError as e:
            return no_update, no_update, no_update, str(e)
        if ex is None:
            raise PreventUpdate
        t = Translator(lang)
        status = t("measured.example.status", run=measured.example_label(ex, t),
                   device=measured.measured_machine(ex.trace) or "?")
        store = no_update if (current or {}).get("token") == ex.token else {"token": ex.token, "name": ex.file}
        return store, no_update, status, ""

    @app.callback(Output("measured-example", "options"), Input("lang", "value"))
    def example_options(lang):
        return measured.example_options(lang)

    @app.callback(Output("overlay", "figure"), Output("trace-notice", "children"),
                  Output("profile-example", "style"), Output("profile-example", "children"),
                  Input("measured", "data"), State("scenario", "data"), State("profile", "data"),
                  State("tabs", "value"), State("lang", "value"), shown("measured"))
    def draw_overlay(measured_data, data, profile_data, tab, lang, _shown):
        only_on("measured", tab)
        t = Translator(lang)
        hidden = {"display": "none"}
        if not measured_data:
            return message_figure(t("overlay.none")), None, hidden, None
        try:
            pair = served.measured_pair(measured_data, data, profile_data)
            if pair is None:
                return message_figure(t("overlay.gone")), None, hidden, None
            trace, sim_scenario, hw, key = pair
            simulated = compute.run(sim_scenario, hw, key).trace
            notice, offer = None, hidden
            apart = measured.mismatch(trace, hw if hw is not None else sim_scenario.hardware)
            if apart is not None:
                notice = t("measured.mismatch", measured=apart[0], simulated=apart[1] or t("measured.unnamed"))
                if key != EXAMPLE_PROFILE_TOKEN and measured.mismatch(trace, measured.example_profile()) is None:
                    offer = {}        # the profile shipped with the examples is of this machine
        except RingsimError as e:
            return message_figure(str(e)), None, hidden, None
        button = t("measured.use-profile", device=measured.measured_machine(trace))
        fig = overlay(simulated, trace, compute.step_errors(simulated, trace), labels=overlay_labels(t))
        return fig, notice, offer, button


def overlay_labels(t: Translator) -> dict[str, Any]:
    return figure_labels(t, "overlay")
