"""sim.invariants against hand-made results: a result that breaks a bound (each checked
against the numbers it is made of) is stopped with one line naming the bound and the
configuration; one within its bounds passes unchanged."""

from __future__ import annotations

import math

import pytest

from sim.errors import RingsimError
from sim.invariants import (
    ACCEPTED_FIT_ERROR,
    RELATIVE_SLACK,
    ImpossibleResult,
    check_calibration,
    check_run,
    check_step,
)

GOOD = {"makespan_s": 2.0, "ideal_s": 1.5, "efficiency": 0.75, "peak_mem_bytes": 10,
        "ranks": [{"compute_s": 1.0, "idle_s": 0.0, "peak_mem_bytes": 10}]}


def test_a_result_within_its_bounds_passes():
    assert check_run(dict(GOOD), {"gpus": 8}) == GOOD
    # at the ideal exactly, and within float rounding of it
    at = {"makespan_s": 1.0, "ideal_s": 1.0 * (1 + RELATIVE_SLACK / 2), "efficiency": 1.0 + RELATIVE_SLACK / 2}
    check_run(at, {})


@pytest.mark.parametrize("change,says", [
    ({"makespan_s": 1.0, "ideal_s": 1.26, "efficiency": 1.26}, "below the ideal"),
    ({"efficiency": 1.26}, "efficiency"),
    ({"efficiency": 0.0}, "efficiency"),
    ({"peak_mem_bytes": 0}, "peak_mem_bytes"),
    ({"makespan_s": math.nan}, "not a finite number"),
    ({"makespan_s": math.inf, "ideal_s": 1.0}, "not a finite number"),
    ({"ranks": [{"compute_s": -1e-3}]}, "below 0"),
    ({"ranks": [{"peak_mem_bytes": -5}]}, "peak_mem_bytes"),
])
def test_a_broken_bound_stops_with_one_line_naming_it(change, says):
    with pytest.raises(ImpossibleResult, match=says) as e:
        check_run({**GOOD, **change}, {"scheme": "hybrid", "workload": {"head_dim": 96}})
    text = str(e.value)
    assert "\n" not in text and "ringsim bug" in text and "scheme=hybrid" in text and "head_dim=96" in text
    assert isinstance(e.value, RingsimError)        # the command line's one line and exit 2


def test_a_refused_row_holds_no_numbers_to_check():
    check_run({"scheme": "ulysses", "refused": "degree must divide the heads"}, {})
    check_run({"error": "ValueError: bad", "makespan_s": None}, {})


@pytest.mark.parametrize("mfu", [1.5, 0.0, -0.1, math.nan])
def test_a_step_s_mfu_lies_in_zero_to_one(mfu):
    with pytest.raises(ImpossibleResult, match="mfu"):
        check_step({"step_s": 1.0, "mfu": mfu, "palm_mfu": 0.5, "memory_bytes_per_gpu": 1e9}, {"model": "m"})
    check_step({"step_s": 1.0, "mfu": 0.5, "palm_mfu": 0.6, "memory_bytes_per_gpu": 1e9}, {"model": "m"})


def test_a_calibration_missing_its_own_data_is_refused_and_states_its_acceptance():
    report = {"compute": {"fp32/full/fwd": {"in_sample_fit": {"median_abs_rel": 0.05}}},
              "holdout": {"summary": {"compare": {"median_abs_rel": 9.0}}}}    # a validation, not the fit
    assert check_calibration(report, {})["acceptance"] == {"median_abs_rel_at_most": ACCEPTED_FIT_ERROR}
    with pytest.raises(RingsimError, match="misses its own data"):
        check_calibration({"link": {"one_way": {"residuals": {"median_abs_rel": 2.3e293}}}}, {})
    with pytest.raises(RingsimError, match="not a number"):
        check_calibration({"kernels": {"fa2": {"median_abs_rel": math.nan}}}, {})
