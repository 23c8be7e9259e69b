"""The reader against the traces' own JSON: every kept event read (counted with orjson over
the whole document), its times, iterations (HTA's rule), launches and message sizes; the
streaming scan the same whatever the chunk size and the file's layout."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pytest

import sim.profiler.columns as columns
import sim.profiler.scan as scan
from sim.errors import RingsimError
from sim.profiler.reader import EVENT_COLUMNS, read_run, read_table, write_table

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
NCCL = TRACES / "hta-nccl-a100.rank0-of-2.json.gz"
H100 = TRACES / "tracelens-qwen0.5b-h100.json.gz"
MEGATRON0 = TRACES / "megatron-tp8-a100.rank0.json.gz"
KEPT = set(columns.GPU_CATS) | set(columns.CPU_CATS)


def _doc(path: Path) -> dict:
    return orjson.loads(gzip.open(path).read())


def _same(a, b) -> None:
    for c in EVENT_COLUMNS:
        x, y = getattr(a.events, c), getattr(b.events, c)
        if x.dtype == object:
            assert (x == y).all(), c
        else:
            assert np.array_equal(x, y, equal_nan=True), c
    assert a.iterations == b.iterations and a.devices == b.devices and a.unknown_kernels == b.unknown_kernels


@pytest.mark.parametrize("path", [NCCL, H100, MEGATRON0])
def test_every_kept_event_is_read(path):
    events = _doc(path)["traceEvents"]
    kept = [e for e in events if e.get("ph") == "X" and e.get("cat") in KEPT]
    run = read_run([path])
    assert len(run.events) == len(kept)
    assert Counter(run.events.cat.tolist()) == Counter(e["cat"] for e in kept)
    first = min(e["ts"] for e in kept)
    ts = np.sort(np.array([e["ts"] - first for e in kept]) * 1e-6)
    assert np.allclose(np.sort(run.events.start_s), ts, atol=1e-9)
    assert run.events.dur_s.sum() == pytest.approx(sum(e["dur"] for e in kept) * 1e-6, rel=1e-12)


def test_iterations_follow_hta_rule():
    """A CPU row belongs to the step holding its start; a kernel to its launch's step."""
    events = _doc(NCCL)["traceEvents"]
    steps = [(int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    run = read_run([NCCL])
    assert [n for n, _, _ in run.iterations[0]] == [n for n, _, _ in steps]
    ev = run.events
    launches = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}

    def step_of(ts):
        return next((n for n, s, e in steps if s <= ts < e), -1)
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    expected = Counter(step_of(launches[k["args"]["correlation"]]) if k["args"]["correlation"] in launches else -1
                       for k in kernels)
    got = Counter(ev.iteration[ev.cat == "kernel"].tolist())
    assert got == expected


def test_launch_and_messages():
    run = read_run([NCCL])
    ev = run.events
    ar = np.flatnonzero(ev.kind == "all_reduce")
    assert len(ar) == 15
    # the kernels' own args: In msg nelems x 4 bytes (Float), two ranks
    doc = _doc(NCCL)["traceEvents"]
    own = sorted(e["args"]["In msg nelems"] * 4 for e in doc if e.get("cat") == "kernel"
                 and e["name"].startswith("ncclKernel_AllReduce"))
    assert sorted(ev.msg_bytes[ar].tolist()) == own
    assert set(ev.group_size[ar].tolist()) == {2}
    assert (ev.launch_start_s[ar] <= ev.start_s[ar]).all()


def test_older_torch_messages_from_the_op_around_the_launch():
    """torch 2.1's record_param_comms records no sizes: Megatron's all-reduce of a
    [4, 2048, 4096] fp16 activation is 64 MiB, read from nccl:all_reduce's input."""
    run = read_run([MEGATRON0])
    ev = run.events
    ar = ev.kind == "all_reduce"
    assert (ev.msg_bytes[ar] > 0).mean() > 0.9
    assert Counter(ev.msg_bytes[ar].tolist()).most_common(1)[0][0] == 4 * 2048 * 4096 * 2


@pytest.mark.parametrize("chunk", [4096, 65536])
def test_any_chunk_size_gives_the_same_table(monkeypatch, chunk):
    whole = read_run([H100])
    monkeypatch.setattr(scan, "CHUNK_BYTES", chunk)
    _same(read_run([H100]), whole)


@pytest.mark.parametrize("option", [None, orjson.OPT_INDENT_2])
def test_any_layout_gives_the_same_table(tmp_path, option):
    """The scan relies on JSON's grammar, not on Kineto's lines: the trace on one line, or
    with every value on its own, reads the same."""
    f = tmp_path / "relaid.json"
    f.write_bytes(orjson.dumps(_doc(NCCL), option=option))
    _same(read_run([f]), read_run([NCCL]))


def test_an_event_larger_than_a_chunk_and_a_stream_as_text(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "k" * (3 << 20), "pid": 0, "tid": 7, "ts": 5, "dur": 1,
               "args": {"stream": 7, "correlation": 1}},
              {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 9, "dur": 1,
               "args": {"stream": "7", "correlation": 2}}]
    f = tmp_path / "t.json"
    f.write_bytes(orjson.dumps({"traceEvents": events}, option=orjson.OPT_INDENT_2))
    run = read_run([f])
    assert run.events.stream.tolist() == [7, 7] and len(run.events.name[0]) == 3 << 20


def test_strings_with_brackets_quotes_and_the_key_itself(tmp_path):
    """Braces, brackets, escaped quotes and the text "traceEvents" inside strings do not
    move an event's bounds."""
    events = [
        {"ph": "X", "cat": "kernel", "name": 'void k<{lambda()#1}>("x\\"]},{") [traceEvents]', "pid": 0, "tid": 7,
         "ts": 10, "dur": 2, "args": {"stream": 7, "correlation": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 9, "dur": 1,
         "args": {"correlation": 1}},
    ]
    doc = {"schemaVersion": 1, "note": 'a "traceEvents": [ in a string \\\\', "traceEvents": events,
           "traceName": "x"}
    f = tmp_path / "t.json"
    f.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    for chunk in (7, 64, 1 << 20):
        scan.CHUNK_BYTES, old = chunk, scan.CHUNK_BYTES
        try:
            run = read_run([f])
        finally:
            scan.CHUNK_BYTES = old
        assert run.events.name.tolist()[0] == events[0]["name"] or run.events.name.tolist()[1] == events[0]["name"]
        k = run.events.cat == "kernel"
        assert run.events.launch_start_s[k][0] == pytest.approx(0.0)
        assert run.events.start_s[k][0] == pytest.approx(1e-6)


def test_table_round_trip(tmp_path):
    run = read_run([NCCL])
    out = tmp_path / "run.parquet"
    write_table(run, out)
    _same(read_table(out), run)
    with pytest.raises(RingsimError, match="exists"):
        write_table(run, out)
    write_table(run, out, overwrite=True)
    (tmp_path / "junk.parquet").write_bytes(b"nope")
    with pytest.raises(RingsimError):
        read_table(tmp_path / "junk.parquet")


def test_folder_of_ranks(tmp_path):
    for i in range(8):
        (tmp_path / f"megatron-tp8-a100.rank{i}.json.gz").write_bytes(
            (TRACES / f"megatron-tp8-a100.rank{i}.json.gz").read_bytes())
    run = read_run([tmp_path])
    assert run.ranks == tuple(range(8)) and run.world_size == 8
    assert all(d["name"] == "NVIDIA A100-SXM4-80GB" and d["numSms"] == 108 for d in run.devices.values())
    # one node: nothing to align
    assert set(run.clock_offsets_s.values()) == {0.0}
