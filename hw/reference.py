"""How fast this host computes now, against the profile it is predicted with.

A profile is measured at one moment and a validation at another. A shared CPU host
does not keep one speed: the same block, timed alone on an idle two-core VM, took 27 ms
for a minute and 33 ms for the half minute before it. Part of a validation's error is
then the host's change, not the model's. `host_speed` times one of the blocks the
profile measured again, as the compute part of `ringsim hw bench` timed it (the same
operator, inputs and thread count), and returns its time now over the profile's: 1.10
means the host computes 10% slower than when it was calibrated.

`ringsim validate` takes this reading before each batch of cases and after the last,
and reports every case's error twice: against the profile as it is, and against the
profile with its compute times scaled to the host's speed of that moment
(`sim.profile.Profile.at_compute_speed`). The first is the prediction a person gets;
the gap between the two is the host's drift.
"""

from __future__ import annotations

import math
import time
from typing import Any

from sim.errors import RingsimError

from hw.bench import REFERENCE_TOKENS, block_flops   # the compute part's reference size; block FLOPs


def reference_block(profile: Any, dtype: str, heads: int, head_dim: int) -> tuple[int, float] | None:
    """(tokens, seconds): the square full-mask forward block of this shape (batch 1) that
    the profile measured, the one closest to REFERENCE_TOKENS; None where it measured none.

    Where that block is the compute part's own reference (the profile's report names
    it) and the profile brought its entries to one speed (sim.calibrate.at_one_speed), the seconds
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
    speed = ((getattr(profile, "report", None) or {}).get("compute") or {}).get("host_speed") or {}
    common = speed.get("reference_median_s")
    if (isinstance(common, (int, float)) and common > 0 and speed.get("reference_block") ==
            {"dtype": dtype, "heads": heads, "head_dim": head_dim, "q_tokens": tokens}):
        return tokens, float(common)
    return tokens, seconds


def host_speed(profile: Any, *, dtype: str, heads: int, head_dim: int, threads: int,
               seconds: float = 3.0, block_impl: str = "auto") -> dict[str, Any] | None:
    """Time the reference block for about `seconds` with `threads` threads, as the
    bench's compute part times it (hw.bench.measure_compute: one warm-up call, the
    median of the calls), and return {tokens, profile_s, now_s, factor, calls, at}; None
    where the profile measured no such block (then nothing is timed)."""
    import torch

    from hw.bench import full_forward_block, measure_compute
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
