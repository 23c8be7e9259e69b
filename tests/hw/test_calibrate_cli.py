"""`ringsim calibrate`: its three modes, their refusals, and the check probe's verdict
(the probe's kernel runs replaced by runs of a known model, so that the answer is known)."""

import json

import pytest

import hw.check
from hw.check import PROBES, check
from sim.cli.main import main
from sim.engine.play import simulate
from sim.scenario.config import Scenario, Workload
from sim.trace.format import Trace
from tests.sim.calibration.test_from_traces import case, known_profile, measured, spread_profile


@pytest.fixture
def kernel_is(monkeypatch):
    """Make the probe's kernel runs those of `profile`, three repeats each."""
    def use(profile):
        def run_configs(cfgs, on_done=None, interleave=False):
            out = []
            for cfg in cfgs:
                sc = Scenario(workload=cfg.workload, n_gpus=cfg.n_gpus, layout=cfg.layout)
                out.append((None, [measured(sc, profile) for _ in range(cfg.repeats)]))
            return out
        monkeypatch.setattr(hw.check, "run_configs", run_configs)
    return use


def test_the_check_holds_for_the_hosts_own_model_and_fails_past_the_tolerance(kernel_is):
    truth = known_profile()
    kernel_is(truth)
    r = check(truth)
    assert r["holds"] and r["worst_abs_error"] == pytest.approx(0, abs=1e-12)
    assert [p["key"] for p in r["probes"]] == [p.key for p in PROBES]
    # the host is 25% slower at compute than the profile says
    kernel_is(known_profile(1.25))
    r = check(truth)
    assert not r["holds"]
    for row in r["probes"]:
        assert row["parts"]["compute_s"]["error"] == pytest.approx(1 / 1.25 - 1)
        assert row["error"] < -0.10


def test_the_check_predicts_by_the_median_of_seeded_plays_as_the_validation_does(kernel_is, tmp_path, capsys):
    """A profile whose host has a measured spread: each probe is predicted by the median
    of N plays seeded 0..N-1 (simulated here independently), one play at the mean rate
    with --replays 1; the kernel's runs are the mean-rate play, so that one is exact."""
    import statistics

    truth = spread_profile()
    kernel_is(truth)
    one = check(truth, replays=1)
    assert one["replays"] == 1 and one["worst_abs_error"] == pytest.approx(0, abs=1e-12)
    r = check(truth, replays=5)
    for probe, row in zip(PROBES, r["probes"]):
        sc = Scenario(workload=Workload(seq=probe.seq, heads=8, kv_heads=8, head_dim=64, dtype="fp32",
                                        causal=probe.causal), n_gpus=probe.n_gpus, layout=probe.layout)
        plays = statistics.median(simulate(sc, truth, jitter=seed).makespan_s for seed in range(5))
        assert row["simulated_s"] == pytest.approx(plays)
        assert row["simulated_s"] != pytest.approx(simulate(sc, truth).makespan_s, rel=1e-6)
    path = tmp_path / "p.json"
    truth.save(path)
    main(["calibrate", "--check", str(path), "--replays", "5"])
    assert "each predicted by the median of 5 seeded plays" in capsys.readouterr().out


def test_a_host_that_computes_slower_now_is_read_and_named(kernel_is, tmp_path, capsys, monkeypatch):
    """A CPU profile: the probe first reads the host's speed (here 1.25x the profile's
    reference block, as the host really is), and at that speed every probe is exact."""
    import dataclasses

    truth = dataclasses.replace(known_profile(), measured_on={**known_profile().measured_on, "kind": "cpu"})
    asked = []

    def host_speed(profile, **kw):
        asked.append(kw)
        return {"tokens": 1024, "profile_s": 0.02, "now_s": 0.025, "factor": 1.25}
    monkeypatch.setattr("hw.reference.host_speed", host_speed)
    kernel_is(known_profile(1.25))
    r = check(truth)
    assert asked == [{"dtype": "fp32", "heads": 8, "head_dim": 64, "threads": 1, "seconds": 3.0}]
    assert not r["holds"] and r["host_speed"]["factor"] == 1.25
    assert r["median_abs_error_at_host_speed"] == pytest.approx(0.0, abs=1e-9)
    for row in r["probes"]:
        assert row["error"] < -0.10 and row["error_at_host_speed"] == pytest.approx(0.0, abs=1e-9)
    path = tmp_path / "p.json"
    truth.save(path)
    assert main(["calibrate", "--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert ("this host computes the profile's 1024-token reference block in 25.0 ms, 1.25x its 20.0 ms there; "
            "at that speed the median |makespan error| is 0.0%") in out
    # no reading at all when asked for none, or for a GPU profile
    asked.clear()
    assert check(truth, reference_s=0)["host_speed"] is None
    assert check(known_profile())["host_speed"] is None and asked == []


def test_a_host_sharing_its_cores_worse_now_is_read_and_named(kernel_is, tmp_path, capsys, monkeypatch):
    """A CPU profile with a host model (two processes 1.04x slower than one); the host
    computes at the profile's speed alone but serves two processes 1.5x worse, and the
    sharing reads so: at that state every probe is exact, and the CLI names the cause."""
    import dataclasses

    from sim.hardware.contention import Contention, Host

    host = Host(cores=2, threads_per_rank=1, law=((1.0, 1.0), (2.0, 1.04), (4.0, 2.1)))
    truth = dataclasses.replace(known_profile(), measured_on={**known_profile().measured_on, "kind": "cpu"},
                                contention=Contention(host=host))
    monkeypatch.setattr("hw.reference.host_speed", lambda profile, **kw: {
        "tokens": 1024, "profile_s": 0.02, "now_s": 0.02, "factor": 1.0})
    asked = []

    def host_sharing(profile, **kw):
        asked.append(kw)
        return {"tokens": 1024, "processes": 2, "slowdown": 1.56, "profile_slowdown": 1.04, "factor": 1.5}
    monkeypatch.setattr("hw.reference.host_sharing", host_sharing)
    kernel_is(truth.at_host_state(1.0, 1.5))
    r = check(truth)
    assert asked == [{"dtype": "fp32", "heads": 8, "head_dim": 64, "threads": 1, "seconds": 3.0}]
    assert r["host_sharing"]["factor"] == 1.5
    assert r["median_abs_error_at_host_state"] == pytest.approx(0.0, abs=1e-9)
    assert r["median_abs_error_at_host_speed"] > 0.05
    path = tmp_path / "p.json"
    truth.save(path)
    main(["calibrate", "--check", str(path)])
    out = capsys.readouterr().out
    assert ("2 processes at once compute the 1024-token reference block 1.56x slower than one alone; the "
            "profile's law says 1.04x (1.50x it); at that speed and sharing the median |makespan error| is 0.0%") in out
    assert "note: this host's cores serve 2 processes worse than when the profile was measured" in out


def test_check_cli_says_it_in_words_and_exit_status(kernel_is, tmp_path, capsys):
    truth = known_profile()
    path = tmp_path / "p.json"
    truth.save(path)
    kernel_is(truth)
    assert main(["calibrate", "--check", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path} still predicts this host within 10%" in out
    kernel_is(known_profile(1.25))
    assert main(["calibrate", "--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "no longer predicts" in out and "recalibrate here" in out
    assert main(["calibrate", "--check", str(path), "--tolerance", "0.3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["holds"] is True


def test_from_traces_writes_a_profile_and_compares_held_out_runs(tmp_path, capsys):
    truth = known_profile()
    fit, held = [], []
    for seq in (2048, 4096):
        p = tmp_path / f"fit{seq}.json"
        measured(case(seq), truth).save(p)
        fit.append(str(p))
    for i in range(2):
        p = tmp_path / f"held{i}.json"
        measured(case(6144, "striped", 3), truth).save(p)
        held.append(str(p))
    other = tmp_path / "other.json"
    known_profile(2.0).save(other)
    out = tmp_path / "p.json"
    argv = ["calibrate", "--from-traces", *fit, "--holdout", *held, "--compare", str(other), "-o", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "from these traces: median |makespan error| 0.0%" in text
    assert "predicts the held-out runs better: these traces" in text
    report = json.loads(out.read_text())["report"]
    assert report["holdout"]["better"] == "traces" and len(report["holdout"]["cases"]) == 1
    assert main(argv) == 2 and "exists" in capsys.readouterr().err


def test_from_traces_predicts_the_held_out_runs_by_seeded_plays(tmp_path, capsys):
    """The compared profile kept its host's spread: by default each held-out run is the
    median of 31 seeded plays, as `ringsim validate` predicts it; --replays 1 plays once."""
    import statistics

    from sim.hardware.profile import load_profile

    truth = known_profile()
    fit = []
    for seq in (2048, 4096):
        p = tmp_path / f"fit{seq}.json"
        measured(case(seq), truth).save(p)
        fit.append(str(p))
    held = tmp_path / "held.json"
    sc = case(6144, "striped", 3)
    measured(sc, truth).save(held)
    other = tmp_path / "other.json"
    spread_profile().save(other)
    argv = ["calibrate", "--from-traces", *fit, "--holdout", str(held), "--compare", str(other)]
    assert main([*argv, "-o", str(tmp_path / "a.json")]) == 0
    assert "(each the median of 31 seeded plays)" in capsys.readouterr().out
    row = json.loads((tmp_path / "a.json").read_text())["report"]["holdout"]["cases"][0]
    spread = load_profile(str(other))
    plays = statistics.median(simulate(sc, spread, jitter=seed).makespan_s for seed in range(31))
    assert row["compare"]["predicted_s"] == pytest.approx(plays)
    assert main([*argv, "-o", str(tmp_path / "b.json"), "--replays", "1"]) == 0
    assert "(one play each)" in capsys.readouterr().out
    row = json.loads((tmp_path / "b.json").read_text())["report"]["holdout"]["cases"][0]
    assert row["compare"]["predicted_s"] == pytest.approx(simulate(sc, spread).makespan_s)


@pytest.mark.parametrize("argv,match", [
    ([], "needs one of"),
    (["b.json", "--check", "p.json"], "got BENCH.json and --check"),
    (["--from-traces", "t.json"], "needs -o"),
    (["--check", "p.json", "--holdout", "t.json"], "go with --from-traces"),
    (["--from-traces", "t.json", "-o", "x.json", "--compare", "p.json"], "--compare needs --holdout"),
    (["--from-traces", "t.json", "-o", "x.json", "--holdout", "t.json"], "both fitted and held out"),
    (["--check", "p.json", "--tolerance", "2"], "--tolerance"),
    (["--from-traces", "t.json", "-o", "x.json", "--replays", "3"], "--replays goes with --check or --holdout"),
    (["b.json", "-o", "x.json", "--replays", "3"], "--replays goes with --check or --holdout"),
    (["--from-traces", "t.json", "-o", "x.json", "--holdout", "h.json", "--replays", "0"],
     "--replays must be at least 1"),
    (["--check", "p.json", "--replays", "0"], "--replays must be at least 1"),
])
def test_bad_combinations_get_one_line(argv, match, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    truth = known_profile()
    truth.save(tmp_path / "p.json")
    measured(case(2048), truth).save(tmp_path / "t.json")
    assert main(["calibrate", *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


def test_saved_measured_traces_load_for_calibration(tmp_path):
    p = tmp_path / "t.trace.npz"
    measured(case(2048), known_profile()).save(p)
    assert Trace.load(p).source == "measured"
    assert simulate(case(2048), known_profile()).source == "simulated"
