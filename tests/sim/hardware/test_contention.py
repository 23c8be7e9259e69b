"""Interference, core sharing and the host model against hand-computed timelines."""

import math

import numpy as np
import pytest
import simpy

from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.hardware.contention import Contention, Host, Sharing, sharing_bound, split_cores
from sim.scenario.config import Scenario, Workload
from sim.trace.metrics import compute_metrics


class ContendedHardware(Hardware):
    """The preset model plus a contention model, as a calibrated profile carries."""

    def __init__(self, contention, **kw):
        super().__init__(**kw)
        object.__setattr__(self, "contention", contention)


def hw(contention, gbps, tflops=1.0):
    return ContendedHardware(contention, gpu=Gpu(achieved_tflops=tflops, launch_overhead_us=0.0),
                             link=Link(bandwidth_gbps=gbps, latency_us=0.0), comm_cost="link")


def run(hardware, n=2, seq=2048, causal=False, player="simpy"):
    w = Workload(seq=seq, heads=1, kv_heads=1, head_dim=64, causal=causal)
    sc = Scenario(workload=w, hardware=hardware, n_gpus=n, layout="contiguous")
    return simulate(sc, player=player)


def base_times(n=2, seq=2048, tflops=1.0, gbps=1.0):
    c = seq // n
    return 4 * c * c * 64 / (tflops * 1e12), 2 * c * 64 * 2 / (gbps * 1e9)


@pytest.mark.parametrize("sigma", [1.0, 1.5, 3.0])
@pytest.mark.parametrize("gbps", [0.05, 1.0, 100.0])
@pytest.mark.parametrize("player", ["simpy", "recurrence"])
def test_first_block_slows_only_while_the_transfer_is_in_flight(sigma, gbps, player):
    w_c, t_x = base_times(gbps=gbps)
    trace = run(hw(Contention(slowdown_in_flight=sigma), gbps), player=player)
    first = min((s for s in trace.spans if s.stream == "compute" and s.rank == 0),
                key=lambda s: s.start_s)
    # the transfer runs over [0, t_x]; the block progresses at 1/sigma inside it
    expect = w_c * sigma if w_c * sigma <= t_x else t_x + (w_c - t_x / sigma)
    assert first.start_s == 0.0
    assert first.duration_s == pytest.approx(expect, rel=1e-9)


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_ranks_share_compute_slots(slots):
    n = 4
    w_c, _ = base_times(n=n, seq=4096, gbps=1e9)
    trace = run(hw(Contention(compute_slots=slots), gbps=1e9), n=n, seq=4096)
    # all four ranks compute in lock step; each block takes w_c * 4 / slots
    per_block = w_c * max(1.0, n / slots)
    assert compute_metrics(trace).makespan_s == pytest.approx(n * per_block, rel=1e-6)


def test_no_contention_leaves_the_preset_model_alone():
    plain = Hardware(gpu=Gpu(achieved_tflops=1.0, launch_overhead_us=0.0),
                     link=Link(bandwidth_gbps=1.0, latency_us=0.0), comm_cost="link")
    a = run(plain)
    b = run(hw(Contention(), 1.0))
    assert a.spans == b.spans


def test_measured_concurrency_slows_every_rank_computing_at_once():
    n = 4
    w_c, _ = base_times(n=n, seq=4096, gbps=1e9)
    model = Contention(concurrency=((1, 1.0), (2, 1.2), (4, 2.6)))
    trace = run(hw(model, gbps=1e9), n=n, seq=4096)
    # four ranks compute in lock step: each block takes w_c times the measured 4-way slowdown
    assert compute_metrics(trace).makespan_s == pytest.approx(n * w_c * 2.6, rel=1e-6)
    assert model.sharing_slowdown(1) == 1.0 and model.sharing_slowdown(3) == pytest.approx(1.9)


# ---- the fluid model on its own: operations started by hand at given times ----------

def play_ops(model, n_ranks, ops, jitter=None):
    """End time of each op: ("compute", rank, work_s, start_s), ("backward", rank, work_s,
    start_s) or ("transfer", src, dst, work_s, start_s), started at its start on `model`."""
    env = simpy.Environment()
    sharing = Sharing(env, n_ranks, model, jitter)
    ends = [None] * len(ops)

    def one(i, op):
        yield env.timeout(op[-1])
        if op[0] in ("compute", "backward"):
            yield from sharing.compute(i, op[1], op[2], op[0] == "backward")
        else:
            yield from sharing.transfer(i, op[1], op[2], op[3])
        ends[i] = env.now

    for i, op in enumerate(ops):
        env.process(one(i, op))
    env.run()
    return ends


def test_two_computes_and_a_transfer_share_two_cores():
    host = Host(cores=2, threads_per_rank=1, transfer_cores=1)
    ends = play_ops(Contention(host=host), 2, [("compute", 0, 3.0, 0.0), ("compute", 1, 3.0, 0.0),
                                               ("transfer", 0, 1, 1.0, 0.0)])
    # demand 1 + 1 + 1 = 3 cores on 2: everything runs at 2/3. The transfer's 1 s of work
    # ends at 1.5 s; by then each compute did 1 s of its 3; alone on the cores (demand 2)
    # they do the other 2 s at full speed: 3.5 s.
    assert ends == [pytest.approx(3.5), pytest.approx(3.5), pytest.approx(1.5)]


def test_a_weighted_transfer_takes_the_rest_of_what_the_host_delivers():
    # computes demanding 2 cores and transfers 2 at a law of 2x: 4 / 2 = 2 cores delivered.
    # Weight 3: compute 2 * (2 + 2/3) / 4 = 4/3, taking 2 / (4/3) = 1.5 cores; the
    # transfers get 0.5 core for their 2: 4x, three times the compute's 4/3
    assert split_cores(2.0, 2.0, 2.0, 3.0) == (pytest.approx(4 / 3), pytest.approx(4.0))
    # weight 1: everything at the law's rate; nothing to split with one side absent
    assert split_cores(2.0, 2.0, 2.0, 1.0) == (2.0, 2.0)
    assert split_cores(1.5, 3.0, 0.0, 3.0) == (1.5, 1.5) and split_cores(1.5, 0.0, 3.0, 3.0) == (1.5, 1.5)
    # 1 core of compute and 1.5 of transfers at 1.25x (2 cores delivered), weight 4: the
    # compute would run at 1.25 * 1.375 / 2.5 = 0.69x, faster than alone, so it runs alone's
    # speed on 1 core and the transfers get the other: 1.5x
    assert split_cores(1.25, 1.0, 1.5, 4.0) == (1.0, pytest.approx(1.5))
    # weight below 1 favours the transfers: 2 * (2 + 2 / 0.5) / 4 = 3 for the computes,
    # 2 / (2 - 2/3) = 1.5 for the transfers
    assert split_cores(2.0, 2.0, 2.0, 0.5) == (pytest.approx(3.0), pytest.approx(1.5))


def test_two_computes_and_a_weighted_transfer_share_two_cores():
    host = Host(cores=2, threads_per_rank=1, transfer_cores=1, transfer_weight=2.0)
    assert host.slowdowns(2, 1) == (pytest.approx(1.25), pytest.approx(2.5))
    ends = play_ops(Contention(host=host), 2, [("compute", 0, 3.0, 0.0), ("compute", 1, 3.0, 0.0),
                                               ("transfer", 0, 1, 1.0, 0.0)])
    # demand 3 on 2 cores: 2 delivered. Weight 2: computes at 1.5 * (2 + 1/2) / 3 = 1.25x
    # (1.6 cores), the transfer on the other 0.4: 2.5x, its 1 s ending at 2.5 s. By then each
    # compute did 2 s of its 3 and does the last alone: 3.5 s, as with even sharing (the
    # host's throughput is the law's either way)
    assert ends == [pytest.approx(3.5), pytest.approx(3.5), pytest.approx(2.5)]


@pytest.mark.parametrize("weight", [0.0, -1.0, float("nan"), float("inf")])
def test_a_transfer_weight_that_is_no_measurement_is_refused(weight):
    with pytest.raises(RingsimError, match="transfer_weight"):
        Host(cores=2, transfer_cores=0.5, transfer_weight=weight)


def test_a_transfer_starting_late_stretches_computes_already_running():
    host = Host(cores=2, threads_per_rank=1, transfer_cores=0.5)
    ends = play_ops(Contention(host=host), 3, [("compute", 0, 2.0, 0.0), ("compute", 1, 2.0, 0.0),
                                               ("transfer", 1, 2, 0.5, 1.0)])
    # [0, 1]: demand 2, full speed, 1 s done each. From 1: demand 2.5 -> everything at 0.8;
    # the transfer's 0.5 s take 0.625 s (ends 1.625), the computes do 0.5 of theirs meanwhile
    # and their last 0.5 s at full speed: 2.125
    assert ends == [pytest.approx(2.125), pytest.approx(2.125), pytest.approx(1.625)]


@pytest.mark.parametrize("end", ["sender", "receiver"])
def test_a_receive_slows_compute_as_a_send_does(end):
    rank = 0 if end == "sender" else 1
    ends = play_ops(Contention(slowdown_in_flight=2.0), 3,
                    [("compute", rank, 2.0, 0.0), ("compute", 2, 2.0, 0.0), ("transfer", 0, 1, 1.0, 0.0)])
    # in flight over [0, 1] (no host: the transfer keeps its duration): the rank at either
    # end does 0.5 s of work there, the rest after: 1 + 1.5 = 2.5 s; rank 2 is untouched
    assert ends == [pytest.approx(2.5), pytest.approx(2.0), pytest.approx(1.0)]


@pytest.mark.parametrize("model", [
    Contention(slowdown_in_flight=2.0, compute_slots=2),
    Contention(slowdown_in_flight=2.0, host=Host(cores=2, threads_per_rank=1, transfer_cores=0.0)),
])
def test_a_transfer_in_flight_and_core_sharing_multiply(model):
    ends = play_ops(model, 3, [("compute", 0, 3.0, 0.0), ("compute", 1, 3.0, 0.0),
                               ("compute", 2, 3.0, 0.0), ("transfer", 0, 1, 100.0, 0.0)])
    # three computes on two slots: 1.5x each. Rank 2 has no transfer: 3 s at 1/1.5 ends at
    # 4.5. Ranks 0 and 1 have one in flight: 1.5 * 2 = 3x, 1.5 s done by 4.5; then two
    # computes fit, 2x from the transfer alone: the last 1.5 s take 3 s, ending at 7.5.
    # (The worse of the two slowdowns, 2x, would end them at 6.)
    assert ends[:3] == [pytest.approx(7.5), pytest.approx(7.5), pytest.approx(4.5)]


def test_the_host_law_never_beats_the_cores():
    law = ((1.0, 1.0), (2.0, 1.1), (4.0, 2.6))
    host = Host(cores=2, threads_per_rank=1, law=law)
    assert host.slowdown(0.5) == 1.0
    assert host.slowdown(3.0) == pytest.approx(1.85)          # measured, above 3/2
    assert Host(cores=2, law=((1.0, 1.0), (3.0, 1.06))).slowdown(3.0) == pytest.approx(1.5)
    assert host.demand(3, 2) == 3.0 and Host(cores=2, transfer_cores=0.25).demand(2, 4) == 3.0
    assert sharing_bound(3, 1, 2) == 1.5 and sharing_bound(1, 1, 2) == 1.0 and sharing_bound(2, 2, 2) == 2.0


def test_ring_step_on_a_two_core_host_through_the_engine():
    host = Host(cores=2, threads_per_rank=1, transfer_cores=0.5)
    w_c, t_x = base_times(gbps=2.0)
    assert t_x < w_c
    trace = run(hw(Contention(host=host), gbps=2.0))
    first = sorted((s for s in trace.spans if s.step == 0 and s.stream in ("compute", "send")),
                   key=lambda s: (s.stream, s.rank))
    assert [(s.stream, s.rank) for s in first] == [("compute", 0), ("compute", 1), ("send", 0), ("send", 1)]
    # both ranks compute (2 cores) while both hops run (2 x 0.5): demand 3, 1.5x slower.
    # The hops end at 1.5 t_x; the computes did t_x of work by then, the rest at full speed.
    for s in first:
        expect = w_c + 0.5 * t_x if s.stream == "compute" else 1.5 * t_x
        assert s.start_s == 0.0 and s.duration_s == pytest.approx(expect, rel=1e-9)


def test_a_backward_compute_runs_by_the_backward_law_beside_a_forward_one():
    """One core; the backward law says two at once run 3x slower, the forward has no law
    (demand / cores). A forward and a backward of 1 s each start together: the forward
    at 1/2 ends at 2 s, when the backward has done 2/3 of its work; alone (demand 1) it
    does the last third at full speed, ending at 7/3 s. A transfer beside them runs by
    the forward law, and without a backward law both computes run alike."""
    host = Host(cores=1, threads_per_rank=1, law_bwd=((1.0, 1.0), (2.0, 3.0)))
    ends = play_ops(Contention(host=host), 2, [("compute", 0, 1.0, 0.0), ("backward", 1, 1.0, 0.0)])
    assert ends == [pytest.approx(2.0), pytest.approx(7 / 3)]
    assert host.slowdown(2.0) == 2.0 and host.slowdown(2.0, backward=True) == 3.0
    # a backward law never goes below the bound either
    assert Host(cores=1, law_bwd=((1.0, 1.0), (2.0, 1.2))).slowdown(2.0, backward=True) == 2.0
    flat = Host(cores=1, threads_per_rank=1)
    assert play_ops(Contention(host=flat), 2, [("compute", 0, 1.0, 0.0), ("backward", 1, 1.0, 0.0)]) == [
        pytest.approx(2.0), pytest.approx(2.0)]
    # the rank's transfer in flight multiplies the backward's own slowdown too
    with_transfer = Host(cores=1, threads_per_rank=1, transfer_cores=0.0, law_bwd=((1.0, 1.0), (2.0, 3.0)))
    ends = play_ops(Contention(slowdown_in_flight=2.0, host=with_transfer), 2,
                    [("backward", 0, 1.0, 0.0), ("compute", 1, 1.0, 0.0), ("transfer", 0, 1, 10.0, 0.0)])
    # the 10 s transfer (no cores) keeps both ranks in flight: the forward runs at 1/(2·2)
    # and ends at 4 s; the backward at 1/(3·2) has done 4/6 by then, and alone, still in
    # flight, at 1/2, its last third takes 2/3 s
    assert ends[1] == pytest.approx(4.0) and ends[0] == pytest.approx(4.0 + (1 - 4 / 6) * 2)


def test_a_backward_compute_in_flight_runs_by_its_own_in_flight_slowdown():
    """No host: a forward and a backward of 1 s on ranks 0 and 1, a 10 s transfer between
    them keeping both in flight. The forward runs at 1/2 (slowdown_in_flight) and ends at
    2 s, the backward at 1/3 (slowdown_in_flight_bwd) and ends at 3 s; without a backward
    factor both run at 1/2."""
    ops = [("compute", 0, 1.0, 0.0), ("backward", 1, 1.0, 0.0), ("transfer", 0, 1, 10.0, 0.0)]
    ends = play_ops(Contention(slowdown_in_flight=2.0, slowdown_in_flight_bwd=3.0), 2, ops)
    assert ends[:2] == [pytest.approx(2.0), pytest.approx(3.0)]
    assert play_ops(Contention(slowdown_in_flight=2.0), 2, ops)[:2] == [pytest.approx(2.0), pytest.approx(2.0)]
    # out of flight it is the host's rate alone: a backward of 1 s and no transfer ends at 1 s
    assert play_ops(Contention(slowdown_in_flight_bwd=3.0), 2, [("backward", 1, 1.0, 0.0)])[0] == pytest.approx(1.0)
    assert Contention(slowdown_in_flight_bwd=1.5).active and not Contention(slowdown_in_flight_bwd=1.0).active


def test_the_engine_plays_a_ring_s_backward_blocks_by_the_backward_law():
    """Four ranks on two cores, a ring's forward and backward without a mask and with
    transfers too fast to matter: every rank computes in lock step, so each forward block
    takes its time alone times 2.0 (the forward law at four processes) and each backward
    block its time alone times 3.5 (the backward law), the times alone read from the same
    ring played without contention."""
    w = Workload(seq=4096, heads=1, kv_heads=1, head_dim=64, causal=False, pass_="fwdbwd")

    def computes(hardware):
        sc = Scenario(workload=w, hardware=hardware, n_gpus=4, layout="contiguous")
        return sorted(((s.kind, s.rank, s.step), s.duration_s) for s in simulate(sc, player="simpy").spans
                      if s.stream == "compute")

    host = Host(cores=2, threads_per_rank=1, law=((1.0, 1.0), (4.0, 2.0)), law_bwd=((1.0, 1.0), (4.0, 3.5)))
    alone = computes(hw(Contention(), gbps=1e9))
    shared = computes(hw(Contention(host=host), gbps=1e9))
    assert [k for k, _ in shared] == [k for k, _ in alone] and {k[0] for k, _ in alone} == {"fwd", "bwd"}
    for (key, t), (_, t_alone) in zip(shared, alone):
        assert t == pytest.approx(t_alone * (3.5 if key[0] == "bwd" else 2.0), rel=1e-9)


# ---- the host's spread of speeds: seeded plays ------------------------------------------

def unit_lognormal(rng, cv):
    """Mean 1 and coefficient of variation cv, written out: sigma^2 = ln(1 + cv^2),
    mu = -sigma^2 / 2."""
    s2 = math.log(1 + cv * cv)
    return rng.lognormal(-s2 / 2, math.sqrt(s2))


def test_a_seeded_play_draws_a_factor_per_rank_and_one_per_block_from_the_measured_spread():
    """Two ranks on four cores (no sharing): each compute's time is its work times its
    rank's factor and its own. The factors are drawn by hand from the same seed, in the
    order a play draws them: one per rank for the run (the rank CV at two processes,
    0.05), then one per block as each starts (the block CV, 0.2). Transfers keep their
    time. The spread at 3 processes is the point at 2 (the one at or below); at 1 the
    first point's."""
    spread = ((1.0, 0.0, 0.01), (2.0, 0.05, 0.2), (4.0, 0.1, 0.4))
    host = Host(cores=4, threads_per_rank=1, spread=spread)
    assert host.spread_at(2) == (0.05, 0.2) and host.spread_at(3) == (0.05, 0.2)
    assert host.spread_at(1) == (0.0, 0.01) and host.spread_at(9) == (0.1, 0.4)
    assert Host(cores=2).spread_at(3) == (0.0, 0.0)
    ops = [("compute", 0, 1.0, 0.0), ("compute", 1, 1.0, 0.0), ("compute", 1, 2.0, 5.0), ("transfer", 0, 1, 1.0, 0.0)]
    ends = play_ops(Contention(host=host), 2, ops, jitter=7)
    rng = np.random.default_rng(7)
    rank = [unit_lognormal(rng, 0.05), unit_lognormal(rng, 0.05)]
    blocks = [unit_lognormal(rng, 0.2) for _ in range(3)]
    assert ends == [pytest.approx(rank[0] * blocks[0]), pytest.approx(rank[1] * blocks[1]),
                    pytest.approx(5.0 + 2.0 * rank[1] * blocks[2]), pytest.approx(1.0)]
    assert len({round(e, 9) for e in ends[:2]}) == 2
    # without a seed, or without a spread, every block at its mean rate
    assert play_ops(Contention(host=host), 2, ops) == [pytest.approx(1.0), pytest.approx(1.0),
                                                        pytest.approx(7.0), pytest.approx(1.0)]
    assert play_ops(Contention(host=Host(cores=4)), 2, ops, jitter=7)[:3] == [pytest.approx(1.0)] * 2 + [
        pytest.approx(7.0)]


def test_the_draws_have_mean_one_and_the_asked_spread():
    """The lognormal's closed form: mean 1, CV as asked; 200000 draws are within 1%."""
    from sim.hardware.contention import _unit_lognormal

    rng = np.random.default_rng(0)
    xs = np.array([_unit_lognormal(rng, 0.3) for _ in range(200_000)])
    assert xs.mean() == pytest.approx(1.0, abs=0.01) and xs.std() / xs.mean() == pytest.approx(0.3, rel=0.01)
    assert _unit_lognormal(rng, 0.0) == 1.0


@pytest.mark.parametrize("spread", [(), ((2.0, -0.1, 0.2),), ((0.0, 0.1, 0.2),), ((2.0, 0.1),)])
def test_a_spread_that_is_no_measurement_is_refused(spread):
    with pytest.raises(RingsimError, match="spread"):
        Host(cores=2, spread=spread)


def flat(pairs):
    """(demand, slowdown) pairs as one list, for pytest.approx."""
    return [x for pair in pairs for x in pair]


def test_a_host_sharing_its_cores_worse_scales_the_law_from_two_processes_up():
    """Read again, two processes run 1.5x worse beside each other than the law says:
    every point from two processes' demand up takes the factor, one between one and two
    processes the share of the way (1.5 cores: half, 1.25x), one process none."""
    law = ((1.0, 1.0), (1.5, 1.02), (2.0, 1.04), (3.0, 1.7), (4.0, 2.1))
    host = Host(cores=2, threads_per_rank=1, transfer_cores=0.3, law=law, law_bwd=((1.0, 1.0), (2.0, 1.2)))
    worse = host.with_sharing(1.5)
    assert flat(worse.law) == pytest.approx(flat(((1.0, 1.0), (1.5, 1.02 * 1.25), (2.0, 1.56), (3.0, 2.55), (4.0, 3.15))))
    assert flat(worse.law_bwd) == pytest.approx(flat(((1.0, 1.0), (2.0, 1.8))))
    assert (worse.cores, worse.transfer_cores, worse.threads_per_rank) == (2, 0.3, 1)
    assert worse.slowdown(2.0) == pytest.approx(1.56) and worse.slowdown(1.0) == 1.0
    assert worse.slowdown(2.0, backward=True) == pytest.approx(1.8)
    # two threads a rank: two processes are a demand of 4 cores
    wide = Host(cores=4, threads_per_rank=2, law=((2.0, 1.0), (4.0, 1.1))).with_sharing(2.0)
    assert flat(wide.law) == pytest.approx(flat(((2.0, 1.0), (4.0, 2.2))))
    # as calibrated: the same slowdowns; better: lower, never under the cores' bound
    assert flat(host.with_sharing(1.0).law) == pytest.approx(flat(law))
    assert host.with_sharing(0.5).slowdown(3.0) == pytest.approx(1.5)      # 0.85 read, 3/2 bound
    # no measured law: the bound it stands for, scaled
    assert flat(Host(cores=2).with_sharing(1.5).law) == pytest.approx(flat(((1, 1.0), (2, 1.5), (3, 2.25), (4, 3.0))))
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(RingsimError, match="sharing factor must be positive"):
            host.with_sharing(bad)


def test_a_profile_at_the_hosts_state_computes_slower_and_shares_worse():
    """Two ranks each computing one block beside the other, with no transfer worth
    counting: at 1.2x the compute speed and 1.5x the sharing, each block takes
    1.2 x 1.56 / 1.04 = 1.8x its time in the profile as it is."""
    from sim.hardware.profile import ComputeGroup, LinkFit, Profile

    groups = {("fp32", m, "fwd"): ComputeGroup("fp32", m, "fwd", (), 0.0, 1e9) for m in ("full", "diagonal")}
    host = Host(cores=2, threads_per_rank=1, law=((1.0, 1.0), (2.0, 1.04), (4.0, 2.1)))
    profile = Profile("fit", groups, LinkFit(0.0, 1e15), Contention(host=host))
    state = profile.at_host_state(1.2, 1.5)
    assert flat(state.contention.host.law) == pytest.approx(flat(((1.0, 1.0), (2.0, 1.56), (4.0, 3.15))))
    assert state.groups[("fp32", "full", "fwd")].flops_per_s == pytest.approx(1e9 / 1.2)
    w = Workload(seq=2048, heads=1, kv_heads=1, head_dim=64, dtype="fp32", causal=False)
    sc = Scenario(workload=w, n_gpus=2, layout="contiguous")
    plain, slow = simulate(sc, profile), simulate(sc, state)
    blocks = [(a.duration_s, b.duration_s) for a, b in zip(plain.spans, slow.spans) if a.stream == "compute"]
    assert len(blocks) == 4
    for a, b in blocks:
        assert b == pytest.approx(a * 1.2 * 1.56 / 1.04, rel=1e-6)
    # a profile without a host model takes the speed only
    bare = Profile("fit", groups, LinkFit(0.0, 1e15))
    assert bare.at_host_state(1.2, 1.5).contention == bare.contention
    assert bare.at_host_state(1.2, 1.5).groups[("fp32", "full", "fwd")].flops_per_s == pytest.approx(1e9 / 1.2)


def test_three_computes_placed_on_two_cores_one_alone_and_two_sharing():
    """Placement "cores", law = the bound (3 on 2: 1.5x). Started together, the computes
    land on cores 0, 1, 0: the one alone on core 1 runs at full speed (share 1 over the
    mean share 2/3 is 1.5, over the law's 1.5x: 1), the two on core 0 at half. When it
    ends at W, one of the two moves to the idle core and both do their other W/2 at full
    speed: 1.5 W. Evenly, all three end at 1.5 W."""
    W = 2.0
    ops = [("compute", r, W, 0.0) for r in range(3)]
    placed = Contention(host=Host(cores=2, threads_per_rank=1, placement="cores"))
    even = Contention(host=Host(cores=2, threads_per_rank=1))
    assert play_ops(placed, 3, ops) == [pytest.approx(1.5 * W), pytest.approx(W), pytest.approx(1.5 * W)]
    assert play_ops(even, 3, ops) == [pytest.approx(1.5 * W)] * 3


def test_held_computes_keep_their_core_while_another_idles():
    """Placement "held", law = the bound: the three computes land on cores 0, 1, 0 as
    with "cores", the one alone at full speed and the pair at half. When the one alone
    ends at W, the pair stays on core 0 (no move), each at most half a core though core 1
    idles: their other W/2 takes W, and they end at 2 W (1.5 W with the move)."""
    W = 2.0
    ops = [("compute", r, W, 0.0) for r in range(3)]
    held = Contention(host=Host(cores=2, threads_per_rank=1, placement="held"))
    assert play_ops(held, 3, ops) == [pytest.approx(2 * W), pytest.approx(W), pytest.approx(2 * W)]


def test_held_computes_on_cores_of_their_own_run_as_placed_ones():
    """Four on two cores, two per core: each at the law's 2x as with "cores" and evenly.
    Two computes from 0 s of 2 s and a third of 1 s from 1 s: the third joins core 0
    (compute 0 and it at 0.75 / 1.5 = 0.5, compute 1 alone at 1); at 2 s compute 1 ends
    with 0.5 s left on compute 0 and on the third, the two still on core 0 at half speed
    though core 1 idles: both end at 3 s. With the move ("cores") one goes to core 1 at
    2 s: both end at 2.5 s."""
    four = [("compute", r, 1.0, 0.0) for r in range(4)]
    assert play_ops(Contention(host=Host(cores=2, placement="held")), 4, four) == [pytest.approx(2.0)] * 4
    ops = [("compute", 0, 2.0, 0.0), ("compute", 1, 2.0, 0.0), ("compute", 2, 1.0, 1.0)]
    held = play_ops(Contention(host=Host(cores=2, placement="held")), 3, ops)
    assert held == [pytest.approx(3.0), pytest.approx(2.0), pytest.approx(3.0)]
    moved = play_ops(Contention(host=Host(cores=2, placement="cores")), 3, ops)
    assert moved == [pytest.approx(2.5), pytest.approx(2.0), pytest.approx(2.5)]


def test_placed_computes_keep_the_law_s_mean_rate():
    """Law 1.8x at three processes, 1x at two: rates are 1.5/1.8 for the one alone and
    0.75/1.8 for the pair (three computes of mean rate 1/1.8, as the law says). The one
    alone ends at 1.2 W; by then the pair did 0.5 W each and, two on two cores, do the rest
    at full speed: 1.7 W. Evenly: 1.8 W for all."""
    W = 1.0
    law = ((1.0, 1.0), (2.0, 1.0), (3.0, 1.8))
    ops = [("compute", r, W, 0.0) for r in range(3)]
    placed = play_ops(Contention(host=Host(cores=2, law=law, placement="cores")), 3, ops)
    assert placed == [pytest.approx(1.7 * W), pytest.approx(1.2 * W), pytest.approx(1.7 * W)]
    assert play_ops(Contention(host=Host(cores=2, law=law)), 3, ops) == [pytest.approx(1.8 * W)] * 3


def test_placement_spreads_four_computes_two_per_core_and_skips_several_threads():
    """Four on two cores sit two per core: every one at the law's rate (2x). A rank of two
    threads is not placed: the same as even."""
    ops = [("compute", r, 1.0, 0.0) for r in range(4)]
    assert play_ops(Contention(host=Host(cores=2, placement="cores")), 4, ops) == [pytest.approx(2.0)] * 4
    ops3 = [("compute", r, 1.0, 0.0) for r in range(3)]
    two_threads = Host(cores=4, threads_per_rank=2, placement="cores")
    assert play_ops(Contention(host=two_threads), 3, ops3) == play_ops(
        Contention(host=Host(cores=4, threads_per_rank=2)), 3, ops3)


def test_a_late_compute_joins_the_least_loaded_core():
    """Two computes of 2 s on two cores from 0 s, a third of 1 s from 1 s. By 1 s the two
    did 1 s each; the third joins core 0 beside compute 0, and compute 1 keeps core 1 at
    full speed: it ends at 2 s. Computes 0 and 2 run at half speed until then (0.5 s done
    of each, 0.5 s left), then one to a core: both end at 2.5 s."""
    ops = [("compute", 0, 2.0, 0.0), ("compute", 1, 2.0, 0.0), ("compute", 2, 1.0, 1.0)]
    ends = play_ops(Contention(host=Host(cores=2, placement="cores")), 3, ops)
    assert ends == [pytest.approx(2.5), pytest.approx(2.0), pytest.approx(2.5)]


def test_a_seeded_play_picks_among_equal_cores():
    """With a seed, computes that start at the same instant are placed in a drawn order
    and on a drawn core among equal ones: over seeds each of the three is the one alone
    (without the draw the third to start would always share), and every play ends them
    at W, 1.5 W, 1.5 W in some order. A compute that starts later still joins the
    least-loaded core: it shares, in every play."""
    ops = [("compute", r, 1.0, 0.0) for r in range(3)]
    model = Contention(host=Host(cores=2, placement="cores"))
    alone = set()
    for seed in range(40):
        ends = play_ops(model, 3, ops, jitter=seed)
        assert sorted(ends) == [pytest.approx(1.0), pytest.approx(1.5), pytest.approx(1.5)]
        alone.add(min(range(3), key=lambda i: ends[i]))
    assert alone == {0, 1, 2}
    late = [("compute", 0, 2.0, 0.0), ("compute", 1, 2.0, 0.0), ("compute", 2, 1.0, 1.0)]
    for seed in range(10):
        assert play_ops(model, 3, late, jitter=seed)[2] == pytest.approx(2.5)


def test_a_placement_that_is_no_model_is_refused():
    with pytest.raises(RingsimError, match="placement must be one of even, cores"):
        Host(cores=2, placement="random")
