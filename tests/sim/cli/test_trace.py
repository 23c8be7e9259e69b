"""`ringsim trace import`: the report, its JSON, the Parquet table, and every kind of bad
input as one line on stderr with exit status 2."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pytest

from sim.cli.main import main
from sim.profiler.reader import read_run, read_table

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
MEGATRON = sorted(TRACES.glob("megatron-tp8-a100.rank*.json.gz"))
H100 = TRACES / "tracelens-qwen0.5b-h100.json.gz"
NCCL = TRACES / "hta-nccl-a100.rank0-of-2.json.gz"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def bad(capsys, *argv) -> str:
    code, out, err = run(capsys, "trace", "import", *argv)
    assert code == 2, out
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ringsim: error: "), err
    return lines[0]


def test_json_has_the_documented_fields(capsys):
    code, out, _ = run(capsys, "trace", "import", H100, "--json")
    assert code == 0
    (row,) = json.loads(out)
    for key in ("rank", "iterations", "compute_s", "comm_s", "memory_s", "idle_s", "overlap_pct",
                "unknown_kernels", "attention_found", "attention_kernels", "gemm_kernels", "comm_kernels"):
        assert key in row
    assert row["iterations"] == [6]
    # the README: 34 pytorch_flash::flash_fwd_kernel calls and 241 sm90_xmma_gemm GEMMs
    assert row["attention_kernels"] == 34 and row["attention_found"]
    assert row["kernels"]["gemm"] >= 241


def test_text_report_and_table_round_trip(capsys, tmp_path):
    out_file = tmp_path / "run.parquet"
    code, out, _ = run(capsys, "trace", "import", *MEGATRON, "--out", out_file)
    assert code == 0
    assert "8 ranks of 8 on NVIDIA A100-SXM4-80GB" in out
    assert "no attention kernels found" in out  # unfused softmax attention: baddbmm + softmax
    again = read_table(out_file)
    direct = read_run(MEGATRON)
    assert again.ranks == direct.ranks and again.iterations == direct.iterations
    assert (again.events.kind == direct.events.kind).all()
    # never replaced without --force
    assert "exists" in bad(capsys, *MEGATRON, "--out", out_file)
    code, _, _ = run(capsys, "trace", "import", *MEGATRON, "--out", out_file, "--force")
    assert code == 0


def _rewrite(src: Path, dst: Path, change) -> Path:
    doc = orjson.loads(gzip.open(src).read())
    change(doc)
    dst.write_bytes(orjson.dumps(doc))
    return dst


def test_truncated_gzip(capsys, tmp_path):
    f = tmp_path / "cut.json.gz"
    f.write_bytes(NCCL.read_bytes()[:100_000])
    assert "truncated" in bad(capsys, f)


def test_truncated_json(capsys, tmp_path):
    f = tmp_path / "cut.json"
    f.write_bytes(gzip.open(NCCL).read()[:3_000_000])
    assert "truncated" in bad(capsys, f)


@pytest.mark.parametrize("text", [b'{"a": 1}', b"[1, 2, 3]", b"not json at all", b'{"traceEvents": 5}', b"",
                                  b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": "soon", "dur": 1}]}',
                                  b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1e300, "dur": 1}]}',
                                  b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": -5}]}',
                                  b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, '
                                  b'"dur": 123456789012345678901234567890}]}',
                                  b'{"traceEvents": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
                                  b'{"traceEvents": [{"ph": "M", "name": "process_name"}]}'])
def test_not_a_kineto_trace(capsys, tmp_path, text):
    f = tmp_path / "x.json"
    f.write_bytes(text)
    bad(capsys, f)


def test_gzip_that_is_not_gzip(capsys, tmp_path):
    f = tmp_path / "x.json.gz"
    f.write_bytes(b"\x1f\x8b" + b"garbage" * 100)
    bad(capsys, f)


def test_missing_file(capsys, tmp_path):
    assert "no such file" in bad(capsys, tmp_path / "nothing.json")


def test_a_rank_missing_and_partial(capsys):
    assert "rank 7 of 8 missing" in bad(capsys, *MEGATRON[:7])
    code, out, _ = run(capsys, "trace", "import", *MEGATRON[:7], "--partial")
    assert code == 0 and "not given" in out


def test_two_files_of_one_rank(capsys, tmp_path):
    copy = tmp_path / "again.json.gz"
    copy.write_bytes(MEGATRON[0].read_bytes())
    assert "two files of rank 0" in bad(capsys, MEGATRON[0], copy, *MEGATRON[1:])


def test_ranks_of_different_runs(capsys):
    assert "different runs" in bad(capsys, NCCL, *MEGATRON[1:])


def test_ranks_recorded_days_apart_are_different_runs(capsys, tmp_path):
    def shift(doc):
        for e in doc["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += 86_400e6
    moved = _rewrite(MEGATRON[3], tmp_path / "megatron.rank3.json", shift)
    assert "different runs" in bad(capsys, *MEGATRON[:3], moved, *MEGATRON[4:])


def test_clock_offset_is_aligned_and_reported(capsys, tmp_path):
    offset_us = 2_500_000  # rank 3's clock 2.5 s ahead

    def shift(doc):
        for e in doc["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += offset_us
    moved = _rewrite(MEGATRON[3], tmp_path / "megatron.rank3.json", shift)
    files = [*MEGATRON[:3], moved, *MEGATRON[4:]]
    run_ = read_run(files)
    assert run_.clock_offsets_s[3] == pytest.approx(offset_us * 1e-6, abs=1e-3)
    assert any("rank 3's clock aligned" in n and "-2500" in n for n in run_.notes)
    reference = read_run(MEGATRON)
    mine, ref = run_.events.rank == 3, reference.events.rank == 3
    # aligned within the collectives' spread: the same rows, times within a millisecond
    assert abs(run_.events.start_s[mine] - reference.events.start_s[ref]).max() < 1e-3
    code, out, _ = run(capsys, "trace", "import", *files)
    assert code == 0 and "aligned" in out


def test_a_trace_without_attention_still_breaks_down(capsys):
    code, out, _ = run(capsys, "trace", "import", NCCL)
    assert code == 0
    assert "no attention kernels found" in out and "HTA scope" in out


def test_hostile_sizes_are_refused(capsys, tmp_path):
    f = tmp_path / "big.json"
    f.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "' + b"a" * (65 * 1024 * 1024) + b'"}]}')
    assert "bytes" in bad(capsys, f)
    g = tmp_path / "world.json"
    g.write_bytes(orjson.dumps({"distributedInfo": {"rank": 0, "world_size": 10**12}, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]}))
    assert "world size" in bad(capsys, g)
