"""Downloads and uploads: formats, size caps, malformed files."""

from __future__ import annotations

import base64
import csv
import io
import json
import pickle

import pytest

from dashboard import export
from sim.errors import RingsimError
from sim.trace.format import Trace
from sim.trace.metrics import compute_metrics


def _data_url(raw: bytes) -> str:
    return "data:application/json;base64," + base64.b64encode(raw).decode()


def test_metrics_csv(small_trace):
    m = compute_metrics(small_trace)
    rows = list(csv.DictReader(io.StringIO(export.metrics_csv(m))))
    assert tuple(rows[0]) == export.CSV_COLUMNS
    assert [r["scope"] for r in rows] == ["run"] + ["rank"] * small_trace.n_gpus
    assert float(rows[0]["makespan_s"]) == pytest.approx(m.makespan_s)
    assert float(rows[0]["efficiency"]) == pytest.approx(m.efficiency)
    for r, rm in zip(rows[1:], m.ranks):
        assert int(r["rank"]) == rm.rank
        assert float(r["exposed_comm_s"]) == pytest.approx(rm.exposed_comm_s)
        assert float(r["flops"]) == pytest.approx(rm.flops)


def test_trace_and_chrome_trace_downloads_load_back(small_trace):
    assert json.loads(export.trace_json(small_trace)) == json.loads(json.dumps(small_trace.to_dict()))
    back = Trace.loads(export.trace_json(small_trace))
    assert len(back.spans) == len(small_trace.spans) and back.config == small_trace.config
    chrome = json.loads(export.chrome_trace_json(small_trace))
    xs = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(small_trace.spans)


def test_trace_upload_round_trip(small_trace):
    raw = export.trace_json(small_trace).encode()
    trace = export.parse_trace_upload(_data_url(raw), "run.json", 50 * 2**20)
    assert len(trace.spans) == len(small_trace.spans)


@pytest.mark.parametrize("raw, words", [
    (b"{not json", "not valid JSON"),
    (b'{"format": "something-else"}', "not a ringsim trace"),
    (b'[1, 2, 3]', "JSON object"),
    (pickle.dumps({"a": 1}), "neither an archive"),
    (b"[" * 100_000, "JSON"),
])
def test_malformed_uploads_give_a_clear_message(raw, words):
    with pytest.raises(RingsimError, match=words) as e:
        export.parse_trace_upload(_data_url(raw), "bad.json", 50 * 2**20)
    assert "bad.json" in str(e.value)


def test_malformed_span_is_named(small_trace):
    d = small_trace.to_dict()
    d["columns"]["rank"][3] = 99
    with pytest.raises(RingsimError, match="span 3: rank"):
        export.parse_trace_upload(_data_url(json.dumps(d).encode()), "t.json", 50 * 2**20)


def test_upload_size_cap_and_encoding():
    with pytest.raises(RingsimError, match="larger than the 1 MB limit"):
        export.decode_upload(_data_url(b"x" * (2**20 + 100)), "big.json", 2**20)
    with pytest.raises(RingsimError, match="bad base64"):
        export.decode_upload("data:application/json;base64,@@@@", "x.json", 2**20)
    with pytest.raises(RingsimError, match="did not arrive"):
        export.decode_upload(None, None, 2**20)
    assert export.parse_json_upload(_data_url(b'{"a": 1}'), "p.json", 2**20) == {"a": 1}


def test_chrome_trace_of_a_large_trace_holds_its_first_ranks(small_trace):
    per_rank = [sum(1 for s in small_trace.spans if s.rank == r) for r in range(4)]
    cap = per_rank[0] + per_rank[1] + 1                 # ranks 0 and 1 fit, rank 2 does not
    assert export.chrome_ranks(small_trace, cap) == 2
    assert export.chrome_ranks(small_trace) == 4
    chrome = json.loads(export.chrome_trace_json(small_trace, max_spans=cap))
    xs = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == per_rank[0] + per_rank[1] and {e["pid"] for e in xs} == {0, 1}
    assert "ranks 0-1 of 4" in chrome["otherData"]["ranks"]
    assert export.chrome_ranks(small_trace, 1) == 1     # at least one rank


def test_the_downloaded_archive_uploads_back(small_trace):
    raw = export.trace_archive(small_trace)
    back = export.parse_trace_upload("data:application/zip;base64," + base64.b64encode(raw).decode(),
                                     "run.trace.npz", 50 * 2**20)
    assert back.spans == small_trace.spans and back.config == small_trace.config
