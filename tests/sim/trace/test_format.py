import json

import numpy as np
import pytest

from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.scenario.config import Scenario, Workload
from sim.trace.format import Trace, to_chrome_trace


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
    assert Trace.load(path).n_gpus == 4


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


def v1_dict(trace):
    """The version-1 file of a trace: a list of span objects."""
    head = {k: v for k, v in trace.to_dict().items() if k not in ("streams", "kinds", "chunk_sets", "columns")}
    head["world_size"] = head.pop("n_gpus")         # version 1 and 2 name the GPU count so
    return {**head, "version": 1, "spans": [s.to_dict() for s in trace.spans]}


def good():
    return v1_dict(small_trace("fwd"))


def broken(path, value):
    d = good()
    obj = d
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    return json.dumps(d)


@pytest.mark.parametrize("text,match", [
    ("", "neither an archive"),
    ("oops", "neither an archive"),
    (b"\xd0\x8f junk bytes", "neither an archive"),
    ("{oops", "not valid JSON"),
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
    ('{"format": "ringsim-trace", "version": 1, "world_size": 1, "source": "simulated", "spans": [{"rank": 0, '
     '"stream": "compute", "kind": "fwd", "step": 0, "start_s": 0, "end_s": NaN}]}', "end_s"),
    ("[" * 100000, "not valid JSON"),
])
def test_malformed_traces_are_refused_with_a_clear_message(text, match):
    with pytest.raises(RingsimError, match=match):
        Trace.loads(text)


def test_version_1_files_still_load(tmp_path):
    trace = small_trace()
    path = tmp_path / "old.json"
    path.write_text(json.dumps(v1_dict(trace)))
    back = Trace.load(path)
    assert back.spans == trace.spans
    assert back.config == trace.config


def test_version_2_files_name_the_gpu_count_world_size_and_still_load(tmp_path):
    trace = small_trace()
    d = trace.to_dict()
    assert (d["version"], d["n_gpus"]) == (3, 4) and "world_size" not in d
    d["version"], d["world_size"] = 2, d.pop("n_gpus")
    back = Trace.loads(json.dumps(d))
    assert back.n_gpus == 4 and back.spans == trace.spans
    back = Trace.loads(_archive(trace, header={"version": 2, "world_size": 4, "n_gpus": None}))
    assert back.n_gpus == 4 and back.spans == trace.spans
    # the current version asks for its own key
    d = {**trace.to_dict(), "world_size": 4}
    del d["n_gpus"]
    with pytest.raises(RingsimError, match="n_gpus must be a positive integer"):
        Trace.loads(json.dumps(d))


def test_the_example_traces_written_as_version_2_load():
    from pathlib import Path

    for path in sorted((Path(__file__).parents[3] / "dashboard" / "examples").glob("*.trace.npz")):
        t = Trace.load(path)
        assert t.n_gpus == int(path.name.split("-")[1][0]) and t.n_gpus == int(t.columns.rank.max()) + 1


@pytest.mark.parametrize("name", ["t.json", "t.npz", "t.trace"])
def test_the_current_version_round_trips_in_both_encodings(tmp_path, name):
    trace = small_trace()
    trace.save(tmp_path / name)
    back = Trace.load(tmp_path / name)
    assert back.spans == trace.spans
    assert (back.config, back.hardware, back.meta) == (trace.config, trace.hardware, trace.meta)
    for col in ("start_s", "end_s", "flops", "bytes"):
        assert (getattr(back.columns, col) == getattr(trace.columns, col)).all()


def test_the_archive_is_smaller_than_version_1_json():
    trace = simulate(Scenario(workload=Workload(seq=8192), n_gpus=16))
    assert len(trace.to_bytes()) * 4 < len(json.dumps(v1_dict(trace)))


def v3(**changes):
    d = small_trace("fwd").to_dict()
    for path, value in changes.items():
        obj = d
        keys = path.split(".")
        for key in keys[:-1]:
            obj = obj[int(key)] if isinstance(obj, list) else obj[key]
        last = keys[-1]
        if isinstance(obj, list):
            obj[int(last)] = value
        else:
            obj[last] = value
    return json.dumps(d)


@pytest.mark.parametrize("text,match", [
    (v3(columns=[]), "columns must be"),
    (v3(**{"columns.rank": "x"}), "column rank must be a list"),
    (v3(**{"columns.rank.0": 99}), "rank must be"),
    (v3(**{"columns.rank.0": 1.5}), "rank must hold integers"),
    (v3(**{"columns.rank.0": 2 ** 40}), "out of range"),
    (v3(**{"columns.start_s.0": "0"}), "finite numbers"),
    (v3(**{"columns.end_s.0": -1.0}), "before start_s"),
    (v3(**{"columns.stream.0": 9}), "stream codes"),
    (v3(**{"columns.kind.0": 4}), "not valid on its stream"),
    (v3(streams=["compute", "gpu"]), "unknown stream"),
    (v3(**{"columns.q_chunks.0": 999}), "q_chunks must index"),
    (v3(chunk_sets=[["a"]]), "chunk_sets"),
    (v3(**{"columns.step": [0]}), "one entry per span"),
])
def test_malformed_column_json_is_refused(text, match):
    with pytest.raises(RingsimError, match=match):
        Trace.loads(text)


def _archive(trace, *, drop=None, replace=None, header=None):
    import io
    import zipfile

    good = zipfile.ZipFile(io.BytesIO(trace.to_bytes()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for info in good.infolist():
            if info.filename == drop:
                continue
            data = good.read(info.filename)
            if replace and info.filename in replace:
                data = replace[info.filename]
            if header is not None and info.filename == "header.json":
                data = json.dumps({**json.loads(data), **header}).encode()
            z.writestr(info.filename, data)
    return buf.getvalue()


def _npy(arr):
    import io

    import numpy as np

    b = io.BytesIO()
    np.lib.format.write_array(b, np.asarray(arr), allow_pickle=True)
    return b.getvalue()


def test_malformed_archives_are_refused():
    import numpy as np

    trace = small_trace("fwd")
    n = len(trace)
    cases = [
        (trace.to_bytes()[:200], "damaged archive"),
        (_archive(trace, drop="header.json"), "no header.json"),
        (_archive(trace, drop="end_s.npy"), "no column end_s"),
        (_archive(trace, replace={"header.json": b"{"}), "not valid JSON"),
        (_archive(trace, header={"version": 1, "world_size": 4}), "must be version 2 or 3"),
        (_archive(trace, header={"n_gpus": 0}), "n_gpus"),
        (_archive(trace, replace={"rank.npy": _npy(np.zeros(n, dtype=np.int64))}), "int32"),
        (_archive(trace, replace={"rank.npy": _npy(np.full(n, 9, dtype=np.int32))}), "rank must be"),
        (_archive(trace, replace={"end_s.npy": _npy(np.full(n, np.nan))}), "finite"),
        (_archive(trace, replace={"step.npy": _npy(np.zeros(n + 1, dtype=np.int32))}), "one entry per span"),
        (_archive(trace, replace={"kind.npy": _npy(np.array(["x"] * n, dtype=object))}), "damaged|int8"),
    ]
    for data, match in cases:
        with pytest.raises(RingsimError, match=match):
            Trace.loads(data)


def test_an_archive_that_unpacks_too_large_is_refused(monkeypatch):
    import sim.trace.format as trace_mod

    data = small_trace("fwd").to_bytes()
    monkeypatch.setattr(trace_mod, "MAX_TRACE_ARRAY_BYTES", 100)
    with pytest.raises(RingsimError, match="unpacks to more than"):
        Trace.loads(data)


def test_unreadable_file_is_one_error(tmp_path):
    with pytest.raises(RingsimError, match="cannot read"):
        Trace.load(tmp_path / "missing.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RingsimError, match="cannot read"):
        Trace.load(tmp_path / "bin.json")


def test_traces_of_collectives_round_trip_and_their_kinds_are_checked(tmp_path):
    from sim.hardware.cluster import Hardware, Link

    hw = Hardware(inter_link=Link.preset("ib-ndr"), gpus_per_node=2)
    for scheme in ("allgather", "ulysses"):
        trace = simulate(Scenario(workload=Workload(seq=4096, pass_="fwdbwd"), hardware=hw, n_gpus=4, scheme=scheme))
        kinds = {s.kind for s in trace.spans}
        assert kinds & {"ag", "rs", "a2a"}
        for name in ("t.json", "t.trace.npz"):
            path = tmp_path / f"{scheme}-{name}"
            trace.save(path)
            assert Trace.load(path).spans == trace.spans
    d = trace.to_dict()
    comp = d["columns"]["stream"].index(0)
    d["columns"]["kind"][comp] = d["kinds"].index("a2a")       # a compute span of kind a2a
    with pytest.raises(RingsimError, match="not valid on its stream"):
        Trace.from_dict(json.loads(json.dumps(d)))


def test_a_chunk_matrix_of_some_spans_is_theirs_in_the_spans_own_words():
    # each row lists the span's chunk ids (as its Span record names them), -1 padded
    trace = simulate(Scenario(workload=Workload(seq=4096, heads=8, kv_heads=2, head_dim=64, pass_="fwdbwd"),
                              n_gpus=4, layout="zigzag"))
    c = trace.columns
    rows = [3, 0, len(c) - 1, 7]
    for column, field in (("q_chunks", "q_chunks"), ("kv_chunks", "kv_chunks")):
        some = c.chunk_matrix(column, rows)
        assert some.shape[0] == len(rows)
        for row, i in zip(some, rows):
            named = getattr(trace.spans[i], field)
            assert list(row[:len(named)]) == list(named) and (row[len(named):] == -1).all()
        mask = np.zeros(len(c), dtype=bool)
        mask[rows] = True
        assert (c.chunk_matrix(column, mask) == c.chunk_matrix(column)[np.sort(rows)]).all()


def test_chunk_sets_are_tuples_of_python_ints_however_they_come():
    """A set of Python ints is kept as it comes (the engine's, up to thousands of chunks);
    NumPy integers, bools and lists become tuples of ints, with the same values."""
    from sim.trace.format import COLUMN_TYPES, SpanTable
    cols = {name: np.zeros(0, dtype=dtype) for name, dtype in COLUMN_TYPES.items()}
    engine = tuple(range(3000))
    sets = [engine, [np.int64(4), np.int32(5)], (True, 2), np.arange(3)]
    table = SpanTable(**cols, chunk_sets=sets)
    assert table.chunk_sets[0] is engine
    assert table.chunk_sets[1:] == ((4, 5), (1, 2), (0, 1, 2))
    assert all(type(x) is int for s in table.chunk_sets for x in s)
