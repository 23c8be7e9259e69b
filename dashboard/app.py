"""The Dash app: `create_app()` builds the page and registers its callbacks, a group at
a time (`_register_scenario`, `_register_summary`, `_register_views`, `_register_profile`,
`_register_measured`, and the languages', the URL's, the questions' and the planner's in
their own modules), over what they share on the server (`Served`).

Callbacks are thin: they turn control values into a scenario (dashboard/state.py), get
results through the simulator's public functions (dashboard/compute.py, cached), and
hand them to the pure figure builders (dashboard/figures/). A user's mistake is a
`RingsimError`, shown as a message beside its control or in place of a figure; the
views keep the last valid scenario meanwhile. Views compute only while their tab is open.

Uploaded traces and profiles stay on the server (bounded), the browser keeps only a
token; uploads are capped in size and parsed as JSON only. The Measured view opens on
the example runs shipped in dashboard/examples/ with the profile of their machine
(dashboard/measured.py), read through the same checks as an upload.
"""

from __future__ import annotations

import gc
import hashlib
import os
import re
from collections import OrderedDict
from typing import Any

import dash
from dash import Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dashboard import compute, explain, export, figures, i18n, measured, nav, plan, questions
from dashboard.figures.block_map import LABELS as BLOCK_MAP_TEXTS
from dashboard.figures.comparison import LABELS as COMPARISON_TEXTS
from dashboard.figures.documents import LABELS as DOCUMENT_TEXTS
from dashboard.figures.memory import LABELS as MEMORY_TEXTS
from dashboard.figures.merge import LABELS as MERGE_TEXTS
from dashboard.figures.overlay import LABELS as OVERLAY_TEXTS
from dashboard.figures.schemes import LABELS as SCHEME_TEXTS
from dashboard.figures.sweep import LABELS as SWEEP_TEXTS
from dashboard.i18n import DEFAULT_LANG, Translator, catalog, layout_label, run_words
from dashboard.layout import MAX_UPLOAD_BYTES, field_style, page
from dashboard.state import (
    CONTROL_IDS,
    CUSTOM,
    RING_CONTROLS,
    RING_SCHEMES,
    SCHEME_CONTROLS,
    ControlError,
    check_profile_dtype,
    cluster_values,
    profile_changes,
    query_from_values,
    scenario_from_values,
    values_from_query,
)
from dashboard.views import SUMMARY_CARDS
from sim.errors import RingsimError
from sim.hardware.presets import GPU_PRESETS, LINK_PRESETS
from sim.layouts import get as get_layout
from sim.scenario.config import Scenario, scenario_from_config
from sim.scenario.memory import full_kv_bytes
from sim.scenario.online_softmax import example as merge_example
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.trace.format import Trace
from sim.units import fmt_bytes

MERGE_MAX_GPUS = 16
"""The exact-merge view runs the numpy ring on at most this many ranks (small inputs)."""
MERGE_TOKENS_PER_CHUNK = 4
TIMELINE_DEFAULT_RANKS = 32
"""Rings larger than 64 GPUs open their timeline on the first this-many GPUs."""
_KEPT_UPLOADS = 8
SCHEME_TABLE_COLUMNS = ("scheme", "variant", "makespan", "vs_best", "efficiency", "exposed", "sent", "memory",
                        "why")
"""The columns of the schemes' table (message keys sch.col.<column>)."""
PRESET_HARDWARE_CONTROLS = ("cluster", "tflops", "efficiency", "overhead-us", "link-gbps", "link-latency-us",
                            "inter-link", "nics-per-node", "nic-gbps", "p2p")
"""What a calibrated profile replaces besides the GPU and the link (sim.engine.play.simulate
times every block and transfer on the profile): disabled while one is loaded."""
EXAMPLE_PROFILE_TOKEN = "profile-examples"
FIGURE_TEXTS = {"memory": MEMORY_TEXTS, "sweep": SWEEP_TEXTS, "blocks": BLOCK_MAP_TEXTS, "merge.view": MERGE_TEXTS,
                "overlay": OVERLAY_TEXTS, "schemes": SCHEME_TEXTS, "cmp": COMPARISON_TEXTS, "docs": DOCUMENT_TEXTS}
"""The figures whose English texts live in their module (LABELS) and whose translations
are the catalogs' messages `<prefix>.<name>`, by prefix."""
SCHEME_WORDS = ("fig.step", "blocks.sim.kernel-call", "blocks.sim.every-pair", "blocks.sim.rings",
                "blocks.sim.chunk", "blocks.sim.stripe", "blocks.sim.shard")
"""The schemes' own words for a block map's values and axes (sim.schemes' BlockMap
value_label and axis_label), as the catalogs say them."""


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "–"
    scale, unit = figures.time_unit(abs(x) if x else 1e-6)
    return f"{x * scale:.4g} {unit}"


def _fmt_pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"


def _fmt_bytes(x: float | None) -> str:
    return fmt_bytes(x, ".3g", missing="–")


class _Kept:
    """A small LRU of server-side objects named by a token."""

    def __init__(self, size: int = _KEPT_UPLOADS):
        self.size = size
        self.items: OrderedDict[str, Any] = OrderedDict()

    def put(self, token: str, obj: Any) -> None:
        self.items[token] = obj
        self.items.move_to_end(token)
        while len(self.items) > self.size:
            self.items.popitem(last=False)

    def get(self, token: str | None) -> Any:
        return self.items.get(token) if token else None


def _profile_module():
    try:
        import sim.hardware.profile
    except ModuleNotFoundError as e:
        if e.name != "sim.hardware.profile":
            raise
        raise RingsimError("calibrated profiles are not available yet: this ringsim has no "
                           "sim/hardware/profile.py (use the presets or custom numbers)") from None
    return sim.hardware.profile


def load_profile_file(path: str) -> Any:
    """A calibrated hardware profile through sim.hardware.profile, if this ringsim has it."""
    return _profile_module().load_profile(path)


def profile_note(token: str, name: str, profile: Any) -> dict[str, Any]:
    """What the page's `profile` store holds for a loaded profile: its token on the
    server, its file name and the machine it was measured on."""
    device = (getattr(profile, "measured_on", {}) or {}).get("device")
    return {"token": token, "name": name, "device": device if isinstance(device, str) else None}


def _example_note() -> dict[str, Any] | None:
    """The store's data for the first example the package ships, if it ships one."""
    try:
        shipped = measured.examples()
    except RingsimError:
        return None          # the view names the refused file when it is opened
    return {"token": shipped[0].token, "name": shipped[0].file} if shipped else None


def profile_from_upload(contents: Any, filename: Any) -> tuple[Any, bytes]:
    """A calibrated profile from an upload (JSON only, size-capped) and its raw bytes."""
    mod = _profile_module()
    cap = min(MAX_UPLOAD_BYTES, getattr(mod, "MAX_PROFILE_BYTES", MAX_UPLOAD_BYTES))
    raw = export.decode_upload(contents, filename, cap)
    name = filename if isinstance(filename, str) else "profile"
    return mod.profile_from_dict(export.parse_json_bytes(raw, name), name), raw

class Served:
    """What the app's callbacks share on a server: the calibrated profiles and traces
    uploaded (kept by token), and the page's scenario and hardware read from its stores."""

    def __init__(self, profile_path: str | None = None):
        self.profiles = _Kept()
        self.uploaded_traces = _Kept()
        self.initial_profile = None
        if profile_path:
            with open(profile_path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()[:16]
            loaded = load_profile_file(profile_path)
            self.profiles.put(f"profile-{digest}", loaded)
            self.initial_profile = profile_note(f"profile-{digest}", os.path.basename(profile_path), loaded)
        self.initial_example = _example_note()

    def hardware_of(self, profile_data: Any) -> tuple[Any, str | None]:
        if not profile_data:
            return None, None
        token = profile_data.get("token")
        hw = self.profiles.get(token)
        if hw is None and token == EXAMPLE_PROFILE_TOKEN:
            hw = measured.example_profile()      # in every server process, not only the one asked
        if hw is None:
            raise RingsimError("the calibrated profile is no longer loaded on the server; "
                               "upload it again")
        return hw, token

    def loaded_profile(self, profile_data: Any) -> Any:
        """The profile the store names, or None (none loaded, or no longer on the server:
        the views say so)."""
        try:
            return self.hardware_of(profile_data)[0]
        except RingsimError:
            return None

    def scenario_of(self, data: Any):
        if not data:
            raise PreventUpdate
        return scenario_from_values(data["values"])

    def result_of(self, data: Any, profile_data: Any) -> compute.Result:
        hw, key = self.hardware_of(profile_data)
        return compute.run(self.scenario_of(data), hw, key)

    def measured_pair(self, measured_data: Any, data: Any, profile_data: Any) -> tuple | None:
        """The measured trace on screen and what it is set against: (trace, the scenario of
        its configuration on the page's hardware, the hardware model, its cache key), or
        None when the trace is no longer on the server."""
        trace = self.measured_trace(measured_data.get("token"))
        if trace is None:
            return None
        hw, key = self.hardware_of(profile_data)
        if hw is None and measured.is_example(measured_data.get("token")):
            # an example is set against the profile of the machine it ran on, unless
            # the reader loaded a profile of their own
            hw, key = measured.example_profile(), EXAMPLE_PROFILE_TOKEN
        sim_scenario = scenario_from_config(trace.config, self.scenario_of(data).hardware)
        if sim_scenario.n_gpus != trace.n_gpus:
            raise RingsimError(f"the trace has {trace.n_gpus} ranks but its configuration "
                               f"says {sim_scenario.n_gpus} GPUs")
        return trace, sim_scenario, hw, key

    def measured_trace(self, token: Any) -> Trace | None:
        ex = measured.example(token)
        return ex.trace if ex is not None else self.uploaded_traces.get(token)


def only_on(tab: str, current: str) -> None:
    if current != tab:
        raise PreventUpdate


def create_app(profile_path: str | None = None) -> dash.Dash:
    """The dashboard app; `profile_path` preloads a calibrated hardware profile."""
    app = dash.Dash(__name__, title="ringsim", update_title=None,
                    assets_folder=os.path.join(os.path.dirname(__file__), "assets"))
    # base64 inflates an upload by 4/3; refuse bodies well past the upload cap outright
    app.server.config["MAX_CONTENT_LENGTH"] = MAX_UPLOAD_BYTES * 3 // 2
    served = Served(profile_path)
    app.layout = lambda: page(served.initial_profile, served.initial_example)
    for register in (_register_scenario, _register_summary, _register_views, _register_profile,
                     _register_measured):
        register(app, served)
    i18n.register_callbacks(app)
    nav.register_callbacks(app)
    questions.register_callbacks(app)
    plan.register_callbacks(app)

    # Dash, Plotly and the page live as long as the server: freezing them keeps the cycle
    # collector, which a large trace sets off many times, from walking them again and again
    gc.freeze()
    return app


def _register_scenario(app: dash.Dash, served: Served) -> None:
    """The scenario: controls <-> URL, validated; the hardware controls a profile sets; the
    settings shown by scheme."""
    index = {cid: i for i, cid in enumerate(CONTROL_IDS)}

    @app.callback(
        [Output(cid, "value") for cid in CONTROL_IDS]
        + [Output("url", "search"), Output("scenario", "data"), Output("banner", "children")]
        + [Output(f"{cid}-msg", "children") for cid in CONTROL_IDS],
        [Input("url", "search")] + [Input(cid, "value") for cid in CONTROL_IDS] + [Input("profile", "data")],
        State("scenario", "data"),
    )
    def sync(search, *vals_and_current):
        *vals, profile_data, current = vals_and_current
        prof = served.loaded_profile(profile_data)
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
            value_out = [values[cid] for cid in CONTROL_IDS]
        elif triggered == {"profile"}:
            values, ignored = dict(zip(CONTROL_IDS, vals)), []
            changes = profile_changes(values, prof) if prof is not None else {}
            values.update(changes)
            value_out = [changes.get(cid, no_update) for cid in CONTROL_IDS]
            url_out = nav.with_nav(query_from_values(values), search) if changes else no_update
        else:
            values, ignored = dict(zip(CONTROL_IDS, vals)), []
            value_out = [no_update] * len(CONTROL_IDS)
            if ctx.triggered_id == "cluster":
                # a cluster preset fills in the controls it sets, as `ringsim --cluster` does
                filled = cluster_values(values["cluster"])
                values.update(filled)
                value_out = [filled.get(cid, no_update) for cid in CONTROL_IDS]
            url_out = nav.with_nav(query_from_values(values), search)
        msgs = [""] * len(CONTROL_IDS)
        banner = [f"ignored unreadable link parameters: {', '.join(ignored)}"] if ignored else []
        try:
            scenario_from_values(values)
            if prof is not None:
                check_profile_dtype(values, prof)
            # a link that changes only the view, question or language keeps the scenario
            same = "url" in triggered and (current or {}).get("values") == values
            store = no_update if same else {"values": values}
        except ControlError as e:
            msgs[index[e.control]] = str(e)
            store = no_update
            banner.append("The views show the last valid scenario until the highlighted value is fixed.")
        return value_out + [url_out, store, " ".join(banner) or None] + msgs

    # a loaded profile is the hardware: the GPU and link controls name it, the preset
    # numbers it replaces are disabled
    @app.callback([Output("gpu", "options"), Output("gpu", "disabled"), Output("link", "options"),
                   Output("link", "disabled")] + [Output(cid, "disabled") for cid in PRESET_HARDWARE_CONTROLS],
                  Input("profile", "data"), Input("gpu", "value"), Input("link", "value"), Input("lang", "value"))
    def hardware_controls(profile_data, gpu, link, lang):
        prof = served.loaded_profile(profile_data)
        if prof is None:
            return ([{"label": x, "value": x} for x in (*GPU_PRESETS, CUSTOM)], False,
                    [{"label": x, "value": x} for x in (*LINK_PRESETS, CUSTOM)], False,
                    *[False] * len(PRESET_HARDWARE_CONTROLS))
        t = Translator(lang)
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


def _register_summary(app: dash.Dash, served: Served) -> None:
    """The summary cards, the layout strip and the downloads."""
    @app.callback(
        [Output(cid, "children") for cid, _ in SUMMARY_CARDS] + [Output("scenario-line", "children")],
        Input("scenario", "data"), Input("profile", "data"), Input("tabs", "value"), Input("measured", "data"),
        Input("lang", "value"),
    )
    def summary(data, profile_data, tab, measured_data, lang):
        shown = None
        try:
            if tab == "measured" and measured_data:
                # the Measured view's cards describe the run it shows: its configuration, simulated
                shown = served.measured_pair(measured_data, data, profile_data)
            if shown is not None:
                _, sc, hw_model, key = shown
                res = compute.run(sc, hw_model, key)
            else:
                sc = served.scenario_of(data)
                res = served.result_of(data, profile_data)
        except RingsimError as e:
            return ["–"] * len(SUMMARY_CARDS) + [html.Span(str(e), className="msg")]
        m = res.metrics
        peak = max((r.peak_mem_bytes or 0) for r in m.ranks) or None
        t = Translator(lang)
        line = scenario_line(t, sc, profile_data, shown)
        # the cards' numbers in the page's decimal sign
        return [t.digits(x) for x in (_fmt_s(m.makespan_s), _fmt_s(m.ideal_s), _fmt_pct(m.efficiency),
                                      f"{m.load_imbalance:.3f}", _fmt_pct(m.overlap_efficiency),
                                      _fmt_s(max(r.exposed_comm_s for r in m.ranks)), _fmt_bytes(peak))] + [line]

    def pcie_words(t: Translator, gpu: str, pcie: Any) -> str:
        """A PCIe node in words (sim.hardware.pcie.Pcie.words), in the page's language."""
        under = (t("line.pcie.own-port") if pcie.gpus_per_switch == 1
                 else t("line.pcie.switch", gpus=t.int(pcie.gpus_per_switch)))
        return t("line.pcie", gpu=gpu, gen=pcie.gen, under=under, socket=t.int(pcie.gpus_per_socket),
                 p2p=t(f"line.pcie.p2p.{pcie.p2p}"))

    def scenario_line(t: Translator, sc: Any, profile_data: Any, shown: Any) -> str:
        """The run the cards describe, in words and numbers of the page's language."""
        w = sc.workload
        hw = sc.hardware
        hw_name = f"{hw.gpu.name} / {hw.link.name}" if hw.pcie is None else pcie_words(t, hw.gpu.name, hw.pcie)
        if profile_data:
            device, name = profile_data.get("device"), profile_data.get("name", "profile")
            hw_name = f"{device} ({name})" if device else name
        if shown is not None and shown[2] is not None:
            hw_name = (getattr(shown[2], "measured_on", None) or {}).get("device") or "its machine's profile"
        nodes = -(-sc.n_gpus // hw.gpus_per_node)
        if nodes > 1 and not profile_data and shown is None:
            between = hw.inter_link.name if hw.inter_link is not None else hw.link.name
            hw_name = t("line.nodes", hardware=hw_name, nodes=t.int(nodes), per_node=t.int(hw.gpus_per_node),
                        between=between)
        line = t("line.scenario", gpus=t.int(sc.n_gpus), hardware=hw_name, run=run_words(t, sc.describe()),
                 tokens=t.int(w.seq), per_gpu=t.int(sc.tokens_per_rank), heads=t.int(w.heads),
                 kv_heads=t.int(w.kv_heads), head_dim=t.int(w.head_dim), dtype=w.dtype,
                 mask=t("line.causal" if w.causal else "line.full"), **{"pass": w.pass_})
        return t("line.measured", line=line) if shown is not None else line

    @app.callback(Output("layout-strip", "figure"), Input("scenario", "data"), Input("lang", "value"))
    def layout_strip(data, lang):
        t = Translator(lang)
        sc = served.scenario_of(data)
        split = compute.token_split(sc, t)
        seq = sc.workload.seq
        labels = {"axis": t("strip.axis"), "hover": t("strip.hover"),
                  "first": t("strip.first" if split["packed"] is None else "strip.first-packed"),
                  "document": t("strip.document"), "documents": t("strip.row.documents"),
                  "holders": t("strip.row.gpus" if split["holders"] is None else "strip.row.positions"),
                  "separators": t.separators(), "number": t.int}

        def make():
            owner, bounds = compute.token_holders(sc, split)
            return figures.layout_strip(split["layout"], seq, split["n"], holders=split["holders"],
                                        title=split["title"], labels=labels, owner=owner, bounds=bounds)

        # a function of the token split (with what packed holders depend on), the length and
        # the language only: other changes reuse it
        return compute.figure("strip", Scenario(), None, [split, seq, t.lang], make)

    def _name(sc) -> str:
        how = sc.layout if sc.scheme == DEFAULT_SCHEME else sc.scheme
        return f"ringsim-{sc.n_gpus}gpu-{how}-{sc.workload.seq}-{sc.workload.pass_}"

    @app.callback(Output("dl-trace", "data"), Input("dl-trace-btn", "n_clicks"),
                  State("scenario", "data"), State("profile", "data"), prevent_initial_call=True)
    def download_trace(_, data, profile_data):
        res = served.result_of(data, profile_data)
        return dcc.send_bytes(export.trace_archive(res.trace), _name(served.scenario_of(data)) + ".trace.npz")

    @app.callback(Output("dl-chrome", "data"), Input("dl-chrome-btn", "n_clicks"),
                  State("scenario", "data"), State("profile", "data"), prevent_initial_call=True)
    def download_chrome(_, data, profile_data):
        res = served.result_of(data, profile_data)
        return dict(content=export.chrome_trace_json(res.trace),
                    filename=_name(served.scenario_of(data)) + ".chrome.json")

    @app.callback(Output("dl-csv", "data"), Input("dl-csv-btn", "n_clicks"),
                  State("scenario", "data"), State("profile", "data"), prevent_initial_call=True)
    def download_csv(_, data, profile_data):
        res = served.result_of(data, profile_data)
        return dict(content=export.metrics_csv(res.metrics),
                    filename=_name(served.scenario_of(data)) + ".metrics.csv")


def _register_views(app: dash.Dash, served: Served) -> None:
    """The views, each computed while its tab is open."""
    @app.callback(Output("ranks", "max"), Output("ranks", "value"), Output("ranks", "marks"),
                  Input("scenario", "data"), State("ranks", "max"), State("ranks", "value"))
    def rank_window(data, old_max, current):
        n = served.scenario_of(data).n_gpus
        step = max(1, n // 8)
        marks = {r: str(r) for r in range(0, n, step)} | {n - 1: str(n - 1)}
        if old_max == n - 1 and current:
            return no_update, no_update, no_update   # same ring: keep the user's window
        hi = n - 1 if n <= 64 else TIMELINE_DEFAULT_RANKS - 1
        return n - 1, [0, hi], marks

    @app.callback(Output("timeline", "figure"),
                  Input("scenario", "data"), Input("profile", "data"), Input("ranks", "value"),
                  Input("tabs", "value"), Input("lang", "value"))
    def timeline(data, profile_data, ranks, tab, lang):
        only_on("timeline", tab)
        window = tuple(ranks) if ranks else None
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
                labels = {"window": t("tl.window"), "time": t("tl.time"), "separators": t.separators()}
                return figures.timeline(tr, window, starts=res.rank_starts, title=title, labels=labels)

            return compute.figure("timeline", sc, key, [window, t.lang], make)
        except RingsimError as e:
            return figures.message_figure(str(e))

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

    @app.callback(Output("compare", "figure"), Output("compare-table", "children"),
                  Input("scenario", "data"), Input("profile", "data"), Input("tabs", "value"), Input("lang", "value"))
    def compare(data, profile_data, tab, lang):
        only_on("compare", tab)
        try:
            hw, key = served.hardware_of(profile_data)
            sc = served.scenario_of(data)
            if sc.scheme not in RING_SCHEMES:
                sc = compute.as_ring(sc)          # a scheme without a ring: the ring's layouts
            # one layout/overlap pair is as good as another for the key: all six are drawn
            rows = compute.figure("compare-rows", sc.with_(layout="zigzag", overlap=True), key, None,
                                  lambda: compute.compare_table(sc, hw, key))
        except RingsimError as e:
            return figures.message_figure(str(e)), None
        t = Translator(lang)
        return figures.comparison(rows, comparison_labels(t)), _compare_table(rows, t)

    @app.callback(Output("documents", "figure"), Output("documents-section", "style"),
                  Input("scenario", "data"), Input("tabs", "value"), Input("lang", "value"))
    def documents(data, tab, lang):
        only_on("compare", tab)
        sc = served.scenario_of(data)
        if not sc.packed:
            return no_update, {"display": "none"}
        t = Translator(lang)
        try:
            if sc.scheme not in RING_SCHEMES:
                sc = compute.as_ring(sc)          # as the layouts' comparison beside it
            fig = compute.figure("documents", sc, None, t.lang,
                                 lambda: figures.document_balance(compute.document_balance(sc),
                                                                  labels=document_labels(t, sc)))
        except RingsimError as e:
            fig = figures.message_figure(str(e))
        return fig, {}

    @app.callback(Output("schemes", "figure"), Output("schemes-table", "children"),
                  Output("schemes-why", "children"),
                  Input("scenario", "data"), Input("profile", "data"), Input("tabs", "value"),
                  Input("lang", "value"))
    def schemes(data, profile_data, tab, lang):
        only_on("schemes", tab)
        t = Translator(lang)
        try:
            hw, key = served.hardware_of(profile_data)
            sc = served.scenario_of(data)
            base = compute.scheme_base(sc)
            # every scheme from the same base: the scheme on screen and its settings do not
            # change the rows, only which one is marked
            rows = compute.figure("scheme-rows", base, key, None, lambda: compute.scheme_rows(sc, hw))
            current = compute.current_variant(sc)
            fig = compute.figure("schemes", base, key, [current, t.lang], lambda: figures.scheme_comparison(
                rows, current=current, full_kv_bytes=full_kv_bytes(sc.workload), labels=scheme_labels(t)))
        except RingsimError as e:
            return figures.message_figure(str(e)), None, None
        return fig, _schemes_table(rows, current, t), _schemes_why(rows, t)

    @app.callback(Output("sweep", "figure"),
                  Input("scenario", "data"), Input("profile", "data"), Input("tabs", "value"), Input("lang", "value"))
    def sweep(data, profile_data, tab, lang):
        only_on("sweep", tab)
        t = Translator(lang)
        try:
            hw, key = served.hardware_of(profile_data)
            # whether a ring's block transfer hides behind its compute: the ring's, whatever
            # scheme is on screen
            sc = compute.as_ring(served.scenario_of(data))
            # the table once, a figure per language
            table = compute.figure("sweep-table", sc, key, None, lambda: compute.overlap_sweep(sc, hw, key))
            return compute.figure("sweep", sc, key, t.lang,
                                  lambda: figures.overlap_sweep(table, labels=sweep_labels(t)))
        except RingsimError as e:
            return figures.message_figure(str(e))

    @app.callback(Output("memory", "figure"), Input("scenario", "data"), Input("tabs", "value"), Input("lang", "value"))
    def memory(data, tab, lang):
        only_on("memory", tab)
        t = Translator(lang)
        sc = served.scenario_of(data)
        table = compute.figure("memory-table", sc, None, None, lambda: compute.memory_table(sc))
        return compute.figure("memory", sc, None, t.lang, lambda: figures.memory(table, labels=memory_labels(t)))

    @app.callback(Output("merge", "figure"), Output("merge-row", "max"), Output("merge-note", "children"),
                  Input("scenario", "data"), Input("merge-row", "value"), Input("tabs", "value"), Input("lang", "value"))
    def merge(data, row, tab, lang):
        only_on("merge", tab)
        t = Translator(lang)
        sc = served.scenario_of(data)
        n = min(sc.n_gpus, MERGE_MAX_GPUS)
        # one sequence of one document: a packed layout is its closed-form twin there
        layout = compute.one_document_layout(sc.layout)
        seq = get_layout(layout).n_chunks(n) * MERGE_TOKENS_PER_CHUNK
        row = seq - 1 if row is None or row >= seq else int(row)
        # a function of the small example only, not of the scenario's sizes or hardware
        fig = compute.figure("merge", Scenario(), None, [n, layout, sc.workload.causal, row, t.lang],
                             lambda: figures.merge_steps(merge_example(
                                 n_ranks=n, layout=layout, causal=sc.workload.causal,
                                 tokens_per_chunk=MERGE_TOKENS_PER_CHUNK, query_row=row), layout,
                                 labels=merge_labels(t)))
        note = t("merge.view.note", tokens=t.int(seq), gpus=t.int(n), layout=layout_label(t, layout),
                 mask=t("fig.causal" if sc.workload.causal else "fig.nomask"))
        return fig, seq - 1, note


def _register_profile(app: dash.Dash, served: Served) -> None:
    """Loading and clearing a calibrated profile."""
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

    @app.callback(Output("profile-status", "children"), Input("profile", "data"))
    def profile_status(profile_data):
        if profile_data:
            name = profile_data.get("name", "a calibrated profile")
            device = profile_data.get("device")
            return f"using {name}" + (f", measured on {device}" if device else "")
        return "none: presets and custom numbers"


def _register_measured(app: dash.Dash, served: Served) -> None:
    """Measured vs simulated: the trace shown and its overlay."""
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
                    f"{name}: " + ", ".join(figures.trace_summary(trace)), "")
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
                  Input("measured", "data"), Input("scenario", "data"), Input("profile", "data"),
                  Input("tabs", "value"), Input("lang", "value"))
    def overlay(measured_data, data, profile_data, tab, lang):
        only_on("measured", tab)
        t = Translator(lang)
        hidden = {"display": "none"}
        if not measured_data:
            return figures.message_figure(t("overlay.none")), None, hidden, None
        try:
            pair = served.measured_pair(measured_data, data, profile_data)
            if pair is None:
                return figures.message_figure(t("overlay.gone")), None, hidden, None
            trace, sim_scenario, hw, key = pair
            simulated = compute.run(sim_scenario, hw, key).trace
            notice, offer = None, hidden
            apart = measured.mismatch(trace, hw if hw is not None else sim_scenario.hardware)
            if apart is not None:
                notice = t("measured.mismatch", measured=apart[0], simulated=apart[1])
                if key != EXAMPLE_PROFILE_TOKEN and measured.mismatch(trace, measured.example_profile()) is None:
                    offer = {}        # the profile shipped with the examples is of this machine
        except RingsimError as e:
            return figures.message_figure(str(e)), None, hidden, None
        button = t("measured.use-profile", device=measured.measured_machine(trace))
        fig = figures.overlay(simulated, trace, compute.step_errors(simulated, trace), labels=overlay_labels(t))
        return fig, notice, offer, button



def documents_words(t: Translator, scenario: Scenario) -> str:
    """The scenario's documents in a few words of the page's language: how many, their
    median and longest length, and the window."""
    w = scenario.workload
    d = compute.length_summary(w)
    words = (t("docs.one") if d["count"] == 1 else
             t("docs.many", count=t.int(d["count"]), median=t.int(d["median"]), longest=t.int(d["longest"])))
    return words if w.window is None else t("docs.window", docs=words, window=t.int(w.window))


def document_labels(t: Translator, scenario: Scenario) -> dict[str, Any]:
    """The texts of figures.document_balance in the page's language."""
    return figure_labels(t, "docs") | {"gpu": t("ctl.gpu.label"), "docs": documents_words(t, scenario),
                                       "ratio_text": lambda x: t.num(x, 4), "layout": lambda lay: layout_label(t, lay)}


def comparison_labels(t: Translator) -> dict[str, Any]:
    """The texts of figures.comparison in the page's language."""
    return figure_labels(t, "cmp") | {"num": lambda y: t.num(y), "layout": lambda lay: layout_label(t, lay)}


def figure_labels(t: Translator, prefix: str) -> dict[str, Any]:
    """The texts of a figure of FIGURE_TEXTS in the page's language, with Plotly's
    `separators` and how its numbers read."""
    return {name: t(f"{prefix}.{name}") for name in FIGURE_TEXTS[prefix] if name != "separators"} | {
        "separators": t.separators(), "digits": t.digits, "int": t.int}


def compared_run(t: Translator, scheme: str, variant: str | None) -> str:
    """A compared run's name (figures.run_name: the scheme, its variant in brackets) with
    the variant in the page's language."""
    return f"{scheme} ({explain.compared_variant(t, scheme, variant)})" if variant else scheme


def memory_labels(t: Translator) -> dict[str, Any]:
    """The texts of figures.memory in the page's language; a scheme's label there is
    dashboard.compute.scheme_memory's: the scheme, or the scheme and its variant."""
    def run(label: str) -> str:
        scheme, _, variant = label.partition(" (")
        return compared_run(t, scheme, variant[:-1]) if variant.endswith(")") else label

    return figure_labels(t, "memory") | {"run": run}


def sweep_labels(t: Translator) -> dict[str, Any]:
    return figure_labels(t, "sweep") | {"layout": lambda lay: layout_label(t, lay)}


def block_map_labels(t: Translator) -> dict[str, Any]:
    def run(config: dict[str, Any]) -> str:
        if config.get("scheme", DEFAULT_SCHEME) == DEFAULT_SCHEME:
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


def merge_labels(t: Translator) -> dict[str, Any]:
    return figure_labels(t, "merge.view") | {"layout": lambda lay: layout_label(t, lay)}


def overlay_labels(t: Translator) -> dict[str, Any]:
    return figure_labels(t, "overlay")


def scheme_labels(t: Translator) -> dict[str, Any]:
    """The texts of figures.scheme_comparison in the page's language: a run's name and
    what bounds it (or why it cannot run) as the table beside it says them."""
    def why(row: dict[str, Any]) -> str:
        return explain.reason(t, row["refused"]) if "refused" in row else explain.row_bound(t, row)

    return figure_labels(t, "schemes") | {"run": lambda row: compared_run(t, row["scheme"], row.get("variant")),
                                          "why": why}


def _compare_table(rows: list[dict[str, Any]], t: Translator) -> html.Table:
    """The rows of `ringsim compare`: every layout with overlap on and off, in the page's language."""
    best = min(r["makespan_s"] for r in rows)
    head = [t("cmp.col.layout"), t("cmp.col.overlap"), t("sch.col.makespan"), t("sch.col.vs_best"),
            t("sch.col.efficiency"), t("card.m-imbalance"), t("card.m-overlap"), t("sch.col.exposed")]
    body = [[layout_label(t, r["layout"]), t("cmp.on" if r["overlap"] else "cmp.off"), t.time(r["makespan_s"]),
             t.num(r["makespan_s"] / best) + "×", "–" if r["efficiency"] is None else t.pct(r["efficiency"]),
             t.num(r["load_imbalance"], 4), t.pct(r["overlap_efficiency"]),
             t.time(r["exposed_comm_s"]) if r["exposed_comm_s"] else "0"] for r in rows]
    return html.Table([html.Thead(html.Tr([html.Th(h) for h in head])),
                       html.Tbody([html.Tr([html.Td(c) for c in row]) for row in body])])


def _schemes_table(rows: list[dict[str, Any]], current: Any, t: Translator) -> html.Table:
    """The rows of `ringsim compare --schemes`, a refused one with its reason; the fastest
    and the run on screen marked."""
    best = figures.fastest(rows)
    head = [t(f"sch.col.{c}") for c in SCHEME_TABLE_COLUMNS]
    body = []
    for r in rows:
        here = current is not None and (r["scheme"], r["variant"]) == tuple(current)
        variant = [explain.compared_variant(t, r["scheme"], r["variant"])] + (
            [" ", html.Span("◂ " + t("sch.current"), className="here")] if here else [])
        if "refused" in r:
            cells = [html.Td(r["scheme"]), html.Td(variant),
                     html.Td(t("sch.refused", reason=explain.reason(t, r["refused"])), colSpan=7, className="refused")]
        else:
            eff = "–" if r["efficiency"] is None else t.pct(r["efficiency"])
            peak = "–" if r["peak_mem_bytes"] is None else t.bytes(r["peak_mem_bytes"])
            cells = [html.Td(c) for c in (r["scheme"], variant, t.time(r["makespan_s"]),
                                          t.num(r["makespan_s"] / best["makespan_s"]) + "×", eff,
                                          t.time(r["exposed_comm_s"]) if r["exposed_comm_s"] else "0",
                                          t.bytes(r["bytes_sent_per_gpu"]), peak)]
            cells.append(html.Td(explain.row_bound(t, r), className="why"))
        body.append(html.Tr(cells, className=" ".join(
            c for c, on in (("best", r is best), ("current", here)) if on) or None))
    return html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(body)])


def _schemes_why(rows: list[dict[str, Any]], t: Translator) -> list[Any]:
    """Why the winner wins: the fastest against the next, and what bounds each (and the
    slowest), in the simulator's own sentences (sim.trace.metrics.explain) in the page's language."""
    ran = sorted((r for r in rows if "refused" not in r), key=lambda r: r["makespan_s"])
    if not ran:
        return [t("sch.none")]
    best = ran[0]
    name = figures.run_name
    if len(ran) == 1:
        lead = t("sch.only", winner=name(best), time=t.time(best["makespan_s"]))
    else:
        nxt = ran[1]
        lead = t("sch.fastest", winner=name(best), time=t.time(best["makespan_s"]), next=name(nxt),
                 margin=t.pct(nxt["makespan_s"] / best["makespan_s"] - 1))
    shown = ran[:2] + ([ran[-1]] if len(ran) > 2 else [])
    return [html.Strong(lead), html.Ul([html.Li(t("sch.bounds", run=name(r), why=explain.row_bound(t, r)))
                                        for r in shown])]
