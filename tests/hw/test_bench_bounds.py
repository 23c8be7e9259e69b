"""The physical-bound checks of `ringsim hw bench`, as pure functions, against hand numbers."""

import pytest

from hw.bench.bounds import concurrency_violation, measure_within_bounds, ring_slowdown, ring_violation


def test_ring_slowdown_is_mean_shared_over_median_alone():
    # alone: median of (1, 2, 9) is 2; shared: mean of (1, 1, 10) is 4
    assert ring_slowdown([1.0, 1.0, 10.0], [1.0, 2.0, 9.0]) == pytest.approx(2.0)
    assert ring_slowdown([], [1.0]) == 0.0


@pytest.mark.parametrize("processes,threads,mean_s,bad", [
    (3, 1, 1.06, True),     # 3 busy processes on 2 cores: at least 1.5x; 1.06x is impossible
    (3, 1, 1.45, False),    # within 5% of 1.5x: noise
    (3, 1, 1.40, True),     # 1.40 < 0.95 * 1.5
    (2, 1, 1.00, False),    # two fit on two cores
    (2, 2, 1.50, True),     # 2 x 2 threads on 2 cores: at least 2x
    (1, 1, 0.50, False),    # the one alone is the reference
])
def test_concurrency_bound(processes, threads, mean_s, bad):
    entry = {"processes": processes, "threads_per_rank": threads, "time_s": [mean_s, mean_s]}
    why = concurrency_violation(entry, 1.0, cores=2)
    assert (why is not None) == bad
    if bad:
        assert "\n" not in why and "physical" in why


def test_concurrency_bound_needs_the_one_alone():
    assert concurrency_violation({"processes": 3, "threads_per_rank": 1, "time_s": [1.0]}, None, 2) is None


def test_ring_bound_checks_the_compute_slowdown():
    entry = {"processes": 4, "threads_per_rank": 1, "compute_slowdown": 1.8, "transfer_slowdown": 0.5}
    assert "2.00x" in ring_violation(entry, cores=2)     # 4 ranks on 2 cores: at least 2x
    assert ring_violation({**entry, "compute_slowdown": 2.3}, cores=2) is None


def test_a_violation_is_measured_again_then_rejected(capsys):
    calls = []

    def measure():
        calls.append(1)
        return {"processes": 3, "threads_per_rank": 1, "compute_slowdown": 1.06}

    entry = measure_within_bounds(measure, lambda e: ring_violation(e, 2), "ring conditions 3 ranks")
    assert len(calls) == 3 and entry["attempts"] == 3 and "1.50x" in entry["rejected"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ring conditions 3 ranks: rejected after 3 attempts")


def test_a_repeat_within_the_bound_is_kept(capsys):
    values = iter([1.06, 1.7])
    entry = measure_within_bounds(
        lambda: {"processes": 3, "threads_per_rank": 1, "compute_slowdown": next(values)},
        lambda e: ring_violation(e, 2), "ring")
    assert entry["compute_slowdown"] == 1.7 and entry["attempts"] == 2 and "rejected" not in entry
    assert capsys.readouterr().err == ""


def test_a_slowdown_far_above_its_bound_is_measured_again_and_the_least_kept():
    # 3 processes on 2 cores: bound 1.5x; 2.8x is more than 1.5 times that, 1.6x is not
    values = iter([2.8, 1.6, 9.9])
    entry = measure_within_bounds(
        lambda: {"processes": 3, "threads_per_rank": 1, "bound": 1.5, "slow": next(values)},
        lambda e: None, "concurrency 3", slowdown=lambda e: e["slow"])
    assert entry["slow"] == 1.6 and entry["attempts"] == 2 and entry["attempt_slowdowns"] == [2.8, 1.6]
    # every attempt suspect: the least slowed of the three
    values = iter([3.0, 2.6, 2.9])
    entry = measure_within_bounds(
        lambda: {"processes": 3, "threads_per_rank": 1, "bound": 1.5, "slow": next(values)},
        lambda e: None, "concurrency 3", slowdown=lambda e: e["slow"])
    assert entry["slow"] == 2.6 and entry["attempts"] == 3 and entry["attempt_slowdowns"] == [3.0, 2.6, 2.9]


def test_a_second_pass_over_a_compute_entry_joins_it_and_lists_every_pass():
    from hw.bench.bounds import add_pass

    entry = {"time_s": [2.0, 2.2, 2.1], "median_s": 2.1, "rate_flops": 10.0, "flops": 21.0, "reference_s": [1.3]}
    add_pass(entry, {"time_s": [1.5, 1.4, 1.6], "median_s": 1.5, "rate_flops": 14.0, "reference_s": [1.0, 1.2]})
    assert entry == {"time_s": [2.0, 2.2, 2.1, 1.5, 1.4, 1.6], "median_s": (1.6 + 2.0) / 2,
                     "rate_flops": 21.0 / 1.8, "flops": 21.0, "reference_s": [1.3, 1.0, 1.2],
                     "pass_medians_s": [2.1, 1.5], "pass_references_s": [1.3, 1.1]}
    # a third pass is listed as well; an entry without references (GPUs) lists none
    add_pass(entry, {"time_s": [3.0], "median_s": 3.0, "reference_s": [2.0]})
    assert entry["pass_medians_s"] == [2.1, 1.5, 3.0] and entry["pass_references_s"] == [1.3, 1.1, 2.0]
    gpu = {"time_s": [1.0], "median_s": 1.0}
    add_pass(gpu, {"time_s": [3.0], "median_s": 3.0})
    assert gpu == {"time_s": [1.0, 3.0], "median_s": 2.0, "pass_medians_s": [1.0, 3.0]}


def test_passes_over_a_paired_compute_entry_list_each_passs_median_ratio():
    from hw.bench.bounds import add_pass

    entry = {"time_s": [2.0, 2.2], "median_s": 2.1, "flops": 21.0, "reference_s": [1.0, 1.1, 1.0],
             "speed_ratios": [2.0, 2.1]}
    add_pass(entry, {"time_s": [1.5], "median_s": 1.5, "reference_s": [0.5, 0.7], "speed_ratios": [2.5]})
    assert entry["speed_ratios"] == [2.0, 2.1, 2.5] and entry["pass_speed_ratios"] == [2.05, 2.5]
    assert entry["pass_references_s"] == [1.0, 0.6]


def test_a_paired_compute_entry_reads_every_sample_against_the_references_around_it(monkeypatch):
    """On a fake clock: the reference block takes 10, 20, 20, 10 ms around three samples
    of the entry of 30, 50 and 45 ms (the host slow in the middle). By hand, the calls go
    reference, entry, reference, ... after the entry's warm-up and one of the
    reference's, and the ratios are 30/15, 50/20 and 45/15."""
    import hw.bench.measure

    clock = [0.0]
    calls: list[str] = []
    durations = {"ref": iter([0.005, 0.010, 0.020, 0.020, 0.010]), "entry": iter([0.001, 0.030, 0.050, 0.045])}

    class Ops:
        def __init__(self, name):
            self.name = name

        def forward(self, q, k, v, causal):
            calls.append(self.name)
            clock[0] += next(durations[self.name])

        def describe(self):
            return self.name

    class FakeTime:
        @staticmethod
        def perf_counter():
            return clock[0]

    monkeypatch.setattr(hw.bench.measure, "time", FakeTime)          # the clock measure_compute_paired reads
    shape = {"kind": "fwd", "dtype": "fp32", "batch": 1, "heads": 1, "kv_heads": 1, "head_dim": 8,
             "q_tokens": 4, "kv_tokens": 4, "mask": "full", "flops": 1.0}
    e = hw.bench.measure.measure_compute_paired(shape, Ops("entry"), dict(shape), Ops("ref"), samples=3, warmup=1)
    assert calls == ["entry", "ref", "ref", "entry", "ref", "entry", "ref", "entry", "ref"]
    assert e["time_s"] == pytest.approx([0.030, 0.050, 0.045])
    assert e["reference_s"] == pytest.approx([0.010, 0.020, 0.020, 0.010])
    assert e["speed_ratios"] == pytest.approx([2.0, 2.5, 3.0])
    assert e["median_s"] == pytest.approx(0.045) and e["impl"] == "entry"


def test_an_entry_with_rounds_is_checked_by_the_median_of_its_rounds():
    """Three processes on two cores, three rounds: the host at half speed for two (32 ms
    shared over 20 alone: 1.6x each), at full speed for the third (mean 17 ms over 10:
    1.7x). Their median, 1.6x, keeps the 1.5x bound; all samples at once (mean 27 ms over
    the median alone, 20 ms: 1.35x) would not. With `median`, each round's medians: 1.6,
    1.6, 1.7. Without rounds, all samples at once."""
    from hw.bench.bounds import round_slowdown

    rounds = [{"alone_s": [0.020] * 3, "time_s": [0.032] * 2}, {"alone_s": [0.020] * 3, "time_s": [0.032] * 2},
              {"alone_s": [0.010] * 3, "time_s": [0.016, 0.018]}]
    entry = {"processes": 3, "threads_per_rank": 1, "rounds": rounds,
             "alone_s": [t for r in rounds for t in r["alone_s"]], "time_s": [t for r in rounds for t in r["time_s"]]}
    assert round_slowdown(entry) == pytest.approx(1.6) and round_slowdown(entry, median=True) == pytest.approx(1.6)
    assert concurrency_violation(entry, 0.020, cores=2) is None
    flat = {k: v for k, v in entry.items() if k != "rounds"}
    assert round_slowdown(flat) == pytest.approx(0.027 / 0.020)
    assert "physical" in concurrency_violation(flat, 0.020, cores=2)
    assert round_slowdown({"time_s": [], "alone_s": []}) == 0.0
