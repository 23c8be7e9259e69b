import json

import pytest

from sim.config import Scenario, Workload
from sim.engine import simulate
from sim.errors import RingsimError
from sim.trace import Trace, to_chrome_trace


def small_trace(pass_="fwdbwd"):
    return simulate(Scenario(workload=Workload(seq=4096, pass_=pass_), n_gpus=4, layout="zigzag"))


def test_save_load_round_trips(tmp_path):
    trace = small_trace()
    path = tmp_path / "t.json"
    trace.save(path)
    back = Trace.load(path)
    assert back.to_dict() == trace.to_dict()
    assert back.spans == trace.spans


def test_save_refuses_to_overwrite(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("precious")
    with pytest.raises(RingsimError, match="exists"):
        small_trace().save(path)
    assert path.read_text() == "precious"
    small_trace().save(path, overwrite=True)
    assert Trace.load(path).world_size == 4


def test_chrome_trace_has_one_process_per_rank_and_one_thread_per_stream():
    trace = small_trace()
    doc = json.loads(json.dumps(to_chrome_trace(trace)))
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(trace.spans)
    for e in xs:
        assert {"name", "ph", "pid", "tid", "ts", "dur", "cat"} <= e.keys()
        assert e["dur"] >= 0 and e["ts"] >= 0
    assert {e["pid"] for e in xs} == {0, 1, 2, 3}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in xs:
        assert names[(e["pid"], e["tid"])] == e["cat"]
    # microseconds: the longest event ends at the makespan
    end = max(e["ts"] + e["dur"] for e in xs)
    assert end == pytest.approx(trace.makespan_s * 1e6, rel=1e-9)


def good():
    return small_trace("fwd").to_dict()


def broken(path, value):
    d = good()
    obj = d
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    return json.dumps(d)


@pytest.mark.parametrize("text,match", [
    ("", "not valid JSON"),
    ("[1, 2]", "object"),
    ('{"format": "other"}', "not a ringsim trace"),
    (json.dumps({**good(), "version": 99}), "version"),
    (broken(["world_size"], -1), "world_size"),
    (broken(["world_size"], True), "world_size"),
    (broken(["spans"], {}), "spans must be a list"),
    (broken(["spans", 0, "rank"], 7), "rank"),
    (broken(["spans", 0, "stream"], "gpu"), "stream"),
    (broken(["spans", 0, "kind"], "bwd2"), "kind"),
    (broken(["spans", 0, "start_s"], "0"), "start_s"),
    (broken(["spans", 0, "end_s"], -1.0), "before start_s"),
    (broken(["spans", 0, "flops"], -5), "non-negative"),
    (broken(["spans", 0, "q_chunks"], ["a"]), "q_chunks"),
    (broken(["spans", 0], 3), "not an object"),
    ('{"format": "ringsim-trace", "version": 1, "world_size": 1, "source": "simulated", "spans": [{"rank": 0, "stream": "compute", "kind": "fwd", "step": 0, "start_s": 0, "end_s": NaN}]}', "end_s"),
    ("[" * 100000, "not valid JSON"),
])
def test_malformed_traces_are_refused_with_a_clear_message(text, match):
    with pytest.raises(RingsimError, match=match):
        Trace.loads(text)


def test_unreadable_file_is_one_error(tmp_path):
    with pytest.raises(RingsimError, match="cannot read"):
        Trace.load(tmp_path / "missing.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RingsimError, match="cannot read"):
        Trace.load(tmp_path / "bin.json")
