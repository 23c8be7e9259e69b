"""GPU profiles: the block model's floors and rates fitted to one GPU's compute grid."""

import json
import subprocess
import sys

import pytest

from sim.calibration.gpu_profile import calibrate_gpu, gpu_profile_from_dict, predict_isolated_s
from sim.errors import RingsimError
from sim.hardware.cluster import Gpu
from sim.hardware.kernel_model import Floors


def entry(kind, mask, heads, tokens, time_s, kv_heads=None, impl="cuda-flash", batch=1):
    pairs = tokens * (tokens + 1) // 2 if mask == "diagonal" else tokens * tokens
    return {"kind": kind, "mask": mask, "dtype": "bf16", "batch": batch, "heads": heads,
            "kv_heads": kv_heads or heads, "head_dim": 128, "q_tokens": tokens, "kv_tokens": tokens,
            "flops": (2.5 if kind == "bwd" else 1.0) * 4 * 128 * pairs * heads * batch, "impl": impl,
            "median_s": time_s}


def bench(entries, name="NVIDIA H200"):
    return {"format": "ringsim-hw-bench", "version": 1, "complete": True,
            "device": {"kind": "cuda", "name": name, "torch": "2.11.0"}, "compute": entries}


TRUE = Gpu.preset("H200", kernel="fa2", floors=Floors(fwd_host_us=21.0, bwd_host_us=47.0),
                  rate_scale={"fwd-full": 0.9, "fwd-diagonal": 0.8, "bwd-full": 1.1, "bwd-diagonal": 0.95})


def synthetic_grid():
    out = []
    for heads in (8, 32):
        for tokens in (512, 1024, 2048, 4096, 8192):
            for kind in ("fwd", "bwd"):
                for mask in ("full", "diagonal"):
                    e = entry(kind, mask, heads, tokens, 1.0)
                    e["median_s"] = predict_isolated_s(TRUE, {**e, "time_s": 1.0})
                    out.append(e)
    return out


def test_calibration_recovers_the_constants_of_a_synthetic_grid():
    profile = calibrate_gpu([(bench(synthetic_grid()), "grid")])
    assert profile.gpu == "H200" and list(profile.kernels) == ["fa2"]
    fit = profile.kernels["fa2"]
    assert fit.floors.fwd_host_us == pytest.approx(21.0, rel=1e-6)
    assert fit.floors.bwd_host_us == pytest.approx(47.0, rel=1e-6)
    assert fit.rate_scale == pytest.approx(TRUE.rate_scale, rel=1e-6)
    assert profile.report["kernels"]["fa2"]["max_abs_rel"] < 1e-9


def test_a_profile_predicts_blocks_it_was_not_fitted_on():
    grid = synthetic_grid()
    profile = calibrate_gpu([(bench([e for e in grid if e["heads"] == 8]), "8 heads")])
    gpu = profile.gpu_for("fa2")
    for e in grid:
        if e["heads"] == 32:
            assert predict_isolated_s(gpu, {**e, "time_s": 0}) == pytest.approx(e["median_s"], rel=1e-6)


def test_the_profile_round_trips_and_keeps_the_preset_s_memory_and_sms():
    profile = calibrate_gpu([(bench(synthetic_grid()), "grid")])
    again = gpu_profile_from_dict(json.loads(json.dumps(profile.to_dict())), "p.json")
    gpu = again.gpu_for()
    assert gpu.memory_gb == 141.0 and gpu.sms == 132 and gpu.kernel == "fa2-h100"
    assert gpu.floors == profile.kernels["fa2"].floors
    assert again.gpu_for(merge="unfused").merge == "unfused"


@pytest.mark.parametrize("grid,says", [
    ({**bench([]), "compute": []}, "no compute entries"),
    (bench([entry("fwd", "full", 8, 1024, -1e-5)]), "positive time"),
    (bench([entry("fwd", "full", 8, 1024, 1e-4)], name="Tesla T4"), "no GPU preset matches"),
    (bench([entry("fwd", "full", 8, 1024, 1e-4, impl="cpu-flash")]), "no kernel table models"),
    ({**bench([entry("fwd", "full", 8, 1024, 1e-4)]), "device": {"kind": "cpu", "name": "x"}}, "CUDA bench"),
    (bench([entry("fwd", "sideways", 8, 1024, 1e-4)]), "bad kind or mask"),
])
def test_bad_grids_are_refused_in_one_line(grid, says):
    with pytest.raises(RingsimError, match=says) as e:
        calibrate_gpu([(grid, "grid.json")])
    assert "\n" not in str(e.value)


def test_another_gpu_s_entries_mixed_in_are_refused():
    a = bench([entry("fwd", "full", 8, 1024, 1e-4)])
    b = bench([entry("fwd", "full", 8, 2048, 2e-4)], name="NVIDIA H100 80GB HBM3")
    with pytest.raises(RingsimError, match="different GPUs"):
        calibrate_gpu([(a, "a.json"), (b, "b.json")])


def test_bad_profiles_are_refused():
    good = calibrate_gpu([(bench(synthetic_grid()), "grid")]).to_dict()
    for bad, says in ((dict(good, gpu="Z80"), "unknown GPU preset"),
                      (dict(good, kernels={}), "non-empty"),
                      (dict(good, kernels={"fa2": {"floors": {"fwd_host_us": -3.0}, "rate_scale": {}}}),
                       "non-negative"),
                      (dict(good, kernels={"fa2": {"floors": {}, "rate_scale": {"fwd-sideways": 1.0}}}),
                       "unknown group")):
        with pytest.raises(RingsimError, match=says):
            gpu_profile_from_dict(bad, "p.json")


def ringsim(*args, cwd):
    return subprocess.run([sys.executable, "-m", "sim.cli.main", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.slow
def test_one_gpu_calibrates_compute_and_plans_a_cluster(tmp_path):
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[3]
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(bench(synthetic_grid())))
    out = ringsim("calibrate", str(grid), "-o", str(tmp_path / "p.json"), cwd=root)
    assert out.returncode == 0, out.stderr
    again = ringsim("calibrate", str(grid), "-o", str(tmp_path / "p.json"), cwd=root)
    assert again.returncode == 2 and "exists" in again.stderr      # nothing overwritten without --force
    run = ringsim("simulate", "--profile", str(tmp_path / "p.json"), "--gpus", "16", "--link", "nvlink4",
                  "--inter-link", "ib-ndr", "--seq", "128k", "--json", cwd=root)
    assert run.returncode == 0, run.stderr
    plain = ringsim("simulate", "--gpus", "16", "--gpu", "H200", "--link", "nvlink4", "--inter-link", "ib-ndr",
                    "--seq", "128k", "--json", cwd=root)
    slower = json.loads(run.stdout)["makespan_s"] / json.loads(plain.stdout)["makespan_s"]
    assert 1.05 < slower < 1.3          # the profile's rates are 0.8-0.9x the table's forward ones
    plan = ringsim("plan", "--profile", str(tmp_path / "p.json"), "--model", "llama3-8b", "--seq", "64k",
                   "--nodes", "2", "--inter-link", "ib-ndr", cwd=root)
    assert plan.returncode == 0, plan.stderr
    assert "141 GB" in plan.stdout      # the preset's memory travels with the profile
    mixed = ringsim("simulate", "--profile", str(tmp_path / "p.json"), "--gpu", "A100-SXM", cwd=root)
    assert mixed.returncode == 2 and "disagree" in mixed.stderr


def test_the_unfused_merge_is_slower_from_the_command_line():
    from sim.cli.main import main

    def makespan(*extra):
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["simulate", "--gpus", "8", "--seq", "64k", "--json", *extra]) == 0
        return json.loads(buf.getvalue())["makespan_s"]

    assert makespan("--merge", "unfused") > makespan("--merge", "fused") > makespan("--kernel", "fa3")


@pytest.mark.slow
def test_the_sdpa_grid_harness_writes_a_bench_that_calibrates(tmp_path):
    """bench/gpu/sdpa_grid.py on the CPU (wall clock, the flash backend): a bench file in
    the format `ringsim calibrate` reads, GQA entries included; an existing file is kept."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[3]
    out = tmp_path / "g.json"
    args = [sys.executable, "bench/gpu/sdpa_grid.py", str(out), "--device", "cpu", "--heads", "2",
            "--kv-heads", "0,1", "--tokens", "64", "--backends", "flash", "--samples", "1", "--warmup", "0"]
    run = subprocess.run(args, capture_output=True, text=True, cwd=root)
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    assert doc["complete"] and len(doc["compute"]) == 8
    assert {(e["heads"], e["kv_heads"]) for e in doc["compute"]} == {(2, 2), (2, 1)}
    assert all(e["median_s"] > 0 and e["impl"] == "cuda-flash" for e in doc["compute"])
    again = subprocess.run(args, capture_output=True, text=True, cwd=root)
    assert again.returncode == 2 and "exists" in again.stderr


@pytest.mark.slow
def test_the_ring_steps_harness_sets_each_step_beside_the_model(tmp_path):
    """bench/gpu/ring_steps.py on the CPU: every rank's every step measured and modelled
    with both merges, a summary per pass; an existing file is kept."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[3]
    out = tmp_path / "steps.json"
    args = [sys.executable, "bench/gpu/ring_steps.py", str(out), "--device", "cpu", "--gpus", "2",
            "--tokens-per-rank", "64", "--heads", "2", "--kv-heads", "1", "--head-dim", "16", "--repeats", "1"]
    run = subprocess.run(args, capture_output=True, text=True, cwd=root)
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    assert len(doc["steps"]) == 8 and set(doc["summary"]) == {"2-fwd", "2-bwd"}
    assert all(r["measured_s"] > 0 and r["model_fused_s"] > 0 and r["model_unfused_s"] > 0 for r in doc["steps"])
    again = subprocess.run(args, capture_output=True, text=True, cwd=root)
    assert again.returncode == 2 and "exists" in again.stderr
