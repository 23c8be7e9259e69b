"""Runs recorded under torch.profiler (hw.profiled): the project's ring and torch's own
context_parallel on gloo, read back (sim.profiler.reader), their ring found
(sim.profiler.ring), fitted and replayed (sim.calibration.from_profiler)."""

from __future__ import annotations

import pytest

from hw.config import RunConfig
from hw.profiled import TorchCP, record_ring, record_torch_cp, trace_path
from sim.calibration.from_profiler import calibrate_from_ring, replay
from sim.errors import RingsimError
from sim.profiler.reader import read_run
from sim.profiler.ring import find_ring
from sim.scenario.config import Workload

pytestmark = pytest.mark.slow


def _replay_holds_its_fit(ring, profile, report: dict) -> None:
    """The replay on the profile fitted to the recording, whatever the host's load was when
    it ran (how close replays land on a quiet host is bench/calibration/kineto_replay.py's
    to measure, not a test's): at least the busiest rank's fitted blocks end to end in an
    iteration, and the error it reports is against the measured median."""
    first = min(c.iteration for c in ring.calls)
    busy: dict[int, float] = {}
    for c in ring.calls:
        if c.iteration == first:
            mask = "diagonal" if c.causal else "full"
            busy[c.rank] = busy.get(c.rank, 0.0) + profile.compute_time_s(
                c.flops, dtype=ring.config.dtype, kind=c.kind, mask=mask, q_tokens=c.q_tokens, kv_tokens=c.kv_tokens)
    m = report["measured"]
    assert max(busy.values()) * (1 - 1e-9) <= report["simulated_s"] < float("inf")
    assert m["min_s"] <= m["median_s"] <= m["max_s"]
    assert report["error"] == pytest.approx((report["simulated_s"] - m["median_s"]) / m["median_s"])


def test_the_rings_own_trace_and_the_profilers_time_the_same_steps(tmp_path):
    cfg = RunConfig(workload=Workload(seq=2048, heads=8, kv_heads=8, head_dim=64, dtype="fp32", causal=True),
                    n_gpus=2, layout="zigzag", warmup=1, repeats=3)
    traces = record_ring(cfg, str(tmp_path))
    run = read_run([tmp_path])
    assert run.world_size == 2 and [n for n, _, _ in run.iterations[0]] == [1, 2, 3]
    ring = find_ring(run)
    assert (ring.config.seq, ring.config.layout, ring.config.causal) == (2048, "zigzag", True)
    # each recorded call is the block ringsim's own recorder timed: its FLOPs per rank and step
    for i, trace in enumerate(traces):
        c = trace.columns
        own = {(int(c.rank[j]), int(c.step[j])): float(c.flops[j]) for j in range(len(c.rank)) if c.stream[j] == 0}
        found = {(x.rank, x.step): x.flops for x in ring.calls if x.iteration == i + 1}
        assert found.keys() == own.keys()
        for key, flops in own.items():
            assert found[key] == pytest.approx(flops, rel=1e-9)
    profile = calibrate_from_ring(ring, str(tmp_path))
    _replay_holds_its_fit(ring, profile, replay(ring, profile))


@pytest.mark.parametrize("rotation", ["alltoall", "allgather"])
def test_torch_context_parallel_is_recorded_found_and_replayed(tmp_path, rotation):
    run = TorchCP(n_gpus=2, seq=2048, rotation=rotation, iterations=3)
    ranks = record_torch_cp(run, str(tmp_path))
    assert [len(r["times_s"]) for r in ranks] == [3, 3]
    assert all((tmp_path / f"rank{r}.json.gz").exists() for r in range(2))
    ring = find_ring(read_run([tmp_path]))
    cfg = ring.config
    assert (cfg.n_gpus, cfg.seq, cfg.heads, cfg.kv_heads, cfg.head_dim) == (2, 2048, 8, 8, 64)
    assert (cfg.layout, cfg.causal, cfg.transport) == ("zigzag", True, rotation)
    assert sorted({(c.rank, c.step) for c in ring.calls}) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    profile = calibrate_from_ring(ring, str(tmp_path))
    _replay_holds_its_fit(ring, profile, replay(ring, profile))


def test_existing_traces_are_kept_unless_asked(tmp_path):
    (tmp_path / "rank0.json.gz").write_bytes(b"")
    assert trace_path(str(tmp_path), 0) == str(tmp_path / "rank0.json.gz")
    with pytest.raises(RingsimError, match="exists"):
        record_torch_cp(TorchCP(n_gpus=2, seq=1024), str(tmp_path))
    with pytest.raises(RingsimError, match="divide"):
        TorchCP(n_gpus=3, seq=1000)


def test_the_commands_record_traces_that_validate_reads(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]

    def ringsim(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sim.cli.main", *args], cwd=root, capture_output=True,
                              text=True, timeout=300)

    got = ringsim("hw", "torch-cp", "--gpus", "2", "--seq", "1024", "--repeats", "2", "--profile-dir",
                  str(tmp_path / "cp"), "--json")
    assert got.returncode == 0, got.stderr
    assert len(json.loads(got.stdout)["slowest_rank_s"]) == 2
    got = ringsim("hw", "run", "--gpus", "2", "--seq", "1024", "--repeats", "2", "--profile-dir",
                  str(tmp_path / "ring"))
    assert got.returncode == 0, got.stderr
    assert f"profiler traces: {tmp_path / 'ring'}" in got.stdout
    for folder, transport in (("cp", "alltoall"), ("ring", "p2p")):
        got = ringsim("validate", "--trace", str(tmp_path / folder), "--json")
        assert got.returncode == 0, got.stderr
        report = json.loads(got.stdout)
        assert (report["config"]["seq"], report["config"]["transport"]) == (1024, transport)
        assert report["measured"]["n"] == 2
