"""Launch costs (sim.profiler.launch): on a synthetic Kineto trace whose launches, queueing and
gaps are set by construction, then on every vendored trace (tests/data/traces/README.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from sim.profiler.launch import host_floor_s, launch_costs
from sim.profiler.reader import read_run

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
VENDORED = {"megatron-tp8-a100": [TRACES / f"megatron-tp8-a100.rank{r}.json.gz" for r in range(8)],
            "hta-nccl-a100": [TRACES / "hta-nccl-a100.rank0-of-2.json.gz"],
            "tracelens-qwen0.5b-h100": [TRACES / "tracelens-qwen0.5b-h100.json.gz"],
            "tracelens-capture-mi300x": [TRACES / "tracelens-capture-mi300x.json.gz"]}
KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)"


def _synthetic(tmp_path: Path) -> tuple[Path, dict[str, list[float]]]:
    """Ten eager ops 100 µs apart, each launching one 20 µs kernel on an idle stream (7 µs from
    the call to the kernel), then a burst of ten ops 10 µs apart whose 50 µs kernels queue up
    and run 2 µs apart. Returns the file and the expected values in µs."""
    t0 = 1_000_000.0
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": t0,
               "dur": 5000.0, "args": {"External id": 1}}]
    want: dict[str, list[float]] = {k: [] for k in ("call", "gap_q", "gap_i", "op_idle", "issue", "l2s_idle")}
    ops = [(1000.0 + 100 * i, 10.0, 5.0) for i in range(10)] + [(3000.0 + 10 * j, 2.0, 3.0) for j in range(10)]
    prev_end, prev_launch = None, None
    for n, (op_t, launch_after, call) in enumerate(ops):
        launch = op_t + launch_after
        start = launch + 7.0 if prev_end is None or launch >= prev_end else prev_end + 2.0
        dur = 20.0 if n < 10 else 50.0
        corr = 100 + n
        events += [{"ph": "X", "cat": "cpu_op", "name": "aten::fill_", "pid": 1, "tid": 1, "ts": t0 + op_t,
                    "dur": 30.0 if n < 10 else 8.0, "args": {"External id": 10 + n}},
                   {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                    "ts": t0 + launch, "dur": call, "args": {"correlation": corr, "External id": 10 + n}},
                   {"ph": "X", "cat": "kernel", "name": KERNEL, "pid": 0, "tid": 7, "ts": t0 + start, "dur": dur,
                    "args": {"correlation": corr, "External id": 10 + n, "stream": 7, "device": 0}}]
        want["call"].append(call)
        idle = prev_end is None or launch >= prev_end
        if prev_end is not None:
            (want["gap_i"] if idle else want["gap_q"]).append(start - prev_end)
        if idle:
            want["op_idle"].append(start - op_t)
            want["l2s_idle"].append(start - launch)
        if prev_launch is not None:
            want["issue"].append(launch - prev_launch)
        prev_end, prev_launch = start + dur, launch
    trace = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
             "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108}],
             "traceEvents": events}
    path = tmp_path / "synthetic.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)
    return path, want


def _spread(values: list[float]) -> tuple[float, float, float]:
    p10, med, p90 = np.percentile(values, [10, 50, 90])
    return med, p10, p90


def test_a_synthetic_trace_gives_back_its_launches_gaps_and_intervals(tmp_path):
    path, want = _synthetic(tmp_path)
    c = launch_costs(read_run([str(path)]), "synthetic")
    assert c.kernels == 20
    for got, key in ((c.launch_call, "call"), (c.gap_queued, "gap_q"), (c.gap_idle, "gap_i"),
                     (c.op_to_start_idle, "op_idle"), (c.issue_interval, "issue"), (c.launch_to_start_idle, "l2s_idle")):
        assert got.count == len(want[key]), key
        assert (got.median_us, got.p10_us, got.p90_us) == pytest.approx(_spread(want[key]), abs=1e-3), key
    assert c.gap_queued.median_us == pytest.approx(2.0, abs=1e-3)
    assert c.gap_idle.p10_us == pytest.approx(80.0, abs=1e-3)
    assert host_floor_s(c, 1000) == pytest.approx((1000 * np.median(want["issue"]) + 7.0) * 1e-6, rel=1e-9)


@pytest.fixture(scope="module", params=list(VENDORED))
def vendored(request):
    return request.param, launch_costs(read_run([str(p) for p in VENDORED[request.param]], partial=True),
                                       request.param)


def test_every_vendored_trace_gives_physical_launch_costs(vendored):
    name, c = vendored
    assert c.kernels > 500, name
    # a queued kernel follows its predecessor within microseconds (NVIDIA's CUDA Graphs blog:
    # 3.8 µs a kernel back to back for a 2.9 µs kernel), never before it ends
    assert 0 <= c.gap_queued.median_us < 10, name
    assert 0 < c.launch_call.median_us < 50, name
    # an op starts before the launch it makes: from the op to the kernel is at least from the launch
    assert c.op_to_start_idle.median_us >= c.launch_to_start_idle.median_us, name
    assert c.gap_idle.median_us > c.gap_queued.median_us, name
    assert c.issue_interval.median_us > 0, name
