"""Interference and core sharing against hand-computed timelines."""

import pytest

from sim.config import Gpu, Hardware, Link, Scenario, Workload
from sim.contention import Contention
from sim.engine import simulate
from sim.metrics import compute_metrics


class ContendedHardware(Hardware):
    """The preset model plus a contention model, as a calibrated profile carries."""

    def __init__(self, contention, **kw):
        super().__init__(**kw)
        object.__setattr__(self, "contention", contention)


def hw(contention, gbps, tflops=1.0):
    return ContendedHardware(contention, gpu=Gpu(achieved_tflops=tflops, launch_overhead_us=0.0),
                             link=Link(bandwidth_gbps=gbps, latency_us=0.0))


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
                     link=Link(bandwidth_gbps=1.0, latency_us=0.0))
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
