"""A trace recorded here with torch.profiler on the CPU (no GPU): torch's SDPA forward and
backward and a matmul over three ProfilerSteps. The reader finds the steps, the CPU
attention and GEMM ops with their shapes, and the breakdown covers the host operators."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.profiler.breakdown import breakdown, has_attention
from sim.profiler.reader import read_run

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    from torch.profiler import ProfilerActivity, profile, schedule

    out = tmp_path_factory.mktemp("cpu-trace") / "rank0.json"
    q = torch.randn(1, 2, 64, 16, requires_grad=True)
    k = torch.randn(1, 2, 64, 16, requires_grad=True)
    v = torch.randn(1, 2, 64, 16, requires_grad=True)
    w = torch.randn(16, 16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(4):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            (o @ w).sum().backward()
            prof.step()
    return out


def test_cpu_trace_steps_ops_and_shapes(cpu_trace):
    run = read_run([cpu_trace])
    assert run.ranks == (0,) and run.devices == {0: {}}
    steps = [n for n, _, _ in run.iterations[0]]
    assert len(steps) == 3 and steps == sorted(steps)
    ev = run.events
    assert not ev.on_gpu.any()
    fwd = ev.kind == "cpu_attention_fwd"
    bwd = ev.kind == "cpu_attention_bwd"
    assert fwd.any() and bwd.any() and has_attention(run)
    # each step holds one forward and one backward of the SDPA op itself
    flash = ev.name == "aten::_scaled_dot_product_flash_attention_for_cpu"
    if flash.any():
        assert sorted(ev.iteration[flash].tolist()) == steps
        dims = json.loads(ev.input_dims[np.flatnonzero(flash)[0]])
        assert dims[0] == [1, 2, 64, 16]
    assert (ev.kind == "cpu_gemm").any()


def test_cpu_trace_breakdown_is_of_host_operators(cpu_trace):
    run = read_run([cpu_trace])
    rows = breakdown(run, per_iteration=True)
    whole = rows[0]
    assert not whole.on_gpu and whole.compute_s > 0 and whole.comm_s == 0 and whole.overlap_pct is None
    for r in rows:
        assert r.compute_s + r.comm_s + r.memory_s + r.other_s + r.idle_s == pytest.approx(r.span_s, rel=1e-9)
