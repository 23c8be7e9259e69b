"""`ringsim hw run`, `ringsim hw bench` and the torchrun entry, end to end."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest
import torch

from hw.bench.options import CONCURRENCY_ROUNDS
from sim.cli.main import main
from sim.files import read_json
from sim.trace.format import Trace

SMALL = ["--seq", "32", "--heads", "2", "--head-dim", "8", "--warmup", "0"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_hw_run_saves_one_trace_per_repeat_and_refuses_to_overwrite(capsys, tmp_path):
    pattern = str(tmp_path / "run.json")
    code, out, err = run(capsys, "hw", "run", "--gpus", "2", *SMALL, "--repeats", "2",
                         "--layout", "striped", "--pass", "fwdbwd", "--trace", pattern, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["hardware"]["kind"] == "measured" and d["config"]["layout"] == "striped"
    assert d["makespan_s"]["n"] == 2 and len(d["repeats"]) == 2
    assert d["trace_files"] == [str(tmp_path / "run-r0.json"), str(tmp_path / "run-r1.json")]
    traces = [Trace.load(p) for p in d["trace_files"]]
    assert [t.meta["repeat"] for t in traces] == [0, 1]
    assert {s.step for s in traces[0].spans if s.stream == "compute"} == {0, 1, 2, 3}
    code, _, err = run(capsys, "hw", "run", "--gpus", "2", *SMALL, "--repeats", "2",
                       "--trace", pattern)
    assert code == 2 and "exists" in err and "--force" in err


@pytest.mark.slow
def test_hw_run_takes_packed_documents_and_a_window(capsys, tmp_path):
    path = str(tmp_path / "run.json")
    code, out, err = run(capsys, "hw", "run", "--gpus", "2", *SMALL, "--repeats", "1", "--docs", "5,20,7",
                         "--window", "6", "--seed", "4", "--layout", "balanced", "--pass", "fwdbwd",
                         "--trace", path, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["config"]["layout"] == "balanced"
    assert {k: d["config"]["workload"][k] for k in ("docs", "seed", "window")} == {"docs": "5,20,7", "seed": 4,
                                                                                 "window": 6}
    trace = Trace.load(path)
    assert trace.config["workload"]["docs"] == "5,20,7"
    assert {(s.kind, s.step) for s in trace.spans if s.stream == "compute" and s.rank == 0} >= {("fwd", 0), ("bwd", 2)}
    code, out, err = run(capsys, "hw", "run", "--gpus", "2", *SMALL, "--repeats", "1",
                         "--docs", "lognormal:median=8,sigma=1", "--layout", "doc-contiguous")
    assert code == 0, err
    assert "packed: " in out and "documents" in out


@pytest.mark.parametrize("argv,match", [
    (["hw", "run", "--gpus", "2", "--seq", "30"], "multiple of 4"),
    (["hw", "run", "--heads", "6", "--kv-heads", "4"], "--kv-heads"),
    (["hw", "run", "--device", "cpu", "--backend", "nccl"], "does not run on cpu"),
    (["hw", "run", "--repeats", "0"], "repeats"),
    pytest.param(["hw", "run", "--device", "cuda"], "no CUDA device",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")),
    (["hw", "run", "--seq", "32", "--docs", "0,5"], "length zero"),
    (["hw", "run", "--seq", "32", "--docs", "3,4"], "do not fill the sequence of 32 tokens"),
    (["hw", "run", "--seq", "32", "--docs", "8", "--scheme", "allgather", "--layout", "striped"],
     "contiguous or zigzag"),
    (["hw", "run", "--seq", "32", "--docs", "8", "--scheme", "ulysses"], "one document"),
    (["hw", "run", "--seq", "32", "--window", "0"], "--window"),
    (["hw", "bench", "-o", "x.json", "--dtypes", "fp64"], "--dtypes"),
    (["hw", "bench", "-o", "x.json", "--sizes", "lots"], "--sizes"),
    (["hw", "frobnicate"], "invalid choice"),
])
def test_user_mistakes_are_one_line_errors(capsys, argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2 and match in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_hw_bench_writes_the_documented_json_and_resumes(capsys, tmp_path):
    path = tmp_path / "bench.json"
    argv = ["hw", "bench", "--quick", "--blocks", "16,32", "--sizes", "1K", "--interference-blocks",
            "32", "--interference-sizes", "kv", "--ring-processes", "2", "--samples", "2", "-o", str(path),
            "--parts", "compute,transfer,interference,concurrency,ring_conditions"]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    d = read_json(path)
    assert d["format"] == "ringsim-hw-bench" and d["version"] == 1 and d["complete"] is True
    assert {"kind", "name", "torch", "backend", "threads_per_rank"} <= d["device"].keys()
    assert len(d["compute"]) == 4 and len(d["transfer"]) == 2 and len(d["interference"]) == 1
    for e in d["compute"]:
        pairs = 16 * 16 if e["q_tokens"] == 16 else 32 * 32
        if e["mask"] == "diagonal":
            pairs = e["q_tokens"] * (e["q_tokens"] + 1) // 2
        assert e["flops"] == 4 * 64 * pairs * 4          # --quick: head dim 64, 4 heads, batch 1
        assert len(e["time_s"]) == 2 and e["median_s"] > 0 and e["kind"] == "fwd"
        assert len(e["reference_s"]) == 3 and min(e["reference_s"]) > 0    # before and after each sample
        assert e["speed_ratios"] == pytest.approx([t / ((a + b) / 2) for t, a, b in
                                                   zip(e["time_s"], e["reference_s"], e["reference_s"][1:])])
        assert "pass_medians_s" not in e                                     # --quick: one pass
    assert {(e["bytes"], e["direction"]) for e in d["transfer"]} == {(1024, "one_way"), (1024, "both_ways")}
    inter = d["interference"][0]
    assert inter["bytes"] == 2 * 4 * 32 * 64 * 4 and inter["slowdown"] > 0
    # --quick: the interference block computed by 1 and by 2 processes at once
    # over a common window: at least the samples asked for, from every process
    assert [e["processes"] for e in d["concurrency"]] == [1, 2]
    assert [len(e["time_s"]) >= 2 * e["processes"] for e in d["concurrency"]] == [True, True]
    # each process also timed alone, just before: the law's reference (sim.calibration.calibrate), in
    # rounds that alternate alone and shared, each round's samples kept apart too
    rounds = CONCURRENCY_ROUNDS
    assert [len(e["alone_s"]) for e in d["concurrency"]] == [rounds * 2 * e["processes"] for e in d["concurrency"]]
    for e in d["concurrency"]:
        assert len(e["rounds"]) == rounds and [len(r["alone_s"]) for r in e["rounds"]] == [2 * e["processes"]] * rounds
        assert sorted(t for r in e["rounds"] for t in r["time_s"]) == sorted(e["time_s"])
        assert [len(r["time_by_process_s"]) for r in e["rounds"]] == [e["processes"]] * rounds
    assert all(e["q_tokens"] == 32 and e["mean_s"] > 0 and e["bound"] == 1.0 for e in d["concurrency"])
    ring = d["ring_conditions"][0]
    assert ring["processes"] == 2 and ring["bytes"] == inter["bytes"] and ring["attempts"] >= 1
    assert len(ring["compute_alone_s"]) == 4 and len(ring["compute_ring_s"]) >= 2
    assert ring["compute_slowdown"] > 0 and ring["transfer_slowdown"] > 0
    assert "[10/10]" in err                                # progress as entries complete
    code, _, err = run(capsys, *argv)
    assert code == 2 and "--resume" in err
    code, _, err = run(capsys, *argv, "--resume", "--blocks", "16,32,48", "--parts", "compute")
    assert code == 0 and "[1/2]" in err and "[2/2]" in err
    assert len(read_json(path)["compute"]) == 6
    # two passes over the grid: each entry lists both medians and references and keeps every sample
    again = tmp_path / "again.json"
    code, _, err = run(capsys, "hw", "bench", "--quick", "--blocks", "16,32", "--samples", "3", "--parts",
                       "compute", "--compute-passes", "2", "-o", str(again))
    assert code == 0 and err.count("[compute, again]") == 4
    for e in read_json(again)["compute"]:
        assert len(e["pass_medians_s"]) == 2 and len(e["pass_references_s"]) == 2
        assert len(e["time_s"]) == 6 and e["median_s"] == statistics.median(e["time_s"])
    code, _, err = run(capsys, "hw", "bench", "--quick", "--compute-passes", "0", "-o", str(tmp_path / "x.json"))
    assert code == 2 and "--compute-passes" in err
    # with backward among the kinds, the concurrency part times the block's backward too,
    # each entry with its own processes alone
    both = tmp_path / "both.json"
    code, _, err = run(capsys, "hw", "bench", "--quick", "--kinds", "fwd,bwd", "--interference-blocks", "32",
                       "--samples", "2", "--parts", "concurrency", "-o", str(both))
    assert code == 0, err
    conc = read_json(both)["concurrency"]
    assert [(e["kind"], e["processes"]) for e in conc] == [("fwd", 1), ("fwd", 2), ("bwd", 1), ("bwd", 2)]
    assert conc[2]["flops"] == 2.5 * conc[0]["flops"] == 2.5 * 4 * 64 * 32 * 32 * 4
    assert all(len(e["alone_s"]) == rounds * 2 * e["processes"] and e["mean_s"] > 0 for e in conc)


@pytest.mark.slow
def test_hw_bench_measures_the_host_parts_in_passes_minutes_apart(capsys, tmp_path):
    """--host-passes 3: the host parts (here the concurrency part) before the compute
    part, after the transfer part and after the collectives, every entry naming its
    pass; a resumed file measures only the passes it lacks."""
    path = tmp_path / "passes.json"
    argv = ["hw", "bench", "--quick", "--blocks", "16", "--masks", "full", "--interference-blocks", "32",
            "--concurrency", "1", "--collectives", "allgather", "--collective-gpus", "2", "--collective-sizes",
            "1K", "--samples", "2", "--parts", "compute,concurrency,collective", "-o", str(path)]
    code, _, err = run(capsys, *argv, "--host-passes", "3")
    assert code == 0, err
    lines = [line.split("] ", 1)[1] for line in err.splitlines() if line.startswith("[")]
    kinds = [line.split()[0] + (line.rsplit(", pass ", 1)[1] if ", pass " in line else "") for line in lines]
    assert kinds == ["concurrency", "compute", "concurrency2", "collective", "concurrency3"]
    d = read_json(path)
    assert [e["pass"] for e in d["concurrency"]] == [1, 2, 3] and d["complete"] is True
    d["concurrency"] = d["concurrency"][:1]
    path.write_text(json.dumps(d))
    code, _, err = run(capsys, *argv, "--host-passes", "3", "--resume")
    assert code == 0 and "[1/2]" in err and "[2/2]" in err, err
    assert [e["pass"] for e in read_json(path)["concurrency"]] == [1, 2, 3]
    code, _, err = run(capsys, *argv, "--host-passes", "4", "--force")
    assert code == 2 and "--host-passes must be 1 to 3" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_torchrun_entry_runs_the_same_options(tmp_path):
    trace = tmp_path / "t.json"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "hw.main", *SMALL, "--repeats", "1", "--layout", "contiguous", "--trace", str(trace)],
        cwd=root, capture_output=True, text=True, timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1",
             "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))})
    assert proc.returncode == 0, proc.stderr[:3000] + "\n...\n" + proc.stderr[-1500:]
    assert "makespan" in proc.stdout
    t = Trace.load(trace)
    assert t.n_gpus == 2 and t.config["layout"] == "contiguous"
    assert len([s for s in t.spans if s.stream == "compute"]) == 3   # rank 0 skips one block
