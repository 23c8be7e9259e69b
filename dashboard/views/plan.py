"""The Plan view: `ringsim plan` on the page (sim.planning.plan).

The same inputs as the command (a model preset or its numbers, a sequence length such as
128k or 1M, batch, nodes x GPUs per node, GPU and link presets, the pass, headroom), the
ranked candidates as a table and as a chart of time per step against memory per GPU with
the memory limit drawn (dashboard/figures/plan.py). Clicking a point, or a row's button,
opens that candidate in the other views: its `ringsim simulate` options become the page's
query, which the controls then read as any link's, and the timeline opens, without
reloading the page (the language stays; the view's inputs also persist for the browser
tab's session). A candidate with an option the page has no control for is
not loaded: a line under the table names the option and gives the command instead. Labels come from the catalogs; the
sentences on why a candidate wins or loses are the planner's own reasons (the clauses each candidate carries), in
the page's language (dashboard/explain.py).

With a global batch (tokens a step) the view plans the whole training step instead
(sim.training.plan, `ringsim plan --global-batch`): every TP x CP x PP x DP split, ZeRO stage
and recomputation, drawn as a bar per candidate of what its step is made of, the table
with each one's `ringsim step` command, and the fastest one's pipeline as the engine
played it, one GPU per stage. A step has no view of its own to load into.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import fields
from functools import lru_cache
from typing import Any
from urllib.parse import urlencode

from dash import ALL, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dashboard import explain, nav
from dashboard.figures.plan import pipeline_chart, plan_chart, step_chart
from dashboard.i18n import Translator, scheme_name
from dashboard.state import CONTROLS, ControlError, message, query_from_values, typed_number, values_from_query
from sim.errors import RingsimError
from sim.hardware.presets import GPU_PRESETS, LINK_PRESETS
from sim.planning.plan import parse_headroom, plan, request_from
from sim.planning.spec import convert, option
from sim.scenario.config import PASSES
from sim.scenario.models import MODEL_PRESETS, Model, model_preset
from sim.trace.format import KIND_NAMES
from sim.training.plan import label, plan_steps, request_hardware
from sim.training.step import Parallel, StepRequest, simulate_step
from sim.units import parse_count

MAX_GPUS = 256
"""Largest cluster the page plans (each candidate is a simulation of every GPU)."""
CUSTOM = "custom"
SAME_LINK = "same"
DEFAULTS = {"plan-model": "llama3-8b", "plan-layers": 32, "plan-heads": 32, "plan-kv-heads": 8,
            "plan-head-dim": 128, "plan-seq": "128k", "plan-batch": 1, "plan-nodes": 1,
            "plan-gpus-per-node": 8, "plan-gpu": "H100-SXM", "plan-link": "nvlink4",
            "plan-inter-link": "ib-ndr", "plan-pass": "fwdbwd", "plan-headroom": "", "plan-top": 10,
            "plan-global-batch": ""}
INPUT_IDS = tuple(DEFAULTS)
MODEL_NUMBERS = ("plan-layers", "plan-heads", "plan-kv-heads", "plan-head-dim")

# (component id, message key) of every fixed text of the view
LABELS = (
    ("plan-intro", "plan.intro"), ("plan-model-label", "plan.model"), ("plan-layers-label", "plan.layers"),
    ("plan-heads-label", "plan.heads"), ("plan-kv-heads-label", "plan.kv-heads"),
    ("plan-head-dim-label", "plan.head-dim"), ("plan-seq-label", "plan.seq"), ("plan-batch-label", "plan.batch"),
    ("plan-nodes-label", "plan.nodes"), ("plan-gpus-per-node-label", "plan.gpus-per-node"),
    ("plan-gpu-label", "plan.gpu"), ("plan-link-label", "plan.link"), ("plan-inter-link-label", "plan.inter-link"),
    ("plan-pass-label", "plan.pass"), ("plan-headroom-label", "plan.headroom"), ("plan-top-label", "plan.top"),
    ("plan-global-batch-label", "plan.global-batch"), ("plan-run", "plan.run"), ("plan-hint", "plan.hint"),
)
STEP_COLUMNS = ("plan.col.rank", "plan.step.col.split", "plan.col.step", "plan.step.col.tokens",
                "plan.step.col.tflops", "plan.step.col.mfu", "plan.col.memory", "plan.col.fits", "plan.col.why")
STEP_PARTS = {"gemm_s": "plan.step.part.gemm", "attention_s": "plan.step.part.attention",
              "elementwise_s": "plan.step.part.elementwise", "tp_comm_s": "plan.step.part.tp",
              "recompute_s": "plan.step.part.recompute", "pp_bubble_s": "plan.step.part.bubble",
              "pp_comm_s": "plan.step.part.pp", "dp_comm_s": "plan.step.part.dp",
              "optimizer_s": "plan.step.part.optimizer"}
STEP_SHOWN = 50
"""The whole-step plan keeps this many candidates for the page (the fastest first)."""
COLUMNS = ("plan.col.rank", "plan.col.scheme", "plan.col.variant", "plan.col.layer", "plan.col.step",
           "plan.col.efficiency", "plan.col.exposed", "plan.col.memory", "plan.col.fits", "plan.col.why", "")


_LABEL_KEY = dict(LABELS)
_KEEP = {"persistence": True, "persistence_type": "session"}
"""The inputs keep what the user set when the page is reloaded."""


WIDE_FIELDS = ("plan-pass",)
"""Fields whose choices read whole only across two columns ("forward + backward")."""


def _field(cid: str, component: Any, t: Translator) -> html.Div:
    return html.Div(className="field plan-field" + (" plan-wide" if cid in WIDE_FIELDS else ""), children=[
        html.Label(t(_LABEL_KEY[f"{cid}-label"]), id=f"{cid}-label", htmlFor=cid), component])


def _number(cid: str, t: Translator, value: Any = None, disabled: bool = False) -> html.Div:
    return _field(cid, dcc.Input(id=cid, type="number", value=DEFAULTS[cid] if value is None else value,
                                 debounce=True, className="num", min=1, disabled=disabled, **_KEEP), t)


def _text(cid: str, t: Translator, placeholder: str) -> html.Div:
    return _field(cid, dcc.Input(id=cid, type="text", value=DEFAULTS[cid], debounce=True, className="num",
                                 placeholder=placeholder, **_KEEP), t)


def _dropdown(cid: str, t: Translator, options: list[Any]) -> html.Div:
    return _field(cid, dcc.Dropdown(id=cid, options=options, value=DEFAULTS[cid], clearable=False,
                                    searchable=False, **_KEEP), t)


def _model_options(t: Translator) -> list[dict[str, str]]:
    return [*({"label": m, "value": m} for m in MODEL_PRESETS), {"label": t("plan.custom"), "value": CUSTOM}]


def _inter_link_options(t: Translator) -> list[dict[str, str]]:
    return [{"label": t("plan.same-link"), "value": SAME_LINK}, *({"label": x, "value": x} for x in LINK_PRESETS)]


def _pass_options(t: Translator) -> list[dict[str, str]]:
    return [{"label": t(key), "value": p} for p, key in
            zip(PASSES, ("opt.pass.fwd", "opt.pass.bwd", "opt.pass.fwdbwd"))]


def view() -> html.Div:
    t = Translator("en")
    preset = model_preset(DEFAULTS["plan-model"])
    numbers = dict(zip(MODEL_NUMBERS, (preset.layers, preset.heads, preset.kv_heads, preset.head_dim)))
    return html.Div(className="plan", children=[
        html.Div(t("plan.intro"), id="plan-intro", className="help"),
        html.Div(className="plan-inputs", children=[
            _dropdown("plan-model", t, _model_options(t)),
            *(_number(cid, t, numbers[cid], disabled=True) for cid in MODEL_NUMBERS),
            _text("plan-seq", t, "128k, 1M"), _number("plan-batch", t),
            _number("plan-nodes", t), _number("plan-gpus-per-node", t),
            _dropdown("plan-gpu", t, list(GPU_PRESETS)), _dropdown("plan-link", t, list(LINK_PRESETS)),
            _dropdown("plan-inter-link", t, _inter_link_options(t)),
            _dropdown("plan-pass", t, _pass_options(t)), _text("plan-headroom", t, "10%, 8GiB"),
            _number("plan-top", t), _text("plan-global-batch", t, "16M, 4M"),
        ]),
        html.Button(t("plan.run"), id="plan-run", n_clicks=0, className="small"),
        html.Div(id="plan-msg", className="msg", role="alert"),
        html.Div(id="plan-summary", className="help"),
        dcc.Loading(dcc.Graph(id="plan-chart", config={"displaylogo": False}, style={"minHeight": "440px"}),
                    type="dot", delay_show=300),
        html.Div(t("plan.hint"), id="plan-hint", className="help"),
        html.Div(id="plan-load-msg", className="msg", role="alert"),
        html.Div(id="plan-table", className="table"),
        html.Div(id="plan-pipeline-box", style={"display": "none"}, children=[
            dcc.Graph(id="plan-pipeline", config={"displaylogo": False})]),
        dcc.Store(id="plan-result"),
    ])


# --- the question -> the plan ------------------------------------------------------------------

def model_of(values: dict[str, Any]) -> Model:
    name = values.get("plan-model")
    if name != CUSTOM:
        return model_preset(name)
    nums = {}
    for cid, field in zip(MODEL_NUMBERS, ("layers", "heads", "kv_heads", "head_dim")):
        v = values.get(cid)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v != int(v):
            raise ControlError(cid, f"model {field}: enter a whole number", "msg.enter-whole", {"control": cid})
        nums[field] = int(v)
    return Model(name=CUSTOM, hidden=nums["heads"] * nums["head_dim"], **nums)


def _whole(values: dict[str, Any], cid: str, what: str) -> int:
    v = values.get(cid)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v != int(v) or v <= 0:
        raise ControlError(cid, f"{what} must be a positive whole number, got {v!r}", "msg.positive-whole",
                           {"control": cid, "value": v if isinstance(v, (int, float)) else repr(v)})
    return int(v)


def request_of(values: dict[str, Any]):
    """A sim.planning.plan.PlanRequest from the view's inputs; RingsimError naming what is wrong."""
    nodes = _whole(values, "plan-nodes", "nodes")
    gpn = _whole(values, "plan-gpus-per-node", "GPUs per node")
    if nodes * gpn > MAX_GPUS:
        raise ControlError("plan-nodes", f"the page plans at most {MAX_GPUS} GPUs; use `ringsim plan` for {nodes * gpn}",
                           "msg.plan-max-gpus", {"most": MAX_GPUS, "gpus": nodes * gpn})
    inter = values.get("plan-inter-link")
    return request_from(model_of(values), seq=values.get("plan-seq"), batch=_whole(values, "plan-batch", "batch"),
                        nodes=nodes, gpus_per_node=gpn, gpu=values.get("plan-gpu"), link=values.get("plan-link"),
                        inter_link=None if inter in (None, SAME_LINK) or nodes == 1 else inter,
                        pass_=values.get("plan-pass"), headroom=values.get("plan-headroom") or None)


@lru_cache(maxsize=16)
def _plan_cached(key: str):
    return plan(request_of(json.loads(key)))


@lru_cache(maxsize=16)
def _step_plan_cached(key: str) -> dict[str, Any]:
    values = json.loads(key)
    req = request_of(values)
    hardware, argv = request_hardware(req)
    batch = parse_count(values["plan-global-batch"], "global batch")
    plan = plan_steps(req.model, req.seq, batch, hardware, req.n_gpus, hardware_argv=argv)
    cands = plan.candidates[:STEP_SHOWN]
    for c in cands:
        c["split"] = label(c)
    out = {"mode": "step", "candidates": cands, "considered": plan.considered, "refused": plan.refused,
           "timed": len(plan.candidates), "fit": sum(c["fits"] for c in plan.candidates), "gpus": plan.gpus,
           "seq": req.seq, "global_batch": batch, "memory_limit_bytes": plan.memory_bytes, "elapsed_s": plan.seconds,
           "pipeline": None}
    if cands:
        p = cands[0]["parallel"]
        # a split names what it sets; the rest (the CP implementation) stays at its default
        par = Parallel(**{f.name: p[f.name] for f in fields(Parallel) if f.name in p})
        step = simulate_step(StepRequest(model=req.model, seq=req.seq, global_batch=batch, parallel=par,
                                         hardware=hardware))
        c = step.pipeline.columns
        keep = (c.stream == 0) | (c.stream == 1)                     # computes and sends
        out["pipeline"] = {"stages": step.pipeline.n_gpus, "rank": c.rank[keep].tolist(),
                           "kind": [KIND_NAMES[int(k)] for k in c.kind[keep]],
                           "start_s": c.start_s[keep].tolist(), "end_s": c.end_s[keep].tolist()}
    return out


def read_plan(values: dict[str, Any], lang: str | None) -> dict[str, Any]:
    """The view's inputs with its token counts (sequence length, global batch) read as the
    page's language writes numbers, sizes such as 128k and 1M taken (dashboard.state.typed_number),
    each as its whole number; a ControlError under the box for one that is not such a count
    (a blank global batch is none: attention alone), or for a headroom that is neither a share
    nor an amount."""
    out = dict(values)
    for cid in ("plan-seq", "plan-global-batch"):
        raw = out.get(cid)
        if cid == "plan-global-batch" and (raw is None or not str(raw).strip()):
            continue
        n = typed_number(raw if raw is not None else "", lang, sizes=True)
        if isinstance(n, bool) or not isinstance(n, (int, float)) or n != int(n) or n <= 0:
            what = cid.removeprefix("plan-").replace("-", " ")
            raise ControlError(cid, f"{what} must be a positive whole number or a size such as 128k or 1M, "
                               f"got {raw!r}", "msg.size", {"control": cid, "value": repr(raw)})
        out[cid] = str(int(n))
    try:
        parse_headroom(out.get("plan-headroom") or None)
    except RingsimError as e:
        raise ControlError("plan-headroom", str(e), "msg.headroom",
                           {"control": "plan-headroom", "value": repr(out.get("plan-headroom"))}) from None
    return out


def plan_data(values: dict[str, Any]) -> dict[str, Any]:
    """The plan of the view's inputs, as the JSON the page stores (cached by inputs): the
    whole step's (sim.training.plan) when a global batch is given, else attention's."""
    request_of(values)                       # a mistake is reported before the cache sees it
    if (values.get("plan-global-batch") or "").strip():
        return _step_plan_cached(json.dumps({k: values.get(k) for k in INPUT_IDS}, sort_keys=True))
    p = _plan_cached(json.dumps({k: values.get(k) for k in INPUT_IDS}, sort_keys=True))
    d = p.to_dict()
    d["elapsed_s"] = p.elapsed_s
    return d


# --- a candidate -> the other views -------------------------------------------------------------

def query_for_candidate(command: str) -> tuple[str, list[str]]:
    """The page's URL query for a candidate's `ringsim simulate` command, and the options
    of that command the page has no control for (those that differ from simulate's
    defaults)."""
    argv = shlex.split(command)[2:]
    by_id = {c.id: c for c in CONTROLS}
    items: list[tuple[str, str]] = []
    dropped: list[str] = []
    i = 0
    while i < len(argv):
        flag = argv[i]
        name = flag[2:]
        if name.startswith("no-") and name[3:] in by_id and by_id[name[3:]].kind == "bool":
            items.append((by_id[name[3:]].url_key, "0"))
            i += 1
            continue
        c = by_id.get(name)
        if c is not None and c.kind == "bool":
            items.append((c.url_key, "1"))
            i += 1
            continue
        value = argv[i + 1]
        i += 2
        if c is not None:
            items.append((c.url_key, value))
            continue
        o = option(name)
        if convert(o, value) != o.default:
            dropped.append(f"{flag} {value}")
    query = "?" + urlencode(items) if items else ""
    values, ignored = values_from_query(query)
    if ignored:
        dropped += ignored
    return query_from_values(values), dropped


def search_for_candidate(command: str, search: str | None) -> tuple[str, list[str]]:
    """The page's query that opens a candidate on the timeline (keeping the language), and
    the options the page could not take (see query_for_candidate)."""
    query, dropped = query_for_candidate(command)
    return nav.with_nav(query, search, view="timeline"), dropped


# --- the table -----------------------------------------------------------------------------------

def _fmt_s(t: Translator, x: float | None) -> str:
    return "–" if x is None else t.time(x, 4)


def table(t: Translator, data: dict[str, Any], top: int) -> html.Table:
    """The first `top` candidates of the plan `data` (sim.planning.plan.Plan.to_dict), with why each
    wins or loses in the page's language (dashboard/explain.py)."""
    head = [t(key) if key else "" for key in COLUMNS]
    rows = []
    for i, c in enumerate(data["candidates"][:top]):
        rows.append(html.Tr([
            html.Td(str(c["rank"])), html.Td(scheme_name(t, c["scheme"])),
            html.Td(explain.variant(t, c["variant_clause"])),
            html.Td(_fmt_s(t, c["makespan_s"])), html.Td(_fmt_s(t, c["step_s"])),
            html.Td("–" if c["efficiency"] is None else t.pct(c["efficiency"])),
            html.Td(_fmt_s(t, c["exposed_comm_s"])),
            # the whole step's memory; under it the one layer's attention the cards show once loaded
            html.Td([t.bytes(c["peak_mem_bytes"]), html.Br(),
                     html.Span(t("plan.attention_memory", bytes=t.bytes(c["attention_mem_bytes"])),
                               className="plan-sub")]),
            html.Td(t("plan.yes") if c["fits"] else t("plan.no")),
            html.Td(explain.plan_why(t, c), className="plan-why"),
            html.Td(html.Button(t("plan.load"), id={"type": "plan-load", "index": i}, n_clicks=0,
                                className="small")),
        ], className="" if c["fits"] else "plan-unfit"))
    return html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)])


def step_table(t: Translator, candidates: list[dict[str, Any]], top: int) -> html.Table:
    """The whole-step plan's first `top` candidates, each with its split already in the
    page's language (_draw_steps)."""
    head = [t(key) for key in STEP_COLUMNS]
    rows = []
    for c in candidates[:top]:
        rows.append(html.Tr([
            html.Td(str(c["rank"])), html.Td(c["split"]), html.Td(_fmt_s(t, c["step_s"])),
            html.Td(t.int(round(c["tokens_per_s_per_gpu"]))), html.Td(t.int(round(c["tflops_per_gpu"]))),
            html.Td(t.pct(c["mfu"])), html.Td(t.bytes(c["memory_bytes_per_gpu"])),
            html.Td(t("plan.yes") if c["fits"] else t("plan.no")),
            html.Td([explain.step_why(t, c), html.Br(), html.Code(c["command"])],
                    className="plan-why"),
        ], className="" if c["fits"] else "plan-unfit"))
    return html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)])


def _draw_steps(t: Translator, data: dict[str, Any], top: int):
    cands = [{**c, "split": explain.step_split(t, c)} for c in data["candidates"][:top]]
    labels = {"title": t("plan.step.chart.title"), "x": t("plan.step.chart.x"), "separators": t.separators(),
              **{part: t(key) for part, key in STEP_PARTS.items()}}
    summary = t("plan.step.summary", considered=t.int(data["considered"]), timed=t.int(data["timed"]),
                fit=t.int(data["fit"]), gpus=t.int(data["gpus"]), seconds=t.num(data.get("elapsed_s", 0.0)))
    if data.get("pipeline"):
        pipe = pipeline_chart(data["pipeline"], {"title": t("plan.step.pipeline.title"),
                                                 "x": t("plan.step.pipeline.x"), "stage": t("plan.step.stage"),
                                                 "fwd": t("plan.step.fwd"), "bwd": t("plan.step.bwd"),
                                                 "pp": t("plan.step.send"), "from": t("plan.step.from"),
                                                 "separators": t.separators()})
        shown = {}
    else:
        pipe, shown = {}, {"display": "none"}
    return step_chart(cands, labels), step_table(t, cands, top), summary, pipe, shown


def register_callbacks(app) -> None:
    @app.callback([Output(cid, "children") for cid, _ in LABELS]
                  + [Output("plan-model", "options"), Output("plan-inter-link", "options"),
                     Output("plan-pass", "options")],
                  Input("lang", "value"))
    def translate(lang):
        t = Translator(lang)
        return [t(key) for _, key in LABELS] + [_model_options(t), _inter_link_options(t), _pass_options(t)]

    @app.callback([Output(cid, "disabled") for cid in MODEL_NUMBERS]
                  + [Output(cid, "value") for cid in MODEL_NUMBERS],
                  Input("plan-model", "value"), prevent_initial_call=True)
    def model_numbers(name):
        if name == CUSTOM:
            return [False] * 4 + [no_update] * 4
        m = model_preset(name)
        return [True] * 4 + [m.layers, m.heads, m.kv_heads, m.head_dim]

    @app.callback(Output("plan-result", "data"), Output("plan-msg", "children"),
                  Input("plan-run", "n_clicks"), Input("tabs", "value"),
                  [State(cid, "value") for cid in INPUT_IDS] + [State("plan-result", "data"), State("lang", "value")])
    def run(_, tab, *values_and_current):
        *vals, current, lang = values_and_current
        if tab != "plan" or (ctx.triggered_id == "tabs" and current):
            raise PreventUpdate                 # computed when the view opens first, then on demand
        try:
            return plan_data(read_plan(dict(zip(INPUT_IDS, vals)), lang)), ""
        except ControlError as e:
            return no_update, message(Translator(lang), e)
        except RingsimError as e:
            return no_update, explain.refusal(Translator(lang), str(e), e.reason)

    @app.callback(Output("plan-chart", "figure"), Output("plan-table", "children"),
                  Output("plan-summary", "children"), Output("plan-pipeline", "figure"),
                  Output("plan-pipeline-box", "style"), Output("plan-hint", "style"),
                  Input("plan-result", "data"), Input("lang", "value"), Input("plan-top", "value"))
    def draw(data, lang, top):
        if not data:
            raise PreventUpdate
        t = Translator(lang)
        cands = data["candidates"]
        if data.get("mode") == "step":
            # no hint to click: a whole step has no view of its own to load into
            return (*_draw_steps(t, data, top if isinstance(top, int) and top > 0 else len(cands)),
                    {"display": "none"})
        labels = {"x": t("plan.chart.x"), "y": t("plan.chart.y"), "limit": t("plan.chart.limit"),
                  "title": t("plan.chart.title"), "not_fit": t("plan.chart.not-fit"), "separators": t.separators(),
                  "scheme": lambda scheme: scheme_name(t, scheme), "number": t.num,
                  "point": lambda c: f"#{c['rank']} {scheme_name(t, c['scheme'])} {explain.variant(t, c['variant_clause'])}"}
        top = top if isinstance(top, int) and top > 0 else len(cands)
        summary = t("plan.summary", simulated=t.int(data["simulated"]), tokens=t.int(data["request"]["seq"]),
                    fit=t.int(data["fit"]),
                    seconds=t.num(data.get("elapsed_s", 0.0)), limit=t.bytes(data["memory_limit_bytes"]))
        if data["not_possible"]:
            reasons = sorted({f"{scheme_name(t, x['scheme'])} {explain.variant(t, x['variant_clause'])}: "
                              f"{explain.refusal(t, x['reason'], x['reason_clause'])}" for x in data["not_possible"]})
            summary = [summary, html.Br(), t("plan.not-possible", items="; ".join(reasons))]
        return (plan_chart(cands, data["memory_limit_bytes"], labels), table(t, data, top), summary, {},
                {"display": "none"}, {})

    # a candidate opens as a link would, without reloading the page: its options become the
    # page's query, which the controls read (dashboard/views/scenario.py), and the timeline
    # opens; the language and the rest of the page stay as they are
    @app.callback(Output("url", "search", allow_duplicate=True), Output("tabs", "value", allow_duplicate=True),
                  Output("plan-load-msg", "children"),
                  Input("plan-chart", "clickData"), Input({"type": "plan-load", "index": ALL}, "n_clicks"),
                  State("plan-result", "data"), State("url", "search"),
                  State("lang", "value"), prevent_initial_call=True)
    def load(click, clicks, data, search, lang):
        if not data:
            raise PreventUpdate
        trig = ctx.triggered_id
        if trig == "plan-chart":
            points = (click or {}).get("points") or []
            if not points or "customdata" not in points[0]:
                raise PreventUpdate
            index = int(points[0]["customdata"])
        elif isinstance(trig, dict) and trig.get("type") == "plan-load":
            if not any(clicks or []):
                raise PreventUpdate            # the table was redrawn, nothing was clicked
            index = int(trig["index"])
        else:
            raise PreventUpdate
        cands = data["candidates"]
        if data.get("mode") == "step" or not 0 <= index < len(cands):
            raise PreventUpdate              # a whole step has no view of its own here: its row gives the command
        query, dropped = search_for_candidate(cands[index]["command"], search)
        if dropped:
            # the other views would show another configuration: say so rather than mislead
            return no_update, no_update, Translator(lang)("plan.cannot-load", flags=", ".join(dropped),
                                                          command=cands[index]["command"])
        return (no_update if query == (search or "") else query), "timeline", ""

