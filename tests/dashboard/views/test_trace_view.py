"""The Profiler traces view on the torch.profiler traces recorded here on gloo
(tests/data/traces/cpu/) and on the Megatron tensor-parallel iteration: opened by upload and
by a path under the server's traces folder, its figures hold the run's ranks and spans, its
numbers are sim.profiler's and sim.calibration.from_profiler's own, bad input is one line,
and its texts are in both languages."""

from __future__ import annotations

import base64
import gzip
import os
import re
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from dashboard.app import create_app
from dashboard.client import CallbackClient
from dashboard.i18n import LANGUAGES, Translator, catalog
from dashboard.views import traces
from sim.calibration.from_profiler import validate_trace
from sim.profiler.breakdown import breakdown
from sim.profiler.reader import read_run, write_table
from sim.profiler.ring import find_ring
from sim.trace.format import COMPUTE, RECV, SEND, WAIT

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"
CPU = DATA / "cpu"
ZIGZAG = CPU / "ring-zigzag-causal-fwd-2r"
FWDBWD = CPU / "ring-contiguous-full-fwdbwd-3r"
MEGATRON_RANK0 = DATA / "megatron-tp8-a100.rank0.json.gz"


def _url(raw: bytes) -> str:
    return "data:application/gzip;base64," + base64.b64encode(raw).decode()


def _upload(folder: Path) -> tuple[list[str], list[str]]:
    files = sorted(folder.iterdir())
    return [_url(f.read_bytes()) for f in files], [f.name for f in files]


@pytest.fixture(scope="module")
def app_and_client(tmp_path_factory):
    root = tmp_path_factory.mktemp("served-traces")
    (root / "zigzag").mkdir()
    for f in ZIGZAG.iterdir():
        (root / "zigzag" / f.name).write_bytes(f.read_bytes())
    app = create_app(traces_dir=str(root))
    return app, CallbackClient.for_app(app), root


def _open(client, contents, names) -> dict:
    # what the page's gate (a clientside callback) passes on of an upload under the limit
    _, out = client.call("traces-opened.data", {"traces-upload-ok.data": {"contents": contents, "filename": names}},
                         ["traces-upload-ok.data"])
    return out


def _draw(client, data, lang="en") -> dict:
    _, out = client.call("traces-status.children", {"traces-opened.data": data, "tabs.value": "traces",
                                                    "lang.value": lang}, ["traces-opened.data"])
    return out


def _array(x):
    """A figure's array as sent: a list, or Plotly's base64-packed typed array."""
    if isinstance(x, dict) and "bdata" in x:
        a = np.frombuffer(base64.b64decode(x["bdata"]), dtype=np.dtype(x["dtype"]))
        return a.reshape(x["shape"]) if "shape" in x and not isinstance(x["shape"], str) else a
    return x


def _figure(sent: dict) -> go.Figure:
    """A figure as the app sent it, its arrays decoded."""
    data = [{k: _array(v) if k in ("x", "y", "base") else v for k, v in tr.items()} for tr in sent["data"]]
    return go.Figure({"data": data, "layout": sent.get("layout", {})})


def _text(node) -> str:
    """The visible text of a component tree as the app sends it."""
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return " ".join(_text(n) for n in node)
    if isinstance(node, dict):
        return _text(node.get("props", {}).get("children", ""))
    return "" if node is None else str(node)


@pytest.mark.parametrize("folder", sorted(p for p in CPU.iterdir() if p.is_dir()), ids=lambda p: p.name)
def test_an_uploaded_ring_is_drawn_measured_beside_simulated(app_and_client, folder):
    _, client, _ = app_and_client
    opened = _open(client, *_upload(folder))
    data = opened["traces-opened"]["data"]
    assert data["token"].startswith("profiled-") and opened["traces-msg"]["children"] == ""
    out = _draw(client, data)
    run = read_run([folder])
    ring = find_ring(run)
    report, _ = validate_trace([str(folder)], run=run)
    n = ring.config.n_gpus

    fig = _figure(out["traces-lanes"]["figure"])
    lanes = [tr for tr in fig.data if tr.type == "bar" and tr.orientation == "h"]
    ys = {float(y) for tr in lanes for y in tr.y}
    # paired lanes per rank: simulated at 2r, measured at 2r + 1, for every rank of the run
    assert ys == {float(y) for y in range(2 * n)}
    it = traces.median_iteration(ring)
    calls = [c for c in ring.calls if c.iteration == it]
    measured_compute = [tr for tr in lanes if tr.name == "measured compute"]
    assert sum(len(tr.y) for tr in measured_compute) == len(calls)
    # each measured bar lasts as long as its attention call (ms on the axis)
    widths = sorted(w for tr in measured_compute for w in tr.x)
    assert np.allclose(widths, sorted(c.dur_s * 1e3 for c in calls), rtol=1e-9)

    # the replay line holds validate_trace's numbers
    t = Translator("en")
    line = out["traces-replay"]["children"]
    m = report["measured"]
    for x in (m["median_s"], m["min_s"], m["max_s"], report["simulated_s"]):
        assert t.time(x) in line
    assert t.pct(report["error"]) in line

    # the breakdown table holds sim.profiler.breakdown's rows, rank by rank
    table_text = _text(out["traces-breakdown"]["children"])
    for b in breakdown(run):
        assert t.time(b.span_s) in table_text and t.time(b.compute_s) in table_text
    # the ring: its assumptions and that every call matched
    ring_text = _text(out["traces-ring"]["children"])
    for a in ring.config.assumed:
        assert a in ring_text
    assert "Every attention call and transfer was matched" in ring_text
    # the what-if controls start at the run's own configuration
    assert out["traces-whatif-gpus"]["value"] == n and out["traces-whatif-seq"]["value"] == ring.config.seq


def test_the_measured_iteration_as_a_trace_holds_the_rings_spans():
    run = read_run([FWDBWD])
    ring = find_ring(run)
    it = traces.median_iteration(ring)
    per = ring.iteration_s()
    assert abs(per[it] - np.median(list(per.values()))) == min(abs(v - np.median(list(per.values())))
                                                               for v in per.values())
    tr = traces.measured_trace(ring, it)
    c = tr.columns
    calls = [x for x in ring.calls if x.iteration == it]
    transfers = [x for x in ring.transfers if x.iteration == it]
    assert (c.stream == COMPUTE).sum() == len(calls)
    assert ((c.stream == SEND) | (c.stream == RECV)).sum() == len(transfers)
    # the backward's steps follow the forward's, as the engine numbers them
    n = ring.config.n_gpus
    assert sorted(set(c.step[c.stream == COMPUTE].tolist())) == list(range(2 * n))
    # a rank's compute and waits tile its attention phase
    for r in range(n):
        start, end = ring.phases[(r, it)]
        mine = (c.rank == r) & ((c.stream == COMPUTE) | (c.stream == WAIT))
        covered = float((c.end_s[mine] - c.start_s[mine]).sum())
        assert covered == pytest.approx(end - start, rel=1e-6)


def test_a_what_if_at_another_degree_runs_and_a_refused_one_says_why(app_and_client):
    _, client, _ = app_and_client
    data = _open(client, *_upload(ZIGZAG))["traces-opened"]["data"]
    _draw(client, data)
    values = {"traces-opened.data": data, "traces-whatif-gpus.value": 4, "traces-whatif-layout.value": "zigzag",
              "traces-whatif-scheme.value": "ring", "traces-whatif-seq.value": 4096, "tabs.value": "traces",
              "lang.value": "en"}
    _, out = client.call("traces-whatif.figure", values, ["traces-whatif-gpus.value"])
    fig = _figure(out["traces-whatif"]["figure"])
    sim_lanes = {float(y) for tr in fig.data if tr.name == "what-if compute" for y in tr.y}
    assert sim_lanes == {0.0, 2.0, 4.0, 6.0}                      # four GPUs simulated
    assert "on 4 GPUs, 4,096 tokens" in out["traces-whatif-line"]["children"]
    # the same what-if straight from the functions: the engine on the fitted profile
    opened = traces.open_path("zigzag", str(app_and_client[2]))[1]
    direct = traces.what_if(opened, 4, "zigzag", "ring", 4096)
    assert direct.n_gpus == 4 and direct.config["workload"]["seq"] == 4096
    _, out = client.call("traces-whatif.figure", {**values, "traces-whatif-gpus.value": 3, "traces-whatif-seq.value": 2048},
                         ["traces-whatif-gpus.value"])
    assert "does not divide" in out["traces-whatif-msg"]["children"]


def test_a_path_under_the_traces_folder_opens_and_one_outside_is_refused(app_and_client):
    _, client, root = app_and_client
    _, out = client.call("traces-opened.data", {"traces-path.value": "zigzag", "traces-path-open.n_clicks": 1},
                         ["traces-path-open.n_clicks"])
    assert out["traces-opened"]["data"]["name"] == "zigzag" and out["traces-msg"]["children"] == ""
    for outside in ("../", "/etc", str(ZIGZAG)):
        _, out = client.call("traces-opened.data", {"traces-path.value": outside, "traces-path-open.n_clicks": 2},
                             ["traces-path-open.n_clicks"])
        msg = out["traces-msg"]["children"]
        assert "outside the traces folder" in msg and "\n" not in msg
    with pytest.raises(Exception, match="opens no paths"):
        traces.resolve_server_path("zigzag", None)
    # the path row shows only where the server allows paths
    _, out = client.call("traces-path-row.style", {"tabs.value": "traces"}, ["tabs.value"])
    assert out["traces-path-row"]["style"] == {}
    bare = CallbackClient.for_app(create_app())
    _, out = bare.call("traces-path-row.style", {"tabs.value": "traces"}, ["tabs.value"])
    assert out["traces-path-row"]["style"] == {"display": "none"}


def test_a_parquet_table_opens_as_its_traces_do(app_and_client, tmp_path):
    _, client, _ = app_and_client
    table = tmp_path / "run.parquet"
    write_table(read_run([ZIGZAG]), table)
    data = _open(client, [_url(table.read_bytes())], ["run.parquet"])["traces-opened"]["data"]
    out = _draw(client, data)
    assert "2 of 2 ranks" in out["traces-status"]["children"]
    assert out["traces-lanes"]["figure"]["data"]


def test_a_trace_without_a_ring_shows_its_breakdown_and_why(app_and_client):
    _, client, _ = app_and_client
    raw = MEGATRON_RANK0.read_bytes()
    data = _open(client, [_url(raw)], [MEGATRON_RANK0.name])["traces-opened"]["data"]
    out = _draw(client, data)
    run = read_run([MEGATRON_RANK0])
    ring_text = _text(out["traces-ring"]["children"])
    assert ring_text.startswith("No ring found:") and "record_shapes" in ring_text
    table_text = _text(out["traces-breakdown"]["children"])
    t = Translator("en")
    b = breakdown(run)[0]
    assert t.time(b.compute_s) in table_text and f"{t.num(b.overlap_pct, 3)}%" in table_text
    unknown = _text(out["traces-unknown"]["children"])
    assert ("not recognised" in unknown) == bool(run.unknown_kernels)
    assert out["traces-replay"]["children"] is None
    _, out = client.call("traces-whatif.figure", {"traces-opened.data": data, "tabs.value": "traces", "lang.value": "en",
                                                  "traces-whatif-gpus.value": 4}, ["traces-whatif-gpus.value"])
    assert "No ring in this run" in str(out["traces-whatif"]["figure"])


def _bad_uploads() -> list[tuple[str, list[str], list[str], str]]:
    raw = (ZIGZAG / "rank0.json.gz").read_bytes()
    return [
        ("truncated gzip", [_url(raw[: len(raw) // 2])], ["rank0.json.gz"], "gzip stream ends early"),
        ("not a Kineto trace", [_url(b'{"schemaVersion": 1}')], ["rank0.json"], "not a Kineto"),
        ("not JSON", [_url(b"<html>")], ["rank0.json"], "not a Kineto"),
        ("a picture", [_url(b"\x89PNG")], ["cat.png"], "not a .json, .json.gz or .parquet"),
        ("two of one rank", [_url(raw), _url(raw)], ["rank0.json.gz", "a/rank0.json.gz"], "same name"),
        ("a table with traces", [_url(raw), _url(b"PAR1")], ["rank0.json.gz", "run.parquet"], "upload it alone"),
        ("not a table", [_url(b"PAR1 nonsense")], ["run.parquet"], "Parquet"),
        ("a rank missing", [_url((FWDBWD / "rank0.json.gz").read_bytes()), _url((FWDBWD / "rank2.json.gz").read_bytes())],
         ["rank0.json.gz", "rank2.json.gz"], ""),
    ]


@pytest.mark.parametrize("case", _bad_uploads(), ids=lambda c: c[0])
def test_bad_input_is_one_line_in_the_page(app_and_client, case):
    _, client, _ = app_and_client
    _, contents, names, says = case
    out = _open(client, contents, names)
    msg = out.get("traces-msg", {}).get("children", "")
    if says:
        assert says in msg
        assert "\n" not in msg and "Traceback" not in msg and "/tmp/" not in msg
    else:               # read as what it is: a partial run, its breakdown shown
        assert msg == "" and out["traces-opened"]["data"]["token"]


def test_an_upload_over_the_limit_is_refused_before_it_is_read():
    big = "data:application/gzip;base64," + "A" * (4 * 1024 * 1024)
    with pytest.raises(Exception, match=r"over the 1 MB limit"):
        traces.open_upload([big], ["rank0.json.gz"], max_bytes=1024 * 1024)


def test_the_views_texts_are_in_both_catalogs_and_the_page_in_indonesian(app_and_client):
    source = Path(traces.__file__).read_text()
    keys = set(re.findall(r'"(traces\.[a-z0-9_.\-]+)"', source)) | {"tab.traces"}
    assert len(keys) > 30
    for lang in LANGUAGES:
        assert sorted(keys - set(catalog(lang))) == [], lang
    en, id_ = catalog("en"), catalog("id")
    assert all(en[k] != id_[k] for k in keys)
    _, client, _ = app_and_client
    data = _open(client, *_upload(ZIGZAG))["traces-opened"]["data"]
    out = _draw(client, data, lang="id")
    assert "peringkat" in _text(out["traces-breakdown"]["children"])
    assert "Fase atensi per iterasi" in out["traces-replay"]["children"]
    _, out = client.call("traces-h-replay.children", {"lang.value": "id"}, ["lang.value"])
    assert out["traces-h-replay"]["children"] == id_["traces.h.replay"]


def test_gzip_members_of_a_folder_upload_are_read_alike(tmp_path):
    """A rank uploaded as plain JSON reads as the same rank gzipped."""
    plain = [_url(gzip.decompress((ZIGZAG / f"rank{r}.json.gz").read_bytes())) for r in (0, 1)]
    token, opened = traces.open_upload(plain, ["rank0.json", "rank1.json"])
    _, gz = traces.open_upload(*_upload(ZIGZAG))
    assert opened.report["measured"] == gz.report["measured"]
    assert os.path.basename(opened.name) == "rank0.json, rank1.json"


def test_a_traces_dir_that_is_not_a_folder_is_one_line_and_exit_2(tmp_path, capsys):
    from sim.cli.main import main

    assert main(["dashboard", "--traces-dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no such folder" in err and "\n" not in err


def test_before_a_run_is_open_the_view_says_what_to_do_once_and_folds_the_rest(app_and_client):
    """Nothing open: one sentence, in the chart's place, and what an opened run fills (its
    tables, ring, what-if controls) folded away; it names the server's folder only where the
    server opens one. An opened run unfolds it."""
    from dashboard.views.common import FOLDED

    _, client, _ = app_and_client
    out = _draw(client, None)
    assert out["traces-replay"]["children"] is None
    assert "or open one on the server" in str(out["traces-lanes"]["figure"])
    assert out["traces-derived"]["style"] == FOLDED
    plain = CallbackClient.for_app(create_app())           # no --traces-dir: upload alone
    out = _draw(plain, None)
    assert "Upload a torch.profiler trace to see it beside its replay." in str(out["traces-lanes"]["figure"])
    out = _draw(plain, None, lang="id")
    assert "Unggah jejak torch.profiler untuk melihatnya" in str(out["traces-lanes"]["figure"])
    raw = MEGATRON_RANK0.read_bytes()
    data = _open(client, [_url(raw)], [MEGATRON_RANK0.name])["traces-opened"]["data"]
    assert _draw(client, data)["traces-derived"]["style"] == {}
