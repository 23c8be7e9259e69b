"""How fast this host computes now, against the profile it is predicted with.

A profile is measured at one moment and a validation at another. A shared CPU host
does not keep one speed: the same block, timed alone on an idle two-core VM, took 27 ms
for a minute and 33 ms for the half minute before it. Part of a validation's error is
then the host's change, not the model's. `host_speed` times one of the blocks the
profile measured again, as the compute part of `ringsim hw bench` timed it (the same
operator, inputs and thread count), and returns its time now over the profile's: 1.10
means the host computes 10% slower than when it was calibrated.

A virtual machine's cores can also be shared from outside it while one process alone
keeps its speed. On a 2-core VM, read back to back for 300 s (bench/calibration/host_sharing.py),
two processes computing the block at once ran 1.01-1.06x slower than one alone in 27
readings of 32 and 1.62-1.71x in the other 5 (stretches of 10-30 s), while one process
stayed at 1.05-1.19x its time in the profile throughout. `host_sharing` reads that: two
processes compute the reference block at once, alternating with each alone, as the
bench's concurrency part measures its law (hw.bench.parts._concurrency_worker), and the ratio
is set against the profile's law at two processes: 1.5 means two ranks now run 1.5x
slower beside each other than when the profile was measured.

`ringsim validate` takes these readings before each batch of cases and after the last,
and reports every case's error three times: against the profile as it is, against the
profile with its compute times scaled to the host's speed of that moment
(`sim.hardware.profile.Profile.at_compute_speed`), and with its sharing law scaled as well
(`sim.hardware.profile.Profile.at_host_state`). The first is the prediction a person gets; the
gaps are the host's drift.
"""

from __future__ import annotations

import math
import time
from typing import Any

from hw.bench.measure import block_flops  # the compute part's reference size; block FLOPs
from hw.bench.parts import REFERENCE_TOKENS  # the compute part's reference size; block FLOPs
from sim.errors import RingsimError
from sim.hardware.profile import Profile

SHARING_PROCESSES = 2
"""Processes of a sharing reading: the fewest that share the host's cores."""


def reference_block(profile: Profile, dtype: str, heads: int, head_dim: int) -> tuple[int, float] | None:
    """(tokens, seconds): the square full-mask forward block of this shape (batch 1) that
    the profile measured, the one closest to REFERENCE_TOKENS; None where it measured none.

    Where that block is the compute part's own reference (the profile's report names
    it) and the profile brought its entries to one speed (sim.calibration.calibrate.at_one_speed), the seconds
    are the reference's median over the part: the speed every entry was brought to.
    The block's own entry is no better: it was timed once, at whatever speed the host had
    in those seconds, then scaled."""
    group = profile.groups.get((dtype, "full", "fwd"))
    if group is None:
        return None
    per_pair = block_flops("fwd", 1, heads, head_dim, 1, 1, "full")
    found = []
    for flops, seconds in group.points:
        tokens = round(math.sqrt(flops / per_pair))
        if tokens > 0 and block_flops("fwd", 1, heads, head_dim, tokens, tokens, "full") == flops and seconds > 0:
            found.append((abs(tokens - REFERENCE_TOKENS), tokens, seconds))
    if not found:
        return None
    _, tokens, seconds = min(found)
    speed = (profile.report.get("compute") or {}).get("host_speed") or {}
    common = speed.get("reference_median_s")
    if (isinstance(common, (int, float)) and common > 0 and speed.get("reference_block") ==
            {"dtype": dtype, "heads": heads, "head_dim": head_dim, "q_tokens": tokens}):
        return tokens, float(common)
    return tokens, seconds


def host_speed(profile: Profile, *, dtype: str, heads: int, head_dim: int, threads: int,
               seconds: float = 3.0, block_impl: str = "auto") -> dict[str, Any] | None:
    """Time the reference block for about `seconds` with `threads` threads, as the
    bench's compute part times it (hw.bench.measure.measure_compute: one warm-up call, the
    median of the calls), and return {tokens, profile_s, now_s, factor, calls, at}; None
    where the profile measured no such block (then nothing is timed)."""
    import torch

    from hw.bench.measure import measure_compute
    from hw.bench.parts import full_forward_block
    from hw.blocks import select_block_ops

    if not 0 < seconds <= 60:
        raise RingsimError("the reference time must be a number of seconds above 0, at most 60")
    ref = reference_block(profile, dtype, heads, head_dim)
    if ref is None:
        return None
    tokens, profile_s = ref
    entry = full_forward_block(dtype, 1, heads, heads, head_dim, tokens)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        timed = measure_compute(entry, select_block_ops("cpu", dtype, head_dim, block_impl), torch.device("cpu"),
                                max(3, math.ceil(seconds / profile_s)), 1)
    finally:
        torch.set_num_threads(saved)
    now_s = timed["median_s"]
    return {"tokens": tokens, "profile_s": profile_s, "now_s": now_s, "factor": now_s / profile_s,
            "calls": len(timed["time_s"]), "at": time.time()}


def host_sharing(profile: Profile, *, dtype: str, heads: int, head_dim: int, threads: int,
                 seconds: float = 3.0, block_impl: str = "auto", timeout_s: float = 120.0) -> dict[str, Any] | None:
    """Two processes of `threads` threads compute the reference block at once and each
    alone, in rounds (hw.bench.parts._concurrency_worker), for about `seconds`; returns
    {tokens, processes, slowdown, profile_slowdown, factor, alone_s, at}: the slowdown
    read as calibration reads a concurrency entry (sim.calibration.calibrate.round_ratios, the median
    of the rounds), the profile's law at that many processes, and their ratio. None where
    the profile has no host model or measured no reference block (then nothing runs)."""
    import statistics

    from hw.bench.options import CONCURRENCY_ROUNDS
    from hw.bench.parts import _concurrency_worker, full_forward_block, gather_concurrency
    from hw.spawn import spawn
    from sim.calibration.calibrate import round_ratios

    if not 0 < seconds <= 60:
        raise RingsimError("the reference time must be a number of seconds above 0, at most 60")
    host = profile.contention.host
    ref = reference_block(profile, dtype, heads, head_dim)
    if host is None or ref is None:
        return None
    tokens, profile_s = ref
    k = SHARING_PROCESSES
    entry = full_forward_block(dtype, 1, heads, heads, head_dim, tokens)
    # a round: each process alone (k x samples blocks), then all at once for about 1.5
    # x samples blocks (hw.bench.parts._common_window)
    samples = max(3, math.ceil(seconds / (CONCURRENCY_ROUNDS * (k + 1.5) * profile_s)))
    per_rank = spawn(_concurrency_worker, k, args=(entry, samples, 1, threads, block_impl),
                     backend="gloo", timeout_s=timeout_s)
    got = gather_concurrency(per_rank)
    ratios = round_ratios(got["rounds"], k * threads > host.cores, "sharing reading")
    if not ratios:
        raise RingsimError("the sharing reading measured no block under sharing; raise --reference-s")
    slowdown = statistics.median(ratios)
    law = host.slowdown(k * threads)
    return {"tokens": tokens, "processes": k, "slowdown": slowdown, "profile_slowdown": law,
            "factor": slowdown / law, "alone_s": statistics.median(got["alone_s"]), "at": time.time()}


def sharing_line(r: dict[str, Any]) -> str:
    """A sharing reading (host_sharing) in words."""
    return (f"{r['processes']} processes at once compute the {r['tokens']}-token reference block "
            f"{r['slowdown']:.2f}x slower than one alone; the profile's law says {r['profile_slowdown']:.2f}x "
            f"({r['factor']:.2f}x it)")
