"""Bad invocations and damaged files, at least one for every command and option family:
each must end with exit status 2 and one line on standard error, never a traceback or a
printed number from a broken input (tests/hostile/cli.py runs the command line in this
process)."""

from __future__ import annotations

import json
import os

import pytest

from tests.hostile import damaged as d
from tests.hostile.cli import assert_clean_refusal, run_cli

PROFILE = d.PROFILE


def _spec(tmp, name, text):
    return d.write(os.path.join(tmp, name), text)


def _trace_bomb(tmp):
    arc = d.archive_with({"start_s.npy": d.npy_claiming((10 ** 11,), b"\0" * 64)}, base=d.trace_archive())
    return d.write(os.path.join(tmp, "claims.npz"), arc)


def _zip_bomb(tmp):
    arc = d.claim_size(d.trace_archive(), "end_s.npy", 0xFFFFFFF0)
    return d.write(os.path.join(tmp, "bomb.npz"), arc)


def _bench(tmp, name, **kw):
    b = d.bench_dict(**{k: v for k, v in kw.items() if k in ("kind", "time_s")})
    b.update({k: v for k, v in kw.items() if k not in ("kind", "time_s")})
    return d.write(os.path.join(tmp, name), json.dumps(b))


def _nan_profile(tmp):
    def change(p):
        p["compute"]["groups"][0]["points"][0][1] = float("nan")
    return d.profile_with(tmp, "nan.json", change)


def _zero_profile(tmp):
    def change(p):
        p["compute"]["groups"][0]["points"][0][1] = 0.0
    return d.profile_with(tmp, "zero.json", change)


def _huge_profile(tmp):
    def change(p):
        p["compute"]["groups"][0]["points"][0][1] = 1e300
    return d.profile_with(tmp, "huge.json", change)


def _fast_profile(tmp):
    def change(p):
        p["compute"]["groups"][0]["fit"]["flops_per_s"] = 1e300
    return d.profile_with(tmp, "fast.json", change)


def _typed_profile(tmp):
    def change(p):
        p["compute"]["groups"] = "many"
    return d.profile_with(tmp, "typed.json", change)


CASES = {
    # simulate: workload, hardware and schedule flags, files
    "simulate-gpus-0": lambda t: ["simulate", "--gpus", "0"],
    "simulate-gpus-negative": lambda t: ["simulate", "--gpus", "-8"],
    "simulate-seq-1e12": lambda t: ["simulate", "--seq", "1000000000000"],
    "simulate-seq-text": lambda t: ["simulate", "--seq", "lots"],
    "simulate-head-dim-0": lambda t: ["simulate", "--head-dim", "0"],
    "simulate-heads-not-divisible": lambda t: ["simulate", "--heads", "7", "--kv-heads", "2"],
    "simulate-dtype": lambda t: ["simulate", "--dtype", "fp64"],
    "simulate-tile-0": lambda t: ["simulate", "--granularity", "tile", "--tile", "0"],
    "simulate-window-0": lambda t: ["simulate", "--window", "0"],
    "simulate-docs-zero": lambda t: ["simulate", "--docs", "0,0"],
    "simulate-docs-bad-dist": lambda t: ["simulate", "--docs", "lognormal:median=-1"],
    "simulate-efficiency-nan": lambda t: ["simulate", "--kernel", "flat", "--efficiency", "nan"],
    "simulate-efficiency-2": lambda t: ["simulate", "--kernel", "flat", "--efficiency", "2"],
    "simulate-tflops-inf": lambda t: ["simulate", "--kernel", "flat", "--tflops", "inf"],
    "simulate-link-gbps-0": lambda t: ["simulate", "--link-gbps", "0"],
    "simulate-overhead-negative": lambda t: ["simulate", "--kernel", "flat", "--overhead-us", "-1"],
    "simulate-gpus-per-node-0": lambda t: ["simulate", "--gpus-per-node", "0"],
    "simulate-ulysses-degree": lambda t: ["simulate", "--scheme", "hybrid", "--ulysses-degree", "3"],
    "simulate-layout": lambda t: ["simulate", "--layout", "spiral"],
    "simulate-trace-empty-name": lambda t: ["simulate", "--trace", ""],
    "simulate-profile-missing": lambda t: ["simulate", "--profile", os.path.join(t, "missing.json")],
    "simulate-profile-nan": lambda t: ["simulate", "--profile", _nan_profile(t)],
    "simulate-profile-zero-time": lambda t: ["simulate", "--profile", _zero_profile(t)],
    "simulate-profile-1e300": lambda t: ["simulate", "--profile", _huge_profile(t)],
    "simulate-profile-fast-fit": lambda t: ["simulate", "--profile", _fast_profile(t)],
    "simulate-profile-types": lambda t: ["simulate", "--profile", _typed_profile(t)],
    "simulate-profile-truncated": lambda t: ["simulate", "--profile", d.write(
        os.path.join(t, "cut.json"), open(PROFILE).read()[:700])],
    "simulate-profile-deep": lambda t: ["simulate", "--profile", d.write(os.path.join(t, "deep.json"),
                                                                         d.deep_json(100000))],
    "simulate-profile-not-json": lambda t: ["simulate", "--profile", d.write(os.path.join(t, "x.json"), b"\xff\xfe")],
    # compare
    "compare-schemes-empty": lambda t: ["compare", "--schemes", ""],
    "compare-schemes-unknown": lambda t: ["compare", "--schemes", "ring,spiral"],
    "compare-impls-unknown": lambda t: ["compare", "--impls", "megatron"],
    "compare-both": lambda t: ["compare", "--schemes", "all", "--impls", "all"],
    "compare-seq-1e12": lambda t: ["compare", "--seq", "1000000000000"],
    # sweep
    "sweep-missing-spec": lambda t: ["sweep", os.path.join(t, "none.yaml"), "--dry-run"],
    "sweep-spec-extension": lambda t: ["sweep", _spec(t, "s.txt", "gpus: 8"), "--dry-run"],
    "sweep-spec-deep": lambda t: ["sweep", _spec(t, "deep.yaml", "gpus: " + d.deep_json(3000)), "--dry-run"],
    "sweep-spec-deep-block": lambda t: ["sweep", _spec(t, "block.yaml", "".join(
        " " * i + "- \n" for i in range(400))), "--dry-run"],
    "sweep-range-1e12": lambda t: ["sweep", _spec(t, "r.yaml", "seq: {from: 1, to: 1000000000000, step: 1}"),
                                   "--dry-run"],
    "sweep-product-too-large": lambda t: ["sweep", _spec(t, "p.yaml", "seq: {from: 1, to: 5000, step: 1}\n"
                                                                      "seed: {from: 1, to: 5000, step: 1}\n"),
                                          "--dry-run"],
    "sweep-spec-types": lambda t: ["sweep", _spec(t, "ty.yaml", "gpus: [eight]"), "--dry-run"],
    "sweep-spec-not-mapping": lambda t: ["sweep", _spec(t, "l.yaml", "- 1\n- 2\n"), "--dry-run"],
    "sweep-spec-bad-toml": lambda t: ["sweep", _spec(t, "b.toml", "gpus = [8"), "--dry-run"],
    "sweep-scheduler-bad": lambda t: ["sweep", _spec(t, "ok.yaml", "gpus: 2\nseq: 4096"), "--out",
                                      os.path.join(t, "o.csv"), "--scheduler", "bad"],
    "sweep-no-out": lambda t: ["sweep", _spec(t, "ok2.yaml", "gpus: 2")],
    "sweep-workers-0": lambda t: ["sweep", _spec(t, "ok3.yaml", "gpus: 2"), "--out", os.path.join(t, "w.csv"),
                                  "--workers", "0"],
    # plan
    "plan-profile-missing": lambda t: ["plan", "--model", "llama3-8b", "--seq", "64k", "--profile",
                                       os.path.join(t, "missing.json")],
    "plan-headroom-all": lambda t: ["plan", "--model", "llama3-8b", "--seq", "64k", "--headroom", "100GB"],
    "plan-headroom-bad": lambda t: ["plan", "--model", "llama3-8b", "--seq", "64k", "--headroom", "-5%"],
    "plan-global-batch-small": lambda t: ["plan", "--model", "llama3-8b", "--seq", "64k", "--global-batch", "100"],
    "plan-global-batch-no-split": lambda t: ["plan", "--model", "llama3-8b", "--seq", "64k",
                                             "--global-batch", "100k"],
    "plan-top-negative": lambda t: ["plan", "--model", "llama3-8b", "--seq", "64k", "--top", "-1"],
    "plan-model-unknown": lambda t: ["plan", "--model", "gpt-9", "--seq", "64k"],
    "plan-seq-0": lambda t: ["plan", "--model", "llama3-8b", "--seq", "0"],
    # step and gemm
    "step-layout-unknown": lambda t: ["step", "--model", "llama3-8b", "--seq", "8k", "--global-batch", "64k",
                                      "--layout", "foo", "--cp", "1"],
    "step-params-disagree": lambda t: ["step", "--model", "llama3-8b", "--seq", "8k", "--global-batch", "64k",
                                       "--params", "1"],
    "step-custom-params-disagree": lambda t: ["step", "--layers", "4", "--heads", "8", "--kv-heads", "8",
                                              "--ffn", "2048", "--vocab", "32000", "--params", "100",
                                              "--seq", "8k", "--global-batch", "64k"],
    "step-tp-not-dividing": lambda t: ["step", "--model", "llama3-8b", "--seq", "8k", "--global-batch", "64k",
                                       "--tp", "3"],
    "step-seq-1e12": lambda t: ["step", "--model", "llama3-8b", "--seq", "1000000000000", "--global-batch",
                                "1000000000000"],
    "step-microbatches-0": lambda t: ["step", "--model", "llama3-8b", "--seq", "8k", "--global-batch", "64k",
                                      "--microbatches", "0"],
    "step-microbatches-too-many": lambda t: ["step", "--model", "llama3-8b", "--seq", "2048", "--global-batch",
                                             str(2048 * 2 ** 20)],
    "step-gpus-mismatch": lambda t: ["step", "--model", "llama3-8b", "--seq", "8k", "--global-batch", "64k",
                                     "--gpus", "5"],
    "gemm-zero": lambda t: ["gemm", "--m", "0", "--n", "4", "--k", "4"],
    "gemm-gpu-unknown": lambda t: ["gemm", "--m", "4", "--n", "4", "--k", "4", "--gpu", "Z80"],
    # calibrate
    "calibrate-nothing": lambda t: ["calibrate"],
    "calibrate-bench-missing": lambda t: ["calibrate", os.path.join(t, "none.json"), "-o", os.path.join(t, "p.json")],
    "calibrate-bench-version": lambda t: ["calibrate", _bench(t, "v.json", version=99), "-o", os.path.join(t, "p.json")],
    "calibrate-gpu-grid-version": lambda t: ["calibrate", _bench(t, "g.json", kind="cuda", version=7), "-o",
                                             os.path.join(t, "p.json")],
    "calibrate-bench-1e300": lambda t: ["calibrate", _bench(t, "h.json", time_s=1e300), "-o",
                                        os.path.join(t, "p.json")],
    "calibrate-bench-zero": lambda t: ["calibrate", _bench(t, "z.json", time_s=0.0), "-o", os.path.join(t, "p.json")],
    "calibrate-gpu-grid-zero": lambda t: ["calibrate", _bench(t, "gz.json", kind="cuda", time_s=0.0), "-o",
                                          os.path.join(t, "p.json")],
    "calibrate-traces-empty-file": lambda t: ["calibrate", "--from-traces", d.write(os.path.join(t, "e.npz"), b""),
                                              "-o", os.path.join(t, "p.json")],
    "calibrate-traces-claims": lambda t: ["calibrate", "--from-traces", _trace_bomb(t), "-o",
                                          os.path.join(t, "p.json")],
    "calibrate-traces-zip-bomb": lambda t: ["calibrate", "--from-traces", _zip_bomb(t), "-o",
                                            os.path.join(t, "p.json")],
    "calibrate-traces-zero-length-spans": lambda t: ["calibrate", "--from-traces", d.measured_trace_with(
        os.path.join(t, "z.npz"), end_scale=0.0), "-o", os.path.join(t, "p.json")],
    "calibrate-traces-1e300-spans": lambda t: ["calibrate", "--from-traces", d.measured_trace_with(
        os.path.join(t, "h.npz"), end_scale=1e300), "-o", os.path.join(t, "p.json")],
    "calibrate-traces-no-spans": lambda t: ["calibrate", "--from-traces", d.measured_trace_with(
        os.path.join(t, "e.npz"), empty=True), "-o", os.path.join(t, "p.json")],
    "calibrate-check-missing": lambda t: ["calibrate", "--check", os.path.join(t, "none.json")],
    "calibrate-check-with-gpu": lambda t: ["calibrate", "--check", PROFILE, "--gpu", "H100-SXM"],
    "calibrate-tolerance": lambda t: ["calibrate", "--check", PROFILE, "--tolerance", "2"],
    # validate
    "validate-no-profile": lambda t: ["validate"],
    "validate-gpus-0": lambda t: ["validate", "--profile", PROFILE, "--gpus", "0"],
    "validate-repeats-1": lambda t: ["validate", "--profile", PROFILE, "--repeats", "1"],
    "validate-trace-missing": lambda t: ["validate", "--trace", os.path.join(t, "none.json")],
    # trace import
    "trace-import-missing": lambda t: ["trace", "import", os.path.join(t, "none.json")],
    "trace-import-empty": lambda t: ["trace", "import", d.write(os.path.join(t, "e.json"), b"")],
    "trace-import-not-json": lambda t: ["trace", "import", d.write(os.path.join(t, "n.json"), b"{{{{")],
    "trace-import-bad-gzip": lambda t: ["trace", "import", d.write(os.path.join(t, "b.json.gz"), b"\x1f\x8b\x08junk")],
    "trace-import-deep": lambda t: ["trace", "import", d.write(os.path.join(t, "deep.json"),
                                                                '{"traceEvents": ' + d.deep_json(50000) + "}")],
    # hw run and bench (refused before any process starts)
    "hw-run-gpus-0": lambda t: ["hw", "run", "--gpus", "0"],
    "hw-run-seq-0": lambda t: ["hw", "run", "--seq", "0"],
    "hw-run-repeats-0": lambda t: ["hw", "run", "--repeats", "0"],
    "hw-bench-force-resume": lambda t: ["hw", "bench", "--force", "--resume", "--output", os.path.join(t, "b.json")],
    "hw-bench-parts": lambda t: ["hw", "bench", "--parts", "everything", "--output", os.path.join(t, "b.json")],
    # the dashboard's options (refused before any server starts)
    "dashboard-port": lambda t: ["dashboard", "--port", "70000"],
    "dashboard-threads": lambda t: ["dashboard", "--threads", "0"],
    "dashboard-workers": lambda t: ["dashboard", "--workers", "0"],
    "dashboard-traces-dir": lambda t: ["dashboard", "--traces-dir", os.path.join(t, "nowhere")],
    # the command line itself
    "unknown-command": lambda t: ["teleport"],
    "unknown-option": lambda t: ["simulate", "--warp", "9"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bad_invocation_ends_in_one_line_and_exit_2(name, tmp_path):
    argv = CASES[name](str(tmp_path))
    assert_clean_refusal(*run_cli(argv))


@pytest.mark.slow      # the scheduler's connection times out after 20 s
def test_a_failed_sweep_leaves_no_empty_table(tmp_path):
    out = tmp_path / "o.csv"
    spec = d.write(str(tmp_path / "s.yaml"), "gpus: 2\nseq: 4096")
    assert_clean_refusal(*run_cli(["sweep", spec, "--out", str(out), "--scheduler", "tcp://127.0.0.1:1"]))
    assert not out.exists()
