"""The Profiler traces view: a run a person recorded with torch.profiler (Kineto JSON, one
file per rank, or the Parquet table `ringsim trace import --out` wrote), opened by upload or,
where the server allows it (`ringsim dashboard --traces-dir DIR`), by a path under that
folder; then what `ringsim trace import` and `ringsim validate --trace` say of it, drawn.

- each rank's breakdown as HTA defines it (sim.profiler.breakdown: the table `trace
  import` prints), the kernel names no pattern recognised (sim.profiler.kernels);
- the ring found in it (sim.profiler.ring.find_ring): its configuration, what was assumed
  and what could not be matched; where there is none (a tensor-parallel iteration, a trace
  without attention), why, and the breakdown still;
- the profile fitted to that ring and its configuration played on it
  (sim.calibration.from_profiler.validate_trace): the measured attention phase per
  iteration (median and range) beside the simulated one and the error, and the two on
  paired lanes per rank in the Measured vs simulated view's figure
  (dashboard.figures.overlay): the measured lanes are one iteration of the run (the one
  nearest the median) as a ringsim trace (`measured_trace`), the simulated ones the
  engine's trace;
- a what-if: the same run at another GPU count (CP degree), layout, scheme or sequence on
  the fitted profile, on the same paired lanes beside the measured iteration.

The run and what was derived from it stay on the server, a few at a time, named by a token
of the bytes (an upload) or the path and its modification time; the page keeps the token.
A file that is not a trace, a path outside the folder, an upload over the size limit: one
line in the page, in place of the figures, in the page's language: the view's own refusals
from the catalogs (`message`), the importer's and the simulator's from the sim.reasons
clause they carry (dashboard/explain.py), a file named as it was given.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

import dash
import numpy as np
from dash import Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dashboard import explain
from dashboard.export import decode_upload
from dashboard.figures.overlay import overlay
from dashboard.figures.style import message_figure
from dashboard.i18n import LANGUAGES, Translator, catalog, layout_label, scheme_label, scheme_name
from dashboard.served import MAX_UPLOAD_BYTES
from dashboard.views.common import FOLDED, HIDDEN, graph, only_on
from dashboard.views.labels import figure_labels
from sim.errors import RingsimError
from sim.layouts import NAMES as LAYOUT_NAMES
from sim.profiler.breakdown import Breakdown, breakdown, pct
from sim.profiler.reader import Run
from sim.profiler.ring import RingRun
from sim.reasons import Clause, english
from sim.schemes import names as scheme_names
from sim.trace.format import A2A, AG, BWD, COMPUTE, DKV, FWD, IDLE, KV, RECV, RS, SEND, WAIT, SpanTable, Trace

MAX_TRACES_UPLOAD_BYTES = MAX_UPLOAD_BYTES
"""The largest upload, all its files together (the app refuses request bodies past it)."""
MAX_WHAT_IF_GPUS = 1024
"""As the scenario's own control: the largest ring the page simulates."""
KEPT_RUNS = 4
"""Opened runs kept on the server (each holds its events, a few MB for a small trace)."""
UNKNOWN_SHOWN = 20
"""Unknown kernel names listed in the page (the most frequent first)."""

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._+-]")
_TRANSFER_KIND = {"all_to_all": A2A, "all_gather": AG, "reduce_scatter": RS}


@dataclass
class Opened:
    """A run opened in the view and what was derived from it."""

    name: str
    run: Run
    breakdown: list[Breakdown]
    ring: RingRun | None = None
    no_ring: str | None = None
    """Why no ring was found (or no profile fitted to it), in sim.profiler's words."""
    no_ring_reason: Clause | None = None
    """The same as a sim.reasons clause, for the page's language (None where it has none)."""
    report: dict[str, Any] = field(default_factory=dict)
    """validate_trace's report (empty without a ring)."""
    profile: Any = None
    iteration: int | None = None
    """The iteration drawn as the measured lanes."""
    measured: Trace | None = None
    simulated: Trace | None = None


# ------------------------------------------------------------------ the view's refusals

def _refusal(key: str, **fields: Any) -> RingsimError:
    """A refusal of the view's own, message `key` of the catalogs: a RingsimError whose text is
    the English one, with the key and its fields kept (`said`) for the page to say it in its
    language. A field is a count (written as the language writes numbers), a name or path
    (written as it is) or a function of the Translator (a text of the catalogs)."""
    e = RingsimError(_say(Translator("en"), key, fields))
    e.said = (key, fields)
    return e


def _say(t: Translator, key: str, fields: dict[str, Any]) -> str:
    def text(v: Any) -> str:
        if callable(v):
            return v(t)
        if isinstance(v, int) and not isinstance(v, bool):
            return t.int(v)
        return str(v)

    return t(key, **{k: text(v) for k, v in fields.items()})


def message(t: Translator, e: RingsimError) -> str:
    """A refusal as the page shows it, in `t`'s language: the view's own from the catalogs,
    the simulator's from its reason (dashboard.explain), else as the simulator wrote it."""
    said = getattr(e, "said", None)
    if said is not None:
        return _say(t, *said)
    return explain.refusal(t, str(e), e.reason)


def _without_folder(reason: Any, folder: str) -> Any:
    """A reason with `folder` (the upload's own temporary one, or the traces folder) taken off
    the front of the paths it names: the page names a file as the person gave it."""
    if isinstance(reason, dict):
        return {k: _without_folder(v, folder) for k, v in reason.items()}
    if isinstance(reason, list):
        return [_without_folder(v, folder) for v in reason]
    if isinstance(reason, str):
        return reason.replace(folder + os.sep, "")
    return reason


def _read_under(paths: list[str], folder: str) -> Run:
    """The run of `paths`, its refusals naming files under `folder` by their names below it."""
    try:
        return _read(paths)
    except RingsimError as e:
        if e.reason is None:
            raise RingsimError(str(e).replace(folder + os.sep, "")) from None
        reason = _without_folder(e.reason, folder)
        raise RingsimError(english(reason), reason=reason) from None


# ------------------------------------------------------------------ opening a run

def _read(paths: list[str]) -> Run:
    from sim.calibration.from_profiler import read_profiled

    return read_profiled(paths, partial=True)


def analyse(run: Run, name: str) -> Opened:
    """What `ringsim trace import` and `ringsim validate --trace` say of `run`: the
    breakdown always; the ring, the fitted profile and the replay where a ring is found."""
    from sim.calibration.from_profiler import validate_trace
    from sim.engine.play import simulate

    opened = Opened(name=name, run=run, breakdown=breakdown(run))
    try:
        report, profile = validate_trace([name], run=run)
    except RingsimError as e:
        opened.no_ring, opened.no_ring_reason = str(e), e.reason
        return opened
    from sim.profiler.ring import find_ring

    ring = find_ring(run)
    opened.ring, opened.report, opened.profile = ring, report, profile
    opened.iteration = median_iteration(ring)
    opened.measured = measured_trace(ring, opened.iteration)
    opened.simulated = simulate(ring.config.scenario(), profile)
    return opened


def open_upload(contents: Any, filenames: Any, max_bytes: int = MAX_TRACES_UPLOAD_BYTES) -> tuple[str, Opened]:
    """(token, the run) of a dcc.Upload of one or several files: .json / .json.gz, one
    per rank, or one .parquet table; RingsimError, one line, otherwise."""
    if isinstance(contents, str):
        contents, filenames = [contents], [filenames]
    if not isinstance(contents, list) or not contents:
        raise _refusal("traces.msg.no-file")
    if not isinstance(filenames, list) or len(filenames) != len(contents):
        filenames = [f"trace{i}.json" for i in range(len(contents))]
    # base64 holds 3 bytes in 4 characters: refuse before decoding anything
    total = sum(len(c) * 3 // 4 for c in contents if isinstance(c, str))
    if total > max_bytes + 3 * len(contents):
        raise _refusal("traces.too-big", size=-(-total // 2 ** 20), mb=max_bytes // 2 ** 20)
    names = [_SAFE_NAME.sub("_", os.path.basename(str(n))) or f"trace{i}.json" for i, n in enumerate(filenames)]
    for n in names:
        if not n.endswith((".json", ".json.gz", ".parquet")):
            raise _refusal("traces.msg.extension", name=n)
    if len(set(names)) != len(names):
        raise _refusal("traces.msg.same-name", names=", ".join(sorted({n for n in names if names.count(n) > 1})))
    if any(n.endswith(".parquet") for n in names) and len(names) > 1:
        raise _refusal("traces.msg.parquet-alone")
    raws = [_decode(c, n, max_bytes) for c, n in zip(contents, names)]
    if sum(len(r) for r in raws) > max_bytes:
        raise _refusal("traces.msg.over-limit", mb=max_bytes // 2 ** 20)
    digest = hashlib.sha256()
    for n, r in sorted(zip(names, raws)):
        digest.update(n.encode() + b"\0" + hashlib.sha256(r).digest())
    token = "profiled-" + digest.hexdigest()[:16]
    with tempfile.TemporaryDirectory(prefix="ringsim-traces-") as folder:
        paths = []
        for n, r in zip(names, raws):
            path = os.path.join(folder, n)
            with open(path, "wb") as f:
                f.write(r)
            paths.append(path)
        run = _read_under(paths, folder)
    return token, analyse(run, ", ".join(names))


_UPLOAD_MESSAGES = {"file-not-a-file": "traces.msg.file-not-a-file", "not-base64": "traces.msg.not-base64",
                    "bad-base64": "traces.msg.bad-base64", "file-over": "traces.msg.file-over"}
"""The catalogs' message for each of dashboard.export.decode_upload's refusals."""


def _decode(contents: Any, name: str, max_bytes: int) -> bytes:
    """The bytes of one file of a dcc.Upload (dashboard.export.decode_upload), its refusals
    in the catalogs' words."""
    return decode_upload(contents, name, max_bytes,
                         refuse=lambda what, **fields: _refusal(_UPLOAD_MESSAGES[what], **fields))


def resolve_server_path(text: Any, traces_dir: str | None) -> str:
    """The file or folder `text` names under `traces_dir` (relative to it, or absolute),
    links resolved; RingsimError when the server opens no paths, or the path is outside
    the folder or missing."""
    if not traces_dir:
        raise _refusal("traces.msg.no-paths")
    if not isinstance(text, str) or not text.strip():
        raise _refusal("traces.msg.type-path")
    root = os.path.realpath(traces_dir)
    path = os.path.realpath(os.path.join(root, os.path.expanduser(text.strip())))
    if os.path.commonpath([root, path]) != root:
        raise _refusal("traces.msg.outside", path=text.strip(), folder=traces_dir)
    if not os.path.exists(path):
        raise _refusal("traces.msg.no-such", path=text.strip(), folder=traces_dir)
    return path


def open_path(text: Any, traces_dir: str | None) -> tuple[str, Opened]:
    """(token, the run) of a trace file, a folder of one file per rank or a .parquet table
    under `traces_dir`."""
    path = resolve_server_path(text, traces_dir)
    token = "profiled-" + hashlib.sha256(f"{path}\0{os.path.getmtime(path)}".encode()).hexdigest()[:16]
    root = os.path.realpath(traces_dir or "")
    name = os.path.relpath(path, root)
    return token, analyse(_read_under([path], root), name)


# ------------------------------------------------------------------ the measured lanes

def median_iteration(ring: RingRun) -> int:
    """The iteration whose attention phase is nearest the median of all of them."""
    per = ring.iteration_s()
    median = statistics.median(per.values())
    return min(per, key=lambda it: (abs(per[it] - median), it))


def measured_trace(ring: RingRun, iteration: int) -> Trace:
    """One iteration of the ring found in a profiled run as a measured ringsim trace, so
    that the Measured vs simulated figure draws it: each attention call a compute span
    (a backward pass's steps numbered after the forward's, as the engine numbers them),
    each transfer a send or receive span of its hop, and the compute stream's gaps in the
    rank's attention phase waits, exposed communication while a transfer of the rank was
    in flight and idle after."""
    n = ring.config.n_gpus
    calls = [c for c in ring.calls if c.iteration == iteration]
    fwd_steps = 1 + max((c.step for c in calls if c.kind == "fwd"), default=-1)
    rows: list[tuple] = []          # rank, stream, kind, step, start, end, flops, bytes, peer
    for c in calls:
        step = c.step + (fwd_steps if c.kind == "bwd" else 0)
        rows.append((c.rank, COMPUTE, BWD if c.kind == "bwd" else FWD, step, c.start_s, c.start_s + c.dur_s,
                     c.flops, 0.0, -1))
    transfers = [t for t in ring.transfers if t.iteration == iteration]
    for t in transfers:
        kind = _TRANSFER_KIND.get(t.op, DKV if fwd_steps and t.hop >= fwd_steps and ring.config.pass_ == "fwdbwd"
                                  else KV)
        stream, peer = (SEND, (t.rank + 1) % n) if t.op == "send" else (RECV, (t.rank - 1) % n)
        if t.op not in ("send", "recv"):
            peer = -1
        rows.append((t.rank, stream, kind, t.hop, t.start_s, max(t.start_s, t.end_s), 0.0, max(0.0, t.bytes), peer))
    for (rank, it), (start, end) in ring.phases.items():
        if it != iteration:
            continue
        mine = sorted((c.start_s, c.start_s + c.dur_s, c.step + (fwd_steps if c.kind == "bwd" else 0))
                      for c in calls if c.rank == rank)
        flights = [(t.start_s, t.end_s, _TRANSFER_KIND.get(t.op, KV)) for t in transfers if t.rank == rank]
        edge = start
        for s, e, step in mine:
            if s > edge:
                rows.extend(_wait_rows(rank, step, edge, s, flights))
            edge = max(edge, e)
        if end > edge:
            rows.extend(_wait_rows(rank, mine[-1][2] if mine else 0, edge, end, flights))
    if not rows:
        raise _refusal("traces.msg.nothing-to-draw", iteration=iteration)
    cols = list(zip(*rows))
    table = SpanTable(rank=cols[0], stream=cols[1], kind=cols[2], step=cols[3], start_s=cols[4], end_s=cols[5],
                      flops=cols[6], bytes=cols[7], peer=cols[8], q_chunks=np.full(len(rows), -1),
                      kv_chunks=np.full(len(rows), -1))
    return Trace("measured", n, table, config=_trace_config(ring), meta={"iteration": iteration})


def _wait_rows(rank: int, step: int, start: float, end: float, flights: list[tuple]) -> list[tuple]:
    """A gap in a rank's compute: exposed up to the last in-flight transfer's end, idle after."""
    busy = [(e, k) for s, e, k in flights if s < end and e > start]
    if not busy:
        return [(rank, WAIT, IDLE, step, start, end, 0.0, 0.0, -1)]
    last, kind = max(busy)
    cut = min(end, last)
    out = [(rank, WAIT, kind, step, start, cut, 0.0, 0.0, -1)]
    if end > cut:
        out.append((rank, WAIT, IDLE, step, cut, end, 0.0, 0.0, -1))
    return out


def _trace_config(ring: RingRun) -> dict[str, Any]:
    cfg = ring.config
    return {"workload": {"batch": cfg.batch, "seq": cfg.seq, "heads": cfg.heads, "kv_heads": cfg.kv_heads,
                         "head_dim": cfg.head_dim, "dtype": cfg.dtype, "causal": cfg.causal, "pass": cfg.pass_},
            "n_gpus": cfg.n_gpus, "scheme": cfg.scheme, "layout": cfg.layout, "overlap": True}


# ------------------------------------------------------------------ the what-if

def what_if(opened: Opened, gpus: Any, layout: Any, scheme: Any, seq: Any) -> Trace:
    """The opened run's configuration at another GPU count, layout, scheme or sequence,
    played on its fitted profile; RingsimError for a configuration the simulator refuses."""
    from sim.engine.play import simulate
    from sim.scenario.config import Scenario

    if opened.ring is None or opened.profile is None:
        raise _refusal("traces.whatif.no-ring")
    cfg = opened.ring.config
    gpus = _whole(gpus, "traces.whatif.gpus", 1, MAX_WHAT_IF_GPUS)
    seq = _whole(seq, "traces.whatif.seq", 1, 1 << 40)
    if scheme not in scheme_names():
        raise _refusal("traces.msg.scheme", scheme=repr(scheme),
                       choices=lambda t: ", ".join(scheme_name(t, s) for s in scheme_names()))
    if layout not in LAYOUT_NAMES:
        raise _refusal("traces.msg.layout", layout=repr(layout),
                       choices=lambda t: ", ".join(layout_label(t, x) for x in LAYOUT_NAMES))
    workload = replace(cfg.workload(), seq=seq)
    scenario = Scenario(workload=workload, n_gpus=gpus, scheme=scheme, layout=layout, overlap=True,
                        granularity="exact")
    return simulate(scenario, opened.profile)


def _whole(x: Any, control: str, lo: int, hi: int) -> int:
    """`x` as a whole number from `lo` to `hi`; else a refusal naming the control (its label's key)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != int(x) or not lo <= x <= hi:
        raise _refusal("traces.msg.whole", control=lambda t: t(control), lo=lo, hi=hi)
    return int(x)


# ------------------------------------------------------------------ the page

_TEXTS = (
    ("traces-path-label", "traces.path.label"),
    ("traces-path-open", "traces.path.open"),
    ("traces-h-replay", "traces.h.replay"),
    ("traces-h-breakdown", "traces.h.breakdown"),
    ("traces-h-ring", "traces.h.ring"),
    ("traces-h-unknown", "traces.h.unknown"),
    ("traces-h-whatif", "traces.h.whatif"),
    ("traces-whatif-gpus-label", "traces.whatif.gpus"),
    ("traces-whatif-layout-label", "traces.whatif.layout"),
    ("traces-whatif-scheme-label", "traces.whatif.scheme"),
    ("traces-whatif-seq-label", "traces.whatif.seq"),
)
"""(component id, message key) of the view's fixed texts."""

_TRANSPORTS = {"p2p": "traces.transport.p2p", "alltoall": "traces.transport.alltoall",
               "allgather": "traces.transport.allgather"}
"""How the ring's blocks travelled (sim.profiler.ring.RingConfig.transport) -> its words' key."""

_BREAKDOWN_COLUMNS = ("traces.col.rank", "traces.col.span", "traces.col.compute", "traces.col.comm", "traces.col.memory",
                      "traces.col.other", "traces.col.idle", "traces.col.overlap", "traces.col.events")


def view() -> list[Any]:
    en = Translator("en")

    def text(cid: str, key: str, tag=html.Span, **kw):
        return tag(en(key), id=cid, **kw)

    def control(cid: str, key: str, widget):
        return html.Div(className="inline", children=[
            html.Label(en(key), htmlFor=cid, id=f"{cid}-label"), html.Div(widget, className="slider")])

    return [
        dcc.Store(id="traces-opened"),
        dcc.Store(id="traces-upload-ok"),
        # no per-file cap here: a file over it would be dropped without a word; the gate
        # (register_callbacks) measures the files read and refuses with a message
        dcc.Upload(id="traces-upload", multiple=True,
                   accept=".json,.gz,.json.gz,.parquet,application/json,application/gzip",
                   className="upload wide", children=_upload_children(en)),
        html.Div(id="traces-path-row", className="inline", style=HIDDEN, children=[
            text("traces-path-label", "traces.path.label", html.Label, htmlFor="traces-path"),
            dcc.Input(id="traces-path", type="text", debounce=True, className="wide"),
            text("traces-path-open", "traces.path.open", html.Button, n_clicks=0, className="small")]),
        html.Div(id="traces-status", className="help"),
        html.Div(id="traces-msg", className="msg", role="alert"),
        text("traces-h-replay", "traces.h.replay", html.H4),
        html.Div(id="traces-replay"),
        graph("traces-lanes", 520),
        # what is derived from an opened run, folded until one is (its charts still drawn at
        # their width: views.common.FOLDED): empty headings and controls said nothing
        html.Div(id="traces-derived", style=FOLDED, children=[
        text("traces-h-breakdown", "traces.h.breakdown", html.H4),
        html.Div(id="traces-breakdown"),
        text("traces-h-ring", "traces.h.ring", html.H4),
        html.Div(id="traces-ring"),
        text("traces-h-unknown", "traces.h.unknown", html.H4),
        html.Div(id="traces-unknown"),
        text("traces-h-whatif", "traces.h.whatif", html.H4),
        html.Div(className="controls-row", children=[
            control("traces-whatif-gpus", "traces.whatif.gpus",
                    dcc.Input(id="traces-whatif-gpus", type="number", min=1, max=MAX_WHAT_IF_GPUS, step=1,
                              debounce=True)),
            control("traces-whatif-layout", "traces.whatif.layout",
                    dcc.Dropdown(id="traces-whatif-layout", clearable=False, searchable=False,
                                 options=_layout_options(en))),
            control("traces-whatif-scheme", "traces.whatif.scheme",
                    dcc.Dropdown(id="traces-whatif-scheme", clearable=False, searchable=False,
                                 options=_scheme_options(en))),
            control("traces-whatif-seq", "traces.whatif.seq",
                    dcc.Input(id="traces-whatif-seq", type="number", min=1, step=1, debounce=True))]),
        html.Div(id="traces-whatif-msg", className="msg", role="alert"),
        html.Div(id="traces-whatif-line"),
        graph("traces-whatif", 520)])]


def _upload_children(t: Translator) -> list[Any]:
    before, _, after = t("traces.upload", mb=MAX_TRACES_UPLOAD_BYTES // 2 ** 20, choose="{choose}").partition("{choose}")
    return [html.Div([before, html.A(t("upload.choose")), after])]


def _layout_options(t: Translator) -> list[dict[str, str]]:
    return [{"label": layout_label(t, x), "value": x} for x in LAYOUT_NAMES]


def _scheme_options(t: Translator) -> list[dict[str, str]]:
    return [{"label": scheme_label(t, s), "value": s} for s in scheme_names()]


def status_line(opened: Opened, t: Translator) -> str:
    run = opened.run
    steps = sorted({n for v in run.iterations.values() for n, _, _ in v})
    return t("traces.status", name=opened.name, ranks=t.int(len(run.ranks)), world=t.int(run.world_size),
             events=t.int(len(run.events)), steps=", ".join(str(s) for s in steps) or "–")


def breakdown_table(rows: list[Breakdown], t: Translator) -> html.Table:
    """The breakdown per rank, as `ringsim trace import` prints it: each part's time and
    its share of the span, and HTA's comm-comp overlap."""
    def part(x: float, span: float) -> str:
        return f"{t.time(x)} ({t.num(pct(x, span), 3)}%)"

    head = [t(key) for key in _BREAKDOWN_COLUMNS]
    body = []
    for b in rows:
        body.append(html.Tr([html.Td(str(b.rank)), html.Td(t.time(b.span_s)), html.Td(part(b.compute_s, b.span_s)),
                             html.Td(part(b.comm_s, b.span_s)), html.Td(part(b.memory_s, b.span_s)),
                             html.Td(part(b.other_s, b.span_s)), html.Td(part(b.idle_s, b.span_s)),
                             html.Td("–" if b.overlap_pct is None else f"{t.num(b.overlap_pct, 3)}%"),
                             html.Td(t.int(b.events))]))
    return html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(body)], id="traces-breakdown-table")


def breakdown_section(opened: Opened, t: Translator) -> list[Any]:
    out: list[Any] = [breakdown_table(opened.breakdown, t)]
    if opened.breakdown and not opened.breakdown[0].on_gpu:
        out.append(html.P(t("traces.breakdown.host"), className="help"))
    out += [html.P(explain.say(t, note), className="help") for note in opened.run.note_clauses]
    return out


def ring_section(opened: Opened, t: Translator) -> list[Any]:
    """The ring's configuration, what the ring finder assumed and what it did not match;
    or why there is no ring."""
    if opened.ring is None:
        why = explain.refusal(t, opened.no_ring or "", opened.no_ring_reason)
        return [html.P(t("traces.ring.none", why=why), id="traces-no-ring")]
    cfg = opened.ring.config
    transport = _TRANSPORTS.get(cfg.transport)
    passes = f"opt.pass.{cfg.pass_}"
    out: list[Any] = [html.P(t("traces.ring.config", n=t.int(cfg.n_gpus), scheme=scheme_label(t, cfg.scheme),
                               transport=t(transport) if transport else cfg.transport,
                               layout=layout_label(t, cfg.layout), seq=t.int(cfg.seq),
                               batch=t.int(cfg.batch), heads=t.int(cfg.heads), kv_heads=t.int(cfg.kv_heads),
                               head_dim=t.int(cfg.head_dim), dtype=cfg.dtype,
                               mask=t("traces.mask.causal" if cfg.causal else "traces.mask.full"),
                               passes=t(passes) if t.has(passes) else cfg.pass_))]
    if cfg.assumed_clauses:
        out += [html.P(t("traces.ring.assumed")),
                html.Ul([html.Li(explain.say(t, a)) for a in cfg.assumed_clauses], id="traces-assumed")]
    if opened.ring.unmatched_clauses:
        out += [html.P(t("traces.ring.unmatched")),
                html.Ul([html.Li(explain.say(t, u)) for u in opened.ring.unmatched_clauses], id="traces-unmatched")]
    else:
        out.append(html.P(t("traces.ring.all-matched"), id="traces-unmatched"))
    return out


def unknown_section(opened: Opened, t: Translator) -> list[Any]:
    unknown = opened.run.unknown_kernels
    if not unknown:
        return [html.P(t("traces.unknown.none"))]
    ranked = sorted(unknown.items(), key=lambda kv: (-kv[1], kv[0]))
    items = [html.Li(t("traces.unknown.row", count=t.int(k), name=name[:200])) for name, k in ranked[:UNKNOWN_SHOWN]]
    out: list[Any] = [html.P(t("traces.unknown.count", names=t.int(len(unknown)),
                               launches=t.int(sum(unknown.values())))),
                      html.Ul(items, id="traces-unknown-list")]
    if len(unknown) > UNKNOWN_SHOWN:
        out.append(html.P(t("traces.unknown.more", more=t.int(len(unknown) - UNKNOWN_SHOWN))))
    return out


def replay_line(opened: Opened, t: Translator) -> str | None:
    """Measured attention phase per iteration (median, range) against the replay, and the error."""
    if not opened.report:
        return None
    r, m = opened.report, opened.report["measured"]
    inside = t("traces.replay.inside" if r["within_range"] else "traces.replay.outside")
    return t("traces.replay.line", median=t.time(m["median_s"]), min=t.time(m["min_s"]), max=t.time(m["max_s"]),
             n=t.int(m["n"]), simulated=t.time(r["simulated_s"]),
             error="–" if r["error"] is None else f"{'+' if r['error'] >= 0 else ''}{t.pct(r['error'])}",
             inside=inside, iteration=t.int(opened.iteration if opened.iteration is not None else -1))


def replay_figure(opened: Opened, t: Translator):
    """The measured iteration and the replay on paired lanes per rank, with the per-step error."""
    from dashboard import compute

    if opened.measured is None or opened.simulated is None:
        return message_figure(t("traces.replay.none"))
    return overlay(opened.simulated, opened.measured, compute.step_errors(opened.simulated, opened.measured),
                   labels=figure_labels(t, "overlay"))


def what_if_figure(opened: Opened, trace: Trace, t: Translator):
    """A what-if beside the measured iteration, on the same paired lanes (without the
    per-step panel: the two need not have the same steps)."""
    labels = figure_labels(t, "overlay") | {"title": t("traces.whatif.title"), "simulated": t("traces.whatif.run"),
                                            "sim_lane": t("traces.whatif.lane")}
    fig = overlay(trace, opened.measured, [], labels=labels)
    # the lanes only: the per-step panel would compare steps the two runs need not share
    fig.data = [tr for tr in fig.data if tr.yaxis in (None, "y")]
    fig.layout.annotations = fig.layout.annotations[:1]
    fig.update_layout(yaxis=dict(domain=[0.0, 1.0]), xaxis2=dict(visible=False), yaxis2=dict(visible=False))
    return fig


def what_if_line(opened: Opened, trace: Trace, gpus: int, scheme: str, layout: str, seq: int, t: Translator) -> str:
    measured = opened.report["measured"]["median_s"]
    return t("traces.whatif.line", scheme=scheme_label(t, scheme), layout=layout_label(t, layout), gpus=t.int(gpus),
             seq=t.int(seq), simulated=t.time(trace.makespan_s), replay=t.time(opened.report["simulated_s"]),
             measured=t.time(measured), ratio=t.num(trace.makespan_s / measured if measured > 0 else float("nan"), 3))


_UPLOAD_GATE = """
function(contents, filename, lang) {
    const nothing = window.dash_clientside.no_update;
    if (!contents) { return [nothing, nothing, nothing]; }
    const all = Array.isArray(contents) ? contents : [contents];
    const names = Array.isArray(filename) ? filename : [filename];
    // base64 holds 3 bytes in 4 characters
    const bytes = all.reduce((n, c) => n + Math.floor((c || "").length * 3 / 4), 0);
    if (bytes > LIMIT) {
        const texts = TEXTS;
        const text = (texts[lang] || texts.en).replace("{size}", Math.ceil(bytes / 1048576))
            .replace("{mb}", Math.floor(LIMIT / 1048576));
        return [null, text, null];
    }
    return [{contents: all, filename: names}, "", null];
}
"""


def register_callbacks(app: dash.Dash, served: Any, traces_dir: str | None = None) -> None:
    kept: OrderedDict[str, Opened] = OrderedDict()

    def keep(token: str, opened: Opened) -> None:
        kept[token] = opened
        kept.move_to_end(token)
        while len(kept) > KEPT_RUNS:
            kept.popitem(last=False)

    @app.callback(Output("traces-path-row", "style"), Input("tabs", "value"))
    def path_row(tab):
        only_on("traces", tab)
        return {} if traces_dir else HIDDEN

    @app.callback([Output(cid, "children") for cid, _ in _TEXTS]
                  + [Output("traces-upload", "children"), Output("traces-whatif-layout", "options"),
                     Output("traces-whatif-scheme", "options")],
                  Input("lang", "value"))
    def texts(lang):
        t = Translator(lang)
        return [t(key) for _, key in _TEXTS] + [_upload_children(t), _layout_options(t), _scheme_options(t)]

    # The upload's gate, in the browser: files over the limit in all are refused there with
    # a message (sent on, the request would be refused by the server without one), and the
    # upload is emptied either way, so that its megabytes do not stay in the page and the
    # same files dropped again are read again.
    app.clientside_callback(
        _UPLOAD_GATE.replace("LIMIT", str(MAX_TRACES_UPLOAD_BYTES)).replace("TEXTS", json.dumps(
            {lang: catalog(lang)["traces.too-big"] for lang in LANGUAGES})),
        Output("traces-upload-ok", "data"), Output("traces-msg", "children", allow_duplicate=True),
        Output("traces-upload", "contents"),
        Input("traces-upload", "contents"), State("traces-upload", "filename"), State("lang", "value"),
        prevent_initial_call=True)

    @app.callback(Output("traces-opened", "data"), Output("traces-msg", "children"),
                  Input("traces-upload-ok", "data"), Input("traces-path-open", "n_clicks"),
                  Input("traces-path", "value"), State("lang", "value"), prevent_initial_call=True)
    def open_run(upload, _clicks, path, lang):
        try:
            if ctx.triggered_id == "traces-upload-ok":
                if not upload:
                    raise PreventUpdate
                token, opened = open_upload(upload.get("contents"), upload.get("filename"))
            else:
                if not path:
                    raise PreventUpdate
                token, opened = open_path(path, traces_dir)
        except RingsimError as e:
            return no_update, message(Translator(lang), e)
        keep(token, opened)
        return {"token": token, "name": opened.name}, ""

    @app.callback(Output("traces-status", "children"), Output("traces-replay", "children"),
                  Output("traces-lanes", "figure"), Output("traces-breakdown", "children"),
                  Output("traces-ring", "children"), Output("traces-unknown", "children"),
                  Output("traces-whatif-gpus", "value"), Output("traces-whatif-layout", "value"),
                  Output("traces-whatif-scheme", "value"), Output("traces-whatif-seq", "value"),
                  Output("traces-derived", "style"),
                  Input("traces-opened", "data"), Input("tabs", "value"), Input("lang", "value"))
    def draw(data, tab, lang):
        only_on("traces", tab)
        t = Translator(lang)
        opened = kept.get((data or {}).get("token"))
        if opened is None:
            none = t("traces.gone" if data else "traces.none" if traces_dir else "traces.none-upload")
            # said once, in the chart's place
            return (None, None, message_figure(none), None, None, None, no_update, no_update, no_update, no_update,
                    FOLDED)
        controls: tuple = (no_update,) * 4
        if ctx.triggered_id == "traces-opened" and opened.ring is not None:
            cfg = opened.ring.config
            controls = (cfg.n_gpus, cfg.layout, cfg.scheme, cfg.seq)
        return (status_line(opened, t), replay_line(opened, t), replay_figure(opened, t),
                breakdown_section(opened, t), ring_section(opened, t), unknown_section(opened, t), *controls, {})

    @app.callback(Output("traces-whatif", "figure"), Output("traces-whatif-line", "children"),
                  Output("traces-whatif-msg", "children"),
                  Input("traces-opened", "data"), Input("traces-whatif-gpus", "value"),
                  Input("traces-whatif-layout", "value"), Input("traces-whatif-scheme", "value"),
                  Input("traces-whatif-seq", "value"), Input("tabs", "value"), Input("lang", "value"))
    def draw_what_if(data, gpus, layout, scheme, seq, tab, lang):
        only_on("traces", tab)
        t = Translator(lang)
        opened = kept.get((data or {}).get("token"))
        if opened is None:
            return message_figure(t("traces.none")), None, ""
        if opened.ring is None:
            return message_figure(t("traces.whatif.no-ring")), None, ""
        try:
            trace = what_if(opened, gpus, layout, scheme, seq)
        except RingsimError as e:
            return no_update, no_update, message(t, e)
        return (what_if_figure(opened, trace, t), what_if_line(opened, trace, int(gpus), scheme, layout, int(seq), t),
                "")
