"""The host's speed against a profile: the reference block is one the profile measured,
and its reading is the time now over the time then."""

import pytest

from sim.errors import RingsimError
from sim.profile import ComputeGroup, LinkFit, Profile
from hw.reference import REFERENCE_TOKENS, host_speed, reference_block


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
    """A profile whose entries were brought to one speed (sim.calibrate.at_one_speed) at
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
