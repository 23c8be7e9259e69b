"""The breakdown against Holistic Trace Analysis itself: HTA 0.5.0 reads the same trace files
from a folder and its temporal breakdown (idle, compute, non-compute) and comm-comp overlap
must agree with sim.profiler.breakdown's within 0.5 percentage points, on every vendored trace
(tests/data/traces/README.md gives each one's source)."""

from __future__ import annotations

import gzip
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from sim.profiler.breakdown import breakdown, pct, union_s
from sim.profiler.reader import read_run

hta_analysis = pytest.importorskip("hta.trace_analysis")
from hta.utils.utils import get_kernel_type, merge_kernel_intervals  # noqa: E402

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
SETS = {
    "megatron-tp8-a100": sorted(TRACES.glob("megatron-tp8-a100.rank*.json.gz")),
    "hta-nccl-a100": [TRACES / "hta-nccl-a100.rank0-of-2.json.gz"],
    "tracelens-qwen0.5b-h100": [TRACES / "tracelens-qwen0.5b-h100.json.gz"],
    "tracelens-capture-mi300x": [TRACES / "tracelens-capture-mi300x.json.gz"],
}
TOLERANCE_PP = 0.5


def _folder_for_hta(files, folder: Path) -> None:
    """The traces as HTA reads them. HTA 0.5.0 under pandas 3 cannot set its int16
    index_correlation beyond 32,767 rows (hta/common/trace.py transform_correlation_to_index),
    so a trace's python_function events (with_stack; no GPU event links to them, HTA's
    breakdown never reads them) are left out of its copy."""
    folder.mkdir()
    for f in files:
        doc = orjson.loads(gzip.open(f).read())
        events = doc["traceEvents"]
        if len(events) > 32_000:
            doc["traceEvents"] = [e for e in events if e.get("cat") != "python_function"]
            # json's spacing: HTA finds the rank with a pattern that expects it
            (folder / f.name.removesuffix(".gz")).write_text(json.dumps(doc))
        else:
            shutil.copy(f, folder / f.name)


def hta_numbers(folder: Path) -> dict[int, dict[str, float]]:
    """HTA's own numbers per rank: its parser, filter, kernel types and interval merge
    (get_temporal_breakdown's idle_time_per_rank, without its assert that non-compute time is
    >= 0, which floating-point sums of a trace with nanosecond times can miss by 1e-9 us), and
    get_comm_comp_overlap."""
    logging.disable(logging.WARNING)
    try:
        ta = hta_analysis.TraceAnalysis(trace_dir=str(folder))
        overlap = ta.get_comm_comp_overlap(visualize=False)
    finally:
        logging.disable(logging.NOTSET)
    sym = ta.t.symbol_table.get_sym_table()
    out = {}
    for rank, df in ta.t.traces.items():
        gpu = df[df["stream"].ne(-1)].copy()
        merged = merge_kernel_intervals(gpu.copy())
        span = merged.iloc[-1]["end"] - merged.iloc[0]["ts"]
        idle = span - (merged.end.sum() - merged.ts.sum())
        types = gpu["name"].apply(lambda n: get_kernel_type(sym[n]))
        comp = merge_kernel_intervals(gpu[types.eq("COMPUTATION")].copy())
        compute = comp.end.sum() - comp.ts.sum()
        row = overlap[overlap["rank"] == rank]
        ov = float(row["comp_comm_overlap_pctg"].iloc[0]) if len(row) else float("nan")
        out[int(rank)] = {"idle": 100 * idle / span, "compute": 100 * compute / span,
                          "non_compute": 100 * (span - compute - idle) / span, "overlap": ov}
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SETS))
def test_breakdown_agrees_with_hta(name, tmp_path):
    files = SETS[name]
    _folder_for_hta(files, tmp_path / "hta")
    theirs = hta_numbers(tmp_path / "hta")
    run = read_run(files)
    ours = {b.rank: b for b in breakdown(run)}
    assert set(ours) == set(theirs)
    for rank, h in theirs.items():
        b = ours[rank]
        assert pct(b.idle_s, b.span_s) == pytest.approx(h["idle"], abs=TOLERANCE_PP)
        assert pct(b.compute_s, b.span_s) == pytest.approx(h["compute"], abs=TOLERANCE_PP)
        assert pct(b.non_compute_s, b.span_s) == pytest.approx(h["non_compute"], abs=TOLERANCE_PP)
        if np.isnan(h["overlap"]) or b.overlap_pct is None:
            assert b.comm_kernel_s == 0 or np.isnan(h["overlap"])
        else:
            assert b.overlap_pct == pytest.approx(h["overlap"], abs=TOLERANCE_PP)
        # the parts make up the span
        total = b.compute_s + b.comm_s + b.memory_s + b.other_s + b.idle_s
        assert total == pytest.approx(b.span_s, rel=1e-9)


def test_union_matches_hta_merge():
    rng = np.random.default_rng(5)
    start = rng.uniform(0, 100, 400)
    end = start + rng.exponential(1.0, 400)
    merged = merge_kernel_intervals(pd.DataFrame({"ts": start, "dur": end - start}))
    assert union_s(start, end) == pytest.approx(float(merged.end.sum() - merged.ts.sum()), rel=1e-12)


def test_cpu_only_trace_breaks_down_host_operators(tmp_path):
    """A CPU trace (gloo, no kernels): compute the operators' union, communication the gloo
    ops not under compute, against HTA's interval merge of the same rows."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100,
               "args": {}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 30, "args": {}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20, "dur": 5, "args": {}},
              {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 1, "tid": 1, "ts": 35, "dur": 25,
               "args": {}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::_scaled_dot_product_flash_attention_for_cpu", "pid": 1,
               "tid": 1, "ts": 70, "dur": 20, "args": {}}]
    f = tmp_path / "cpu.json"
    f.write_bytes(orjson.dumps({"schemaVersion": 1, "traceEvents": events}))
    run = read_run([f])
    (b,) = breakdown(run)
    assert not b.on_gpu
    comp = merge_kernel_intervals(pd.DataFrame({"ts": [10, 20, 70], "dur": [30, 5, 20]}))
    compute_us = float(comp.end.sum() - comp.ts.sum())
    assert b.compute_s == pytest.approx(compute_us * 1e-6)
    assert b.comm_s == pytest.approx((60 - 40) * 1e-6)  # gloo from 35 to 60, compute until 40
    assert b.overlap_pct == pytest.approx(100 * 5 / 25)
    assert b.span_s == pytest.approx(80e-6)
    assert b.idle_s == pytest.approx((80 - 70) * 1e-6)


@pytest.mark.parametrize("keep", [True])
def test_per_iteration_rows_cover_each_step(keep):
    run = read_run([TRACES / "hta-nccl-a100.rank0-of-2.json.gz"])
    rows = breakdown(run, per_iteration=keep)
    steps = [r for r in rows if r.iteration >= 0]
    assert [r.iteration for r in steps] == [n for n, _, _ in run.iterations[0]]
    for r in steps:
        assert r.compute_s + r.comm_s + r.memory_s + r.other_s + r.idle_s == pytest.approx(r.span_s, rel=1e-9)
        assert r.events > 0


def test_hta_scope_drops_the_last_step():
    """HTA counts the GPU events launched before the last ProfilerStep starts."""
    run = read_run([TRACES / "hta-nccl-a100.rank0-of-2.json.gz"])
    (whole,) = breakdown(run)
    steps = run.iterations[0]
    ev = run.events
    launched_before = ev.on_gpu & (ev.launch_start_s < steps[-1][1])
    assert whole.events == int(launched_before.sum())


def _synthetic_trace(steps: int, seed: int) -> dict:
    """A rank's trace written as Kineto writes one: launches on the host inside ProfilerSteps,
    kernels on three streams (GEMMs, NCCL all-reduces overlapping them, memcpy, a kernel
    with "Sync" in its name, which HTA types as other), cuda_sync events (a stream's and
    the context's) and Triton launches (host ops with a stream argument)."""
    rng = np.random.default_rng(seed)
    events, corr, t = [], 100, 1_000.0
    names = ["sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32", "ncclKernel_AllReduce_RING_LL_Sum_float",
             "Memcpy DtoD (Device -> Device)", "void at::native::elementwise_kernel<4>", "custom_SyncKernel"]
    cats = ["kernel", "kernel", "gpu_memcpy", "kernel", "kernel"]
    streams = [7, 20, 7, 7, 24]
    for n in range(steps):
        start = t
        for _ in range(40):
            k = int(rng.integers(0, len(names)))
            launch = t + rng.uniform(1, 5)
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": round(launch, 3), "dur": 3.5, "args": {"correlation": corr}})
            gpu_start = launch + rng.uniform(2, 60)
            events.append({"ph": "X", "cat": cats[k], "name": names[k], "pid": 0, "tid": streams[k],
                           "ts": round(gpu_start, 3), "dur": round(float(rng.uniform(0.5, 80)), 3),
                           "args": {"stream": streams[k], "correlation": corr, "device": 0}})
            if k == 3:
                events.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7,
                               "ts": round(gpu_start + 1, 3), "dur": 4.0,
                               "args": {"stream": 7, "correlation": corr + 1, "device": 0}})
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1,
                               "tid": 1, "ts": round(launch + 4, 3), "dur": 5.0, "args": {"correlation": corr + 1}})
            if k == 0 and rng.uniform() < 0.3:
                # Inductor's Triton launch: a host op that records the stream it launches on
                events.append({"ph": "X", "cat": "cpu_op", "name": "triton_poi_fused_add_0", "pid": 1, "tid": 1,
                               "ts": round(launch - 1, 3), "dur": 12.0, "args": {"stream": 7, "External id": corr}})
            corr += 2
            t = launch + float(rng.uniform(10, 120))
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n + 1}", "pid": 1, "tid": 1,
                       "ts": start, "dur": round(t - start + 1, 3), "args": {}})
        t += 2
    events.append({"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "pid": 0, "tid": 7, "ts": t + 50,
                   "dur": 3.0, "args": {"stream": -1, "correlation": corr, "device": 0}})
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
            "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108}],
            "traceEvents": events}


@pytest.mark.parametrize("steps", [1, 3])
def test_synthetic_trace_agrees_with_hta(steps, tmp_path):
    """One step (HTA counts every event with a stream) and three (those launched before the
    last step starts), with sync events and a Sync-named kernel."""
    folder = tmp_path / "hta"
    folder.mkdir()
    f = folder / "rank0.json"
    f.write_text(json.dumps(_synthetic_trace(steps, seed=steps)))
    theirs = hta_numbers(folder)[0]
    (b,) = breakdown(read_run([f]))
    assert pct(b.idle_s, b.span_s) == pytest.approx(theirs["idle"], abs=TOLERANCE_PP)
    assert pct(b.compute_s, b.span_s) == pytest.approx(theirs["compute"], abs=TOLERANCE_PP)
    assert pct(b.non_compute_s, b.span_s) == pytest.approx(theirs["non_compute"], abs=TOLERANCE_PP)
    assert b.overlap_pct == pytest.approx(theirs["overlap"], abs=TOLERANCE_PP)
    assert b.other_s > 0
