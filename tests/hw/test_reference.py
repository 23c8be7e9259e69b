"""The host's speed and sharing against a profile: the reference block is one the
profile measured; a speed reading is its time now over the time then, a sharing reading
two processes computing it at once over each alone, against the profile's law."""

import math

import pytest

from hw.bench.parts import REFERENCE_TOKENS
from hw.reference import host_sharing, host_speed, reference_block
from sim.errors import RingsimError
from sim.hardware.profile import ComputeGroup, LinkFit, Profile


def profile_with(points, dtype="fp32"):
    groups = {(dtype, "full", "fwd"): ComputeGroup(dtype, "full", "fwd", tuple(points), 0.0, 1e9)}
    return Profile("fit", groups, LinkFit(1e-5, 1e9))


def square(tokens, heads=8, head_dim=64):
    """FLOPs of a full forward block of `tokens` queries and keys (4 x pairs x heads x d)."""
    return 4.0 * tokens * tokens * heads * head_dim


def test_the_reference_is_the_measured_square_block_of_the_shape_closest_to_its_size():
    points = [(square(512), 0.007), (square(1536), 0.06), (square(2048), 0.11)]
    assert REFERENCE_TOKENS == 1024
    # 512 and 1536 are both 512 tokens away: the smaller is taken
    assert reference_block(profile_with(points), "fp32", 8, 64) == (512, 0.007)
    assert reference_block(profile_with(points + [(square(1024), 0.027)]), "fp32", 8, 64) == (1024, 0.027)
    # FLOPs that are no square block of this shape (4 heads x 64 makes 1024 tokens into
    # a 724.08-token block of 8 heads) are never taken
    assert reference_block(profile_with([(square(1024, heads=4), 0.01)]), "fp32", 8, 64) is None
    assert reference_block(profile_with(points), "bf16", 8, 64) is None
    assert reference_block(profile_with([]), "fp32", 8, 64) is None


def test_a_reading_is_the_blocks_time_now_over_the_profiles():
    p = profile_with([(square(64, heads=2, head_dim=8), 0.5e-3)])
    r = host_speed(p, dtype="fp32", heads=2, head_dim=8, threads=1, seconds=0.05)
    assert r["tokens"] == 64 and r["profile_s"] == 0.5e-3
    assert r["calls"] >= 3 and 0 < r["now_s"] < 0.5
    assert r["factor"] == pytest.approx(r["now_s"] / 0.5e-3)
    assert host_speed(profile_with([]), dtype="fp32", heads=2, head_dim=8, threads=1) is None
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(RingsimError, match="reference time must be a number of seconds"):
            host_speed(p, dtype="fp32", heads=2, head_dim=8, threads=1, seconds=bad)


def test_the_compute_parts_own_reference_is_read_at_its_median_over_the_part():
    """A profile whose entries were brought to one speed (sim.calibration.calibrate.at_one_speed) at
    a reference median of 30 ms: its 1024-token block, when it is that reference, is the
    30 ms the entries were brought to, not the 23.5 ms its own entry was scaled to
    (timed at 27 ms just after a 35 ms reading). Another shape keeps its point."""
    points = [(square(1024), 0.0235), (square(1024, head_dim=128), 0.05)]
    profile = profile_with(points)
    speed = {"reference_median_s": 0.030,
             "reference_block": {"dtype": "fp32", "heads": 8, "head_dim": 64, "q_tokens": 1024}}
    assert reference_block(profile, "fp32", 8, 64) == (1024, 0.0235)     # no such report: the point
    profile.report["compute"] = {"host_speed": speed}
    assert reference_block(profile, "fp32", 8, 64) == (1024, 0.030)
    assert reference_block(profile, "fp32", 8, 128) == (1024, 0.05)


def hosted(points, cores=2, law=((1.0, 1.0), (2.0, 1.2))):
    """profile_with(points) with a host model of `cores` cores and a sharing law."""
    import dataclasses

    from sim.hardware.contention import Contention, Host

    return dataclasses.replace(profile_with(points), contention=Contention(host=Host(cores=cores, law=law)))


def fake_spawn(per_rank, asked):
    def spawn(fn, n_gpus, *, args=(), **kw):
        asked.append((fn.__name__, n_gpus, args))
        return per_rank
    return spawn


def rounds_of(alone, shared, n=3):
    return {"time_s": shared * n, "alone_s": alone * n, "rounds": [{"alone_s": alone, "time_s": shared}] * n}


def test_a_sharing_reading_is_the_rounds_median_ratio_over_the_profiles_law(monkeypatch):
    """Two processes each 0.1 s alone and 0.1, 0.1, 0.4 s beside the other. On two cores
    they fit, and a round counts its median shared block (0.1: 1.0x, as calibration
    reads a two-process entry); on one core they are time-sliced and it counts the mean
    (0.2: 2.0x). The profile's law says 1.2x on two cores, the bound 2x on one."""
    asked = []
    per_rank = [rounds_of([0.1, 0.1, 0.1], [0.1, 0.1, 0.4])] * 2
    monkeypatch.setattr("hw.reference.spawn", fake_spawn(per_rank, asked))
    p = hosted([(square(64, heads=2, head_dim=8), 0.01)])
    r = host_sharing(p, dtype="fp32", heads=2, head_dim=8, threads=1, seconds=1.2)
    assert r["processes"] == 2 and r["tokens"] == 64
    assert r["slowdown"] == pytest.approx(1.0) and r["profile_slowdown"] == pytest.approx(1.2)
    assert r["factor"] == pytest.approx(1.0 / 1.2) and r["alone_s"] == pytest.approx(0.1)
    # the concurrency part's worker, two processes, samples for about 1.2 s: 3 rounds of
    # 3.5 blocks of 10 ms per sample
    (name, n_gpus, args), = asked
    assert name == "_concurrency_worker" and n_gpus == 2
    assert args[0]["q_tokens"] == 64 and args[0]["mask"] == "full" and args[1] == math.ceil(1.2 / (3 * 3.5 * 0.01))
    one_core = hosted([(square(64, heads=2, head_dim=8), 0.01)], cores=1, law=None)
    r = host_sharing(one_core, dtype="fp32", heads=2, head_dim=8, threads=1, seconds=1.2)
    assert r["slowdown"] == pytest.approx(2.0) and r["profile_slowdown"] == pytest.approx(2.0)
    assert r["factor"] == pytest.approx(1.0)


def test_no_sharing_reading_without_a_host_model_or_reference_block(monkeypatch):
    asked = []
    monkeypatch.setattr("hw.reference.spawn", fake_spawn([], asked))
    assert host_sharing(profile_with([(square(64, heads=2, head_dim=8), 0.01)]), dtype="fp32", heads=2,
                        head_dim=8, threads=1) is None
    assert host_sharing(hosted([]), dtype="fp32", heads=2, head_dim=8, threads=1) is None
    assert asked == []
    with pytest.raises(RingsimError, match="reference time must be a number of seconds"):
        host_sharing(hosted([]), dtype="fp32", heads=2, head_dim=8, threads=1, seconds=0)


def test_a_sharing_reading_runs_two_real_processes():
    p = hosted([(square(64, heads=2, head_dim=8), 0.5e-3)])
    r = host_sharing(p, dtype="fp32", heads=2, head_dim=8, threads=1, seconds=0.1)
    assert r["processes"] == 2 and 0 < r["alone_s"] < 0.5
    assert r["slowdown"] > 0 and r["factor"] == pytest.approx(r["slowdown"] / 1.2)
