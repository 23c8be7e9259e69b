"""The pipeline played on the engine (sim.training.pipeline) against 1F1B's closed forms."""

import numpy as np
import pytest

from sim.trace.format import KIND_NAMES
from sim.trace.metrics import compute_metrics
from sim.training.pipeline import in_flight, pipeline_makespan, play_pipeline, program


@pytest.mark.parametrize("pp, m, v", [(2, 2, 1), (4, 8, 1), (4, 8, 2), (16, 32, 1), (16, 32, 4), (8, 8, 2), (1, 5, 1)])
def test_equal_stages_take_m_micro_batches_plus_the_bubble(pp, m, v):
    tf, tb = 1.0, 2.0
    makespan = compute_metrics(play_pipeline([tf] * pp, [tb] * pp, 0.0, m, v)).makespan_s
    assert makespan == pytest.approx(m * (tf + tb) + (pp - 1) * (tf + tb) / v, rel=1e-12)


def test_the_slowest_stage_sets_the_pace():
    # one stage twice as slow: m of its micro-batches, plus the others' share of the fill and drain
    fast, slow = [1.0, 1.0, 1.0], [1.0, 2.0, 1.0]
    a = compute_metrics(play_pipeline(fast, [2 * x for x in fast], 0.0, 6)).makespan_s
    b = compute_metrics(play_pipeline(slow, [2 * x for x in slow], 0.0, 6)).makespan_s
    assert a == pytest.approx(6 * 3 + 2 * 3)
    assert b >= 6 * (2 + 4) and b > a


def test_sends_lengthen_the_fill_and_the_drain():
    # two stages, one micro-batch: F0, send, F1, B1, send, B0
    t = compute_metrics(play_pipeline([1.0, 1.0], [2.0, 2.0], 0.25, 1)).makespan_s
    assert t == pytest.approx(1 + 0.25 + 1 + 2 + 0.25 + 2)


def test_megatrons_order_warms_up_then_alternates():
    order = program(4, 8)
    assert [x[0] for x in order[0][:5]] == ["F", "F", "F", "F", "B"]            # 3 warm-up forwards, then 1F1B
    assert [x[0] for x in order[3][:3]] == ["F", "B", "F"]                        # the last stage: none
    for stage in order:
        assert sorted((p, i) for p, _, i in stage) == sorted([("F", i) for i in range(8)] + [("B", i) for i in range(8)])
    # interleaved: every (chunk, micro-batch) forward and backward once per stage
    order = program(4, 8, 2)
    assert all(len(stage) == 2 * 8 * 2 for stage in order)
    assert {(c, i) for p, c, i in order[1] if p == "B"} == {(c, i) for c in range(2) for i in range(8)}


def test_the_trace_names_the_stages_and_their_sends():
    tr = play_pipeline([1.0] * 3, [2.0] * 3, 0.1, 4)
    c = tr.columns
    assert tr.n_gpus == 3
    sends = c.kind == KIND_NAMES.index("pp")
    assert sends.any() and set(c.kind[~sends].tolist()) <= {KIND_NAMES.index(k) for k in ("fwd", "bwd", "idle", "pp")}


@pytest.mark.parametrize("pp, m, v", [(4, 8, 1), (4, 2, 1), (16, 32, 1), (4, 8, 2), (16, 32, 2), (16, 32, 4), (1, 3, 1),
                                      (16, 16, 8), (8, 8, 4)])
def test_the_chunks_in_flight_follow_megatrons_warm_up(pp, m, v):
    # plain 1F1B: stage s holds PP - s micro-batches (at most m); interleaved, Megatron's
    # warm-up of 2 (PP - s - 1) + (v - 1) PP forwards plus the one before the first backward
    held = in_flight(pp, m, v)
    # the reference: each stage's program walked, a forward taking a chunk and a backward freeing one
    walked = []
    for order in program(pp, m, v):
        now = peak = 0
        for phase, _, _ in order:
            now += 1 if phase == "F" else -1
            peak = max(peak, now)
        walked.append(peak)
    assert list(held) == walked
    for s in range(pp):
        want = pp - s if v == 1 else 2 * (pp - s - 1) + (v - 1) * pp + 1
        assert held[s] == min(want, m * v)
    if v > 1 and (v + 1) * pp - 1 <= m * v:
        # so the first stage's activations grow by 1 + (PP - 1) / (PP v) (Korthikanti et al. 2022)
        assert held[0] / v / pp == pytest.approx(1 + (pp - 1) / (pp * v))


@pytest.mark.parametrize("pp, m, v, send", [(4, 8, 1, 0.0), (4, 8, 2, 0.3), (16, 32, 4, 0.05), (3, 2, 1, 1.5)])
def test_the_makespan_without_a_trace_is_the_traces(pp, m, v, send):
    # uneven stages, so the shape built once serves different times
    fwd = [1.0 + 0.25 * s for s in range(pp)]
    bwd = [2.0 + 0.5 * (s % 2) for s in range(pp)]
    for f, b in ((fwd, bwd), (bwd, fwd)):
        assert pipeline_makespan(f, b, send, m, v) == compute_metrics(play_pipeline(f, b, send, m, v)).makespan_s


@pytest.mark.parametrize("pp, m, v", [(1, 7, 1), (2, 4, 1), (4, 8, 2), (3, 6, 1), (4, 8, 4)])
def test_pipelines_played_together_are_each_the_trace_of_its_own(pp, m, v):
    # the reference: each pipeline's own trace (sim.engine.record), its makespan bit for bit
    from sim.training.pipeline import pipeline_makespans

    rng = np.random.default_rng(pp * 100 + m * 10 + v)
    f = rng.uniform(0.5, 2.0, size=(5, pp)).tolist()
    b = rng.uniform(1.0, 4.0, size=(5, pp)).tolist()
    send = [0.0, 0.01, 0.3, 0.0, 1e-6]
    together = pipeline_makespans(f, b, send, m, v)
    alone = [compute_metrics(play_pipeline(f[k], b[k], send[k], m, v)).makespan_s for k in range(5)]
    assert together == alone
    assert [pipeline_makespan(f[k], b[k], send[k], m, v) for k in range(5)] == alone


@pytest.mark.parametrize("pp, m, v", [(1, 5, 1), (2, 2, 1), (4, 8, 1), (4, 8, 2), (8, 16, 4), (5, 10, 1)])
def test_the_pipelines_bound_is_at_most_its_makespan_and_reached_without_a_bubble(pp, m, v):
    from sim.training.step import pipeline_bound_s

    rng = np.random.default_rng(pp + m + v)
    for _ in range(20):
        f, b = rng.uniform(0.1, 3.0, pp).tolist(), rng.uniform(0.1, 6.0, pp).tolist()
        send = float(rng.choice([0.0, 0.05, 0.5]))
        bound, played = pipeline_bound_s(f, b, send, m, v), pipeline_makespan(f, b, send, m, v)
        assert bound <= played * (1 + 1e-12)
    # equal stages and free sends: the bound is 1F1B's closed form, m (t_f + t_b) + (PP - 1) / v (t_f + t_b)
    assert pipeline_bound_s([1.0] * pp, [2.0] * pp, 0.0, m, v) == pytest.approx(m * 3 + (pp - 1) * 3 / v)
