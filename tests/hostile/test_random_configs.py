"""Random valid configurations of simulate, compare and step, drawn by Hypothesis and run
through the command line in this process: each ends in one line and exit 2 (a configuration
the model refuses) or in a result whose numbers keep their bounds, checked here from the
printed numbers themselves: efficiency = ideal / makespan <= 1, makespan >= ideal, MFU <= 1,
memory > 0, every time finite and >= 0."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile.cli import assert_clean_refusal, run_cli

SLACK = 1e-9      # sim.invariants.RELATIVE_SLACK: float rounding between the two sides
BUDGET = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _times_ok(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            _times_ok(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for v in obj:
            _times_ok(v, path)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        assert math.isfinite(obj), path
        if path.endswith("_s"):
            assert obj >= 0, path


def _run_bounds(r):
    _times_ok(r)
    if r.get("ideal_s") is not None:
        assert r["makespan_s"] >= r["ideal_s"] * (1 - SLACK)
        assert math.isclose(r["efficiency"], r["ideal_s"] / r["makespan_s"], rel_tol=1e-12)
        assert 0 < r["efficiency"] <= 1 + SLACK
    for key in ("peak_mem_bytes",):
        if r.get(key) is not None:
            assert r[key] > 0


workloads = st.fixed_dictionaries({
    "gpus": st.sampled_from([1, 2, 3, 4, 8]),
    "per_rank": st.sampled_from([96, 384, 1536, 3072]),
    "heads": st.sampled_from([(8, 8), (8, 2), (16, 4), (32, 8), (12, 4)]),
    "head_dim": st.sampled_from([32, 64, 80, 96, 128, 160, 192, 256]),
    "dtype": st.sampled_from(["bf16", "fp16", "fp32"]),
    "causal": st.booleans(),
    "pass": st.sampled_from(["fwd", "bwd", "fwdbwd"]),
    "gpu": st.sampled_from(["H100-SXM", "H200", "A100-SXM-80GB", "B200", "MI300X", "L40S", "RTX-4090"]),
})


def _argv(w):
    heads, kv = w["heads"]
    return ["--gpus", str(w["gpus"]), "--seq", str(w["gpus"] * w["per_rank"]), "--heads", str(heads),
            "--kv-heads", str(kv), "--head-dim", str(w["head_dim"]), "--dtype", w["dtype"],
            "--causal" if w["causal"] else "--no-causal", "--pass", w["pass"], "--gpu", w["gpu"]]


@BUDGET
@given(w=workloads, scheme=st.sampled_from(["ring", "allgather", "ulysses", "hybrid"]),
       layout=st.sampled_from(["contiguous", "striped", "zigzag"]), overlap=st.booleans(),
       sync=st.sampled_from(["step", "buffered"]), impl=st.sampled_from(["ideal", "te", "rfa", "torch", "usp"]),
       kernel=st.sampled_from(["default", "flat"]))
def test_simulate_gives_a_bounded_result_or_one_line(w, scheme, layout, overlap, sync, impl, kernel):
    argv = ["simulate", *_argv(w), "--scheme", scheme, "--layout", layout, "--overlap" if overlap else "--no-overlap",
            "--sync", sync, "--impl", impl, "--json"] + (["--kernel", "flat"] if kernel == "flat" else [])
    rc, out, err = run_cli(argv)
    if rc != 0:
        assert_clean_refusal(rc, out, err)
        return
    _run_bounds(json.loads(out))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=workloads, what=st.sampled_from(["layouts", "schemes", "impls"]))
def test_compare_gives_bounded_rows_or_one_line(w, what):
    extra = {"layouts": [], "schemes": ["--schemes", "all"], "impls": ["--impls", "all"]}[what]
    rc, out, err = run_cli(["compare", *_argv(w), *extra, "--json"])
    if rc != 0:
        assert_clean_refusal(rc, out, err)
        return
    for row in json.loads(out)["rows"]:
        if "refused" not in row:
            _run_bounds(row)


@BUDGET
@given(model=st.sampled_from([["--model", "llama3-8b"], ["--model", "llama3-70b"],
                              ["--layers", "4", "--heads", "16", "--kv-heads", "4", "--hidden", "2048",
                               "--ffn", "5632", "--vocab", "32000"]]),
       seq=st.sampled_from([2048, 8192, 32768]), seqs=st.sampled_from([4, 16, 64]),
       tp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2]),
       zero=st.sampled_from([0, 1, 3]), recompute=st.sampled_from(["none", "selective", "full"]),
       fp8=st.booleans(), gpu=st.sampled_from(["H100-SXM", "A100-SXM-80GB", "B200"]))
def test_step_gives_a_bounded_step_or_one_line(model, seq, seqs, tp, cp, pp, zero, recompute, fp8, gpu):
    argv = ["step", *model, "--seq", str(seq), "--global-batch", str(seq * seqs), "--tp", str(tp), "--cp", str(cp),
            "--pp", str(pp), "--zero", str(zero), "--recompute", recompute, "--gpu", gpu, "--json"]
    rc, out, err = run_cli(argv + (["--fp8"] if fp8 else []))
    if rc != 0:
        assert_clean_refusal(rc, out, err)
        return
    step = json.loads(out)
    _times_ok(step)
    assert step["step_s"] > 0 and step["memory_bytes_per_gpu"] > 0
    assert 0 < step["mfu"] <= 1 + SLACK and 0 < step["palm_mfu"] <= 1 + SLACK
