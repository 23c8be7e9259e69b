"""A benchmark script never replaces a results file already kept unasked: before it measures
anything it refuses, without --force, an output that exists (bench.common.keep_results),
in one line on standard error and exit status 2, and leaves the file as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

KEPT = b'{"kept": "a result measured before"}\n'

SCRIPTS = [
    # (script, the option naming its results file (None: the first positional argument),
    #  other arguments it needs)
    ("bench/accuracy/blocks_h100_batch1.py", "--json", []),
    ("bench/accuracy/compare_rfa.py", "--out", []),
    ("bench/accuracy/gemm_xla.py", "--out", []),
    ("bench/accuracy/implementations_h100.py", "--json", []),
    ("bench/accuracy/pcie_splits.py", "--out", []),
    ("bench/accuracy/rfa_varlen.py", "--json", []),
    ("bench/accuracy/step_llama3.py", "--out", []),
    ("bench/accuracy/step_published.py", "--out", []),
    ("bench/accuracy/trace_megatron_tp8.py", "--out", []),
    ("bench/calibration/kineto_replay.py", "--output", []),
    ("bench/calibration/launch_costs.py", "--out", []),
    ("bench/calibration/validate_host.py", "--out", ["--profiles", "never-read-profile.json"]),
    ("bench/checks/hostile_run.py", "--out", []),
    ("bench/experiments/compiled_pull.py", "--json", []),
    ("bench/experiments/predict_again.py", "--json", ["a-commit-never-read"]),
    ("bench/experiments/resimulate_law.py", "--json", ["a-commit-never-read"]),
    ("bench/experiments/validate_rounds.py", "--out", ["--profile", "never-read-profile.json"]),
    ("bench/gpu/gemm_grid.py", None, []),
    ("bench/gpu/varlen.py", None, []),
    ("bench/speed/comparison_runs.py", "--out", []),
    ("bench/speed/dashboard_callbacks.py", "--out", []),
    ("bench/speed/dashboard_latency.py", "--out", []),
    ("bench/speed/dashboard_load.py", "--out", []),
    ("bench/speed/infer.py", "--out", []),
    ("bench/speed/kernel_profile.py", "-o", []),
    ("bench/speed/kernel_vs_one_process.py", "-o", []),
    ("bench/speed/kernel_vs_torch_cp.py", "-o", []),
    ("bench/speed/malloc_reuse.py", "--out", []),
    ("bench/speed/plan.py", "--out", []),
    ("bench/speed/simulate.py", "--out", []),
    ("bench/speed/sweep_throughput.py", "--out", []),
    ("bench/speed/trace_import.py", "--out", []),
]


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def refused(r: subprocess.CompletedProcess, path: Path) -> str:
    """The one line a refusal prints, after checking that it is one line and exit status 2."""
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert str(path) in lines[0] and "--force" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("script, option, extra", SCRIPTS, ids=[Path(s).stem for s, _, _ in SCRIPTS])
def test_a_kept_results_file_is_refused_before_measuring(tmp_path, script, option, extra):
    kept = tmp_path / "kept.json"
    kept.write_bytes(KEPT)
    out = [str(kept)] if option is None else [option, str(kept)]
    line = refused(run(script, *out, *extra), kept)
    assert line.startswith(Path(script).stem), line      # the script names itself
    assert kept.read_bytes() == KEPT


def test_sweep_throughput_refuses_a_kept_plan_table_before_measuring(tmp_path):
    """The plan tables it writes beside its JSON are results too: one already there is
    refused up front, and the JSON is not written."""
    table = tmp_path / "plan-llama3-8b-128k-1x8-h100.txt"
    table.write_bytes(b"a table kept before\n")
    refused(run("bench/speed/sweep_throughput.py", "--out", str(tmp_path / "sweep.json")), table)
    assert table.read_bytes() == b"a table kept before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [table.name]
