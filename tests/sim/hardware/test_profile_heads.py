"""A profile prices a block of other heads than it measured by its extent, not its FLOPs
(sim.hardware.profile: k measured blocks of the block's own extent, k = its heads / theirs)."""

import json

import pytest

from sim.calibration.calibrate import calibrate
from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.hardware.profile import profile_from_dict
from tests.sim.reference import scenario

D = 64


def diagonal_flops(heads: int, tokens: int, kind: str = "fwd") -> float:
    """A causal tokens x tokens block: tokens (tokens + 1) / 2 pairs."""
    return 4 * D * heads * tokens * (tokens + 1) / 2 * (2.5 if kind == "bwd" else 1)


def full_flops(heads: int, q: int, kv: int) -> float:
    return 4 * D * heads * q * kv


T1536, T3072 = 0.030, 0.100
"""Seconds of 8-head causal blocks of 1536 and 3072 tokens: the longer block runs at a
higher rate (8 x 1536 x 1537 / 2 pairs in 30 ms; four times as many in 100 ms, not 120)."""


def bench(heads=8, batch=1, with_heads=True):
    compute = []
    for tokens, t in ((768, 0.009), (1536, T1536), (3072, T3072)):
        for mask, flops in (("diagonal", diagonal_flops(heads * batch, tokens)),
                            ("full", full_flops(heads * batch, tokens, tokens))):
            entry = {"kind": "fwd", "dtype": "fp32", "mask": mask, "flops": flops,
                     "time_s": [t * (2 if mask == "full" else 1)] * 3}
            if with_heads:
                entry.update(batch=batch, heads=heads, kv_heads=heads, head_dim=D, q_tokens=tokens,
                             kv_tokens=tokens)
            compute.append(entry)
    transfer = [{"bytes": b, "direction": "both_ways", "time_s": [1e-4 + b / 1e9]} for b in (1e6, 4e6)]
    return {"format": "ringsim-hw-bench", "version": 1,
            "device": {"kind": "cpu", "name": "test cpu", "cpu_count": 16, "threads_per_rank": 1},
            "compute": compute, "transfer": transfer}


def table_profile(b):
    d = calibrate(b).to_dict()
    d["compute"]["model"] = "table"
    return profile_from_dict(json.loads(json.dumps(d)))


def block(p, flops, tokens, mask="diagonal", kv_tokens=None):
    return p.compute_time_s(flops, dtype="fp32", kind="fwd", mask=mask, q_tokens=tokens,
                            kv_tokens=tokens if kv_tokens is None else kv_tokens)


def test_calibration_keeps_the_heads_the_blocks_were_measured_with():
    p = calibrate(bench(heads=4, batch=2))
    assert {(g.heads, g.head_dim) for g in p.groups.values()} == {(8, D)}
    assert p.report["compute"]["fp32/diagonal/fwd"]["heads"] == 8
    assert {(g.heads, g.head_dim) for g in calibrate(bench(with_heads=False)).groups.values()} == {(None, None)}
    mixed = bench()
    mixed["compute"][0]["heads"] = 4        # one block of other heads: the group keeps none
    assert calibrate(mixed).groups[("fp32", "diagonal", "fwd")].heads is None


def test_a_block_of_fewer_heads_runs_at_the_rate_of_its_own_extent():
    p = table_profile(bench())
    # two heads over 3072 tokens (Ulysses' H/4 of 8 heads) do the FLOPs of eight heads over
    # 1536: by FLOPs 30 ms, by extent a quarter of the 8-head 3072-token block, 25 ms
    assert diagonal_flops(2, 3072) == pytest.approx(diagonal_flops(8, 1536), rel=1e-3)
    assert block(p, diagonal_flops(2, 3072), 3072) == pytest.approx(T3072 / 4)
    # 32 heads over 1536 tokens: four 8-head blocks of 1536 tokens
    assert block(p, diagonal_flops(32, 1536), 1536) == pytest.approx(4 * T1536)
    # the measured heads: the table itself (a full block of 1536 x 768 lies between points)
    assert block(p, diagonal_flops(8, 1536), 1536) == pytest.approx(T1536)
    assert block(p, full_flops(8, 1536, 768), 1536, "full", 768) == pytest.approx(
        p.groups[("fp32", "full", "fwd")].table_s(full_flops(8, 1536, 768)))


def test_a_profile_without_heads_prices_a_block_by_its_flops():
    p = table_profile(bench(with_heads=False))
    assert block(p, diagonal_flops(2, 3072), 3072) == pytest.approx(T1536, rel=1e-3)


def test_heads_survive_the_profile_file_and_bad_ones_are_refused():
    d = calibrate(bench()).to_dict()
    assert {(g["heads"], g["head_dim"]) for g in d["compute"]["groups"]} == {(8, D)}
    again = profile_from_dict(json.loads(json.dumps(d)))
    assert again.at_compute_speed(2.0).groups[("fp32", "diagonal", "fwd")].heads == 8
    for bad in (0, -1, 2.5, "8", True):
        broken = json.loads(json.dumps(d))
        broken["compute"]["groups"][0]["heads"] = bad
        with pytest.raises(RingsimError, match="heads and head_dim must be positive integers"):
            profile_from_dict(broken)


def test_ulysses_computes_on_its_heads_and_the_ring_on_all_of_them():
    p = table_profile(bench())
    w = dict(heads=8, kv_heads=8, head_dim=D, dtype="fp32", layout="contiguous", causal=True)
    # Ulysses on 4 GPUs: one causal 3072 x 3072 call on 2 heads each, a quarter of the
    # measured 8-head block of that extent (the transfers aside)
    u = simulate(scenario(n=4, seq=3072, **w).with_(scheme="ulysses"), p)
    c = u.columns
    computes = c.stream == 0
    assert (c.end_s[computes] - c.start_s[computes]) == pytest.approx([T3072 / 4] * 4)
    # a ring's own diagonal block of 1536 tokens on 2 GPUs: 8 heads, the table's 30 ms
    r = simulate(scenario(n=2, seq=3072, **w), p)
    c = r.columns
    first = (c.stream == 0) & (c.step == 0)
    assert (c.end_s[first] - c.start_s[first]) == pytest.approx([T1536] * 2)
