import pytest
import torch

from hw.config import RunConfig
from hw.reporting import trace_paths
from hw.runner import RankResult, build_traces, make_inputs
from sim.scenario.config import Workload
from sim.trace.format import Span


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
    traces = build_traces(cfg(n_gpus=2), [RankResult(r, [spans[r]], info) for r in (1, 0)])
    t = traces[0]
    idle = [s for s in t.spans if s.stream == "wait"]
    assert [(s.rank, s.kind, s.start_s, s.end_s) for s in idle] == [(0, "idle", 1.0, 3.0)]
    assert t.makespan_s == 3.0 and t.meta["peak_mem_bytes"] == [1, 1]


def test_trace_paths_one_per_repeat():
    assert trace_paths("t.json", 1) == ["t.json"]
    assert trace_paths("t.json", 2) == ["t-r0.json", "t-r1.json"]
    assert trace_paths("run{i}.json", 2) == ["run0.json", "run1.json"]


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("n_gpus", [1, 2, 3, 4])
def test_a_rank_makes_exactly_its_shard_of_the_inputs(layout, n_gpus):
    from hw.layouts import shard
    from hw.runner import make_rank_inputs

    wl = Workload(batch=2, seq=48, heads=4, kv_heads=2, head_dim=8, dtype="fp32", pass_="fwdbwd")
    c = RunConfig(workload=wl, n_gpus=n_gpus, layout=layout, seed=5)
    full = make_inputs(c)
    for r in range(n_gpus):
        mine = make_rank_inputs(c, r)
        for got, whole in zip((mine.q, mine.k, mine.v, mine.dout), (full.q, full.k, full.v, full.dout)):
            assert torch.equal(got, shard(whole, layout, n_gpus, r))


def test_a_rank_never_makes_rows_beyond_its_shard(monkeypatch):
    from hw import runner

    asked = []
    real = runner.normal_rows

    def spy(seed, stream, rows, width, device="cpu"):
        asked.append(len(rows))
        return real(seed, stream, rows, width, device)
    monkeypatch.setattr(runner, "normal_rows", spy)
    c = cfg(n_gpus=4, layout="striped", pass_="fwdbwd")
    runner.make_rank_inputs(c, 3)
    assert asked == [c.workload.batch * c.tokens_per_rank] * 4


def test_inputs_are_standard_normal_and_independent_across_tensors():
    from hw.runner import normal_rows

    rows = torch.arange(4096)
    a, b = normal_rows(0, 0, rows, 64), normal_rows(0, 1, rows, 64)
    for x in (a, b):
        # 262144 samples: the mean's standard error is 0.002, the variance's 0.003
        assert abs(x.mean().item()) < 0.01 and abs(x.var().item() - 1.0) < 0.015
        assert abs((x.abs() < 1).float().mean().item() - 0.6827) < 0.005   # within one sigma
    assert abs(torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1].item()) < 0.01
    assert torch.equal(normal_rows(0, 0, rows[1000:1010], 64), a[1000:1010])
    assert not torch.equal(normal_rows(1, 0, rows[:10], 64), a[:10])


def test_a_measured_wait_is_split_as_the_simulator_splits_it():
    """Rank 1 waits [1, 5] for K/V from rank 0: it posted its receive at 0, but rank 0
    posted the send only at 2, and the block arrived at 4. By the simulator's definitions:
    idle [1, 2] (the transfer had not started), exposed [2, 4], idle [4, 5]; a wait on
    nothing in flight is idle."""
    info = {"device": "cpu", "threads_per_rank": 1, "block_impl": "x", "peak_mem_bytes": 1,
            "clock": "perf_counter"}
    rank0 = [Span(0, "compute", "fwd", 0, 0.0, 2.0), Span(0, "send", "kv", 0, 2.0, 4.0, bytes=8, peer=1),
             Span(0, "wait", "kv", 1, 2.0, 4.0), Span(0, "compute", "fwd", 1, 4.0, 6.0)]
    rank1 = [Span(1, "compute", "fwd", 0, 0.0, 1.0), Span(1, "recv", "kv", 0, 0.0, 4.0, bytes=8, peer=0),
             Span(1, "wait", "kv", 1, 1.0, 5.0), Span(1, "compute", "fwd", 1, 5.0, 6.0)]
    needs = [{2: [1]}, {2: [1]}]
    results = [RankResult(r, [s], info, needs=[needs[r]]) for r, s in ((0, rank0), (1, rank1))]
    t = build_traces(cfg(n_gpus=2), results)[0]
    waits = [(s.rank, s.kind, s.start_s, s.end_s) for s in t.spans if s.stream == "wait"]
    assert waits == [(0, "kv", 2.0, 4.0), (1, "idle", 1.0, 2.0), (1, "kv", 2.0, 4.0), (1, "idle", 4.0, 5.0)]
    # the trace holds columns, in the simulator's record order
    assert [s.rank for s in t.spans] == sorted(s.rank for s in t.spans)
    assert t.columns.start_s.dtype.kind == "f" and len(t.columns) == len(t.spans)


def test_a_measured_wait_is_exposed_while_its_transfer_flies_and_idle_once_it_landed():
    """Rank 1 waits [1, 3] for the K/V block rank 0 sends: both ends had posted it by 0.5
    (rank 1's receive) and it arrived at 3, so the whole wait is exposed communication.
    Rank 0 waits [2, 2.5] on the block from rank 1, which arrived at 1.5: nothing it
    waited on was in flight, so the wait is idle; it ends at 3.5 and idles to rank 1's
    end at 4."""
    info = {"device": "cpu", "threads_per_rank": 1, "block_impl": "x", "peak_mem_bytes": 1,
            "clock": "perf_counter"}
    rank0 = [Span(0, "compute", "fwd", 0, 0.0, 2.0), Span(0, "send", "kv", 0, 0.0, 3.0, bytes=8, peer=1),
             Span(0, "recv", "kv", 0, 0.0, 1.5, bytes=8, peer=1), Span(0, "wait", "kv", 1, 2.0, 2.5),
             Span(0, "compute", "fwd", 1, 2.5, 3.5)]
    rank1 = [Span(1, "compute", "fwd", 0, 0.0, 1.0), Span(1, "send", "kv", 0, 0.5, 1.5, bytes=8, peer=0),
             Span(1, "recv", "kv", 0, 0.5, 3.0, bytes=8, peer=0), Span(1, "wait", "kv", 1, 1.0, 3.0),
             Span(1, "compute", "fwd", 1, 3.0, 4.0)]
    needs = [{3: [2]}, {3: [2]}]            # each wait on its rank's receive
    results = [RankResult(r, [s], info, needs=[needs[r]]) for r, s in ((0, rank0), (1, rank1))]
    t = build_traces(cfg(n_gpus=2), results)[0]
    waits = [(s.rank, s.kind, s.start_s, s.end_s) for s in t.spans if s.stream == "wait"]
    assert waits == [(0, "idle", 2.0, 2.5), (0, "idle", 3.5, 4.0), (1, "kv", 1.0, 3.0)]
