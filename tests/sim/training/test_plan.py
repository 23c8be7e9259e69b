"""The whole-step planner's first K (sim.training.plan.plan_steps with `top`) against the whole
plan, every split timed: the same rows, and bounds that are bounds."""

import pytest

from sim.hardware.cluster import Hardware
from sim.scenario.models import model_preset
from sim.training.plan import MARGIN, not_ranked_line, plan_steps
from sim.training.step import (
    Parallel,
    StepRequest,
    _attention_s,
    attention_bound_s,
    attention_memory_bytes,
    simulate_step,
    step_bound_s,
    step_memory,
    step_parts,
)

L8B = model_preset("llama3-8b")
L70B = model_preset("llama3-70b")
SPLIT = ("tp", "cp", "pp", "dp", "zero", "recompute", "fp8", "interleave", "scheme", "layout", "tp_overlap")


def dgx(nodes: int) -> Hardware:
    from sim.planning.plan import request_from
    from sim.training.plan import request_hardware

    return request_hardware(request_from(L8B, seq="8k", nodes=nodes, gpus_per_node=8, cluster="dgx-h100"))[0]


@pytest.fixture(scope="module")
def whole():
    """Llama 3 8B at 8k tokens, 2M a step, on 2 nodes: every split timed."""
    return plan_steps(L8B, 8192, 1 << 21, dgx(2), 16)


@pytest.mark.parametrize("top", [1, 4, 30])
def test_the_first_k_are_the_whole_plans_first_k(whole, top):
    part = plan_steps(L8B, 8192, 1 << 21, dgx(2), 16, top=top)
    assert part.candidates == whole.candidates[:top]
    assert (part.considered, part.refused, part.skipped, part.fitting) == (
        whole.considered, whole.refused, whole.skipped, whole.fitting)
    assert len(part.candidates) + len(part.not_ranked) + part.refused + part.skipped == part.considered
    rows = {tuple(c["parallel"][k] for k in SPLIT): c for c in whole.candidates}
    first = {tuple(c["parallel"][k] for k in SPLIT) for c in whole.candidates[:top]}
    assert part.not_ranked and part.bar_s == whole.candidates[top - 1]["step_s"]
    for c in part.not_ranked:
        key = tuple(c["parallel"][k] for k in SPLIT)
        assert key not in first
        assert c["fits"] == rows[key]["fits"]
        if c["step_at_least_s"] is not None:
            assert c["step_at_least_s"] <= rows[key]["step_s"] * (1 + MARGIN)
            # a bound prunes only above the bar; a split timed behind may tie it (ranked after, by its order)
            assert (c["step_at_least_s"] >= part.bar_s if c["timed"] else c["step_at_least_s"] > part.bar_s) \
                or not c["fits"]
    assert part.timed < whole.timed
    line = not_ranked_line(part, top)
    assert line.startswith(f"not ranked: {len(part.not_ranked):,} splits that cannot be among the first {top} (")


def test_without_top_every_split_is_timed_and_none_is_left_unranked(whole):
    assert whole.not_ranked == [] and whole.bar_s is None
    assert whole.timed == len(whole.candidates) == whole.considered - whole.refused - whole.skipped
    assert whole.fitting == sum(c["fits"] for c in whole.candidates)


def test_where_few_fit_the_first_k_go_on_with_those_that_do_not():
    hw = dgx(1)
    whole = plan_steps(L70B, 131072, 1 << 20, hw, 8)
    fit = sum(c["fits"] for c in whole.candidates)
    assert fit < 5 < len(whole.candidates)
    part = plan_steps(L70B, 131072, 1 << 20, hw, 8, top=5)
    assert part.candidates == whole.candidates[:5]
    assert not part.candidates[-1]["fits"]


def test_every_splits_bounds_are_at_most_its_step(whole):
    hw = dgx(2)
    for c in whole.candidates:
        par = Parallel(**{k: c["parallel"][k] for k in SPLIT})
        req = StepRequest(model=L8B, seq=8192, global_batch=1 << 21, parallel=par, hardware=hw)
        assert step_bound_s(req) <= c["step_s"] * (1 + MARGIN)
        parts = step_parts(req)
        assert parts.bound_s() <= c["step_s"] * (1 + MARGIN)
        # the memory read before the attention is simulated is the step's
        assert step_memory(req) == c["memory"]


@pytest.mark.parametrize("tp, cp, scheme", [(1, 2, "ring"), (2, 4, "ring"), (4, 4, "allgather"), (8, 8, "ring"),
                                            (1, 16, "allgather"), (2, 1, "ring")])
def test_attentions_bound_is_at_most_its_simulated_makespan(tp, cp, scheme):
    req = StepRequest(model=L70B, seq=131072, global_batch=131072, parallel=Parallel(tp=tp, cp=cp, scheme=scheme),
                      hardware=dgx(8))
    from sim.training import step

    step._ATTENTION.clear()                       # the memory read first, from the memory model alone
    memory = attention_memory_bytes(req)
    for pass_ in ("fwd", "bwd"):
        makespan, _ = _attention_s(req, pass_)
        bound = attention_bound_s(req, pass_)
        assert 0 < bound <= makespan
    # the working memory a step counts is the forward's, read without simulating it
    assert memory == _attention_s(req, "fwd")[1]


def test_a_step_from_its_parts_is_the_simulated_step():
    par = Parallel(tp=2, cp=2, pp=4, dp=2, interleave=2)
    req = StepRequest(model=L8B, seq=8192, global_batch=64 * 8192, parallel=par, hardware=dgx(2))
    a, b = simulate_step(req), step_parts(req).step()
    assert a.to_dict() == b.to_dict()


@pytest.mark.parametrize("slower, stands", [(1.0, "step.fastest"), (1.03, "step.tie"), (1.049, "step.tie"),
                                            (1.06, "step.slower")])
def test_a_split_within_the_models_error_of_the_fastest_is_a_tie(slower, stands):
    """The step planner ties splits as the attention planner ties candidates: within
    sim.planning.plan.TIE_WITHIN (the kernel model's error), not a closer margin of its own."""
    from sim.planning.plan import TIE_WITHIN
    from sim.training.plan import _why

    best = {"fits": True, "tokens_per_s_per_gpu": 1000.0, "step_s": 1.0, "breakdown": {"gemm_s": 1.0}}
    c = best if slower == 1.0 else {**best, "tokens_per_s_per_gpu": 1000.0 / slower}
    first = _why(c, best, limit=80e9)[0]
    assert first["clause"] == stands
    if stands == "step.tie":
        assert first["within"] == TIE_WITHIN
    if stands == "step.slower":
        assert first["ratio"] == pytest.approx(slower)
