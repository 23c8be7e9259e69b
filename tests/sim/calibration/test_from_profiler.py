"""A profile fitted to the ring of a profiler trace (sim.calibration.from_profiler), the run
replayed on it, and what-ifs asked of it from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.calibration.from_profiler import calibrate_from_ring, compute_points, hop_points, replay, validate_trace
from sim.hardware.profile import load_profile
from sim.profiler.reader import read_run
from sim.profiler.ring import find_ring
from tests.sim.profiler.test_ring import CPU, write_gpu_ring

ROOT = Path(__file__).resolve().parents[3]


def test_the_fit_recovers_the_rates_a_synthetic_trace_was_written_with(tmp_path):
    want = write_gpu_ring(tmp_path / "run", rate=300e12, alpha_s=0.0, bandwidth=40e9)
    ring = find_ring(read_run([tmp_path / "run"]))
    profile = calibrate_from_ring(ring, "synthetic", measured_on={"kind": "cuda", "backend": "nccl"})
    # every block took FLOPs / rate: both masks' groups run at that rate, with no overhead
    for key in (("bf16", "diagonal", "fwd"), ("bf16", "full", "fwd")):
        g = profile.groups[key]
        assert g.flops_per_s == pytest.approx(want["rate"], rel=1e-6)
        assert g.overhead_s == pytest.approx(0.0, abs=1e-12)
        assert g.heads == 8 and g.head_dim == 64
    # one message size, no latency: the link's bandwidth is the one written
    assert profile.link.bandwidth_bytes_per_s == pytest.approx(40e9, rel=1e-6)
    assert all(h["bytes"] == want["kv_bytes"] for h in hop_points(ring))
    assert sum(p["calls"] for p in compute_points(ring)) == len(ring.calls)


def test_replaying_a_synthetic_ring_gives_its_own_time(tmp_path):
    """Hops shorter than the blocks hide behind them: the iteration is the sum of one rank's
    block times (closed form), and the simulator plays exactly that."""
    want = write_gpu_ring(tmp_path / "run", rate=1e12, alpha_s=10e-6, bandwidth=40e9)
    ring = find_ring(read_run([tmp_path / "run"]))
    n, c = want["n"], want["c"]
    closed = (4.0 * 64 * 8 * (c * (c + 1) / 2) + (n - 1) * 4.0 * 64 * 8 * (c * c / 2)) / want["rate"]
    assert ring.measured()["median_s"] == pytest.approx(closed, rel=1e-9)
    got = replay(ring, calibrate_from_ring(ring, "synthetic", measured_on={"kind": "cuda", "backend": "nccl"}))
    assert got["simulated_s"] == pytest.approx(closed, rel=1e-6)
    assert abs(got["error"]) < 1e-6
    # every hop hidden behind its step: no rank waited, measured or simulated
    assert got["measured"]["waiting_median_s"] == pytest.approx(0.0, abs=1e-9)
    assert got["simulated_waiting_s"] == pytest.approx(0.0, abs=1e-9)


def test_a_recorded_ring_fits_the_blocks_it_holds():
    ring = find_ring(read_run([CPU / "ring-zigzag-causal-fwd-2r"]))
    profile = calibrate_from_ring(ring, "ring")
    # each group's point is the mean of its calls' times (numpy's mean as the reference)
    import numpy as np

    for mask, causal in (("diagonal", True), ("full", False)):
        calls = [c for c in ring.calls if bool(c.causal) == causal]
        g = profile.groups[("fp32", mask, "fwd")]
        assert len(g.points) == 1
        assert g.points[0][0] == pytest.approx(calls[0].flops)
        assert g.points[0][1] == pytest.approx(float(np.mean([c.busy_s for c in calls])))
    assert profile.contention.slowdown_in_flight == 1.0
    assert profile.report["route"] == "profiler trace"


@pytest.mark.parametrize("name", ["ring-zigzag-causal-fwd-2r", "torchcp-alltoall-causal-2r",
                                  "torchcp-allgather-causal-2r", "ring-contiguous-full-fwdbwd-3r",
                                  "torchcp-alltoall-causal-3r"])
def test_every_recorded_trace_replays_beside_its_spread(name):
    report, _ = validate_trace([str(CPU / name)])
    m = report["measured"]
    assert m["n"] == 3 and m["min_s"] <= m["median_s"] <= m["max_s"]
    assert report["simulated_s"] > 0
    assert report["error"] == pytest.approx((report["simulated_s"] - m["median_s"]) / m["median_s"])


def _ringsim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim.cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_validate_trace_writes_a_profile_that_answers_a_what_if_at_another_degree(tmp_path):
    out = tmp_path / "fitted.json"
    got = _ringsim("validate", "--trace", str(CPU / "ring-zigzag-causal-fwd-2r"), "--profile-out", str(out), "--json")
    assert got.returncode == 0, got.stderr
    report = json.loads(got.stdout)
    assert report["config"]["n_gpus"] == 2 and report["profile_out"] == str(out)
    profile = load_profile(out)
    assert profile.groups[("fp32", "full", "fwd")].flops_per_s == pytest.approx(
        report["profile"]["compute"]["fp32/full/fwd"]["flops_per_s"])
    # the same run at twice the degree and twice the sequence, from the command line
    what_if = _ringsim("simulate", "--profile", str(out), "--gpus", "4", "--seq", "4096", "--heads", "8",
                       "--kv-heads", "8", "--head-dim", "64", "--dtype", "fp32", "--layout", "zigzag", "--json")
    assert what_if.returncode == 0, what_if.stderr
    sim = json.loads(what_if.stdout)
    assert sim["scenario"]["n_gpus"] == 4 and sim["scenario"]["workload"]["seq"] == 4096
    # a quarter of twice the tokens per rank: each rank's causal work per step is the 2-rank run's
    assert len(sim["ranks"]) == 4 and sim["makespan_s"] > 0


def test_validate_trace_refuses_a_trace_that_is_no_ring_in_one_line(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1},
           "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}]}
    (folder / "rank0.json").write_text(json.dumps(doc))
    got = _ringsim("validate", "--trace", str(folder))
    assert got.returncode == 2
    assert len(got.stderr.strip().splitlines()) == 1 and "no attention calls" in got.stderr


def test_the_imported_table_validates_as_the_traces_do(tmp_path):
    from sim.profiler.reader import write_table

    folder = CPU / "torchcp-alltoall-causal-2r"
    write_table(read_run([folder]), tmp_path / "run.parquet")
    from_table, _ = validate_trace([str(tmp_path / "run.parquet")])
    from_files, _ = validate_trace([str(folder)])
    assert from_table["config"] == from_files["config"]
    assert from_table["measured"]["iterations_s"] == pytest.approx(from_files["measured"]["iterations_s"])
    assert from_table["simulated_s"] == pytest.approx(from_files["simulated_s"])


def test_validate_needs_a_profile_or_a_trace():
    got = _ringsim("validate", "--quick")
    assert got.returncode == 2 and "--profile" in got.stderr and "--trace" in got.stderr
    got = _ringsim("validate", "--trace", str(CPU / "ring-zigzag-causal-fwd-2r"), "--profile", "p.json")
    assert got.returncode == 2 and "does not go with --trace" in got.stderr
