"""Calibration recovers the parameters of synthetic measurements made from known models."""

import json
from pathlib import Path

import pytest

from sim.calibration.calibrate import calibrate, fit_line
from sim.cli.main import main
from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.hardware.profile import load_profile, profile_from_dict
from sim.scenario.config import Scenario, Workload
from sim.trace.metrics import compute_metrics

OVERHEAD, RATE, DIAG_RATE = 150e-6, 20e9, 12e9
LATENCY, BW = 80e-6, 1.2e9
CONCURRENCY = [(1, 1.0), (2, 1.1), (4, 2.6)]
RUNS = Path(__file__).resolve().parents[3] / "bench" / "results" / "calibration" / "cpu-2core"


def bench(slowdown=1.3, cpu_count=2, threads=1, kinds=("fwd",), noise=0.0):
    compute = []
    for kind in kinds:
        for mask, rate in (("full", RATE), ("diagonal", DIAG_RATE)):
            for c in (256, 512, 1024, 2048):
                flops = 4 * 64 * 8 * (c * c if mask == "full" else c * (c + 1) / 2) * (2.5 if kind == "bwd" else 1)
                t = OVERHEAD + flops / rate
                compute.append({"kind": kind, "dtype": "fp32", "mask": mask, "flops": flops,
                                "time_s": [t * (1 - noise), t, t * (1 + noise)], "median_s": t})
    transfer = []
    for b in (65536, 1 << 20, 1 << 24):
        transfer.append({"bytes": b, "direction": "both_ways", "time_s": [LATENCY + b / BW]})
        transfer.append({"bytes": b, "direction": "one_way", "time_s": [LATENCY / 2 + b / (2 * BW)]})
    interference = [{"compute_alone_s": [0.010], "compute_with_transfer_s": [0.010 * slowdown]}]
    concurrency = [{"processes": k, "time_s": [0.02 * f, 0.02 * f]} for k, f in CONCURRENCY]
    return {"format": "ringsim-hw-bench", "version": 1,
            "device": {"kind": "cpu", "name": "test cpu", "cpu_count": cpu_count, "threads_per_rank": threads},
            "compute": compute, "transfer": transfer, "interference": interference,
            "concurrency": concurrency}


def test_fit_line_recovers_a_line():
    a, b = fit_line([1, 2, 3, 4], [3.5, 5.5, 7.5, 9.5])
    assert (a, b) == (pytest.approx(1.5), pytest.approx(2.0))


def test_calibrate_recovers_compute_link_and_contention():
    p = calibrate(bench())
    full = p.groups[("fp32", "full", "fwd")]
    diag = p.groups[("fp32", "diagonal", "fwd")]
    assert full.overhead_s == pytest.approx(OVERHEAD) and full.flops_per_s == pytest.approx(RATE)
    assert diag.flops_per_s == pytest.approx(DIAG_RATE)
    assert p.link.latency_s == pytest.approx(LATENCY)
    assert p.link.bandwidth_bytes_per_s == pytest.approx(BW)
    assert p.report["link"]["one_way"]["bandwidth_bytes_per_s"] == pytest.approx(2 * BW)
    assert p.contention.slowdown_in_flight == pytest.approx(1.3)
    assert p.contention.compute_slots == 2
    assert p.contention.concurrency == (pytest.approx((1, 1.0)), pytest.approx((2, 1.1)), pytest.approx((4, 2.6)))
    assert p.contention.sharing_slowdown(3) == pytest.approx(1.85)
    assert p.contention.sharing_slowdown(6) == pytest.approx(4.1)   # along the last segment
    # exact data: both models predict held-out points well; the line exactly
    assert p.report["compute"]["chosen"]["held_out_median_abs_rel_fit"] == pytest.approx(0, abs=1e-9)
    assert p.compute_model == "fit"
    # a block between measured sizes, and the fallbacks
    flops = 4 * 64 * 8 * 700 * 700
    assert p.compute_time_s(flops, dtype="fp32", kind="fwd", mask="full", q_tokens=700,
                            kv_tokens=700) == pytest.approx(OVERHEAD + flops / RATE)
    assert p.compute_time_s(2.5 * flops, dtype="fp32", kind="bwd", mask="full", q_tokens=700,
                            kv_tokens=700) == pytest.approx(OVERHEAD + 2.5 * flops / RATE)
    with pytest.raises(RingsimError, match="bf16"):
        p.compute_time_s(flops, dtype="bf16", kind="fwd", mask="full", q_tokens=700, kv_tokens=700)


def test_gpu_profiles_have_no_core_sharing_and_slowdowns_below_one_are_not_used():
    b = bench(slowdown=0.8)
    b["device"]["kind"] = "cuda"
    p = calibrate(b)
    assert p.contention.compute_slots is None
    assert p.contention.slowdown_in_flight == 1.0
    assert p.report["interference"]["median_slowdown"] == pytest.approx(0.8)


def test_profile_round_trips_and_drives_the_simulator(tmp_path):
    p = calibrate(bench())
    path = tmp_path / "p.json"
    p.save(path)
    back = load_profile(path)
    assert back.groups == p.groups and back.link == p.link and back.contention == p.contention
    sc = Scenario(workload=Workload(seq=4096, heads=8, kv_heads=8, head_dim=64, dtype="fp32",
                                    causal=False), n_gpus=2, layout="contiguous")
    trace = simulate(sc, back)
    first = min((s for s in trace.spans if s.stream == "compute"), key=lambda s: s.start_s)
    assert first.duration_s >= OVERHEAD + 4 * 64 * 8 * 2048 ** 2 / RATE
    assert compute_metrics(trace).ideal_s == pytest.approx(4 * 64 * 8 * 4096 ** 2 / (2 * RATE))


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(format="x"), "not a ringsim profile"),
    (lambda d: d.update(version=7), "version"),
    (lambda d: d["compute"].update(model="magic"), "compute.model"),
    (lambda d: d["compute"].update(groups=[]), "non-empty"),
    (lambda d: d["compute"]["groups"][0].update(dtype="int4"), "dtype"),
    (lambda d: d["compute"]["groups"][0]["fit"].update(flops_per_s=0), "positive"),
    (lambda d: d["compute"]["groups"][0].update(points=[[1, "x"]]), "finite number"),
    (lambda d: d["link"].update(bandwidth_bytes_per_s=-1), "bandwidth"),
    (lambda d: d.update(contention=[]), "contention"),
])
def test_malformed_profiles_are_refused(mutate, match):
    d = json.loads(json.dumps(calibrate(bench()).to_dict()))
    mutate(d)
    with pytest.raises(RingsimError, match=match):
        profile_from_dict(d)


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(format="other"), "not a `ringsim hw bench`"),
    (lambda d: d.update(compute=[]), "no compute"),
    (lambda d: d.update(transfer=[]), "no transfer"),
    (lambda d: d["compute"][0].update(mask="weird"), "bad dtype, mask or kind"),
    (lambda d: d["compute"][0].update(flops=-1), "positive flops"),
    (lambda d: d["compute"][0].update(time_s=["x"]), "time_s"),
])
def test_malformed_bench_files_are_refused(mutate, match):
    d = bench()
    mutate(d)
    with pytest.raises(RingsimError, match=match):
        calibrate(d)


def test_calibrate_cli_writes_once_and_reports(tmp_path, capsys):
    src, out = tmp_path / "b.json", tmp_path / "p.json"
    src.write_text(json.dumps(bench()))
    assert main(["calibrate", str(src), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "interference: compute 1.300x slower" in text and "compute model: fit" in text
    assert "2 -> 1.10x slower" in text
    assert main(["calibrate", str(src), "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["simulate", "--profile", str(out), "--gpus", "2", "--seq", "4096", "--dtype", "fp32",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["makespan_s"] > 0
    (tmp_path / "junk.json").write_text("{nope")
    assert main(["calibrate", str(tmp_path / "junk.json"), "-o", str(tmp_path / "q.json")]) == 2


# ---- the host model: physical bounds, ring conditions, older files ---------------------

def test_a_concurrency_slowdown_below_the_core_bound_is_rejected_not_fitted():
    b = bench()
    # 3 processes on 2 cores measured 1.06x slower than one: impossible (at least 1.5x)
    b["concurrency"].insert(2, {"processes": 3, "time_s": [0.02 * 1.06]})
    p = calibrate(b)
    assert [k for k, _ in p.contention.concurrency] == [1, 2, 4]
    assert [d for d, _ in p.contention.host.law] == [1, 2, 4]
    # fitted without the bad point: 3 cores demanded sit between the 2- and 4-process
    # slowdowns, 1.1 + (2.6 - 1.1) / 2 = 1.85 (with it the law would say 1.06, raised to 1.5)
    assert p.contention.host.slowdown(3.0) == pytest.approx(1.85)
    assert len(p.report["rejected"]) == 1 and "concurrency 3" in p.report["rejected"][0]


def test_entries_the_bench_rejected_are_not_fitted():
    b = bench()
    b["concurrency"][1]["rejected"] = "below the bound"
    p = calibrate(b)
    assert [k for k, _ in p.contention.concurrency] == [1, 4]
    assert p.report["rejected"] == ["concurrency 2: below the bound"]


# A host of 2 cores, 1 thread per rank, transfers demanding 0.5 core, the sharing law of
# CONCURRENCY in cores demanded (1 thread per process: (1, 1.0), (2, 1.1), (4, 2.6), then
# along the last segment, slope 0.75) and 1.2x more on compute while its transfer is in
# flight. k ranks in a ring: demand k·1 + k·0.5; the k exchanges alone demand k·0.5.
#   k=2: loaded law(3) = 1.85;  alone law(1) = 1.0;   compute 1.2 * 1.85, transfer 1.85
#   k=3: loaded law(4.5) = 2.975; alone law(1.5) = 1.05; compute 1.2 * 2.975, transfer 2.975 / 1.05
#   k=4: loaded law(6) = 4.1;   alone law(2) = 1.1;   compute 1.2 * 4.1, transfer 4.1 / 1.1
RING = {2: (1.2 * 1.85, 1.85), 3: (1.2 * 2.975, 2.975 / 1.05), 4: (1.2 * 4.1, 4.1 / 1.1)}


def ring_bench(ring=RING):
    b = bench()
    b["ring_conditions"] = [
        {"processes": k, "threads_per_rank": 1, "bytes": 1 << 20,
         "compute_alone_s": [0.009, 0.010, 0.030], "compute_ring_s": [0.010 * c] * 4,
         "transfer_alone_s": [0.002, 0.002, 0.009], "transfer_ring_s": [0.002 * x] * 4}
        for k, (c, x) in ring.items()]
    return b


def test_ring_conditions_give_the_cores_a_transfer_demands():
    p = calibrate(ring_bench())
    host = p.contention.host
    assert (host.cores, host.threads_per_rank) == (2, 1)
    assert host.transfer_cores == pytest.approx(0.5)
    assert p.contention.slowdown_in_flight == pytest.approx(1.2)
    assert p.report["host"]["sum_sq_log_error"] == pytest.approx(0, abs=1e-12)
    # two hops alone demand 1 core: the link's alone time needs no correction
    assert p.link.bandwidth_bytes_per_s == pytest.approx(BW)


# The same host with transfers 2x slower than computes while both oversubscribe the
# cores (sim.hardware.contention.split_cores on the law's slowdown of k + k·0.5, delivering
# (k + k·0.5) / law cores):
#   k=2: law 1.85;  compute 1.85 * (2 + 0.5) / 3 = 1.5417, transfer 2 * that / law(1) 1.0
#   k=3: law 2.975; compute 2.975 * (3 + 0.75) / 4.5 = 2.4792, transfer 2 * that / 1.05
#   k=4: law 4.1;   compute 4.1 * (4 + 1) / 6 = 3.4167,  transfer 2 * that / 1.1
WEIGHTED = {k: (1.2 * c, 2 * c / alone) for k, c, alone in
            ((2, 1.85 * 2.5 / 3, 1.0), (3, 2.975 * 3.75 / 4.5, 1.05), (4, 4.1 * 5 / 6, 1.1))}


def test_ring_conditions_give_how_much_slower_a_transfer_runs_than_a_compute():
    p = calibrate(ring_bench(WEIGHTED))
    host = p.contention.host
    assert host.transfer_cores == pytest.approx(0.5) and host.transfer_weight == pytest.approx(2.0)
    assert p.contention.slowdown_in_flight == pytest.approx(1.2)
    assert p.report["host"]["transfer_weight"] == pytest.approx(2.0)
    assert p.report["host"]["sum_sq_log_error"] == pytest.approx(0, abs=1e-12)
    for point in p.report["host"]["points"]:
        c, x = WEIGHTED[int(point["processes"])]
        assert point["predicted_compute_slowdown"] == pytest.approx(c)
        assert point["predicted_transfer_slowdown"] == pytest.approx(x)
    # the even fit of the same measurements explains them worse
    assert RING != WEIGHTED and calibrate(ring_bench()).contention.host.transfer_weight == pytest.approx(1.0)


def with_backward(b, compute=None, transfer=None):
    """Bench `b` with a backward entry beside each of RING's, a backward step's two hops
    each exchange: as RING's, or with its compute `compute` times the host model's (RING's
    in-flight 1.2x taken out) and its exchanges `transfer` times RING's."""
    for e in ring_bench()["ring_conditions"]:
        back = {**e, "kind": "bwd", "hops": 2}
        if compute is not None:
            back["compute_ring_s"] = [t / 1.2 * compute for t in e["compute_ring_s"]]
        if transfer is not None:
            back["transfer_ring_s"] = [t * transfer for t in e["transfer_ring_s"]]
        b["ring_conditions"].append(back)
    return b


def test_backward_ring_entries_give_a_backward_compute_its_own_in_flight_slowdown():
    """RING's host with backward entries beside its forwards, their computes 1.35x the host
    model's (the law for backwards too: bench() measured none apart), at each size: the
    forwards' fit is as before (0.5 core, 1.2x) and a backward computes 1.35x slower in
    flight; backward entries at the model's own slowdown give 1.0, never below."""
    p = calibrate(with_backward(ring_bench(), compute=1.35))
    assert p.contention.host.transfer_cores == pytest.approx(0.5)
    assert p.contention.slowdown_in_flight == pytest.approx(1.2)
    assert p.contention.slowdown_in_flight_bwd == pytest.approx(1.35)
    back = p.report["host"]["backward"]
    assert back["ring_entries"] == 3 and back["residual_in_flight_slowdown"] == pytest.approx(1.35)
    for point in back["points"]:
        assert point["predicted_compute_slowdown"] == pytest.approx(point["compute_slowdown"])
    assert calibrate(with_backward(ring_bench(), compute=0.9)).contention.slowdown_in_flight_bwd == 1.0
    assert calibrate(ring_bench()).contention.slowdown_in_flight_bwd is None
    saved = profile_from_dict(p.to_dict())
    assert saved.contention.slowdown_in_flight_bwd == pytest.approx(1.35)


def test_backward_ring_entries_weigh_in_the_transfers_share():
    """The transfers' cores and weight are fitted to both kinds at once: RING's forwards
    with backward entries whose exchanges ran 1.5x slower than RING's give another host
    than the forwards alone (0.5 core, weight 1), and no longer explain every point."""
    p = calibrate(with_backward(ring_bench(), transfer=1.5))
    host = p.contention.host
    assert (host.transfer_cores, host.transfer_weight) != pytest.approx((0.5, 1.0))
    assert p.report["host"]["sum_sq_log_error"] > 0.01


def test_calibrate_cli_reports_the_backward_ring_points(tmp_path, capsys):
    src = tmp_path / "b.json"
    src.write_text(json.dumps(with_backward(ring_bench(), compute=1.35)))
    assert main(["calibrate", str(src), "-o", str(tmp_path / "p.json")]) == 0
    text = capsys.readouterr().out
    assert "backward blocks with two hops in flight: 1.35x slower in flight than the host model says (from 3" in text
    # the forward point and the backward one of two ranks, each beside the model's figure
    assert f"  2 ranks in a ring: compute {1.2 * 1.85:.2f}x (model {1.2 * 1.85:.2f}x)" in text
    assert f"    2 ranks in a ring: compute {1.35 * 1.85:.2f}x (model {1.35 * 1.85:.2f}x)" in text


def test_a_ring_entry_of_an_unknown_kind_is_a_clear_error():
    b = ring_bench()
    b["ring_conditions"][0]["kind"] = "sideways"
    with pytest.raises(RingsimError, match="ring_conditions entry 0 has kind 'sideways'"):
        calibrate(b)


def test_a_ring_entry_below_the_core_bound_is_rejected():
    # 4 ranks on 2 cores computing only 1.5x slower than alone: impossible (at least 2x)
    p = calibrate(ring_bench({**RING, 4: (1.5, 4.1 / 1.1)}))
    assert p.report["host"]["ring_entries"] == 2
    assert any("ring conditions 4" in r for r in p.report["rejected"])
    assert p.contention.host.transfer_cores == pytest.approx(0.5)


def test_an_old_bench_file_still_calibrates(tmp_path):
    # bench() has neither ring_conditions nor the concurrency fields added with them
    p = calibrate(bench())
    assert p.contention.host.transfer_cores == 0.0 and p.contention.slowdown_in_flight == pytest.approx(1.3)
    assert "no ring-conditions" in p.report["host"]["note"]
    committed = calibrate(json.loads((RUNS / "microbenchmarks.json").read_text()))
    # the committed measurements calibrate; what they break of a physical bound is named
    assert committed.contention.host.cores == 2
    assert all(r.split(":")[0].startswith(("concurrency", "ring")) for r in committed.report["rejected"])
    # and an old profile (no host) still loads, playing as it did
    old = load_profile(RUNS / "host-model-1" / "profile-without-host.json")
    assert old.contention.host is None and old.contention.concurrency is not None


def test_host_model_round_trips_through_the_profile(tmp_path):
    p = calibrate(ring_bench())
    p.save(tmp_path / "p.json")
    back = load_profile(tmp_path / "p.json")
    assert back.contention == p.contention and back.contention.host.transfer_cores == pytest.approx(0.5)
    weighted = calibrate(ring_bench(WEIGHTED))
    weighted.save(tmp_path / "w.json")
    assert load_profile(tmp_path / "w.json").contention.host.transfer_weight == pytest.approx(2.0)
    # a profile from before the weight plays its transfers at the law's rate
    d = json.loads((tmp_path / "w.json").read_text())
    del d["contention"]["host"]["transfer_weight"]
    (tmp_path / "old.json").write_text(json.dumps(d))
    assert load_profile(tmp_path / "old.json").contention.host.transfer_weight == 1.0
    d["contention"]["host"]["transfer_weight"] = 0
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(RingsimError, match="transfer_weight must be positive"):
        load_profile(tmp_path / "bad.json")


# Calibration's choice of the table: block times that jump between two sizes (a step,
# as when a kernel changes its tiling) are no line, and the table must win.

def step_bench():
    """fp32 full forward blocks of 1..8 GFLOP: 1 ms up to 4 GFLOP, 3 ms from 5 GFLOP."""
    compute = [{"dtype": "fp32", "mask": "full", "kind": "fwd", "flops": g * 1e9,
                "time_s": [1e-3 if g <= 4 else 3e-3] * 3} for g in range(1, 9)]
    transfer = [{"bytes": b, "direction": "both_ways", "time_s": [1e-4 + b / 1e9]} for b in (1e6, 4e6)]
    return {"format": "ringsim-hw-bench", "version": 1,
            "device": {"kind": "cpu", "name": "step cpu", "cpu_count": 2, "threads_per_rank": 1},
            "compute": compute, "transfer": transfer}


def test_calibration_chooses_the_table_for_a_step_and_the_profile_interpolates_it():
    p = calibrate(step_bench())
    chosen = p.report["compute"]["chosen"]
    assert chosen["held_out_median_abs_rel_table"] < chosen["held_out_median_abs_rel_fit"]
    assert p.compute_model == "table" and chosen["model"] == "table"

    def at(flops, profile=p):
        return profile.compute_time_s(flops, dtype="fp32", kind="fwd", mask="full", q_tokens=1, kv_tokens=1)
    # between 2 and 3 GFLOP (both 1 ms): 1 ms; a quarter of the way up the step from 4 to
    # 5 GFLOP: 1 + (3 - 1) / 4 = 1.5 ms; between 6 and 7 GFLOP: 3 ms
    assert at(2.5e9) == pytest.approx(1e-3)
    assert at(4.25e9) == pytest.approx(1.5e-3)
    assert at(6.5e9) == pytest.approx(3e-3)
    # the line through the same points would not: it rises steadily
    g = p.groups[("fp32", "full", "fwd")]
    assert g.fit_s(4.25e9) != pytest.approx(1.5e-3, rel=0.1)
    # the choice survives the profile's file
    again = profile_from_dict(json.loads(json.dumps(p.to_dict())))
    assert again.compute_model == "table" and at(4.25e9, again) == pytest.approx(1.5e-3)


def test_the_sharing_law_is_relative_to_the_block_time_the_simulator_starts_from():
    """The concurrency part's one process ran its block in 8 ms, the compute part the same
    block in 10 ms (the time the simulator multiplies): two processes at 10 ms are no
    sharing at all, three at 16 ms are 1.6x; the median block counts, not a slow outlier."""
    b = bench()
    shape = {"kind": "fwd", "dtype": "fp32", "heads": 8, "kv_heads": 8, "head_dim": 64, "q_tokens": 1024,
             "kv_tokens": 1024, "mask": "full"}
    b["compute"].append({**shape, "flops": 4 * 64 * 8 * 1024 * 1024, "time_s": [0.010, 0.010, 0.011]})
    b["concurrency"] = [{**shape, "processes": 1, "time_s": [0.008] * 3},
                        {**shape, "processes": 2, "time_s": [0.010, 0.010, 0.010, 0.010, 0.050, 0.050]},
                        {**shape, "processes": 3, "time_s": [0.016] * 9}]
    p = calibrate(b)
    assert p.contention.host.law == (pytest.approx((1, 1.0)), pytest.approx((2, 1.0)), pytest.approx((3, 1.6)))
    assert p.report["rejected"] == []


def test_the_sharing_law_is_the_same_processes_shared_over_alone_when_the_bench_timed_both():
    """The bench now times each entry's processes alone just before they share the
    cores. The host ran 20% slower than during the compute part (10 ms) for the two
    processes' entry (alone 12 ms, together 12 ms: no sharing) and 10% faster for the
    three (alone 9 ms, together 14.4 ms: 1.6x): the law is those ratios, not the times
    over the compute part's 10 ms (1.2x and 1.44x)."""
    b = bench()
    shape = {"kind": "fwd", "dtype": "fp32", "heads": 8, "kv_heads": 8, "head_dim": 64, "q_tokens": 1024,
             "kv_tokens": 1024, "mask": "full"}
    b["compute"].append({**shape, "flops": 4 * 64 * 8 * 1024 * 1024, "time_s": [0.010, 0.010, 0.011]})
    b["concurrency"] = [{**shape, "processes": 1, "time_s": [0.0095] * 3, "alone_s": [0.0095] * 3},
                        {**shape, "processes": 2, "time_s": [0.012] * 5 + [0.06], "alone_s": [0.012, 0.012, 0.030]},
                        {**shape, "processes": 3, "time_s": [0.0144] * 9, "alone_s": [0.009] * 3}]
    p = calibrate(b)
    assert p.contention.host.law == (pytest.approx((1, 1.0)), pytest.approx((2, 1.0)), pytest.approx((3, 1.6)))
    # a ratio below the physical bound (3 processes on 2 cores: 1.5x) is still rejected
    b["concurrency"][2]["time_s"] = [0.0126] * 9                           # 1.4x
    p = calibrate(b)
    assert p.contention.host.law == (pytest.approx((1, 1.0)), pytest.approx((2, 1.0)))
    assert [r.split(":")[0] for r in p.report["rejected"]] == ["concurrency 3"]


def test_time_sliced_processes_count_by_their_mean_block_and_fitting_ones_by_their_median():
    """Three processes on two cores are time-sliced: of six blocks four ran untouched
    (10 ms) and two waited their turn (35 ms). Their median is 10 ms, below the physical
    1.5x; their mean, the throughput, is 110/6 ms: 1.833x. Two processes fit the cores,
    and one slow block among six (50 ms) leaves their median at 10 ms: 1.0x."""
    b = bench()
    shape = {"kind": "fwd", "dtype": "fp32", "heads": 8, "kv_heads": 8, "head_dim": 64, "q_tokens": 1024,
             "kv_tokens": 1024, "mask": "full", "threads_per_rank": 1}
    b["concurrency"] = [{**shape, "processes": 2, "time_s": [0.010] * 5 + [0.050], "alone_s": [0.010] * 2},
                        {**shape, "processes": 3, "time_s": [0.010] * 4 + [0.035] * 2, "alone_s": [0.010] * 3}]
    p = calibrate(b)
    assert p.contention.host.law == (pytest.approx((1, 1.0)), pytest.approx((2, 1.0)),
                                     pytest.approx((3, 0.110 / 6 / 0.010)))
    assert p.report["rejected"] == []


def test_compute_entries_are_brought_to_one_speed_of_the_host_by_their_reference_block(monkeypatch):
    """The host ran 25% slower for the entries of 1024 tokens (their reference block took
    25 ms, 20 ms for the others). Read one entry at a time (a window of 1), their times
    are scaled by 20/25 and the line through all of them is the true one again; the
    report says how far apart the entries were."""
    import sim.calibration.calibrate as cal

    monkeypatch.setattr(cal, "SPEED_WINDOW", 1)
    b = bench()
    for e in b["compute"]:
        slow = e["flops"] in (4 * 64 * 8 * 1024 * 1024, 4 * 64 * 8 * 1024 * 1025 / 2)
        e["time_s"] = [t * (1.25 if slow else 1.0) for t in e["time_s"]]
        e["reference_s"] = [0.025] * 3 if slow else [0.020, 0.019, 0.021]
    b["reference_block"] = {"kind": "fwd", "dtype": "fp32", "batch": 1, "heads": 8, "kv_heads": 8,
                            "head_dim": 64, "q_tokens": 1024, "kv_tokens": 1024, "mask": "full"}
    p = calibrate(b)
    for mask, rate in (("full", RATE), ("diagonal", DIAG_RATE)):
        g = p.groups[("fp32", mask, "fwd")]
        assert g.overhead_s == pytest.approx(OVERHEAD) and g.flops_per_s == pytest.approx(rate)
    assert p.report["compute"]["host_speed"] == {
        "entries": 8, "window": 1, "reference_median_s": pytest.approx(0.020),
        "slowest_over_median": pytest.approx(1.25), "fastest_over_median": pytest.approx(1.0),
        "reference_block": {"dtype": "fp32", "heads": 8, "head_dim": 64, "q_tokens": 1024}}
    # one entry without its reference: nothing is scaled, the slow entries bend the line
    del b["compute"][0]["reference_s"]
    p = calibrate(b)
    assert "host_speed" not in p.report["compute"]
    assert p.groups[("fp32", "full", "fwd")].overhead_s > OVERHEAD + 1e-3


def test_entries_timed_between_readings_of_the_reference_come_to_one_speed_by_their_ratios():
    """Every entry met the host at its own speed (0.7x to 1.5x, one for each entry, their
    median 1x, as a shared host swings over seconds), its samples and the references
    around them alike: the reference block takes 20 ms at speed 1. Each entry's samples over
    its references are its true time over 20 ms whatever the speed, so times of ratio x
    20 ms put every point back on the true line. The window over whole entries cannot:
    without the ratios the line bends."""
    b = bench()
    speeds = [1.0, 1.5, 0.7, 1.2, 0.9, 1.4, 0.8, 1.0]
    for e, f in zip(b["compute"], speeds):
        t = e["median_s"]
        e["time_s"] = [t * f] * 3
        e["reference_s"] = [0.020 * f] * 4
        e["speed_ratios"] = [t / 0.020] * 3
    p = calibrate(b)
    for mask, rate in (("full", RATE), ("diagonal", DIAG_RATE)):
        g = p.groups[("fp32", mask, "fwd")]
        assert g.overhead_s == pytest.approx(OVERHEAD) and g.flops_per_s == pytest.approx(rate)
    drift = p.report["compute"]["host_speed"]
    assert drift["paired"] == 8 and drift["reference_median_s"] == pytest.approx(0.020)
    # two passes' ratios count at their mean (1.1x the true one here), as their times do
    for e in b["compute"]:
        r = e.pop("speed_ratios")[0]
        e["speed_ratios"], e["pass_speed_ratios"] = [r] * 3, [r, 1.2 * r]
    g = calibrate(b).groups[("fp32", "full", "fwd")]
    assert g.overhead_s == pytest.approx(1.1 * OVERHEAD) and g.flops_per_s == pytest.approx(RATE / 1.1)
    for e in b["compute"]:
        del e["speed_ratios"], e["pass_speed_ratios"]
    p = calibrate(b)
    assert "paired" not in p.report["compute"]["host_speed"]
    assert abs(p.groups[("fp32", "full", "fwd")].flops_per_s / RATE - 1) > 0.05


def test_the_hosts_speed_around_an_entry_is_the_median_reference_of_the_entries_beside_it():
    """References of nine entries in the order measured, a window of three: 20 ms, a
    blip of 35 ms at entry 2 (one reading, the entry beside it was not slowed), and a
    spell at 25 ms over entries 5-7. Their median is 20 ms. By hand, the medians of each
    entry and its neighbours: 20, 20, 20, 20, 20, 25, 25, 25, 22.5; so the blip's entry
    keeps its time, the spell's are scaled by 20/25 and the last by 20/22.5."""
    from sim.calibration.calibrate import at_one_speed

    refs = [20, 20, 35, 20, 20, 25, 25, 25, 20]
    compute = [{"time_s": 1.0, "reference_s": r / 1000} for r in refs]
    report = at_one_speed(compute, window=3)
    assert [c["time_s"] for c in compute] == pytest.approx([1, 1, 1, 1, 1, 0.8, 0.8, 0.8, 20 / 22.5])
    assert report == {"entries": 9, "window": 3, "reference_median_s": pytest.approx(0.020),
                      "slowest_over_median": pytest.approx(1.25), "fastest_over_median": pytest.approx(1.0)}
    # without a window given, SPEED_WINDOW entries
    from sim.calibration.calibrate import SPEED_WINDOW

    assert at_one_speed([dict(c) for c in compute])["window"] == SPEED_WINDOW == 9


def test_an_entry_measured_in_two_passes_counts_at_their_mean_and_its_reference_likewise():
    """Each entry was measured twice, once 10% fast and once 10% slow, and its samples
    are the fast pass's (as files that kept the least slowed pass hold them): the mean
    of the passes is the true time, and the line through them is the true one. The
    references (19 and 21 ms, the same mean everywhere) move nothing."""
    b = bench()
    for e in b["compute"]:
        t = e["median_s"]
        e["time_s"] = [0.9 * t] * 3
        e["pass_medians_s"] = [0.9 * t, 1.1 * t]
        e["reference_s"] = [0.019]
        e["pass_references_s"] = [0.019, 0.021]
    p = calibrate(b)
    for mask, rate in (("full", RATE), ("diagonal", DIAG_RATE)):
        g = p.groups[("fp32", mask, "fwd")]
        assert g.overhead_s == pytest.approx(OVERHEAD) and g.flops_per_s == pytest.approx(rate)
    assert p.report["compute"]["host_speed"]["reference_median_s"] == pytest.approx(0.020)


def test_a_profile_at_another_compute_speed_scales_every_block_time_and_nothing_else():
    """At_compute_speed(f): a host computing f times slower. Hand values: the table
    profile's 1.5 ms at 4.25 GFLOP (see above) becomes 1.5 f ms; the fitted line's
    overhead + FLOPs / rate becomes f times that; links, collectives and contention stay."""
    table = calibrate(step_bench())
    fit = calibrate(bench())
    for p in (table, fit):
        slower = p.at_compute_speed(1.25)
        for kind, mask in (("fwd", "full"), ("fwd", "diagonal")):
            for flops in (3e8, 4.25e9, 9e9):
                kw = dict(dtype="fp32", kind=kind, mask=mask, q_tokens=1, kv_tokens=1)
                assert slower.compute_time_s(flops, **kw) == pytest.approx(1.25 * p.compute_time_s(flops, **kw))
        assert slower.link == p.link and slower.contention == p.contention
        assert slower.collectives == p.collectives and slower.compute_model == p.compute_model
    assert table.at_compute_speed(1.25).compute_time_s(4.25e9, dtype="fp32", kind="fwd", mask="full",
                                                       q_tokens=1, kv_tokens=1) == pytest.approx(1.875e-3)
    g = fit.groups[("fp32", "full", "fwd")]
    assert g.overhead_s == pytest.approx(OVERHEAD) and g.flops_per_s == pytest.approx(RATE)
    assert fit.at_compute_speed(2.0).compute_time_s(1e9, dtype="fp32", kind="fwd", mask="full", q_tokens=1,
                                                    kv_tokens=1) == pytest.approx(2 * (OVERHEAD + 1e9 / RATE))
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(RingsimError, match="compute speed factor must be positive"):
            fit.at_compute_speed(bad)


def test_the_hosts_spread_is_read_from_each_processes_samples_over_their_time_alone():
    """Two processes, alone 1.0 s: one ran blocks of 1.0 and 1.2 s, the other 2.0 and
    2.0. By hand: their means 1.1 and 2.0, the per-rank CV their sample standard
    deviation over their mean, 0.6364 / 1.55; the per-block CV the mean of their own,
    (0.1 / 1.1 + 0) / 2. Three processes without per-process samples (older files):
    the CV of all samples together, 0.5 / 1.5 for 1 and 2 s, and no per-rank spread. A
    rejected entry and one without its time alone give nothing."""
    from sim.calibration.calibrate import host_spread

    two = {"processes": 2, "alone_s": [1.0, 1.0], "time_s": [1.0, 1.2, 2.0, 2.0],
           "time_by_process_s": [[1.0, 1.2], [2.0, 2.0]]}
    three = {"processes": 3, "alone_s": [1.0], "time_s": [1.0, 2.0, 1.0, 2.0]}
    spread = host_spread([three, two, {"processes": 4, "alone_s": [1.0], "time_s": [9.0, 9.0], "rejected": "x"},
                          {"processes": 5, "time_s": [9.0, 9.0]}])
    assert spread == ((2.0, pytest.approx(0.9 / 2 ** 0.5 / 1.55), pytest.approx(0.1 / 1.1 / 2)),
                      (3.0, 0.0, pytest.approx(0.5 / 1.5)))
    assert host_spread([]) is None
    # and it reaches the profile, through a file and back
    b = bench()
    for e in b["concurrency"]:
        e["alone_s"] = [0.02]
        e["time_by_process_s"] = [e["time_s"][:1], e["time_s"][1:]]
    p = calibrate(b)
    assert p.contention.host.spread is not None and len(p.contention.host.spread) == len(b["concurrency"])


def test_a_backward_block_shared_by_time_sliced_processes_gets_its_own_law(tmp_path):
    """The concurrency part timed the block's forward and its backward. Forward: three
    processes 15 ms against 10 ms alone, 1.5x; four 20 ms, 2.0x. Backward: alone 25 ms,
    three 45 ms (1.8x), four 62.5 ms (2.5x), two 25 ms (1.0x). Each law is its own kind's
    ratios; a backward ratio below the bound (four at 1.8x, under 2.0x less 5% for noise) is rejected under its kind's
    name; the spread comes from the forward entries alone; both laws go through a file
    and back. A kind other than fwd or bwd is refused in one line."""
    b = bench()
    shape = {"dtype": "fp32", "heads": 8, "kv_heads": 8, "head_dim": 64, "q_tokens": 1024, "kv_tokens": 1024,
             "mask": "full", "threads_per_rank": 1}
    fwd = [{**shape, "kind": "fwd", "processes": k, "time_s": [t] * 4, "alone_s": [0.010] * k,
            "time_by_process_s": [[t] * 2, [t] * 2]} for k, t in ((1, 0.010), (3, 0.015), (4, 0.020))]
    bwd = [{**shape, "kind": "bwd", "processes": k, "time_s": [t] * 4, "alone_s": [0.025] * k,
            "time_by_process_s": [[t, t * 1.5], [t, t]]} for k, t in ((2, 0.025), (3, 0.045), (4, 0.0625))]
    b["concurrency"] = fwd + bwd
    p = calibrate(b)
    host = p.contention.host
    assert host.law == (pytest.approx((1, 1.0)), pytest.approx((3, 1.5)), pytest.approx((4, 2.0)))
    assert host.law_bwd == (pytest.approx((1, 1.0)), pytest.approx((2, 1.0)), pytest.approx((3, 1.8)),
                            pytest.approx((4, 2.5)))
    assert [k for k, _, _ in host.spread] == [1, 3, 4] and all(cv == 0 for _, cv, _ in host.spread)
    assert p.report["concurrency_slowdown_bwd"][-1] == pytest.approx([4, 2.5])
    p.save(tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json").contention.host == host
    b["concurrency"][-1]["time_s"] = [0.025 * 1.8] * 4
    p = calibrate(b)
    assert p.contention.host.law_bwd[-1] == pytest.approx((3, 1.8))
    assert [r.split(":")[0] for r in p.report["rejected"]] == ["concurrency bwd 4"]
    # files without backward entries keep one law
    b["concurrency"] = fwd
    assert calibrate(b).contention.host.law_bwd is None
    b["concurrency"] = fwd + [{**bwd[0], "kind": "dkv"}]
    with pytest.raises(RingsimError, match="concurrency entry 3 has kind 'dkv'"):
        calibrate(b)


def test_an_entry_that_alternated_alone_and_shared_counts_by_the_median_of_its_rounds():
    """Three processes on two cores (time-sliced: means), three rounds. The host ran at
    half speed in the first two (alone 20 ms, shared 32 ms: 1.6x) and at full speed in
    the third (alone 10 ms, shared mean (16 + 18) / 2 = 17 ms: 1.7x). The law is their
    median, 1.6x; over all samples at once (mean 27 ms over the median alone, 20 ms) it
    would read 1.35x, below the physical 1.5x, and be rejected. A round without samples
    is passed over; rounds that are no list of objects are refused in one line."""
    b = bench()
    shape = {"kind": "fwd", "dtype": "fp32", "heads": 8, "kv_heads": 8, "head_dim": 64, "q_tokens": 1024,
             "kv_tokens": 1024, "mask": "full", "threads_per_rank": 1}
    rounds = [{"alone_s": [0.020] * 3, "time_s": [0.032] * 2}, {"alone_s": [0.020] * 3, "time_s": [0.032] * 2},
              {"alone_s": [0.010] * 3, "time_s": [0.016, 0.018]}, {"alone_s": [], "time_s": []}]
    entry = {**shape, "processes": 3, "rounds": rounds,
             "alone_s": [t for r in rounds for t in r["alone_s"]], "time_s": [t for r in rounds for t in r["time_s"]]}
    b["concurrency"] = [entry]
    p = calibrate(b)
    assert p.contention.host.law == (pytest.approx((1, 1.0)), pytest.approx((3, 1.6)))
    assert p.report["rejected"] == []
    without = {k: v for k, v in entry.items() if k != "rounds"}
    b["concurrency"] = [without]
    assert calibrate(b).contention.host.law is None
    b["concurrency"] = [{**entry, "rounds": [[0.01]]}]
    with pytest.raises(RingsimError, match="rounds must be a list of objects"):
        calibrate(b)


def test_the_hosts_spread_of_an_entry_in_rounds_is_read_a_round_at_a_time():
    """Two processes, two rounds: in the first, alone 1.0 s, one ran 1.0 and 1.2 s, the
    other 2.0 and 2.0; in the second the host ran at half speed (alone 2.0 s) and so did
    they (2.0, 2.4; 4.0, 4.0). Each round reads as the one-round entry of the test above
    (per-rank CV 0.6364 / 1.55, per-block 0.1 / 1.1 / 2), and so does their mean: the
    host's drift between rounds is no spread. Read over all samples at once against the
    median alone (1.5 s), the drift would count."""
    from sim.calibration.calibrate import host_spread

    rounds = [{"alone_s": [1.0, 1.0], "time_s": [1.0, 1.2, 2.0, 2.0], "time_by_process_s": [[1.0, 1.2], [2.0, 2.0]]},
              {"alone_s": [2.0, 2.0], "time_s": [2.0, 2.4, 4.0, 4.0], "time_by_process_s": [[2.0, 2.4], [4.0, 4.0]]}]
    entry = {"processes": 2, "alone_s": [1.0, 1.0, 2.0, 2.0], "time_s": [1.0, 1.2, 2.0, 2.0, 2.0, 2.4, 4.0, 4.0],
             "time_by_process_s": [[1.0, 1.2, 2.0, 2.4], [2.0, 2.0, 4.0, 4.0]], "rounds": rounds}
    assert host_spread([entry]) == ((2.0, pytest.approx(0.9 / 2 ** 0.5 / 1.55), pytest.approx(0.1 / 1.1 / 2)),)
    flat = host_spread([{k: v for k, v in entry.items() if k != "rounds"}])
    assert flat[0][2] > 2 * (0.1 / 1.1 / 2)


def _sliced_entry(processes: int, slowdown: float, pass_: int) -> dict:
    """One pass's entry of `processes` time-sliced processes, one round: alone 10 ms,
    shared `slowdown` times that (a mean)."""
    rounds = [{"alone_s": [0.010] * 3, "time_s": [0.010 * slowdown] * 2}]
    return {"kind": "fwd", "dtype": "fp32", "heads": 8, "kv_heads": 8, "head_dim": 64, "q_tokens": 1024,
            "kv_tokens": 1024, "mask": "full", "threads_per_rank": 1, "processes": processes, "pass": pass_,
            "rounds": rounds, "alone_s": rounds[0]["alone_s"], "time_s": rounds[0]["time_s"]}


def test_entries_of_one_count_measured_in_passes_count_by_their_median():
    """Three processes on two cores, measured in four passes minutes apart: 1.55x, 2.0x
    (the cores served something else then), 1.6x and 1.2x. 1.2x is below the physical
    1.5x: rejected on its own and named by its pass (pooled, the median of the four would
    be (1.55 + 1.6) / 2 = 1.575x and pass). The law is the median of the other three,
    1.6x (their mean, 1.717x, would carry the slow pass into every block); the report
    keeps every accepted pass."""
    b = bench()
    b["concurrency"] = [_sliced_entry(3, f, i) for i, f in enumerate((1.55, 2.0, 1.6, 1.2), 1)]
    p = calibrate(b)
    assert p.contention.host.law == (pytest.approx((1, 1.0)), pytest.approx((3, 1.6)))
    assert len(p.report["rejected"]) == 1 and p.report["rejected"][0].startswith("concurrency 3 (pass 4): ")
    assert p.report["host"]["law_passes"] == [[3.0, pytest.approx([1.55, 2.0, 1.6])]]
    b["concurrency"] = [_sliced_entry(3, 1.6, 1)]           # one pass: nothing to list
    assert "law_passes" not in calibrate(b).report["host"]


def test_ring_entries_of_one_size_measured_in_passes_count_by_their_median():
    """The host of RING, its 2-rank entry measured in three passes, the second while the
    cores served something else (compute 1.3x and transfer 1.4x slower still): each
    slowdown is the median of its passes, so the fit is RING's own (0.5 core per
    transfer, 1.2x in flight, no residual); all five entries are counted, and the point
    lists its three passes."""
    b = ring_bench()
    two = b["ring_conditions"][0]
    slow = {**two, "compute_ring_s": [t * 1.3 for t in two["compute_ring_s"]],
            "transfer_ring_s": [t * 1.4 for t in two["transfer_ring_s"]]}
    b["ring_conditions"][1:1] = [{**slow, "pass": 2}, {**two, "pass": 3}]
    p = calibrate(b)
    assert p.contention.host.transfer_cores == pytest.approx(0.5)
    assert p.contention.slowdown_in_flight == pytest.approx(1.2)
    assert p.report["host"]["sum_sq_log_error"] == pytest.approx(0, abs=1e-12)
    assert p.report["host"]["ring_entries"] == 5
    point = p.report["host"]["points"][0]
    assert point["processes"] == 2 and [q["compute_slowdown"] for q in point["passes"]] == pytest.approx(
        [1.2 * 1.85, 1.3 * 1.2 * 1.85, 1.2 * 1.85])


def test_the_hosts_spread_pools_the_rounds_of_passes_of_one_count():
    """The two-round entry of the test above, cut into two passes of one round each,
    reads the same spread: the passes' rounds are pooled, not the last pass kept."""
    from sim.calibration.calibrate import host_spread

    rounds = [{"alone_s": [1.0, 1.0], "time_s": [1.0, 1.2, 2.0, 2.0], "time_by_process_s": [[1.0, 1.2], [2.0, 2.0]]},
              {"alone_s": [2.0, 2.0], "time_s": [2.0, 2.4, 4.0, 4.0], "time_by_process_s": [[2.0, 2.4], [4.0, 4.0]]}]
    passes = [{"processes": 2, "pass": i, "alone_s": r["alone_s"], "time_s": r["time_s"],
               "time_by_process_s": r["time_by_process_s"], "rounds": [r]} for i, r in enumerate(rounds, 1)]
    assert host_spread(passes) == ((2.0, pytest.approx(0.9 / 2 ** 0.5 / 1.55), pytest.approx(0.1 / 1.1 / 2)),)
    # different samples in the second pass move the spread: it is read, not dropped
    passes[1]["rounds"] = [{**rounds[1], "time_by_process_s": [[2.0, 2.0], [4.0, 4.0]]}]
    assert host_spread(passes)[0][2] == pytest.approx(0.1 / 1.1 / 2 / 2)


def test_a_hosts_placement_goes_through_a_file_and_older_profiles_share_evenly(tmp_path):
    """A calibrated host holds each compute on the core it started on
    (sim.hardware.contention.Host.placement); another placement, set in the profile, goes through a
    file and back; a profile made before the field shares evenly; a value that is no
    placement is refused in one line."""
    import dataclasses

    b = bench()
    for e in b["concurrency"]:
        e["alone_s"] = [0.02]
    p = calibrate(b)
    assert p.contention.host.placement == "held" and p.report["host"]["placement"] == "held"
    placed = dataclasses.replace(p, contention=dataclasses.replace(
        p.contention, host=dataclasses.replace(p.contention.host, placement="cores")))
    placed.save(tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json").contention.host.placement == "cores"
    d = json.loads((tmp_path / "p.json").read_text())
    del d["contention"]["host"]["placement"]
    assert profile_from_dict(d).contention.host.placement == "even"
    d["contention"]["host"]["placement"] = "round-robin"
    with pytest.raises(RingsimError, match="contention.host.placement must be one of even, cores, held"):
        profile_from_dict(d)
