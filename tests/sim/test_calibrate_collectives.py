"""Collectives in a calibrated profile: the fit recovers known per-round latencies and
bandwidths, and the simulator times each flow of a collective with them."""

import json

import numpy as np
import pytest

from sim.calibrate import calibrate, fit_rounds
from sim.config import Scenario, Workload
from sim.engine import simulate
from sim.errors import RingsimError
from sim.profile import profile_from_dict

# per collective: (latency per round at world 2, at world 3, at world 4), bandwidth
MODEL = {"allgather": ((100e-6, 100e-6, 100e-6), 0.5e9),
         "reducescatter": ((1e-3, 3e-3, 3e-3), 2e9),
         "alltoall": ((50e-6, 50e-6, 50e-6), 0.25e9)}
SHARDS = (4096, 65536, 1 << 20)


def synthetic_bench() -> dict:
    flops = [4 * 64 * 8 * c * c for c in (256, 512, 1024)]
    compute = [{"kind": "fwd", "dtype": "fp32", "mask": "full", "flops": f, "time_s": [1e-4 + f / 20e9]}
               for f in flops]
    transfer = [{"bytes": b, "direction": "both_ways", "time_s": [80e-6 + b / 1e9]} for b in (65536, 1 << 20)]
    collective = []
    for op, (latency, bw) in MODEL.items():
        for world, alpha in zip((2, 3, 4), latency):
            for shard in SHARDS:
                sent = (world - 1) * shard
                collective.append({"op": op, "world": world, "shard_bytes": shard, "sent_bytes": sent,
                                   "time_s": [(world - 1) * alpha + sent / bw]})
    return {"format": "ringsim-hw-bench", "version": 1,
            "device": {"kind": "cuda", "name": "test device", "cpu_count": 2, "threads_per_rank": None},
            "compute": compute, "transfer": transfer, "collective": collective}


def test_fit_rounds_recovers_latency_and_bandwidth_and_stays_non_negative():
    rounds, sent = [1, 1, 2, 2, 3], [1e3, 1e6, 2e3, 2e6, 3e6]
    times = [k * 2e-4 + s / 1e9 for k, s in zip(rounds, sent)]
    assert fit_rounds(rounds, sent, times) == (pytest.approx(2e-4), pytest.approx(1e-9))
    # unconstrained, these give a negative latency (-0.32 ms); held at zero, the
    # bandwidth alone: beta = sum(sent * t) / sum(sent^2) = 11500 / 6e12
    alpha, beta = fit_rounds([1, 1, 2], [1e6, 2e6, 1e6], [2e-3, 4e-3, 1.5e-3])
    assert alpha == 0.0 and beta == pytest.approx(11500 / 6e12)


def test_calibrate_fits_every_collective_over_and_at_each_world_size():
    p = calibrate(synthetic_bench())
    for op, (latency, bw) in MODEL.items():
        fit = p.collectives[op]
        assert sorted(fit.by_world) == [2, 3, 4]
        for world, alpha in zip((2, 3, 4), latency):
            assert fit.by_world[world].latency_s == pytest.approx(alpha)
            assert fit.by_world[world].bandwidth_bytes_per_s == pytest.approx(bw)
    # one latency fits every world size of the all-gather exactly
    ag = p.collectives["allgather"].rounds
    assert ag.latency_s == pytest.approx(100e-6) and ag.bandwidth_bytes_per_s == pytest.approx(0.5e9)
    assert p.report["collectives"]["allgather"]["residuals"]["max_abs_rel"] == pytest.approx(0, abs=1e-9)
    # not the reduce-scatter's: world 2 is cheaper per round than 3 and 4
    assert p.report["collectives"]["reducescatter"]["residuals_by_world"]["2"]["median_abs_rel"] > 0.1


def test_each_flow_takes_its_world_sizes_fit_and_unmeasured_collectives_the_default():
    p = calibrate(synthetic_bench())
    kind = np.array(["rs", "rs", "rs", "ag", "a2a"])
    nbytes = np.array([1e6, 1e6, 1e6, 1e6, 1e6])
    group = np.array([2, 3, 9, 2, 3])
    got = p.collective_times_s(kind, nbytes, np.full(5, -1.0), group=group)
    rounds = p.collectives["reducescatter"].rounds
    assert got.tolist() == pytest.approx([1e-3 + 1e6 / 2e9, 3e-3 + 1e6 / 2e9,
                                          rounds.latency_s + 1e6 / rounds.bandwidth_bytes_per_s,
                                          100e-6 + 1e6 / 0.5e9, 50e-6 + 1e6 / 0.25e9])
    bench = synthetic_bench()
    bench["collective"] = [r for r in bench["collective"] if r["op"] != "alltoall"]
    no_a2a = calibrate(bench)
    assert no_a2a.collective_times_s(kind, nbytes, np.full(5, -1.0), group=group)[4] == -1.0


def test_the_simulator_plays_an_all_gather_on_the_measured_fit():
    p = calibrate(synthetic_bench())
    sc = Scenario(workload=Workload(seq=3072, heads=8, kv_heads=8, head_dim=64, dtype="fp32", causal=True),
                  n_gpus=3, layout="zigzag", scheme="allgather")
    trace = simulate(sc, p)
    sends = [s for s in trace.spans if s.stream == "send" and s.kind == "ag"]
    assert len(sends) == 3 * 2                       # three ranks, two rounds each
    # each flow: one rank's K/V, 2 x 1024 tokens x 8 heads x 64 x 4 bytes
    block = 2 * 1024 * 8 * 64 * 4
    assert [s.bytes for s in sends] == [block] * 6
    assert [s.duration_s for s in sends] == pytest.approx([100e-6 + block / 0.5e9] * 6)


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d["collectives"].update(broadcast={}), "unknown collective"),
    (lambda d: d["collectives"]["allgather"].update(bandwidth_bytes_per_s=0), "bandwidth"),
    (lambda d: d["collectives"]["allgather"].update(by_world={"1": {}}), "world size"),
    (lambda d: d["collectives"]["allgather"].update(by_world=[1]), "by_world"),
    (lambda d: d.update(collectives=[]), "collectives"),
])
def test_malformed_collective_fits_are_refused_and_good_ones_round_trip(mutate, match):
    d = json.loads(json.dumps(calibrate(synthetic_bench()).to_dict()))
    assert profile_from_dict(json.loads(json.dumps(d))).collectives == calibrate(synthetic_bench()).collectives
    mutate(d)
    with pytest.raises(RingsimError, match=match):
        profile_from_dict(d)
