import torch

from hw.cli import trace_paths
from hw.config import RunConfig
from hw.runner import RankResult, build_traces, make_inputs
from sim.config import Workload
from sim.trace import Span


def cfg(**kw):
    wl = Workload(seq=16, heads=4, kv_heads=2, head_dim=8, dtype="bf16", pass_=kw.pop("pass_", "fwd"))
    return RunConfig(workload=wl, **kw)


def test_inputs_are_reproducible_from_the_seed():
    a, b, c = make_inputs(cfg(seed=3)), make_inputs(cfg(seed=3)), make_inputs(cfg(seed=4))
    assert all(torch.equal(x, y) for x, y in zip((a.q, a.k, a.v), (b.q, b.k, b.v)))
    assert not torch.equal(a.q, c.q)
    assert a.q.shape == (1, 16, 4, 8) and a.k.shape == (1, 16, 2, 8) and a.q.dtype == torch.bfloat16
    assert a.dout is None and make_inputs(cfg(pass_="fwdbwd")).dout.shape == a.q.shape


def test_traces_end_every_rank_with_idle_up_to_the_makespan():
    info = {"device": "cpu", "threads_per_rank": 1, "block_impl": "x", "peak_mem_bytes": 1,
            "clock": "perf_counter"}
    spans = [[Span(0, "compute", "fwd", 0, 0.0, 1.0)], [Span(1, "compute", "fwd", 0, 0.0, 3.0)]]
    traces = build_traces(cfg(world_size=2), [RankResult(r, [spans[r]], info) for r in (1, 0)])
    t = traces[0]
    idle = [s for s in t.spans if s.stream == "wait"]
    assert [(s.rank, s.kind, s.start_s, s.end_s) for s in idle] == [(0, "idle", 1.0, 3.0)]
    assert t.makespan_s == 3.0 and t.meta["peak_mem_bytes"] == [1, 1]


def test_trace_paths_one_per_repeat():
    assert trace_paths("t.json", 1) == ["t.json"]
    assert trace_paths("t.json", 2) == ["t-r0.json", "t-r1.json"]
    assert trace_paths("run{i}.json", 2) == ["run0.json", "run1.json"]
