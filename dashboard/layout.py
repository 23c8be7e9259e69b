"""The page's components: controls on the left, summary and views on the right.

Every scenario control is built from dashboard/state.CONTROLS and has a message slot
(`<id>-msg`) beside it, where the callbacks put what is wrong with its value.
"""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from dashboard import i18n, measured, plan, questions
from dashboard.state import CUSTOM, NO_CLUSTER, PRESET_P2P, SAME_LINK, applies, defaults, shown_layouts
from dashboard.views import HELP, SUMMARY_CARDS, TABS
from sim.hardware.pcie import P2P_MODES
from sim.hardware.presets import CLUSTER_PRESETS, GPU_PRESETS, LINK_PRESETS
from sim.scenario.config import PASSES
from sim.scenario.schema import scenario_option
from sim.schemes import names as scheme_names

MAX_UPLOAD_BYTES = 50 * 1024 * 1024
"""Largest trace or profile file the page accepts."""

_SHOWN, _HIDDEN = {}, {"display": "none"}


def field_style(cid: str, scheme: str) -> dict[str, str]:
    """A control's field is shown only where it applies to the scheme (dashboard.state.applies)."""
    return _SHOWN if applies(cid, scheme) else _HIDDEN


def _field(cid: str, label: str, component: Any, style: dict[str, str] | None = None) -> html.Div:
    return html.Div(className="field", id=f"{cid}-field", style=style or {}, children=[
        html.Label(label, htmlFor=cid, id=f"{cid}-label"),
        component,
        html.Div(HELP.get(cid, ""), className="help", id=f"{cid}-help") if cid in HELP else None,
        html.Div(id=f"{cid}-msg", className="msg", role="alert"),
    ])


def _number(cid: str, label: str, value: Any, placeholder: str = "", style: dict | None = None) -> html.Div:
    return _field(cid, label, dcc.Input(id=cid, type="number", value=value, debounce=True,
                                        placeholder=placeholder, className="num"), style)


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


def _card(cid: str, label: str) -> html.Div:
    return html.Div(className="card", children=[html.Div(label, className="card-label", id=f"{cid}-label"),
                                                html.Div("–", id=cid, className="card-value")])


def _graph(gid: str, height: int = 400) -> dcc.Loading:
    return dcc.Loading(dcc.Graph(id=gid, config={"displaylogo": False, "scrollZoom": False},
                                 style={"minHeight": f"{height}px"}), type="dot", delay_show=300)


def views(first_example: str | None = None) -> html.Div:
    d = defaults()
    tab_children = {
        "timeline": [
            html.Div(className="inline", children=[
                html.Label("GPUs shown", htmlFor="ranks", id="ranks-label"),
                html.Div(dcc.RangeSlider(id="ranks", min=0, max=d["gpus"] - 1, step=1,
                                         value=[0, d["gpus"] - 1], allowCross=False,
                                         tooltip={"placement": "bottom"}), className="slider"),
            ]),
            _graph("timeline", 420), questions.timeline_ring()],
        "questions": [questions.view()],
        "blocks": [_graph("block-map", 560)],
        "compare": [html.Div(id="documents-section", style=_HIDDEN, children=[_graph("documents", 420)]),
                    _graph("compare", 380), html.Div(id="compare-table", className="table")],
        "schemes": [html.Div(id="schemes-why", className="schemes-why"), _graph("schemes", 420),
                    html.Div(id="schemes-table", className="table")],
        "sweep": [_graph("sweep", 640)],
        "memory": [_graph("memory", 440)],
        "merge": [
            html.Div(className="inline", children=[
                html.Label("query token", htmlFor="merge-row", id="merge-row-label"),
                html.Div(dcc.Slider(id="merge-row", min=0, max=63, step=1, value=63,
                                    marks=None, tooltip={"placement": "bottom"}), className="slider"),
            ]),
            html.Div(id="merge-note", className="help"),
            _graph("merge", 620)],
        "measured": [
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
                html.Button(id="profile-example", n_clicks=0, className="small", style=_HIDDEN)]),
            _graph("overlay", 560)],
        "plan": [plan.view()],
    }
    return html.Div(className="main", children=[
        html.Div(id="banner", className="banner", role="alert"),
        html.Div(className="cards", children=[_card(cid, label) for cid, label in SUMMARY_CARDS]),
        html.Div(className="exports", children=[
            html.Span(id="scenario-line", className="scenario-line"),
            html.Button("trace (.npz)", id="dl-trace-btn", n_clicks=0),
            html.Button("Chrome trace (Perfetto)", id="dl-chrome-btn", n_clicks=0),
            html.Button("metrics (CSV)", id="dl-csv-btn", n_clicks=0),
            dcc.Download(id="dl-trace"), dcc.Download(id="dl-chrome"), dcc.Download(id="dl-csv"),
        ]),
        dcc.Graph(id="layout-strip", config={"displayModeBar": False}, style={"height": "170px"}),
        dcc.Tabs(id="tabs", value="timeline", children=[
            dcc.Tab(label=label, value=value, id=f"tab-{value}", children=tab_children[value])
            for value, label in TABS
        ]),
    ])


def page(profile_note: dict[str, Any] | None = None,
         example_note: dict[str, Any] | None = None) -> html.Div:
    """The page; `profile_note` names a profile loaded at start, `example_note` the
    measured run the Measured view opens on (the store's data)."""
    return html.Div(className="page", children=[
        dcc.Location(id="url", refresh=False),
        dcc.Store(id="scenario"),
        dcc.Store(id="profile", data=profile_note),
        dcc.Store(id="measured", data=example_note),
        *questions.stores(),
        html.Header(className="header", children=[
            html.H1("ringsim"),
            html.Span("Ring Attention and sequence parallelism, simulated: how K/V blocks travel, "
                      "when transfers hide, which layout wins.", className="tagline", id="tagline"),
            i18n.language_bar(),
        ]),
        html.Div(className="body", children=[controls(), views((example_note or {}).get("token"))]),
    ])
