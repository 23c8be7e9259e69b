"""run_local end to end, its measured trace, and what happens when a rank fails."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hw.config import RunConfig
from hw.launch import run_configs, run_local
from sim.errors import RingsimError
from sim.scenario.config import Scenario, Workload
from sim.schemes.ring import peak_memory_bytes
from sim.trace.format import Trace
from tests.hw.conftest import max_err, reference_attention
from tests.hw.test_ring import check_trace_structure

pytestmark = pytest.mark.slow


def test_run_local_matches_attention_and_records_a_measured_trace():
    g = torch.Generator().manual_seed(7)
    q, dout = (torch.randn(2, 24, 4, 8, generator=g) for _ in range(2))
    k, v = (torch.randn(2, 24, 2, 8, generator=g) for _ in range(2))
    res = run_local(q, k, v, n_gpus=3, layout="zigzag", causal=True, dout=dout, repeats=2)
    want = reference_attention(q, k, v, True, dout)
    assert max_err(res.out, want[0]) <= 1e-5
    for got, w in zip((res.dq, res.dk, res.dv), want[1:]):
        assert got.shape == w.shape and max_err(got, w) <= 1e-4
    assert len(res.traces) == 2 and res.trace is res.traces[-1]
    t = Trace.from_dict(res.trace.to_dict())   # survives its own validation
    assert t.source == "measured" and t.n_gpus == 3
    wl = Workload(batch=2, seq=24, heads=4, kv_heads=2, head_dim=8, dtype="fp32", causal=True,
                  pass_="fwdbwd")
    assert t.config == Scenario(workload=wl, n_gpus=3, layout="zigzag").describe()
    hw = t.hardware
    assert hw["kind"] == "measured" and hw["backend"] == "gloo" and hw["n_gpus"] == 3
    assert hw["torch"] == torch.__version__ and hw["threads_per_rank"] >= 1 and hw["device"]
    assert t.meta["peak_mem_bytes"] == [peak_memory_bytes(wl, 8, 3)["total"]] * 3
    check_trace_structure(t, "zigzag", True, ["fwd", "bwd"], 24, batch=2, heads=4, head_dim=8)
    # one time axis: every receive ends after its send was posted, give or take the
    # alignment skew, and the run starts near zero on every rank
    for r in range(3):
        first = min(s.start_s for s in t.spans if s.rank == r)
        assert -0.05 < first < 0.5


def test_one_gpu_runs_in_process():
    q = torch.randn(1, 8, 2, 4)
    res = run_local(q, q, q, n_gpus=1, layout="striped", causal=True)
    assert max_err(res.out, reference_attention(q, q, q, True)[0]) <= 1e-5
    assert res.dq is None and [s.step for s in res.trace.spans if s.stream == "compute"] == [0]


def test_bad_inputs_fail_before_any_process_starts():
    q = torch.randn(1, 10, 2, 4)
    with pytest.raises(RingsimError, match="multiple of 4"):
        run_local(q, q, q, n_gpus=2, layout="zigzag", causal=True)
    with pytest.raises(RingsimError, match="fp32, bf16 or fp16"):
        run_local(q.double(), q.double(), q.double(), n_gpus=2, layout="striped", causal=True)


def test_run_configs_shares_one_group_per_gpu_count():
    def cfg(layout, n_gpus, pass_="fwd"):
        return RunConfig(workload=Workload(seq=24, heads=2, kv_heads=1, head_dim=8, dtype="fp32",
                                           pass_=pass_),
                         n_gpus=n_gpus, layout=layout, warmup=0, repeats=2)
    cfgs = [cfg("zigzag", 2), cfg("striped", 3), cfg("contiguous", 2, "fwdbwd")]
    done = []
    out = run_configs(cfgs, on_done=done.append)
    assert sorted(done) == [0, 1, 2]
    for c, (results, traces) in zip(cfgs, out):
        assert len(results) == c.n_gpus and len(traces) == 2
        assert traces[0].config == c.describe()
        phases = ["fwd", "bwd"] if c.workload.pass_ == "fwdbwd" else ["fwd"]
        check_trace_structure(traces[0], c.layout, True, phases, 24, batch=1, heads=2, head_dim=8)


def test_interleaved_configurations_run_repeat_by_repeat_and_give_the_same_traces():
    """With interleave, a group sets every configuration up, runs each one's warm-up, then
    repeat i of every configuration before repeat i + 1 of any; each still gets its own
    traces, as many as its repeats, of the right structure."""
    import types

    import hw.runner
    from hw.launch import _run_many_worker

    def cfg(layout, pass_="fwd", repeats=2, warmup=1):
        return RunConfig(workload=Workload(seq=24, heads=2, kv_heads=1, head_dim=8, dtype="fp32", pass_=pass_),
                         n_gpus=1, layout=layout, warmup=warmup, repeats=repeats)
    cfgs = [cfg("zigzag"), cfg("striped", "fwdbwd", repeats=3), cfg("contiguous", warmup=0)]
    order = []
    iteration = hw.runner.RankRun.iteration

    def recorded(self, it):
        order.append((self.cfg.layout, it))
        iteration(self, it)
    ctx = types.SimpleNamespace(rank=0, n_gpus=1, group=None, barrier=lambda: None, store=None)
    try:
        hw.runner.RankRun.iteration = recorded
        results = _run_many_worker(ctx, cfgs, False, True)
    finally:
        hw.runner.RankRun.iteration = iteration
    assert order == [("zigzag", 0), ("striped", 0),                                   # warm-ups
                     ("zigzag", 1), ("striped", 1), ("contiguous", 0),                # repeat 0
                     ("zigzag", 2), ("striped", 2), ("contiguous", 1),                # repeat 1
                     ("striped", 3)]                                                  # repeat 2
    assert [len(r.spans) for r in results] == [2, 3, 2]
    # on real process groups: the same structure as run one after another
    two = [dataclasses.replace(c, n_gpus=2, repeats=2) for c in cfgs]
    for c, (ranks, traces) in zip(two, run_configs(two, interleave=True)):
        assert len(ranks) == 2 and len(traces) == 2 and traces[0].config == c.describe()
        phases = ["fwd", "bwd"] if c.workload.pass_ == "fwdbwd" else ["fwd"]
        check_trace_structure(traces[0], c.layout, True, phases, 24, batch=1, heads=2, head_dim=8)
