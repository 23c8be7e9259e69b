"""The controls on the left: the scenario (dashboard/state.py's controls, each with a
message slot `<id>-msg` where what is wrong with its value is said), kept in step with the
URL and validated (the views keep the last valid scenario meanwhile); a cluster preset
filling in the controls it sets; the settings shown by scheme; and the calibrated profile,
loaded or cleared, which then is the hardware: the GPU and link controls name it and the
preset numbers it replaces are disabled.
"""

from __future__ import annotations

import hashlib
from typing import Any

import dash
from dash import Input, Output, State, ctx, dcc, html, no_update

from dashboard import i18n, measured, nav
from dashboard.contents import HELP
from dashboard.i18n import Translator
from dashboard.served import EXAMPLE_PROFILE_TOKEN, MAX_UPLOAD_BYTES, Served, profile_from_upload, profile_note
from dashboard.state import (
    CONTROL_IDS,
    NO_CLUSTER,
    PRESET_P2P,
    RING_CONTROLS,
    SAME_LINK,
    SCHEME_CONTROLS,
    ControlError,
    applies,
    check_profile_dtype,
    cluster_values,
    control_label,
    defaults,
    message,
    profile_changes,
    query_from_values,
    read_typed,
    scenario_from_values,
    shown_layouts,
    typed_number,
    unknown_keys,
    values_from_query,
)
from dashboard.views.common import HIDDEN, changed
from sim.errors import RingsimError
from sim.hardware.pcie import P2P_MODES
from sim.hardware.presets import CLUSTER_PRESETS, GPU_PRESETS, LINK_PRESETS
from sim.scenario.config import PASSES
from sim.scenario.resolve import CUSTOM
from sim.scenario.schema import scenario_option
from sim.schemes import names as scheme_names

PRESET_HARDWARE_CONTROLS = ("cluster", "tflops", "efficiency", "overhead-us", "link-gbps", "link-latency-us",
                            "inter-link", "nics-per-node", "nic-gbps", "p2p")
"""What a calibrated profile replaces besides the GPU and the link (sim.engine.play.simulate
times every block and transfer on the profile): disabled while one is loaded."""


def field_style(cid: str, scheme: str) -> dict[str, str]:
    """A control's field is shown only where it applies to the scheme (dashboard.state.applies)."""
    return {} if applies(cid, scheme) else HIDDEN


def _field(cid: str, label: str, component: Any, style: dict[str, str] | None = None) -> html.Div:
    return html.Div(className="field", id=f"{cid}-field", style=style or {}, children=[
        html.Label(label, htmlFor=cid, id=f"{cid}-label"),
        component,
        html.Div(HELP.get(cid, ""), className="help", id=f"{cid}-help") if cid in HELP else None,
        html.Div(id=f"{cid}-msg", className="msg", role="alert"),
    ])


def _number(cid: str, label: str, value: Any, placeholder: str = "", style: dict | None = None) -> html.Div:
    # a text box the page reads in its own language (dashboard.state.typed_number): a number
    # box is read by the browser in the browser's, which took an Indonesian 1.000 for 1 and
    # dropped what it could not read without a word
    return _field(cid, label, dcc.Input(id=cid, type="text", inputMode="decimal", value=value, debounce=True,
                                        placeholder=placeholder, className="num", spellCheck=False,
                                        autoComplete="off"), style)


def _text(cid: str, label: str, value: Any, placeholder: str = "") -> html.Div:
    return _field(cid, label, dcc.Input(id=cid, type="text", value=value, debounce=True,
                                        placeholder=placeholder, className="text", spellCheck=False))


def _dropdown(cid: str, label: str, options: list[Any], value: Any) -> html.Div:
    opts = [o if isinstance(o, dict) else {"label": str(o), "value": o} for o in options]
    return _field(cid, label, dcc.Dropdown(id=cid, options=opts, value=value, clearable=False,
                                           searchable=False))


def _onoff(cid: str, label: str, value: bool) -> html.Div:
    return _field(cid, label, dcc.RadioItems(
        id=cid, options=[{"label": "on", "value": True}, {"label": "off", "value": False}],
        value=value, inline=True, className="radio"))


def controls() -> html.Div:
    """The controls column, at the page's defaults (the URL sets them on load)."""
    d = defaults()
    scheme = d["scheme"]
    en = i18n.Translator(i18n.DEFAULT_LANG)     # the language callback sets every label on load
    return html.Div(className="controls", children=[
        html.H3("Scheme", id="h-scheme"),
        _number("gpus", "GPUs", d["gpus"]),
        _field("scheme", "Scheme", dcc.RadioItems(
            id="scheme", options=[{"label": i18n.scheme_label(en, x), "value": x} for x in scheme_names()],
            value=scheme, className="radio")),
        _number("head-groups", "Head groups", d["head-groups"], style=field_style("head-groups", scheme)),
        _number("ulysses-degree", "Ulysses degree", d["ulysses-degree"], "auto",
                style=field_style("ulysses-degree", scheme)),
        _number("ring-degree", "Ring degree", d["ring-degree"], "auto",
                style=field_style("ring-degree", scheme)),
        _field("placement", "Placement", dcc.RadioItems(
            id="placement", options=[{"label": en(f"opt.placement.{x}"), "value": x}
                                     for x in scenario_option("placement").choices],
            value=d["placement"], className="radio"), field_style("placement", scheme)),
        _dropdown("impl", "Implementation", [{"label": en(f"opt.impl.{x}"), "value": x}
                                             for x in scenario_option("impl").choices], d["impl"]),
        html.Div(id="ring-section", style=field_style("layout", scheme), children=[
            html.H3("Ring", id="h-ring"),
            _field("layout", "Layout", dcc.RadioItems(
                id="layout", options=[{"label": x, "value": x}
                                      for x in shown_layouts(d["docs"], d["window"], d["layout"])],
                value=d["layout"],
                className="radio")),
            _onoff("overlap", "Overlap transfers with compute", d["overlap"]),
            _field("sync", "Forwarding (with overlap)", dcc.RadioItems(
                id="sync", options=[{"label": "per step", "value": "step"},
                                    {"label": "buffered", "value": "buffered"}],
                value=d["sync"], className="radio")),
        ]),
        html.H3("Workload", id="h-workload"),
        _number("seq", "Sequence length", d["seq"]),
        _number("batch", "Batch", d["batch"]),
        _number("heads", "Query heads", d["heads"]),
        _number("kv-heads", "K/V heads", d["kv-heads"]),
        _number("head-dim", "Head dim", d["head-dim"]),
        _dropdown("dtype", "dtype", ["bf16", "fp16", "fp32"], d["dtype"]),
        _onoff("causal", "Causal mask", d["causal"]),
        _dropdown("pass", "Pass", [{"label": {"fwd": "forward", "bwd": "backward",
                                              "fwdbwd": "forward + backward"}[p], "value": p}
                                   for p in PASSES], d["pass"]),
        _text("docs", "Documents", d["docs"], "one document"),
        _number("seed", "Seed", d["seed"]),
        _number("window", "Window (tokens)", d["window"], "none"),
        html.H3("Hardware", id="h-hardware"),
        _dropdown("cluster", "Cluster preset", [{"label": "none", "value": NO_CLUSTER},
                                                *[{"label": x, "value": x} for x in CLUSTER_PRESETS]],
                  d["cluster"]),
        _dropdown("gpu", "GPU", [*GPU_PRESETS, CUSTOM], d["gpu"]),
        _number("tflops", "Achieved TFLOP/s", d["tflops"], "preset"),
        _number("efficiency", "Efficiency", d["efficiency"], "0.5"),
        _number("overhead-us", "Launch overhead (µs)", d["overhead-us"], "5"),
        _dropdown("link", "Link inside a node", [*LINK_PRESETS, CUSTOM], d["link"]),
        _number("link-gbps", "Link GB/s", d["link-gbps"], "preset"),
        _number("link-latency-us", "Link latency (µs)", d["link-latency-us"], "preset"),
        _dropdown("inter-link", "Link between nodes",
                  [{"label": "same as above", "value": SAME_LINK},
                   *[{"label": x, "value": x} for x in LINK_PRESETS]], d["inter-link"]),
        _number("gpus-per-node", "GPUs per node", d["gpus-per-node"]),
        _number("nics-per-node", "NICs per node", d["nics-per-node"], "one per GPU"),
        _number("nic-gbps", "NIC GB/s", d["nic-gbps"], "link's"),
        _dropdown("p2p", "PCIe peer to peer", [PRESET_P2P, *P2P_MODES], d["p2p"]),
        html.Div(className="field", children=[
            html.Label("Calibrated profile", id="profile-label"),
            dcc.Upload(id="profile-upload", max_size=MAX_UPLOAD_BYTES, accept=".json,application/json",
                       className="upload", children=html.Div(["drop or ", html.A("choose"),
                                                              " a profile (JSON)"])),
            html.Div(id="profile-status", className="help"),
            html.Button("use presets", id="profile-clear", n_clicks=0, className="small"),
            html.Div(id="profile-msg", className="msg", role="alert"),
        ]),
        html.H3("Work counting", id="h-counting"),
        _dropdown("granularity", "Granularity", ["exact", "tile"], d["granularity"]),
        _number("tile", "Tile (tokens)", d["tile"]),
    ])


def register_callbacks(app: dash.Dash, served: Served) -> None:
    index = {cid: i for i, cid in enumerate(CONTROL_IDS)}

    @app.callback(
        [Output(cid, "value") for cid in CONTROL_IDS]
        + [Output("url", "search"), Output("scenario", "data"), Output("banner", "children")]
        + [Output(f"{cid}-msg", "children") for cid in CONTROL_IDS],
        [Input("url", "search")] + [Input(cid, "value") for cid in CONTROL_IDS]
        + [Input("profile", "data"), Input("lang", "value")],
        [State("scenario", "data"), State("tabs", "value"), State("banner", "children")]
        + [State(f"{cid}-msg", "children") for cid in CONTROL_IDS],
    )
    def sync(search, *rest):
        n = len(CONTROL_IDS)
        vals, (profile_data, lang, current, tab, shown_banner), shown_msgs = rest[:n], rest[n:n + 5], rest[n + 5:]
        prof = served.loaded_profile(profile_data)
        # the messages in the page's language: the URL's (it carries the language) until the
        # switch has taken it
        t = Translator(lang if "lang" in set(ctx.triggered_prop_ids.values()) else nav.parse_nav(search)[0]["lang"])
        # the page's first call names every input it has a value for: the URL wins
        triggered = set(ctx.triggered_prop_ids.values())
        if not triggered or "url" in triggered:
            values, ignored = values_from_query(search)
            url_out = no_update
            if prof is not None and not current:
                # the page's first scenario: one the profile can time, within what it measured
                changes = profile_changes(values, prof)
                values.update(changes)
                if changes:
                    url_out = nav.with_nav(query_from_values(values), search)
            # a control already showing its value is left alone: the page redraws only those
            # the address changed (re-rendering all of them took the browser about 0.4 s)
            value_out = [values[cid] if not triggered or values[cid] != typed_number(now, t.lang) else no_update
                         for cid, now in zip(CONTROL_IDS, vals)]
        else:
            # the numbers as typed, read in the page's language; each box read shows its number
            values, read = read_typed(dict(zip(CONTROL_IDS, vals)), lang)
            ignored = []
            value_out = [read.get(cid, no_update) for cid in CONTROL_IDS]
            if triggered == {"profile"}:
                changes = profile_changes(values, prof) if prof is not None else {}
                values.update(changes)
                value_out = [changes.get(cid, v) for cid, v in zip(CONTROL_IDS, value_out)]
                url_out = nav.with_nav(query_from_values(values), search) if changes else no_update
            elif triggered == {"lang"}:
                # the same values, their messages said again
                url_out = no_update
            else:
                if ctx.triggered_id == "cluster":
                    # a cluster preset fills in the controls it sets, as `ringsim --cluster` does
                    filled = cluster_values(values["cluster"])
                    values.update(filled)
                    value_out = [filled.get(cid, v) for cid, v in zip(CONTROL_IDS, value_out)]
                url_out = nav.with_nav(query_from_values(values), search)
        msgs = [""] * len(CONTROL_IDS)
        banner = [t("nav.ignored", params=", ".join(ignored))] if ignored else []
        if not triggered or "url" in triggered:
            unknown = unknown_keys(search, nav.NAV_KEYS)
            if unknown:
                banner.append(t("nav.unknown", params=", ".join(unknown)))
        try:
            scenario_from_values(values)
            if prof is not None:
                check_profile_dtype(values, prof)
            # a link that changes only the view, question or language keeps the scenario
            same = (current or {}).get("values") == values
            store = no_update if same else {"values": values}
            if not same and tab != "measured" and (prof is not None or not profile_data):
                # the cards beside every view but Measured show this run's metrics: made from now on
                served.start_run(store, profile_data)
        except ControlError as e:
            msgs[index[e.control]] = message(t, e)
            # the line at the top names the control and says what is wrong: the control may
            # be far down the column from the one just changed (GPUs that do not divide the
            # sequence: the message is under Sequence length)
            said = {"control": control_label(t, e.control), "message": msgs[index[e.control]]}
            if not current and (not triggered or "url" in triggered):
                # a link the page cannot simulate, and nothing valid shown yet: the defaults
                store = {"values": defaults(), "link_refused": True}
                banner.append(t("banner.defaults", **said))
            elif (current or {}).get("link_refused"):
                store = no_update
                banner.append(t("banner.defaults", **said))
            else:
                store = no_update
                banner.append(t("banner.last-valid", **said))
        # a line already saying what it should is left alone, as a control is
        banner_out = " ".join(banner) or None
        return (value_out + [url_out, store, changed(banner_out, shown_banner)]
                + [changed(m, shown) for m, shown in zip(msgs, shown_msgs)])

    # a loaded profile is the hardware: the GPU and link controls name it, the preset
    # numbers it replaces are disabled
    @app.callback([Output("gpu", "options"), Output("gpu", "disabled"), Output("link", "options"),
                   Output("link", "disabled")] + [Output(cid, "disabled") for cid in PRESET_HARDWARE_CONTROLS],
                  Input("profile", "data"), Input("gpu", "value"), Input("link", "value"), Input("lang", "value"))
    def hardware_controls(profile_data, gpu, link, lang):
        prof = served.loaded_profile(profile_data)
        t = Translator(lang)
        if prof is None:
            def named(x):
                return {"label": t("opt.custom") if x == CUSTOM else x, "value": x}

            return ([named(x) for x in (*GPU_PRESETS, CUSTOM)], False,
                    [named(x) for x in (*LINK_PRESETS, CUSTOM)], False,
                    *[False] * len(PRESET_HARDWARE_CONTROLS))
        device = (prof.measured_on or {}).get("device") or profile_data.get("name")
        fit = prof.link
        link_label = t("ctl.link.profile", gbps=t.gbps(fit.bandwidth_bytes_per_s / 1e9),
                       latency=t.time(fit.latency_s))
        return ([{"label": t("ctl.gpu.profile", device=device), "value": gpu}], True,
                [{"label": link_label, "value": link}], True, *[True] * len(PRESET_HARDWARE_CONTROLS))

    # the scheme's own settings and the ring's controls, shown where they apply
    shown_by_scheme = sorted({cid for cids in SCHEME_CONTROLS.values() for cid in cids})

    @app.callback([Output(f"{cid}-field", "style") for cid in shown_by_scheme]
                  + [Output("ring-section", "style")], Input("scheme", "value"))
    def scheme_settings(scheme):
        return [field_style(cid, scheme) for cid in shown_by_scheme] + [field_style(RING_CONTROLS[0], scheme)]

    # loading and clearing a calibrated profile
    @app.callback(Output("profile", "data"), Output("profile-msg", "children"),
                  Input("profile-upload", "contents"), Input("profile-clear", "n_clicks"),
                  Input("profile-example", "n_clicks"),
                  State("profile-upload", "filename"), prevent_initial_call=True)
    def profile_upload(contents, _, __, filename):
        if ctx.triggered_id == "profile-clear":
            return None, ""
        try:
            if ctx.triggered_id == "profile-example":
                hw = measured.example_profile()
                token, name = EXAMPLE_PROFILE_TOKEN, measured.EXAMPLE_PROFILE
            else:
                hw, raw = profile_from_upload(contents, filename)
                token = "profile-" + hashlib.sha256(raw).hexdigest()[:16]
                name = filename if isinstance(filename, str) else "profile"
        except RingsimError as e:
            return no_update, str(e)
        served.profiles.put(token, hw)
        return profile_note(token, name, hw), ""

    @app.callback(Output("profile-status", "children"), Input("profile", "data"), Input("lang", "value"))
    def profile_status(profile_data, lang):
        t = Translator(lang)
        if profile_data:
            name = profile_data.get("name") or t("ctl.profile.a-profile")
            device = profile_data.get("device")
            return t("ctl.profile.using-on", name=name, device=device) if device else t("ctl.profile.using", name=name)
        return t("ctl.profile.none")
