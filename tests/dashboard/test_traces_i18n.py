"""The Profiler traces view in Bahasa Indonesia, without a browser: every refusal it shows (an
upload that is not a trace file, a path it does not open, a damaged or foreign trace the
importer refuses, a what-if it cannot run) and everything it draws of the traces vendored in
tests/data/traces is the catalogs' text in the page's language, with no English word outside
the proper names of the trace's format and tools; on the English page each importer's refusal
is the sentence the command line prints.

The word check is the browser test's (tests/dashboard/test_browser_indonesian.py): the words of
the English catalog, less its proper names and units, commands, file names and code."""

from __future__ import annotations

import base64
import gzip
import os
import re
from pathlib import Path

import pytest

from dashboard import explain
from dashboard.app import create_app
from dashboard.client import CallbackClient
from dashboard.i18n import Translator
from dashboard.views import traces
from sim.errors import RingsimError
from sim.profiler.reader import read_run, read_table
from sim.reasons import clause
from tests.dashboard.test_browser_indonesian import english_in, english_words

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
CPU = DATA / "cpu"
ZIGZAG = CPU / "ring-zigzag-causal-fwd-2r"
FWDBWD = CPU / "ring-contiguous-full-fwdbwd-3r"
VENDORED = ("megatron-tp8-a100.rank0.json.gz", "hta-nccl-a100.rank0-of-2.json.gz",
            "tracelens-qwen0.5b-h100.json.gz", "tracelens-capture-mi300x.json.gz")
"""The traces others recorded on GPUs (tests/data/traces/README.md), one file each."""

EN, ID = Translator("en"), Translator("id")
TRACE_NAMES = {"kineto", "gzip", "traceevents", "distributedinfo", "profilerstep", "pyarrow", "dtype", "input", "dims",
               "base", "dir", "fp32", "bf16", "batch"}
"""Proper names a profiled run's texts keep in Indonesian: Kineto's and its file format's
(traceEvents, distributedInfo, ProfilerStep, Input Dims), the libraries', a dtype, a flag's
argument (DIR), base64, and the loanword the view's other texts already use (batch)."""
ENGLISH = english_words() - TRACE_NAMES


def _url(raw: bytes, kind: str = "application/gzip") -> str:
    return f"data:{kind};base64," + base64.b64encode(raw).decode()


_KEYWORD_ARGUMENT = re.compile(r"\S*\w+=\w+\S*")
"""Code to type with a keyword argument (torch.profiler(record_shapes=True)): set aside, as the
browser test sets aside commands and flags."""


def _english(text: str) -> list[str]:
    return english_in(_KEYWORD_ARGUMENT.sub(" ", text), ENGLISH)


def _text(node) -> str:
    """The visible text of a component tree (as built, or as the app sends it)."""
    if node is None:
        return ""
    if isinstance(node, str):
        return node
    if isinstance(node, (list, tuple)):
        return " ".join(_text(n) for n in node)
    if isinstance(node, dict):
        return _text(node.get("props", {}).get("children"))
    return _text(getattr(node, "children", None))


def _refused(fn, *args, **kw) -> RingsimError:
    with pytest.raises(RingsimError) as caught:
        fn(*args, **kw)
    return caught.value


# --------------------------------------------------------------------------- the view's own refusals

RAW = (ZIGZAG / "rank0.json.gz").read_bytes()

OWN_UPLOADS = [
    # (case, contents, names, max_bytes, key, fields as the catalog is filled)
    ("nothing", [], [], None, "traces.msg.no-file", {}),
    ("not a data url", ["plain text"], ["rank0.json"], None, "traces.msg.file-not-a-file", {"name": "rank0.json"}),
    ("not base64", ["data:application/json,{}"], ["rank0.json"], None, "traces.msg.not-base64",
     {"name": "rank0.json"}),
    ("bad base64", ["data:application/json;base64,@@@@"], ["rank0.json"], None, "traces.msg.bad-base64",
     {"name": "rank0.json"}),
    ("a picture", [_url(b"\x89PNG", "image/png")], ["cat.png"], None, "traces.msg.extension", {"name": "cat.png"}),
    ("two of one name", [_url(RAW), _url(RAW)], ["rank0.json.gz", "a/rank0.json.gz"], None, "traces.msg.same-name",
     {"names": "rank0.json.gz"}),
    ("a table with traces", [_url(RAW), _url(b"PAR1")], ["rank0.json.gz", "run.parquet"], None,
     "traces.msg.parquet-alone", {}),
    ("over the limit", ["data:application/gzip;base64," + "A" * (4 * 1024 * 1024)], ["rank0.json.gz"], 1024 * 1024,
     "traces.too-big", {"size": "4", "mb": "1"}),
]


@pytest.mark.parametrize("case", OWN_UPLOADS, ids=lambda c: c[0])
def test_an_upload_the_view_refuses_is_said_in_indonesian(case):
    _, contents, names, max_bytes, key, fields = case
    kw = {"max_bytes": max_bytes} if max_bytes else {}
    e = _refused(traces.open_upload, contents, names, **kw)
    said = traces.message(ID, e)
    assert said == ID(key, **fields)
    assert said != EN(key, **fields) and _english(said) == []
    assert traces.message(EN, e) == str(e) == EN(key, **fields)


def test_a_path_the_server_does_not_open_is_said_in_indonesian(tmp_path):
    (tmp_path / "zigzag").mkdir()
    cases = [
        ((None, None), "traces.msg.no-paths", {}),
        (("  ", str(tmp_path)), "traces.msg.type-path", {}),
        (("../", str(tmp_path)), "traces.msg.outside", {"path": "../", "folder": str(tmp_path)}),
        (("nowhere.json", str(tmp_path)), "traces.msg.no-such", {"path": "nowhere.json", "folder": str(tmp_path)}),
    ]
    for args, key, fields in cases:
        said = traces.message(ID, _refused(traces.resolve_server_path, *args))
        assert said == ID(key, **fields)
        assert _english(said.replace(str(tmp_path), "")) == [], said


def test_the_page_says_a_refused_path_in_its_language(tmp_path):
    (tmp_path / "zigzag").mkdir()
    client = CallbackClient.for_app(create_app(traces_dir=str(tmp_path)))
    for lang in ("id", "en"):
        t = Translator(lang)
        _, out = client.call("traces-opened.data", {"traces-path.value": "/etc", "traces-path-open.n_clicks": 1,
                                                    "lang.value": lang}, ["traces-path-open.n_clicks"])
        assert out["traces-msg"]["children"] == t("traces.msg.outside", path="/etc", folder=str(tmp_path))


def test_an_iteration_with_nothing_to_draw_is_said_in_indonesian():
    from sim.profiler.ring import find_ring

    ring = find_ring(read_run([ZIGZAG]))
    e = _refused(traces.measured_trace, ring, 12345)
    assert traces.message(ID, e) == ID("traces.msg.nothing-to-draw", iteration="12.345")
    assert str(e) == EN("traces.msg.nothing-to-draw", iteration="12,345")


# --------------------------------------------------------------------------- the importer's refusals

def _gz(text: bytes) -> bytes:
    return gzip.compress(text)


KERNEL = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": %s, "dur": %s, "pid": 0, "tid": 7, "args": {"stream": 7}}'

IMPORTER = [
    # (case, file name, bytes, clause key, its fields but the path, the library's words in it)
    ("a truncated gzip", "rank0.json.gz", RAW[: len(RAW) // 2], "gzip-cut", {}, False),
    ("not gzip inside", "rank0.json.gz", b"\x1f\x8bnonsense", "gzip-bad", None, True),
    ("no traceEvents", "rank0.json", b'{"schemaVersion": 1}', "no-events", {}, False),
    ("html", "rank0.json", b"<html>", "no-events", {}, False),
    ("traceEvents not a list", "rank0.json", b'{"traceEvents": 5}', "events-not-list", {}, False),
    ("ends inside", "rank0.json", b'{"traceEvents": [{"ph": "X"', "ends-inside", {}, False),
    ("an event not JSON", "rank0.json", b'{"traceEvents": [{"ph": "X", "ts": }]}', "event-json", None, True),
    ("not JSON after", "rank0.json", b'{"traceEvents": [], "x": }', "json-after", None, True),
    ("not an event", "rank0.json", b'{"traceEvents": [1, 2]}', "not-event", {}, False),
    ("a negative duration", "rank0.json", b'{"traceEvents": [%s]}' % (KERNEL % (b"1", b"-5")), "negative-duration",
     {"duration_us": -5.0}, False),
    ("a time not a number", "rank0.json", b'{"traceEvents": [%s]}' % (KERNEL % (b'"abc"', b"5")), "bad-time",
     {"entry": "ts", "detail": "'abc'"}, False),
    ("no activities", "rank0.json", b'{"traceEvents": []}', "no-activities", {}, False),
    ("world size 0", "rank0.json", gzip.decompress(RAW).replace(b'"world_size": 2', b'"world_size": 0'),
     "world-size", {"world": 0}, False),
    ("not a table", "run.parquet", b"PAR1 nonsense", "not-parquet", None, True),
]


@pytest.mark.parametrize("case", IMPORTER, ids=lambda c: c[0])
def test_a_trace_the_importer_refuses_is_said_in_indonesian(case, tmp_path):
    _, name, raw, key, fields, quotes_a_library = case
    e = _refused(traces.open_upload, [_url(raw)], [name])
    assert e.reason is not None and e.reason["clause"] == f"profiler.{key}"
    assert e.reason["path"] == name                 # the upload's folder taken off
    if fields is not None:
        assert e.reason == clause(f"profiler.{key}", path=name, **fields)
    said = traces.message(ID, e)
    detail = e.reason.get("detail", "")
    assert said == ID(f"why.profiler.{key}").format(**{**e.reason, "duration_us": "-5,0", "world": "0"})
    # the library's own words (an exception's text) are quoted as they are; the rest is Indonesian
    assert _english(said.replace(detail, "") if quotes_a_library else said) == [], said
    # the English page says what the command line says of the same file
    (tmp_path / name).write_bytes(raw)
    cli = _refused(read_table if name.endswith(".parquet") else read_run, tmp_path / name)
    assert traces.message(EN, e) == str(e) == str(cli).replace(str(tmp_path) + os.sep, "")


def test_ranks_of_two_runs_are_said_in_indonesian():
    files = [ZIGZAG / "rank0.json.gz", FWDBWD / "rank1.json.gz"]
    e = _refused(traces.open_upload, [_url(f.read_bytes()) for f in files], ["a.json.gz", "b.json.gz"])
    assert e.reason == clause("profiler.mixed-worlds", worlds=[clause("profiler.world-of", world=2, path="a.json.gz"),
                                                               clause("profiler.world-of", world=3, path="b.json.gz")])
    said = traces.message(ID, e)
    assert said == ID("why.profiler.mixed-worlds", worlds="2 (a.json.gz), 3 (b.json.gz)")
    assert _english(said) == []
    assert str(e) == "ranks of different runs mixed: world sizes 2 (a.json.gz), 3 (b.json.gz)"


# --------------------------------------------------------------------------- what-if refusals

@pytest.fixture(scope="module")
def zigzag(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces-i18n")
    (root / "zigzag").mkdir()
    for f in ZIGZAG.iterdir():
        (root / "zigzag" / f.name).write_bytes(f.read_bytes())
    app = create_app(traces_dir=str(root))
    client = CallbackClient.for_app(app)
    _, out = client.call("traces-opened.data", {"traces-path.value": "zigzag", "traces-path-open.n_clicks": 1,
                                                "lang.value": "id"}, ["traces-path-open.n_clicks"])
    assert out["traces-msg"]["children"] == ""
    return client, out["traces-opened"]["data"], traces.open_path("zigzag", str(root))[1]


WHAT_IFS = [
    # (case, gpus, layout, scheme, seq, key, fields of the Indonesian message)
    ("no GPUs", 0, "zigzag", "ring", 4096, "traces.msg.whole",
     {"control": ID("traces.whatif.gpus"), "lo": "1", "hi": "1.024"}),
    ("a fraction of a GPU", 2.5, "zigzag", "ring", 4096, "traces.msg.whole",
     {"control": ID("traces.whatif.gpus"), "lo": "1", "hi": "1.024"}),
    ("no sequence", 2, "zigzag", "ring", None, "traces.msg.whole",
     {"control": ID("traces.whatif.seq"), "lo": "1", "hi": "1.099.511.627.776"}),
    ("an unknown scheme", 2, "zigzag", "nope", 4096, "traces.msg.scheme", {"scheme": "'nope'"}),
    ("an unknown layout", 2, "nope", "ring", 4096, "traces.msg.layout", {"layout": "'nope'"}),
]


@pytest.mark.parametrize("case", WHAT_IFS, ids=lambda c: c[0])
def test_a_what_if_refused_by_the_view_is_said_in_indonesian(zigzag, case):
    client, data, opened = zigzag
    _, gpus, layout, scheme, seq, key, fields = case
    _, out = client.call("traces-whatif.figure", {
        "traces-opened.data": data, "traces-whatif-gpus.value": gpus, "traces-whatif-layout.value": layout,
        "traces-whatif-scheme.value": scheme, "traces-whatif-seq.value": seq, "tabs.value": "traces",
        "lang.value": "id"}, ["traces-whatif-gpus.value"])
    said = out["traces-whatif-msg"]["children"]
    if key in ("traces.msg.scheme", "traces.msg.layout"):
        e = _refused(traces.what_if, opened, gpus, layout, scheme, seq)
        assert said == traces.message(ID, e)
        assert said.startswith(ID(key, **fields, choices="")) and said != traces.message(EN, e)
    else:
        assert said == ID(key, **fields)
    assert _english(said) == [], said


@pytest.mark.parametrize("scheme", ["ulysses", "allgather"])
def test_a_what_if_the_simulator_refuses_is_said_in_indonesian(zigzag, scheme):
    client, data, opened = zigzag
    # 8 heads on a Ulysses degree of 3; 2,048 tokens in 6 chunks for an all-gather on 3 GPUs
    e = _refused(traces.what_if, opened, 3, "contiguous", scheme, 2048)
    assert e.reason is not None
    _, out = client.call("traces-whatif.figure", {
        "traces-opened.data": data, "traces-whatif-gpus.value": 3, "traces-whatif-layout.value": "contiguous",
        "traces-whatif-scheme.value": scheme, "traces-whatif-seq.value": 2048, "tabs.value": "traces",
        "lang.value": "id"}, ["traces-whatif-gpus.value"])
    said = out["traces-whatif-msg"]["children"]
    assert said == explain.say(ID, e.reason) and _english(said) == []
    assert traces.message(EN, e) == str(e)


# --------------------------------------------------------------------------- what the view draws

def _drawn(opened: traces.Opened, t: Translator) -> dict[str, str]:
    """The texts of the view's sections for an opened run (the unknown kernels' names left out:
    a kernel's name is its own)."""
    unknown = traces.unknown_section(opened, t)
    texts = {"status": traces.status_line(opened, t), "replay": traces.replay_line(opened, t) or "",
             "breakdown": _text(traces.breakdown_section(opened, t)), "ring": _text(traces.ring_section(opened, t)),
             "unknown": " ".join(_text(x) for x in unknown if getattr(x, "id", None) != "traces-unknown-list")}
    if opened.ring is not None:
        cfg = opened.ring.config
        trace = traces.what_if(opened, cfg.n_gpus, cfg.layout, cfg.scheme, cfg.seq)
        texts["what-if"] = traces.what_if_line(opened, trace, cfg.n_gpus, cfg.scheme, cfg.layout, cfg.seq, t)
    return texts


def _figure_texts(fig) -> list[str]:
    """What a figure writes: its title, axis titles and ticks, annotations, and each trace's
    name, first hovers and texts."""
    out = [fig.layout.title.text or ""]
    for axis in ("xaxis", "yaxis", "xaxis2", "yaxis2"):
        a = getattr(fig.layout, axis, None)
        if a is not None:
            out += [a.title.text or ""] + [str(x) for x in (a.ticktext or ())]
    out += [a.text or "" for a in fig.layout.annotations]
    for tr in fig.data:
        out.append(tr.name or "")
        for many in (tr.hovertemplate, tr.text):
            out += [many] if isinstance(many, str) else [str(x) for x in list(many if many is not None else ())[:3]]
    return [x for x in out if x]


RINGS = sorted(p.name for p in CPU.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", RINGS + list(VENDORED))
def test_every_vendored_trace_is_drawn_in_indonesian(name):
    opened = traces.open_path(name, str(CPU if name in RINGS else DATA))[1]
    drawn = _drawn(opened, ID)
    for part, text in drawn.items():
        assert _english(text) == [], (part, text)
    english = _drawn(opened, EN)
    assert all(drawn[k] != english[k] for k in drawn if english[k])
    # what the ring finder assumed and did not match, and the reading's notes, from the catalogs
    if opened.ring is not None:
        for a in opened.ring.config.assumed_clauses:
            assert explain.say(ID, a) in drawn["ring"] and explain.say(EN, a) in english["ring"]
        for u in opened.ring.unmatched_clauses:
            assert explain.say(ID, u) in drawn["ring"]
        cfg = opened.ring.config
        what_if = traces.what_if(opened, cfg.n_gpus, cfg.layout, cfg.scheme, cfg.seq)
        for fig in (traces.replay_figure(opened, ID), traces.what_if_figure(opened, what_if, ID)):
            assert fig.layout.separators == ID.separators()
            assert [t for t in _figure_texts(fig) if _english(t)] == []
    else:
        why = explain.say(ID, opened.no_ring_reason)
        assert ID("traces.ring.none", why=why) == drawn["ring"]
        assert opened.no_ring in english["ring"]            # the command line's sentence on the English page
    for note in opened.run.note_clauses:
        assert explain.say(ID, note) in drawn["breakdown"]


def test_the_assumptions_are_the_command_lines_on_the_english_page():
    opened = traces.open_path("ring-contiguous-full-fwdbwd-3r", str(CPU))[1]
    ring = _text(traces.ring_section(opened, EN))
    assert opened.ring.config.assumed == (
        "dtype: the attention calls' input type is not in the table; fp32 assumed",
        "mask: every block full on every step, a full mask; layout contiguous assumed (under a full mask every "
        "layout does the same work)")
    for a in opened.ring.config.assumed:
        assert a in ring
    said = _text(traces.ring_section(opened, ID))
    assert explain.say(ID, clause("profiler.assumed-full-mask", layout="contiguous")) in said
    assert ID("why.profiler.assumed-full-mask", layout=ID("opt.layout.contiguous")) in said


def test_a_partial_runs_note_is_said_in_indonesian():
    run = read_run([FWDBWD / "rank0.json.gz", FWDBWD / "rank2.json.gz"], partial=True)
    assert run.notes == ("ranks 0, 2 of 3 read, 1 not given",)
    assert explain.say(ID, run.note_clauses[0]) == ID("why.profiler.ranks-read", rank_list="0, 2", world="3",
                                                      missing="1")


def test_the_shipped_measured_examples_are_named_in_indonesian():
    from dashboard import measured

    for e in measured.examples():
        said = measured.example_label(e, ID)
        assert _english(said) == [], said
        cfg = e.trace.config
        assert ID("opt.layout." + cfg["layout"]) in said and ID("name.scheme." + cfg["scheme"]) in said
        # the English page names them as the command line does
        assert f"{cfg['scheme']}, {cfg['layout']}" in measured.example_label(e, EN)
