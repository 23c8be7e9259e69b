"""Validation arithmetic on traces whose errors are known by construction."""

import statistics

import pytest

from hw.validate import markdown, matrix, summarize
from sim.calibration.validation import Case, compare_again, compare_case
from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.scenario.config import Scenario, Workload
from sim.trace.format import Span, Trace
from sim.trace.metrics import step_durations


def sim_trace(layout="zigzag", causal=True, n=4, seq=4096):
    hw = Hardware(gpu=Gpu(achieved_tflops=0.02, launch_overhead_us=20.0),
                  link=Link(bandwidth_gbps=1.0, latency_us=50.0))
    w = Workload(seq=seq, heads=4, kv_heads=4, head_dim=32, dtype="fp32", causal=causal)
    return simulate(Scenario(workload=w, hardware=hw, n_gpus=n, layout=layout))


def scaled(trace, factor, shift=0.0):
    spans = [Span(s.rank, s.stream, s.kind, s.step, shift + s.start_s * factor,
                  shift + s.end_s * factor, s.flops, s.bytes, s.q_chunks, s.kv_chunks, s.peer)
             for s in trace.spans]
    return Trace("measured", trace.n_gpus, spans, trace.config, {}, {})


def test_errors_of_a_uniformly_slower_measurement():
    sim = sim_trace()
    measured = [scaled(sim, f, shift=5.0) for f in (1.05, 1.10, 1.20)]
    row = compare_case(Case("zigzag", True, 4, 4096), measured, sim)
    assert row["measured_median_s"] == pytest.approx(1.10 * sim.makespan_s)
    assert row["measured_min_s"] == pytest.approx(1.05 * sim.makespan_s)
    assert row["error"] == pytest.approx(1 / 1.10 - 1)
    assert row["within_range"] is False
    # every step is off by the same factor
    assert row["step_median_abs_error"] == pytest.approx(1 - 1 / 1.10)
    assert row["step_max_abs_error"] == pytest.approx(1 - 1 / 1.10)
    assert row["parts"]["compute_s"]["error"] == pytest.approx(1 / 1.10 - 1)
    cv = (sum((f - 1.1167) ** 2 for f in (1.05, 1.10, 1.20)) / 2) ** 0.5 / 1.1167
    assert row["measured_cv"] == pytest.approx(cv, rel=1e-3)


def test_a_row_predicted_again_by_the_same_runs_is_the_same_row():
    sim = sim_trace()
    measured = [scaled(sim, f, shift=2.0) for f in (0.95, 1.05, 1.30)]
    row = compare_case(Case("zigzag", True, 4, 4096), measured, sim)
    assert compare_again(row, sim) == row


def test_a_row_predicted_again_is_scored_against_what_the_report_kept():
    sim = sim_trace()
    row = compare_case(Case("zigzag", True, 4, 4096), [scaled(sim, f) for f in (1.0, 1.1, 1.2)], sim)
    again = compare_again(row, scaled(sim, 1.21))
    # measured median 1.1x, the new prediction 1.21x: 10% long, past the measured max 1.2x
    assert again["error"] == pytest.approx(1.21 / 1.1 - 1)
    assert again["within_range"] is False
    assert again["step_median_abs_error"] == pytest.approx(1.21 / 1.1 - 1)
    assert again["parts"]["compute_s"]["error"] == pytest.approx(1.21 / 1.1 - 1)
    assert [(s["rank"], s["step"]) for s in again["steps"]] == [(s["rank"], s["step"]) for s in row["steps"]]
    assert again["measured_cv"] == row["measured_cv"] and again["repeats"] == 3


def test_a_row_without_its_measurement_is_a_one_line_error():
    sim = sim_trace()
    row = compare_case(Case("zigzag", True, 4, 4096), [sim], sim)
    del row["steps"]
    with pytest.raises(RingsimError, match="no usable measurement"):
        compare_again(row, sim)


def test_a_prediction_inside_the_spread_is_in_range():
    sim = sim_trace(layout="contiguous")
    row = compare_case(Case("contiguous", True, 4, 4096), [scaled(sim, f) for f in (0.9, 1.0, 1.1)], sim)
    assert row["within_range"] and row["abs_error"] == pytest.approx(0.0, abs=1e-12)
    s = summarize([row])
    assert s["median_abs_error"] == pytest.approx(0.0, abs=1e-12)
    assert s["cases_within_range_or_tolerance"] == 1


def test_step_durations_partition_each_ranks_busy_time():
    trace = sim_trace(layout="contiguous")
    steps = step_durations(trace)
    for rank in range(4):
        last = max(s.end_s for s in trace.spans if s.stream == "compute" and s.rank == rank)
        assert sum(d for (r, _), d in steps.items() if r == rank) == pytest.approx(last)
    # contiguous causal: rank 0 skips every block after its own
    assert [k for k in steps if k[0] == 0] == [(0, 0)]


def test_quick_matrix_has_at_least_twelve_cases_over_three_gpu_counts():
    cases = matrix(quick=True)
    assert len(cases) >= 12
    assert {c.n_gpus for c in cases} == {2, 3, 4}
    assert {c.layout for c in cases} == {"contiguous", "striped", "zigzag"}
    assert {c.causal for c in cases} == {True, False}
    assert len({c.seq for c in cases}) >= 2
    assert len({c.key for c in cases}) == len(cases)


def test_quick_matrix_is_forward_at_two_sizes_and_forward_backward_at_the_smaller():
    cases = matrix(quick=True)
    # per GPU count and size: 3 causal layouts and contiguous without a mask
    fwd = [c for c in cases if c.pass_ == "fwd"]
    both = [c for c in cases if c.pass_ == "fwdbwd"]
    assert len(fwd) == 3 * 2 * 4 and len(both) == 3 * 1 * 4 and len(cases) == 36
    assert {c.seq for c in fwd} == {3072, 6144} and {c.seq for c in both} == {3072}
    assert {c.scheme for c in cases} == {"ring"}
    # cases of one GPU count follow one another (they share processes)
    sizes = [c.n_gpus for c in cases]
    assert sum(a != b for a, b in zip(sizes, sizes[1:])) == 5


def test_full_matrix_covers_every_pass_and_scheme():
    cases = matrix(quick=False)
    assert {c.pass_ for c in cases} == {"fwd", "bwd", "fwdbwd"}
    assert {c.seq for c in cases} == {3072, 6144, 12288}
    # per pass, size and GPU count: ring 3 layouts x 2 masks, allgather zigzag x 2 masks,
    # ulysses 2 masks where the GPU count divides the 8 heads (2 and 4, not 3)
    assert len(cases) == 3 * 3 * (3 * (6 + 2) + 2 * 2)
    assert {c.layout for c in cases if c.scheme == "allgather"} == {"zigzag"}
    assert {c.n_gpus for c in cases if c.scheme == "ulysses"} == {2, 4}
    wide = matrix(quick=False, schemes=["ulysses"], heads=12, kv_heads=4, gpu_counts=[2, 3, 4])
    assert {c.n_gpus for c in wide} == {2, 4}                  # 3 does not divide the 4 K/V heads
    assert {c.n_gpus for c in matrix(quick=True, schemes=["ulysses"], heads=12, kv_heads=12)} == {2, 3, 4}


def test_markdown_lists_every_case():
    sim = sim_trace()
    rows = [compare_case(Case("zigzag", True, 4, 4096), [scaled(sim, f) for f in (1.0, 1.1)], sim)]
    md = markdown({"summary": summarize(rows), "cases": rows, "measured_on": {"device": "x"}})
    assert md.count("| ring/zigzag/causal/gpus4/seq4096/fwd |") == 1


# Hand-built two-rank traces. Each rank computes step 0 then step 1 (c seconds each) and
# sends one K/V block (x seconds). Rank 1 starts `skew` after rank 0; rank 0 waits `w`
# on K/V between its steps (exposed); a rank that ends early idles to the makespan.

def two_ranks(t0, skew, c, w, x, source="measured"):
    r0_end, r1_end = t0 + 2 * c + w, t0 + skew + 2 * c
    spans = [Span(0, "compute", "fwd", 0, t0, t0 + c), Span(0, "send", "kv", 0, t0, t0 + x, peer=1),
             Span(0, "compute", "fwd", 1, t0 + c + w, r0_end),
             Span(1, "compute", "fwd", 0, t0 + skew, t0 + skew + c),
             Span(1, "send", "kv", 0, t0 + skew, t0 + skew + x, peer=0),
             Span(1, "compute", "fwd", 1, t0 + skew + c, r1_end)]
    if w > 0:
        spans.append(Span(0, "wait", "kv", 1, t0 + c, t0 + c + w))
    for rank, end in ((0, r0_end), (1, r1_end)):
        if end < max(r0_end, r1_end):
            spans.append(Span(rank, "wait", "idle", 1, end, max(r0_end, r1_end)))
    return Trace(source, 2, spans)


def hand_built_case():
    """simulated: both ranks compute [0, 2] and [2, 4], send for 1 s, never wait.

    measured, three repeats (start t0, skew, c, w, x):
      A (100, 0.5, 2.5, 0.25, 1.5): rank 0 ends 105.25, rank 1 105.5; makespan 5.5;
         steps (0,0) 2.5, (0,1) 2.75, (1,0) 3.0 (it began 0.5 late), (1,1) 2.5;
         compute 10, mean transfer 1.5, exposed 0.25 (the idle 0.25 is not), skew 0.5
      B (7, 0.25, 2.25, 0.5, 1.25): ends 12.0 and 11.75; makespan 5.0;
         steps 2.25, 2.75, 2.5, 2.25; compute 9, transfer 1.25, exposed 0.5, skew 0.25
      C (0, 1.0, 2.75, 0, 2.0): ends 5.5 and 6.5; makespan 6.5;
         steps 2.75, 2.75, 3.75, 2.75; compute 11, transfer 2.0, exposed 0, skew 1.0
    """
    sim = two_ranks(0.0, 0.0, 2.0, 0.0, 1.0, source="simulated")
    measured = [two_ranks(100.0, 0.5, 2.5, 0.25, 1.5), two_ranks(7.0, 0.25, 2.25, 0.5, 1.25),
                two_ranks(0.0, 1.0, 2.75, 0.0, 2.0)]
    return compare_case(Case("zigzag", True, 2, 64), measured, sim)


def test_makespan_error_and_spread_of_hand_built_traces():
    row = hand_built_case()
    assert (row["measured_min_s"], row["measured_median_s"], row["measured_max_s"]) == \
        (pytest.approx(5.0), pytest.approx(5.5), pytest.approx(6.5))
    assert row["simulated_s"] == pytest.approx(4.0)
    assert row["error"] == pytest.approx((4.0 - 5.5) / 5.5)          # -3/11
    assert row["abs_error"] == pytest.approx(3 / 11)
    assert row["within_range"] is False                                # 4 < 5
    # sample standard deviation of (5, 5.5, 6.5) over their mean 17/3
    mean = 17 / 3
    sd = (((5 - mean) ** 2 + (5.5 - mean) ** 2 + (6.5 - mean) ** 2) / 2) ** 0.5
    assert row["measured_cv"] == pytest.approx(sd / mean)


def test_makespan_error_splits_into_compute_and_the_time_outside_it():
    """The hand-built case: simulated, each rank computes 4 of a 4 s run, nothing outside;
    measured, the median compute 10 over two ranks (5 each) of a 5.5 s median makespan.
    The compute part is (4 - 5) / 5.5 = -2/11, the rest 0 - (5.5 - 5) over 5.5 = -1/11,
    and the two add up to the error, -3/11."""
    row = hand_built_case()
    assert row["error_parts"]["compute"] == pytest.approx(-2 / 11)
    assert row["error_parts"]["outside_compute"] == pytest.approx(-1 / 11)
    # a measurement that computes twice as long and waits as simulated: all of it is compute
    sim = two_ranks(0.0, 0.0, 2.0, 0.0, 1.0, source="simulated")
    slow = compare_case(Case("zigzag", True, 2, 64), [two_ranks(0.0, 0.0, 4.0, 0.0, 1.0)], sim)
    assert slow["error"] == pytest.approx(-0.5)
    assert slow["error_parts"] == {"compute": pytest.approx(-0.5), "outside_compute": pytest.approx(0.0, abs=1e-12)}
    # the summary takes each part's median, also for a row written before the parts were
    old = {k: v for k, v in slow.items() if k != "error_parts"}
    s = summarize([row, old, row])
    assert s["median_error"] == pytest.approx(-3 / 11)
    assert s["median_error_parts"] == {"compute": pytest.approx(-2 / 11), "outside_compute": pytest.approx(-1 / 11)}
    md = markdown({"summary": s, "cases": [row, old, row], "measured_on": {"device": "x"}})
    assert "median makespan error -27.3%" in md and "the mean rank's compute -18.2%" in md
    assert "the time outside it (waits on transfers and on slower ranks, skew, the time between blocks) -9.1%" in md


def test_several_seeded_plays_count_by_their_median_as_the_repeats_do():
    """The three measured runs above, played back as three simulated plays against the
    simulated run as the measurement: the prediction is their median makespan, 5.5; each
    step's the median of the plays' (2.5, 2.75, 3.0, 2.5, by hand above); compute and
    transfer their medians, 10 and 1.5; the plays' spread is [5.0, 6.5]."""
    sim = two_ranks(0.0, 0.0, 2.0, 0.0, 1.0)
    plays = [two_ranks(100.0, 0.5, 2.5, 0.25, 1.5, source="simulated"),
             two_ranks(7.0, 0.25, 2.25, 0.5, 1.25, source="simulated"),
             two_ranks(0.0, 1.0, 2.75, 0.0, 2.0, source="simulated")]
    row = compare_case(Case("zigzag", True, 2, 64), [sim], plays)
    assert row["simulated_s"] == pytest.approx(5.5) and row["simulated_plays"] == 3
    assert (row["simulated_min_s"], row["simulated_max_s"]) == (pytest.approx(5.0), pytest.approx(6.5))
    assert row["error"] == pytest.approx((5.5 - 4.0) / 4.0)
    steps = {(s["rank"], s["step"]): s["simulated_s"] for s in row["steps"]}
    assert steps == {(0, 0): pytest.approx(2.5), (0, 1): pytest.approx(2.75), (1, 0): pytest.approx(3.0),
                     (1, 1): pytest.approx(2.5)}
    assert row["parts"]["compute_s"]["simulated"] == pytest.approx(10.0)
    assert row["parts"]["mean_transfer_s"]["simulated"] == pytest.approx(1.5)
    # one trace is one play
    assert compare_case(Case("zigzag", True, 2, 64), [sim], plays[0])["simulated_plays"] == 1


def test_a_profile_with_a_host_spread_is_played_with_seeds_and_one_without_once():
    """simulate_replays: asked for REPLAYS plays, a CPU host with a measured spread gives
    that many seeded 0, 1, ..., which differ; the same profile without the spread, or
    asked for one play (the default), gives one play at the mean rate, the unseeded
    simulation."""
    import dataclasses

    from hw.config import RunConfig
    from sim.calibration.validation import REPLAYS, simulate_replays
    from sim.hardware.contention import Contention, Host
    from sim.hardware.profile import ComputeGroup, LinkFit, Profile

    groups = {("fp32", m, k): ComputeGroup("fp32", m, k, (), 1e-4, 1e9)
              for m in ("full", "diagonal") for k in ("fwd", "bwd")}
    host = Host(cores=2, threads_per_rank=1, spread=((2.0, 0.05, 0.1),))
    spread = Profile("fit", groups, LinkFit(5e-5, 1e9), Contention(host=host))
    flat = dataclasses.replace(spread, contention=Contention(host=dataclasses.replace(host, spread=None)))
    w = Workload(seq=96, heads=2, kv_heads=2, head_dim=8, dtype="fp32", causal=True)
    sc = RunConfig(workload=w, n_gpus=2, layout="zigzag").scenario()
    plays = simulate_replays(sc, spread, REPLAYS)
    assert len(plays) == REPLAYS and [t.meta["jitter"] for t in plays] == list(range(REPLAYS))
    assert len({t.makespan_s for t in plays}) > REPLAYS // 2
    once = simulate_replays(sc, flat, REPLAYS)
    assert len(once) == 1 and "jitter" not in once[0].meta
    assert once[0].makespan_s == simulate(sc, spread).makespan_s == simulate_replays(sc, spread)[0].makespan_s
    assert len(simulate_replays(sc, spread)) == 1


def test_step_errors_of_hand_built_traces():
    row = hand_built_case()
    # medians over the repeats: (0,0) 2.5, (0,1) 2.75, (1,0) 3.0, (1,1) 2.5; simulated 2 each
    expected = {(0, 0): (2.5, 0.5 / 2.5), (0, 1): (2.75, 0.75 / 2.75),
                (1, 0): (3.0, 1.0 / 3.0), (1, 1): (2.5, 0.5 / 2.5)}
    got = {(s["rank"], s["step"]): (s["measured_s"], s["abs_error"]) for s in row["steps"]}
    assert got.keys() == expected.keys()
    for key, (meas, err) in expected.items():
        assert got[key] == (pytest.approx(meas), pytest.approx(err)), key
        assert row["steps"][list(got).index(key)]["simulated_s"] == pytest.approx(2.0)
    assert row["step_median_abs_error"] == pytest.approx((0.2 + 3 / 11) / 2)   # of 0.2, 0.2, 3/11, 1/3
    assert row["step_max_abs_error"] == pytest.approx(1 / 3)


def test_breakdown_of_hand_built_traces_including_the_clock_skew():
    p = hand_built_case()["parts"]
    # medians of (10, 9, 11), (1.5, 1.25, 2.0), (0.25, 0.5, 0) and (0.5, 0.25, 1.0)
    assert p["compute_s"] == {"measured": pytest.approx(10.0), "simulated": pytest.approx(8.0),
                              "error": pytest.approx(-0.2)}
    assert p["mean_transfer_s"] == {"measured": pytest.approx(1.5), "simulated": pytest.approx(1.0),
                                    "error": pytest.approx(-1 / 3)}
    assert p["exposed_comm_s"] == {"measured": pytest.approx(0.25), "simulated": 0.0,
                                   "error": pytest.approx(-1.0)}
    assert p["first_compute_skew_s"]["measured"] == pytest.approx(0.5)
    assert p["first_compute_skew_s"]["simulated"] == 0.0


def test_summary_groups_errors_by_scheme_and_pass():
    row = hand_built_case()
    sim = two_ranks(0.0, 0.0, 2.0, 0.0, 1.0, source="simulated")
    exact = compare_case(Case("zigzag", True, 2, 64, "fwd", "allgather"),
                         [two_ranks(0.0, 0.0, 2.0, 0.0, 1.0), two_ranks(5.0, 0.0, 2.0, 0.0, 1.0)], sim)
    s = summarize([row, exact], max_case_error=0.3)
    assert s["median_abs_error"] == pytest.approx((3 / 11 + 0.0) / 2)
    assert s["worst_case"] == "ring/zigzag/causal/gpus2/seq64/fwd"
    assert s["cases_within_range_or_tolerance"] == 2                   # 3/11 < 0.3; the exact one in range
    assert summarize([row, exact], max_case_error=0.2)["cases_within_range_or_tolerance"] == 1
    # each group scored as the whole report: the hand-built case's steps are medians 2.5,
    # 2.75, 3.0 and 2.5 over its repeats against 2.0 simulated (1/5, 3/11, 1/3, 1/5 off)
    assert s["median_abs_error_by_group"] == {
        "ring/fwd": {"cases": 1, "median_abs_error": pytest.approx(3 / 11), "max_abs_error": pytest.approx(3 / 11),
                     "cases_within_range_or_tolerance": 1, "step_median_abs_error": pytest.approx((1 / 5 + 3 / 11) / 2)},
        "allgather/fwd": {"cases": 1, "median_abs_error": pytest.approx(0.0), "max_abs_error": pytest.approx(0.0),
                          "cases_within_range_or_tolerance": 1, "step_median_abs_error": pytest.approx(0.0)}}
    strict = summarize([row, exact], max_case_error=0.2)["median_abs_error_by_group"]
    assert strict["ring/fwd"]["cases_within_range_or_tolerance"] == 0
    md = markdown({"summary": s, "cases": [row, exact], "measured_on": {"device": "x"}})
    assert ("  - ring/fwd: median |makespan error| 27.3% over 1 cases; worst 27.3%, 1 of 1 inside their range "
            "or within 30%, per-step median |error| 23.6%") in md
    assert "| allgather/zigzag/causal/gpus2/seq64/fwd |" in md
    assert "within 30%: 2 of 2" in md
    assert "| 500000 µs |" in md                                       # rank 1 of the median repeat, 0.5 s late


def test_case_keys_carry_the_scheme():
    assert Case("zigzag", True, 2, 3072, "fwd", "allgather").key == "allgather/zigzag/causal/gpus2/seq3072/fwd"
    assert Case("contiguous", False, 4, 6144, "bwd").key == "ring/contiguous/full/gpus4/seq6144/bwd"
    assert Case("zigzag", True, 2, 64, "fwdbwd", "ulysses").to_dict() == {
        "layout": "zigzag", "causal": True, "n_gpus": 2, "seq": 64, "pass": "fwdbwd", "scheme": "ulysses"}
    # a row of a report written before the GPU count was n_gpus
    old = {"layout": "zigzag", "causal": True, "world_size": 3, "seq": 96, "pass": "fwd"}
    assert Case.from_row(old) == Case("zigzag", True, 3, 96, "fwd")


# `ringsim validate` end to end, with the kernel replaced by prepared traces: every
# measured repeat is the simulator's own trace slowed by a known factor, so each case's
# error is known by hand (simulated / (factor x simulated) - 1).

def write_profile(path):
    from sim.hardware.profile import ComputeGroup, LinkFit, Profile

    # the fit times every block; the one measured point is the reference block of the
    # cases' shape (2 heads x 8: 64 FLOPs per pair, 64 tokens), which `ringsim validate`
    # times again to read the host's speed
    groups = {(m, k): ComputeGroup("fp32", m, k, points, 1e-4, rate)
              for m, k, rate, points in (("full", "fwd", 2e9, ((64.0 * 64 * 64, 3e-4),)),
                                         ("diagonal", "fwd", 1.5e9, ()),
                                         ("full", "bwd", 1e9, ()), ("diagonal", "bwd", 0.8e9, ()))}
    Profile("fit", {("fp32", m, k): g for (m, k), g in groups.items()}, LinkFit(5e-5, 1e9),
            measured_on={"device": "test cpu"}).save(path)


class FakeKernel:
    """Stands in for hw.validate_cli.measure: counts the cases it is asked to run."""

    def __init__(self, profile_path, factors=(1.2, 1.25, 1.3), device="bench cpu"):
        from sim.hardware.profile import load_profile

        self.profile = load_profile(profile_path)
        self.factors = factors
        self.device = device
        self.runs = []
        self.batches = []

        self.compute_only = False
        """True: each repeat is the simulation on a host computing `factor` times slower
        (links as they are), not the whole trace stretched."""
        self.sharing = 1.0
        """With compute_only: the host's cores also serve two processes this many times
        worse than the profile's law (sim.hardware.profile.Profile.at_host_state)."""

    def __call__(self, cfgs):
        self.batches.append([cfg.n_gpus for cfg in cfgs])
        out = []
        for cfg in cfgs:
            self.runs.append(cfg)
            sim = simulate(cfg.scenario(), self.profile)
            if self.compute_only:
                traces = [scaled(simulate(cfg.scenario(), self.profile.at_host_state(f, self.sharing)), 1.0, shift=3.0)
                          for f in self.factors[:cfg.repeats]]
            else:
                traces = [scaled(sim, f, shift=3.0) for f in self.factors[:cfg.repeats]]
            for t in traces:
                t.hardware = {"kind": "measured", "device": self.device}
            out.append(traces)
        return out


ARGS = ["validate", "--quick", "--gpus", "2", "--seqs", "96", "--passes", "fwd",
        "--heads", "2", "--kv-heads", "2", "--head-dim", "8", "--repeats", "3"]
QUICK_KEYS = ["ring/contiguous/causal/gpus2/seq96/fwd", "ring/contiguous/full/gpus2/seq96/fwd",
              "ring/striped/causal/gpus2/seq96/fwd", "ring/zigzag/causal/gpus2/seq96/fwd"]


@pytest.fixture
def cli(tmp_path, monkeypatch):
    from hw import validate_cli
    from sim.cli.main import main

    profile = tmp_path / "profile.json"
    write_profile(profile)
    kernel = FakeKernel(profile)
    monkeypatch.setattr(validate_cli, "measure", kernel)
    readings = []                        # the host's speed: as calibrated unless a test says otherwise

    def host_speed(profile, **kw):
        factor = readings.pop(0) if readings else 1.0
        return {"tokens": 64, "profile_s": 3e-4, "now_s": 3e-4 * factor, "factor": factor}
    monkeypatch.setattr("hw.reference.host_speed", host_speed)
    sharing = []                         # the host's sharing: none read unless a test says so

    def host_sharing(profile, **kw):
        if not sharing:
            return None
        slowdown, law = sharing.pop(0)
        return {"tokens": 64, "processes": 2, "slowdown": slowdown, "profile_slowdown": law,
                "factor": slowdown / law}
    monkeypatch.setattr("hw.reference.host_sharing", host_sharing)

    def run(*extra):
        return main([*ARGS, "--profile", str(profile), *extra])
    run.kernel, run.profile, run.out, run.readings = kernel, profile, tmp_path / "report.json", readings
    run.sharing = sharing
    return run


def test_validate_reports_every_case_with_the_error_made_by_hand(cli, capsys):
    import json

    assert cli("--out", str(cli.out)) == 0
    assert [c.workload.seq for c in cli.kernel.runs] == [96] * 4
    report = json.loads(cli.out.read_text())
    assert [r["key"] for r in report["cases"]] == QUICK_KEYS and report["complete"] is True
    for r in report["cases"]:
        assert r["error"] == pytest.approx(1 / 1.25 - 1)              # median repeat is 1.25x slower
        assert r["measured_min_s"] == pytest.approx(1.2 * r["simulated_s"])
    assert report["measured_on"]["device"] == "bench cpu"
    assert report["profile_compute"] == {"fp32/full/fwd": "fp32/full/fwd", "fp32/diagonal/fwd": "fp32/diagonal/fwd"}
    assert "| ring/zigzag/causal/gpus2/seq96/fwd |" in capsys.readouterr().out


@pytest.mark.parametrize("flags, status", [
    (["--max-median-error", "0.25"], 0),   # |1/1.25 - 1| = 0.2
    (["--max-median-error", "0.15"], 1),
    (["--max-case-error", "0.21"], 0),
    (["--max-case-error", "0.19"], 1),     # every case below its measured minimum and off by 0.2
    (["--max-median-error", "0.25", "--max-case-error", "0.19"], 1),
    ([], 0),
])
def test_thresholds_set_the_exit_status(cli, capsys, flags, status):
    assert cli(*flags) == status
    err = capsys.readouterr().err
    assert ("validation failed" in err) == (status == 1)


def test_a_prediction_inside_the_measured_spread_passes_any_case_threshold(cli):
    cli.kernel.factors = (0.9, 1.25, 1.3)                  # min below the prediction: in range
    assert cli("--max-case-error", "0.01") == 0
    assert cli("--max-median-error", "0.19") == 1           # the median is still off by 0.2


def test_a_report_made_with_other_settings_is_refused_untouched(cli, capsys):
    assert cli("--out", str(cli.out)) == 0
    before = cli.out.read_bytes()
    capsys.readouterr()
    cli.kernel.runs.clear()
    assert cli("--out", str(cli.out), "--seed", "1") == 2
    err = capsys.readouterr().err.strip()
    assert err == f"ringsim: error: {cli.out} holds a report with other settings; pass --force to start over"
    assert cli.out.read_bytes() == before and cli.kernel.runs == []
    assert cli("--out", str(cli.out), "--seed", "1", "--force") == 0
    assert len(cli.kernel.runs) == 4


def test_a_resumed_run_measures_only_the_missing_cases(cli):
    import json

    assert cli("--out", str(cli.out)) == 0
    report = json.loads(cli.out.read_text())
    del report["cases"][1:3]                               # as if stopped before these two
    report["complete"] = False
    cli.out.write_text(json.dumps(report))
    cli.kernel.runs.clear()
    assert cli("--out", str(cli.out)) == 0
    assert [(c.layout, c.workload.causal) for c in cli.kernel.runs] == [("contiguous", False), ("striped", True)]
    resumed = json.loads(cli.out.read_text())
    assert [r["key"] for r in resumed["cases"]] == QUICK_KEYS and resumed["complete"] is True


def test_a_resumed_complete_run_measures_nothing_and_keeps_measured_on(cli):
    import json

    assert cli("--out", str(cli.out)) == 0
    first = json.loads(cli.out.read_text())
    cli.kernel.runs.clear()
    assert cli("--out", str(cli.out)) == 0
    assert cli.kernel.runs == []
    again = json.loads(cli.out.read_text())
    assert again["measured_on"] == first["measured_on"] == {"kind": "measured", "device": "bench cpu"}
    assert again["cases"] == first["cases"]


def test_schemes_are_measured_and_simulated_with_their_own_scheme(cli):
    import json

    assert cli("--out", str(cli.out), "--schemes", "allgather", "ulysses", "--gpus", "2", "3") == 0
    keys = [r["key"] for r in json.loads(cli.out.read_text())["cases"]]
    # allgather on the zigzag layout at both sizes; ulysses where the degree divides the 2 heads
    assert keys == ["allgather/zigzag/causal/gpus2/seq96/fwd", "allgather/zigzag/full/gpus2/seq96/fwd",
                    "ulysses/contiguous/causal/gpus2/seq96/fwd", "ulysses/contiguous/full/gpus2/seq96/fwd",
                    "allgather/zigzag/causal/gpus3/seq96/fwd", "allgather/zigzag/full/gpus3/seq96/fwd"]
    assert [(c.scheme, c.n_gpus) for c in cli.kernel.runs] == \
        [("allgather", 2), ("allgather", 2), ("ulysses", 2), ("ulysses", 2), ("allgather", 3), ("allgather", 3)]
    assert cli.kernel.batches == [[2, 2, 2, 2], [3, 3]]         # one set of processes per GPU count
    for cfg in cli.kernel.runs:
        assert cfg.scenario().describe()["scheme"] == cfg.scheme


def test_bad_settings_are_one_line_errors(cli, capsys):
    assert cli("--repeats", "1") == 2
    assert capsys.readouterr().err.strip() == "ringsim: error: --repeats must be at least 2 to report a spread"
    assert cli("--schemes", "ulysses", "--gpus", "3") == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "ringsim: error: no cases to run: no scheme fits these GPU counts and heads"
    assert cli("--seqs", "50") == 2                         # 50 tokens do not cut into 4 zigzag chunks
    assert "ringsim: error: sequence length 50" in capsys.readouterr().err
    assert cli.kernel.runs == []


def test_backward_blocks_are_timed_from_the_profiles_backward_groups(tmp_path):
    """What the validation simulates for a fwdbwd case: every backward block takes the
    bwd group's time (overhead + FLOPs / the bwd rate), every forward block the fwd
    group's; without bwd groups, backward falls back to the forward's and says so."""
    from hw.validate_cli import profile_compute_groups
    from sim.hardware.profile import load_profile

    write_profile(tmp_path / "p.json")
    profile = load_profile(tmp_path / "p.json")
    rates = {("full", "fwd"): 2e9, ("diagonal", "fwd"): 1.5e9, ("full", "bwd"): 1e9, ("diagonal", "bwd"): 0.8e9}
    w = Workload(seq=96, heads=2, kv_heads=2, head_dim=8, dtype="fp32", causal=True, pass_="fwdbwd")
    trace = simulate(Scenario(workload=w, n_gpus=2, layout="zigzag"), profile)
    seen = set()
    for s in trace.spans:
        if s.stream != "compute":
            continue
        # zigzag causal on 2 ranks: the diagonal block at the first step of each pass
        # (forward steps 0-1, backward 2-3), full blocks after
        mask = "diagonal" if s.step in (0, 2) else "full"
        assert s.duration_s == pytest.approx(1e-4 + s.flops / rates[(mask, s.kind)]), s
        seen.add((mask, s.kind))
    assert seen == set(rates)
    cases = [Case("zigzag", True, 2, 96, "fwdbwd")]
    assert profile_compute_groups(profile, "fp32", cases) == {
        "fp32/full/bwd": "fp32/full/bwd", "fp32/diagonal/bwd": "fp32/diagonal/bwd",
        "fp32/full/fwd": "fp32/full/fwd", "fp32/diagonal/fwd": "fp32/diagonal/fwd"}
    fwd_only = type(profile)("fit", {k: g for k, g in profile.groups.items() if k[2] == "fwd"}, profile.link)
    assert profile_compute_groups(fwd_only, "fp32", cases)["fp32/diagonal/bwd"] == "fp32/diagonal/fwd (fallback)"


def test_batches_hold_one_gpu_count_and_at_most_batch_cases():
    from hw.validate_cli import BATCH, _batches

    cases = [Case(layout, True, ws, 96 * (i + 1))
             for layout, ws, n in (("zigzag", 2, BATCH + 3), ("zigzag", 3, 2), ("striped", 2, 1))
             for i in range(n)]
    done = {cases[1].key: {}}
    batches = _batches(cases, done)
    assert [len(b) for b in batches] == [BATCH, 2, 2, 1]           # 10 left on 2 ranks, then 3, then 2
    assert [b[0].n_gpus for b in batches] == [2, 2, 3, 2]
    assert cases[1] not in [c for b in batches for c in b]


def test_a_profile_from_another_host_is_named_once_and_one_from_here_is_not(cli, capsys):
    import json

    from sim.hardware.host import this_host

    assert cli() == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: profile {cli.profile} was measured on another host (device test cpu here "
                        f"{this_host()['device']}); check it with `ringsim calibrate --check {cli.profile}` "
                        "or calibrate afresh"]
    d = json.loads(cli.profile.read_text())
    d["measured_on"] = {k: v for k, v in this_host().items() if k != "threads_per_rank"}
    cli.profile.write_text(json.dumps(d))
    assert cli("--force") == 0
    assert "warning:" not in capsys.readouterr().err


def test_errors_at_the_hosts_speed_take_out_a_host_that_computes_slower(cli, capsys):
    """The host computes 1.2, 1.25 and 1.3x slower than the profile in the three repeats
    (its links as calibrated), and its speed reads 1.2 before the batch and 1.3 after:
    at the mean, 1.25, the profile predicts the median repeat exactly, while the raw
    error is the whole slowdown's."""
    import json

    cli.kernel.compute_only = True
    cli.readings[:] = [1.2, 1.3]
    assert cli("--out", str(cli.out), "--remeasure", "0") == 0
    report = json.loads(cli.out.read_text())
    profile = cli.kernel.profile
    for cfg, r in zip(cli.kernel.runs, report["cases"]):
        plain = simulate(cfg.scenario(), profile).makespan_s
        median = simulate(cfg.scenario(), profile.at_compute_speed(1.25)).makespan_s
        assert r["error"] == pytest.approx(plain / median - 1)
        assert r["error"] < -0.1                                   # mostly compute: most of the 20%
        assert r["host_speed"] == pytest.approx(1.25) and r["host_speed_readings"] == [1.2, 1.3]
        assert r["simulated_at_host_speed_s"] == pytest.approx(median)
        assert r["error_at_host_speed"] == pytest.approx(0.0, abs=1e-9)
        assert r["within_range_at_host_speed"] is True
        assert r["step_abs_errors_at_host_speed"] and max(r["step_abs_errors_at_host_speed"]) < 1e-9
    s = report["summary"]
    assert s["host_speed"] == {"median": pytest.approx(1.25), "min": pytest.approx(1.25), "max": pytest.approx(1.25)}
    assert s["at_host_speed"]["median_abs_error"] == pytest.approx(0.0, abs=1e-9)
    assert s["at_host_speed"]["cases_within_range_or_tolerance"] == 4
    assert s["median_abs_error"] > 0.1
    out, err = capsys.readouterr()
    assert "at the host's speed of the moment: median |makespan error| 0.0%" in out
    assert "| 1.25x | +0.0% |" in out
    assert err.count("host speed: the 64-token reference block") == 2      # before the batch, after it


def test_errors_at_the_hosts_state_take_out_cores_shared_worse_as_well(cli, capsys):
    """A profile with a host model (two processes at once 1.04x slower than one). The
    host computes 1.2-1.3x slower, as above, and its cores also serve two processes 1.5x
    worse than the law: the sharing reads 1.56x before the batch and after it. At the
    host's speed alone the cases that compute on both ranks at once stay long of the
    profile; at its speed and sharing the profile predicts the median repeat exactly."""
    import dataclasses
    import json

    from sim.hardware.contention import Contention, Host
    from sim.hardware.profile import load_profile

    host = Host(cores=2, threads_per_rank=1, law=((1.0, 1.0), (2.0, 1.04), (4.0, 2.1)))
    profile = dataclasses.replace(load_profile(cli.profile), contention=Contention(host=host))
    profile.save(cli.profile, overwrite=True)
    cli.kernel.profile = load_profile(cli.profile)
    cli.kernel.compute_only, cli.kernel.sharing = True, 1.5
    cli.readings[:] = [1.2, 1.3]
    cli.sharing[:] = [(1.56, 1.04), (1.56, 1.04)]
    assert cli("--out", str(cli.out), "--remeasure", "0") == 0
    report = json.loads(cli.out.read_text())
    for cfg, r in zip(cli.kernel.runs, report["cases"]):
        state = simulate(cfg.scenario(), cli.kernel.profile.at_host_state(1.25, 1.5)).makespan_s
        assert r["host_sharing"] == pytest.approx(1.5) and r["host_sharing_readings"] == [1.56, 1.56]
        assert r["profile_sharing"] == 1.04
        assert r["simulated_at_host_state_s"] == pytest.approx(state)
        assert r["error_at_host_state"] == pytest.approx(0.0, abs=1e-9)
        assert r["within_range_at_host_state"] is True
        assert max(r["step_abs_errors_at_host_state"]) < 1e-9
        assert r["error_at_host_speed"] < -0.05          # the sharing's part is left
    s = report["summary"]
    assert s["at_host_state"]["median_abs_error"] == pytest.approx(0.0, abs=1e-9)
    assert s["at_host_speed"]["median_abs_error"] > 0.05
    assert s["host_sharing"] == {"min": 1.56, "max": 1.56, "profile": 1.04, "batches_off": ["ring 2 GPUs fwd"]}
    out, err = capsys.readouterr()
    assert ("the host's sharing (the same block in two processes at once against each alone, before and after "
            "each batch): 1.56x-1.56x slower, the profile's law 1.04x; batches read more than 15% off it: "
            "ring 2 GPUs fwd") in out
    assert "at the host's speed and sharing of the moment: median |makespan error| 0.0%" in out
    assert "| 1.50x | +0.0% |" in out
    assert err.count("host sharing: 2 processes at once compute the 64-token reference block 1.56x slower "
                     "than one alone; the profile's law says 1.04x (1.50x it)") == 2
    # read as calibrated: no batch named
    cli.readings[:] = [1.0, 1.0]
    cli.sharing[:] = [(1.04, 1.04), (1.1, 1.04)]
    cli.kernel.compute_only, cli.kernel.sharing = False, 1.0
    assert cli("--out", str(cli.out), "--force", "--remeasure", "0") == 0
    assert json.loads(cli.out.read_text())["summary"]["host_sharing"]["batches_off"] == []
    assert "every batch within 15% of it" in capsys.readouterr().out


def test_a_batch_read_off_the_profile_is_measured_again_and_the_attempt_read_closest_kept(cli, monkeypatch, capsys):
    """The sharing reads 1.0x the law before the batch and 1.6x after it (30% off on
    average): measured again after a fresh reading, it reads 1.6x and 1.3x (45% off),
    and a third time 1.0x and 1.1x (5%): that attempt is kept and nothing more is
    measured. Each attempt's runs are 1.1x the last one's, so the kept one is known by
    its times; every attempt's readings and median are in the report."""
    import json

    from hw import validate_cli

    calls = []

    def measure(cfgs):
        calls.append(len(cfgs))
        return [[scaled(t, 1.0 + 0.1 * (len(calls) - 1)) for t in traces] for traces in cli.kernel(cfgs)]
    monkeypatch.setattr(validate_cli, "measure", measure)
    cli.sharing[:] = [(1.0, 1.0), (1.6, 1.0), (1.6, 1.0), (1.3, 1.0), (1.0, 1.0), (1.1, 1.0)]
    assert cli("--out", str(cli.out)) == 0
    assert calls == [4, 4, 4]
    report = json.loads(cli.out.read_text())
    for cfg, r in zip(cli.kernel.runs, report["cases"]):
        first = statistics.median(t.makespan_s for t in cli.kernel([cfg])[0])
        assert r["measured_median_s"] == pytest.approx(1.2 * first)
        assert [t["measured_median_s"] for t in r["attempts"]] == pytest.approx([first, 1.1 * first, 1.2 * first])
        assert [t["sharing_readings"] for t in r["attempts"]] == [[1.0, 1.6], [1.6, 1.3], [1.0, 1.1]]
        assert [t["kept"] for t in r["attempts"]] == [False, False, True]
        assert r["host_sharing_readings"] == [1.0, 1.1]
    assert report["summary"]["measured_again"] == {"ring 2 GPUs fwd": 3}
    out, err = capsys.readouterr()
    assert err.count("the host read off the profile around this batch of 2 ranks (speed 0%, sharing 30% off): "
                     "measuring it again (1 of 2)") == 1
    assert "measuring it again (2 of 2)" in err
    assert ("- measured again, the host having read more than 15% off the profile around them, in speed or sharing "
            "(the attempt read closest to it kept): ring 2 GPUs fwd (3 attempts)") in out
    # never with --remeasure 0; at most 2 more by default, the closest kept even if off
    calls.clear()
    cli.sharing[:] = [(1.0, 1.0), (1.6, 1.0)]
    assert cli("--out", str(cli.out), "--force", "--remeasure", "0") == 0 and calls == [4]
    calls.clear()
    cli.sharing[:] = [(1.0, 1.0), (1.6, 1.0), (1.7, 1.0), (1.5, 1.0), (1.9, 1.0), (1.9, 1.0)]
    assert cli("--out", str(cli.out), "--force") == 0 and calls == [4, 4, 4]
    rows = json.loads(cli.out.read_text())["cases"]
    assert [t["kept"] for t in rows[0]["attempts"]] == [True, False, False]
    # the one-process speed read off as well: 1.0x then 1.4x (20% off), then 1.05x and 1.1x
    calls.clear()
    cli.readings[:] = [1.0, 1.4, 1.05, 1.1]
    cli.sharing[:] = [(1.0, 1.0)] * 4
    assert cli("--out", str(cli.out), "--force") == 0 and calls == [4, 4]
    rows = json.loads(cli.out.read_text())["cases"]
    assert [t["speed_readings"] for t in rows[0]["attempts"]] == [[1.0, 1.4], [1.05, 1.1]]
    assert [t["kept"] for t in rows[0]["attempts"]] == [False, True] and rows[0]["host_speed"] == pytest.approx(1.075)
    assert "(speed 20%, sharing 0% off)" in capsys.readouterr().err
    assert cli("--out", str(cli.out), "--force", "--remeasure", "6") == 2
    assert "ringsim: error: --remeasure must be a count from 0 to 5, got 6" in capsys.readouterr().err


def test_the_hosts_speed_is_read_before_each_batch_and_after_the_last(cli):
    import json

    # 2 ranks: 4 cases in one batch; 3 ranks: 4 more in another
    cli.readings[:] = [1.0, 1.1, 1.5]
    assert cli("--out", str(cli.out), "--gpus", "2", "3", "--remeasure", "0") == 0
    rows = json.loads(cli.out.read_text())["cases"]
    assert [r["host_speed_readings"] for r in rows] == [[1.0, 1.1]] * 4 + [[1.1, 1.5]] * 4
    assert [r["host_speed"] for r in rows] == pytest.approx([1.05] * 4 + [1.3] * 4)


def test_without_a_reading_the_report_has_no_errors_at_the_hosts_speed(cli, tmp_path, capsys):
    import json

    from sim.hardware.profile import load_profile

    assert cli("--out", str(cli.out), "--reference-s", "0") == 0
    report = json.loads(cli.out.read_text())
    assert "at_host_speed" not in report["summary"] and all("host_speed" not in r for r in report["cases"])
    assert "| - | - |" in capsys.readouterr().out
    # a profile that never measured the reference block: said once, nothing read
    p = load_profile(cli.profile)
    bare = type(p)("fit", {k: type(g)(g.dtype, g.mask, g.kind, (), g.overhead_s, g.flops_per_s)
                           for k, g in p.groups.items()}, p.link, measured_on=p.measured_on)
    bare.save(cli.profile, overwrite=True)
    cli.readings[:] = [9.0]
    assert cli("--out", str(tmp_path / "bare.json")) == 0
    assert cli.readings == [9.0]
    assert capsys.readouterr().err.count("profile has no full fp32 forward block of 2 heads x 8") == 1
    assert cli("--reference-s", "-1") == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "ringsim: error: --reference-s must be a number of seconds from 0 to 60"
    assert cli("--reference-s", "nan") == 2 and cli("--reference-s", "inf") == 2


def test_replays_are_asked_for_and_a_report_keeps_how_many(cli, capsys):
    """The default predicts each case by one play at the mean rate; `--replays 5` on a
    profile whose host has a measured spread by the median of five seeded plays (the
    plays are the ones simulate_replays gives, by hand below); the count is one of the
    report's settings, so a resumed run with another count is refused; 0 is refused in
    one line."""
    import dataclasses
    import json
    import statistics

    from hw.validate import markdown
    from sim.calibration.validation import simulate_replays
    from sim.hardware.contention import Contention, Host
    from sim.hardware.profile import load_profile

    host = Host(cores=2, threads_per_rank=1, spread=((2.0, 0.1, 0.2),))
    spread = dataclasses.replace(load_profile(cli.profile), contention=Contention(host=host))
    spread.save(cli.profile, overwrite=True)
    assert cli("--out", str(cli.out)) == 0
    assert all(r["simulated_plays"] == 1 for r in json.loads(cli.out.read_text())["cases"])
    assert cli("--out", str(cli.out), "--replays", "5") == 2
    assert "other settings" in capsys.readouterr().err
    assert cli("--out", str(cli.out), "--replays", "5", "--force") == 0
    report = json.loads(cli.out.read_text())
    assert report["settings"]["replays"] == 5
    assert "each case predicted by the median of 5 seeded plays." in markdown(report).splitlines()[0]
    for r, cfg in zip(report["cases"], cli.kernel.runs[-4:]):
        plays = simulate_replays(cfg.scenario(), load_profile(cli.profile), 5)
        assert r["simulated_plays"] == 5
        assert r["simulated_s"] == pytest.approx(statistics.median(t.makespan_s for t in plays))
    capsys.readouterr()
    assert cli("--replays", "0") == 2
    err = capsys.readouterr().err.strip()
    assert err == "ringsim: error: --replays must be at least 1"


def test_rounds_of_a_batch_lie_apart_and_spread_over_the_run():
    """Round r of batch i in slot i + r * ceil(batches / rounds), later rounds first
    within a slot: worked out by hand for 6 batches in 3 rounds (slots 2 apart) and 2
    batches in 3 (1 apart); one round is the batches in order."""
    from hw.validate_cli import round_order, split_repeats

    assert round_order(6, 3) == [(0, 0), (1, 0), (0, 1), (2, 0), (1, 1), (3, 0), (0, 2), (2, 1), (4, 0),
                                 (1, 2), (3, 1), (5, 0), (2, 2), (4, 1), (3, 2), (5, 1), (4, 2), (5, 2)]
    assert round_order(2, 3) == [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (1, 2)]
    assert round_order(4, 1) == [(0, 0), (1, 0), (2, 0), (3, 0)]
    for batches, rounds in ((6, 3), (5, 2), (1, 4), (7, 3)):
        order = round_order(batches, rounds)
        assert sorted(order) == [(i, r) for i in range(batches) for r in range(rounds)]
        for i in range(batches):                          # each batch's rounds in turn
            assert [r for j, r in order if j == i] == list(range(rounds))
    assert split_repeats(6, 3) == [2, 2, 2] and split_repeats(5, 3) == [2, 2, 1] and split_repeats(5, 1) == [5]


def test_a_batch_measured_in_rounds_counts_every_rounds_repeats_and_readings(cli, monkeypatch, capsys):
    """Two batches (2 and 3 ranks) in 3 rounds of one repeat each, run in the order
    round_order gives; the n-th set of processes runs 1 + 0.1 n times slower than the
    simulation, so a case's median is the middle of its rounds' factors. The host's
    speed is read before the first round and after every one: a case counts the
    readings around each of its batch's rounds, at their mean."""
    import json

    from hw import validate_cli

    calls = []

    def measure(cfgs):
        calls.append([(cfg.n_gpus, cfg.repeats) for cfg in cfgs])
        n = len(calls) - 1
        return [[scaled(t, 1.0 + 0.1 * n, shift=3.0) for t in traces] for traces in cli.kernel(cfgs)]
    monkeypatch.setattr(validate_cli, "measure", measure)
    cli.kernel.factors = (1.0,)
    cli.readings[:] = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6]
    assert cli("--out", str(cli.out), "--gpus", "2", "3", "--rounds", "3", "--remeasure", "0") == 0
    # order (0,0) (0,1) (1,0) (0,2) (1,1) (1,2): the 2-rank batch is the 1st, 2nd and 4th set of processes
    assert [c[0] for c in calls] == [(2, 1), (2, 1), (3, 1), (2, 1), (3, 1), (3, 1)]
    report = json.loads(cli.out.read_text())
    assert report["rounds"] == 3 and report["settings"]["rounds"] == 3
    profile = cli.kernel.profile
    runs = {(cfg.n_gpus, cfg.layout, cfg.workload.causal): cfg for cfg in cli.kernel.runs}
    for r in report["cases"]:
        cfg = runs[r["n_gpus"], r["layout"], r["causal"]]
        sim = simulate(cfg.scenario(), profile).makespan_s
        calls_of_batch, readings = ((0, 1, 3), [1.0, 1.1, 1.1, 1.2, 1.3, 1.4]) if cfg.n_gpus == 2 else \
            ((2, 4, 5), [1.2, 1.3, 1.4, 1.5, 1.5, 1.6])
        assert r["repeats"] == 3
        assert r["measured_median_s"] == pytest.approx((1.0 + 0.1 * calls_of_batch[1]) * sim)
        assert r["measured_min_s"] == pytest.approx((1.0 + 0.1 * calls_of_batch[0]) * sim)
        assert r["measured_max_s"] == pytest.approx((1.0 + 0.1 * calls_of_batch[2]) * sim)
        assert r["host_speed_readings"] == pytest.approx(readings)
        assert r["host_speed"] == pytest.approx(sum(readings) / 6)
    assert "5 repeats" not in markdown(report)
    assert "3 repeats each in 3 rounds spread over the run, each after 1 warm-up" in markdown(report).splitlines()[0]
    # a report stopped before the 3-rank batch resumes with it alone, in its three rounds
    del report["cases"][4:]
    report["complete"] = False
    cli.out.write_text(json.dumps(report))
    calls.clear()
    cli.readings[:] = []
    assert cli("--out", str(cli.out), "--gpus", "2", "3", "--rounds", "3", "--remeasure", "0") == 0
    assert [c[0] for c in calls] == [(3, 1)] * 3
    assert json.loads(cli.out.read_text())["complete"] is True
    # other rounds are other settings; a count outside 1..repeats is one line
    capsys.readouterr()
    assert cli("--out", str(cli.out), "--gpus", "2", "3", "--remeasure", "0") == 2
    assert "other settings" in capsys.readouterr().err
    for bad in ("0", "4"):
        assert cli("--rounds", bad) == 2
        assert capsys.readouterr().err.strip() == \
            f"ringsim: error: --rounds must be a count from 1 to --repeats (3), got {bad}"


def test_a_round_measured_again_counts_its_own_attempts():
    from hw.validate import _measured_again

    row = {"n_gpus": 3, "pass": "fwd", "attempts": [{"round": 0}, {"round": 1}, {"round": 1}, {"round": 2}]}
    old = {"n_gpus": 2, "pass": "fwdbwd", "attempts": [{}, {}]}       # a report without rounds
    assert _measured_again([row, old]) == {"ring 2 GPUs fwdbwd": 2, "ring 3 GPUs fwd": 2}


def _spread_reports(errors, groups):
    """Reports of len(errors[k]) runs whose case k (in group groups[k] = (ws, pass)) has
    the signed errors errors[k]."""
    n = len(next(iter(errors.values())))
    return [{"cases": [{"key": k, "n_gpus": groups[k][0], "pass": groups[k][1], "error": errors[k][i]}
                       for k in errors]} for i in range(n)]


def test_error_spread_recovers_case_and_batch_parts_built_in():
    from sim.calibration.validation import error_spread
    # case parts (the model's, in every run) and one shift per batch and run, no rest
    own = {"a": 0.04, "b": -0.02, "c": 0.01, "d": -0.03}
    groups = {"a": (2, "fwd"), "b": (2, "fwd"), "c": (3, "fwd"), "d": (3, "fwd")}
    shift = {(2, "fwd"): [0.05, -0.05, 0.0], (3, "fwd"): [-0.02, 0.0, 0.02]}
    errors = {k: [own[k] + shift[groups[k]][i] for i in range(3)] for k in own}
    s = error_spread(_spread_reports(errors, groups))
    assert (s["runs"], s["cases"]) == (3, 4)
    assert s["case_means"] == pytest.approx(own)
    assert s["case_sd"] == pytest.approx(statistics.pstdev(own.values()))
    assert s["group_shifts"]["ring 2 GPUs fwd"] == pytest.approx([0.05, -0.05, 0.0])
    assert s["group_sd"] == pytest.approx(((2 * (0.05 ** 2 * 2) + 2 * (0.02 ** 2 * 2)) / 12) ** 0.5)
    assert s["rest_sd"] == pytest.approx(0.0, abs=1e-12)


def test_error_spread_parts_add_up_as_a_numpy_two_way_split():
    import numpy as np

    from sim.calibration.validation import error_spread
    rng = np.random.default_rng(7)
    keys = [f"k{i}" for i in range(10)]
    groups = {k: (2 + i % 3, "fwd" if i < 6 else "fwdbwd") for i, k in enumerate(keys)}
    e = rng.normal(0.0, 0.05, size=(10, 4))
    s = error_spread(_spread_reports({k: list(e[i]) for i, k in enumerate(keys)}, groups))
    own = e.mean(axis=1, keepdims=True)
    r = e - own
    g = np.zeros_like(r)
    for grp in set(groups.values()):
        idx = [i for i, k in enumerate(keys) if groups[k] == grp]
        g[idx] = r[idx].mean(axis=0)
    assert s["mean"] == pytest.approx(e.mean())
    assert s["case_sd"] == pytest.approx(own.std())
    assert s["group_sd"] == pytest.approx(np.sqrt((g ** 2).mean()))
    assert s["rest_sd"] == pytest.approx((r - g).std())
    assert s["sd"] ** 2 == pytest.approx(s["case_sd"] ** 2 + s["group_sd"] ** 2 + s["rest_sd"] ** 2)


def test_error_spread_counts_only_cases_every_run_has_and_refuses_one_run():
    from sim.calibration.validation import error_spread
    from sim.errors import RingsimError
    reps = _spread_reports({"a": [0.1, 0.2], "b": [0.0, 0.0]}, {"a": (2, "fwd"), "b": (2, "fwd")})
    reps[1]["cases"][1]["error"] = None
    s = error_spread(reps)
    assert s["cases"] == 1 and s["case_means"] == {"a": pytest.approx(0.15)}
    with pytest.raises(RingsimError, match="at least two"):
        error_spread(reps[:1])
    with pytest.raises(RingsimError, match="no case has 'error_at_host_speed'"):
        error_spread(reps, "error_at_host_speed")


def test_a_hop_counts_from_the_later_post_of_its_two_ends():
    """Measured: rank 0 posts its send to rank 1 at 0, rank 1 posts the receive at 3, the
    hop ends at 5: 2 s of transfer and 3 of waiting for the receiver. Rank 1's send to
    rank 0 finds its receive posted and takes 1 s. Simulated, the same hops take 2 s
    and 1 s with their receives beside them: the transfer part agrees, where the
    sends' own spans (5 s and 1 s) would put it 50% short. A send without a receive to
    pair (a collective's, peer -1) keeps its span."""
    def trace(source, late):
        spans = [Span(0, "compute", "fwd", 0, 0.0, 6.0), Span(1, "compute", "fwd", 0, 0.0, 6.0),
                 Span(0, "send", "kv", 0, 0.0, 2.0 + late, peer=1),
                 Span(1, "recv", "kv", 0, late, 2.0 + late, peer=0),
                 Span(1, "send", "kv", 0, 0.0, 1.0, peer=0),
                 Span(0, "recv", "kv", 0, 0.0, 1.1, peer=1)]
        return Trace(source, 2, spans)
    row = compare_case(Case("zigzag", True, 2, 64), [trace("measured", 3.0)], trace("simulated", 0.0))
    assert row["parts"]["mean_transfer_s"] == {"measured": pytest.approx(1.5), "simulated": pytest.approx(1.5),
                                               "error": pytest.approx(0.0, abs=1e-12)}
    lone = Trace("measured", 2, [Span(0, "compute", "fwd", 0, 0.0, 6.0), Span(1, "compute", "fwd", 0, 0.0, 6.0),
                                 Span(0, "send", "ag", 0, 0.0, 4.0, peer=-1)])
    assert compare_case(Case("zigzag", True, 2, 64), [lone], lone)["parts"]["mean_transfer_s"]["measured"] == 4.0


def test_step_spread_groups_steps_by_scheme_pass_gpu_count_and_index():
    from sim.calibration.validation import step_spread
    from sim.errors import RingsimError

    def case(ws, pass_, steps, scheme="ring"):
        # steps: (step, simulated, measured); abs_error as compare_case writes it
        return {"scheme": scheme, "n_gpus": ws, "pass": pass_,
                "steps": [{"rank": 0, "step": k, "simulated_s": s, "measured_s": m,
                           "abs_error": abs(s - m) / m if m > 0 else None} for k, s, m in steps]}

    one = {"cases": [case(3, "fwd", [(0, 0.8, 1.0), (1, 1.3, 1.0)]), case(2, "fwd", [(0, 1.0, 1.0)])]}
    two = {"cases": [case(3, "fwd", [(0, 0.9, 1.0), (1, 1.1, 1.0)]),
                     case(3, "fwd", [(0, 0.7, 1.0), (1, 1.0, 0.0)]),         # no measured step: left out
                     case(2, "fwd", [(0, 2.0, 1.0)], scheme="ulysses")]}
    s = step_spread([one, two])
    rows = {(r["group"], r["n_gpus"], r["step"]): r for r in s["steps"]}
    # ring 3 GPUs step 0: errors -0.2, -0.1, -0.3 -> median -0.2, |median| 0.2
    assert rows["ring/fwd", 3, 0]["n"] == 3
    assert rows["ring/fwd", 3, 0]["median_error"] == pytest.approx(-0.2)
    assert rows["ring/fwd", 3, 0]["median_abs_error"] == pytest.approx(0.2)
    # step 1: +0.3 and +0.1 -> 0.2
    assert rows["ring/fwd", 3, 1]["median_error"] == pytest.approx(0.2) and rows["ring/fwd", 3, 1]["n"] == 2
    assert rows["ulysses/fwd", 2, 0]["median_error"] == pytest.approx(1.0)
    groups = {(g["group"], g["n_gpus"]): g for g in s["groups"]}
    # ring 3 GPUs over all steps: |errors| 0.2, 0.3, 0.1, 0.1, 0.3 -> 0.2
    assert groups["ring/fwd", 3]["n"] == 5 and groups["ring/fwd", 3]["median_abs_error"] == pytest.approx(0.2)
    assert groups["ring/fwd", 2]["median_abs_error"] == pytest.approx(0.0)
    with pytest.raises(RingsimError, match="no step"):
        step_spread([{"cases": []}])


def test_run_to_run_is_the_median_log_ratio_of_shared_cases_over_root_two():
    import numpy as np

    from sim.calibration.validation import run_to_run

    def case(seq, median, layout="zigzag", scheme="ring"):
        return {"layout": layout, "causal": True, "n_gpus": 2, "seq": seq, "pass": "fwd", "scheme": scheme,
                "measured_median_s": median}

    a = {"cases": [case(1, 1.0), case(2, 2.0), case(3, 1.0), case(4, 5.0), case(5, 1.0, scheme="ulysses")]}
    b = {"cases": [case(1, 1.1), case(2, 1.6), case(3, 1.0), case(5, 2.0, scheme="ulysses"),
                   case(6, 1.0)]}                                   # cases 4 and 6: one run only, left out
    r = run_to_run(a, b)
    expected = np.median(np.abs(np.log([1.0 / 1.1, 2.0 / 1.6, 1.0, 0.5]))) / np.sqrt(2)
    assert r["cases"] == 4 and r["median"] == pytest.approx(expected)
    assert run_to_run(b, a)["median"] == pytest.approx(expected)
    with pytest.raises(RingsimError, match="no measured case in common"):
        run_to_run(a, {"cases": [case(9, 1.0)]})
