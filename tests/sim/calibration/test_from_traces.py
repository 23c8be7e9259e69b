"""Calibration from measured ring traces: spans made by a known model give that model back,
and held-out runs are predicted by each profile with the errors worked out by hand."""

import json

import pytest

from sim.calibration.calibrate import calibrate
from sim.calibration.from_traces import calibrate_from_traces, compute_points, holdout
from sim.calibration.validation import Case
from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.scenario.config import Scenario, Workload, scenario_from_config
from sim.trace.format import Trace
from sim.trace.metrics import compute_metrics
from tests.sim.calibration.test_calibrate import BW, DIAG_RATE, LATENCY, OVERHEAD, RATE, bench


def known_profile(compute_factor: float = 1.0):
    """The synthetic bench's models with no contention (every span is its model's time),
    every block `compute_factor` times as long."""
    b = bench(slowdown=1.0)
    b["device"]["kind"] = "cuda"
    b["concurrency"] = []
    for e in b["compute"]:
        e["time_s"] = [compute_factor * t for t in e["time_s"]]
    p = calibrate(b)
    assert not p.contention.active
    return p


def measured(scenario: Scenario, profile) -> Trace:
    """What the kernel would record if the hardware were exactly `profile`."""
    t = simulate(scenario, profile)
    return Trace("measured", t.n_gpus, t.columns, config=json.loads(json.dumps(t.config)),
                 hardware={"kind": "measured", "device": "test device", "backend": "gloo", "torch": "2.13.0",
                           "threads_per_rank": 1})


def case(seq, layout="zigzag", n=2, causal=True):
    return Scenario(workload=Workload(seq=seq, heads=8, kv_heads=8, head_dim=64, dtype="fp32", causal=causal),
                    n_gpus=n, layout=layout)


def test_the_traces_of_a_known_model_give_it_back():
    truth = known_profile()
    runs = [(measured(case(s, layout, causal=causal), truth), f"{s}-{layout}")
            for s in (2048, 4096) for layout, causal in (("zigzag", True), ("contiguous", False))]
    p = calibrate_from_traces(runs)
    full, diag = p.groups[("fp32", "full", "fwd")], p.groups[("fp32", "diagonal", "fwd")]
    assert full.overhead_s == pytest.approx(OVERHEAD) and full.flops_per_s == pytest.approx(RATE)
    assert diag.flops_per_s == pytest.approx(DIAG_RATE)
    # two K/V sizes, 2 x 1024 and 2 x 2048 tokens x 8 heads x 64 x 4 bytes: alpha and beta
    assert p.link.latency_s == pytest.approx(LATENCY) and p.link.bandwidth_bytes_per_s == pytest.approx(BW)
    assert not p.contention.active
    assert p.measured_on["device"] == "test device" and p.measured_on["kind"] == "cpu"
    assert p.report["cases"] == {"ring/contiguous/full/gpus2/seq2048/fwd": 1, "ring/contiguous/full/gpus2/seq4096/fwd": 1,
                                 "ring/zigzag/causal/gpus2/seq2048/fwd": 1, "ring/zigzag/causal/gpus2/seq4096/fwd": 1}


def test_compute_points_take_the_mask_from_the_schedule():
    pts = compute_points(measured(case(2048), known_profile()), "t")
    # zigzag, 2 ranks, chunks of 512: step 0 holds two causal diagonals and one dense chunk
    # pair, step 1 two dense chunk pairs (rank 0: chunk 3 against chunks 1 and 2)
    assert sorted((p["mask"], p["flops"]) for p in pts) == sorted(
        [("diagonal", 4 * 64 * 8 * (2 * 512 * 513 // 2 + 512 * 512))] * 2 + [("full", 4 * 64 * 8 * 2 * 512 * 512)] * 2)
    # each a call on the workload's 8 heads of 64, whatever its mask and extent
    assert {(p["heads"], p["head_dim"]) for p in pts} == {(8, 64)}


def test_held_out_runs_are_predicted_by_each_profile():
    truth = known_profile()
    fit_on = [(measured(case(s), truth), str(s)) for s in (2048, 4096)]
    p = calibrate_from_traces(fit_on)
    slow = known_profile(2.0)                       # every block twice as long
    held = [(measured(case(6144, "striped", 3), truth), "a"), (measured(case(6144, "striped", 3), truth), "b")]
    r = holdout(held, {"traces": p, "compare": slow})
    (row,) = r["cases"]
    assert row["key"] == "ring/striped/causal/gpus3/seq6144/fwd" and row["repeats"] == 2
    truth_makespan = compute_metrics(simulate(case(6144, "striped", 3), truth)).makespan_s
    assert row["measured_s"] == pytest.approx(truth_makespan)
    assert row["traces"]["error"] == pytest.approx(0, abs=1e-9)
    slow_makespan = compute_metrics(simulate(case(6144, "striped", 3), slow)).makespan_s
    assert row["compare"]["error"] == pytest.approx(slow_makespan / truth_makespan - 1)
    assert row["compare"]["error"] > 0.5
    assert r["better"] == "traces" and r["summary"]["traces"]["within_10pct"] == 1


def spread_profile():
    """The known model on a host with a measured spread of speeds (per run and per block),
    as a CPU profile from `hw bench` keeps it: a play seeded with it differs from the
    mean-rate one."""
    import dataclasses

    from sim.hardware.contention import Contention, Host

    host = Host(cores=4, threads_per_rank=1, spread=((1.0, 0.0, 0.05), (2.0, 0.1, 0.05), (3.0, 0.2, 0.1)))
    return dataclasses.replace(known_profile(), contention=Contention(host=host))


def test_held_out_runs_are_predicted_as_the_validation_predicts_them():
    """With replays, a profile that kept its host's spread predicts a held-out case by the
    median of that many plays seeded 0..N-1 (simulated here one by one); one fitted to
    traces has no spread and plays once, at the mean rate."""
    import statistics

    truth = known_profile()
    fit_on = [(measured(case(s), truth), str(s)) for s in (2048, 4096)]
    p = calibrate_from_traces(fit_on)
    spread = spread_profile()
    sc = case(6144, "striped", 3)
    held = [(measured(sc, truth), "a"), (measured(sc, truth), "b")]
    r = holdout(held, {"traces": p, "compare": spread}, replays=5)
    (row,) = r["cases"]
    median_of_plays = statistics.median(simulate(sc, spread, jitter=seed).makespan_s for seed in range(5))
    assert row["compare"]["predicted_s"] == pytest.approx(median_of_plays)
    mean_rate = simulate(sc, spread).makespan_s
    assert row["compare"]["predicted_s"] != pytest.approx(mean_rate, rel=1e-6)
    assert row["traces"]["error"] == pytest.approx(0, abs=1e-9)
    assert r["summary"]["compare"]["plays"] == 5 and r["summary"]["traces"]["plays"] == 1
    once = holdout(held, {"compare": spread})
    assert once["cases"][0]["compare"]["predicted_s"] == pytest.approx(mean_rate)
    assert once["summary"]["compare"]["plays"] == 1


def test_traces_that_are_not_measured_or_not_of_their_configuration_are_refused():
    truth = known_profile()
    with pytest.raises(RingsimError, match="simulated trace"):
        calibrate_from_traces([(simulate(case(2048), truth), "sim.json")])
    t = measured(case(2048), truth)
    t.config["workload"]["seq"] = 4096          # the header no longer describes the spans
    with pytest.raises(RingsimError, match="not a trace of that configuration"):
        compute_points(t, "t.json")
    bad = measured(case(2048), truth)
    bad.config["workload"]["heads"] = 7
    with pytest.raises(RingsimError, match="configuration"):
        compute_points(bad, "t.json")
    other = measured(case(2048), truth)
    other.hardware["device"] = "another device"
    with pytest.raises(RingsimError, match="several devices"):
        calibrate_from_traces([(measured(case(2048), truth), "a"), (other, "b")])


def test_scenario_and_key_of_a_header():
    sc = case(3072, "striped", 3)
    config = simulate(sc, known_profile()).config
    assert scenario_from_config(config).describe() == sc.describe()
    assert Case.from_config(config).key == "ring/striped/causal/gpus3/seq3072/fwd"
    with pytest.raises(RingsimError, match="no usable configuration"):
        scenario_from_config({"n_gpus": 2})
