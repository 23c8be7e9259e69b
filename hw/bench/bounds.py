"""Physical bounds a host measurement must keep, and measuring again until it does (hw.bench)."""

from __future__ import annotations

import statistics
import sys
from typing import Any, Callable

from sim.calibration.calibrate import bound_violation, round_ratios

# ---- physical bounds ------------------------------------------------------------------

MAX_ATTEMPTS = 3
"""Measurements of a concurrency or ring-conditions entry before one breaking a physical
bound is given up on (written as rejected)."""
SUSPECT = 1.5
"""A slowdown this many times its physical bound is measured again (and the least kept)."""


def add_pass(entry: dict[str, Any], again: dict[str, Any]) -> None:
    """Fold another pass over a compute entry into it, in place: its samples and its
    reference block's samples join the entry's, and every pass's median and reference
    median are listed (`pass_medians_s`, `pass_references_s`), and so are the samples'
    ratios to their references and each pass's median of them (`speed_ratios`,
    `pass_speed_ratios`). A shared host's speed
    swings by 20% within seconds; a run meets the host at its typical speed, not at the
    best moment of a pass, so calibration (sim.calibration.calibrate) takes the mean of the passes."""
    listed = (("reference_s", "pass_references_s"), ("speed_ratios", "pass_speed_ratios"))
    if "pass_medians_s" not in entry:
        entry["pass_medians_s"] = [entry["median_s"]]
        for key, per_pass in listed:
            if entry.get(key):
                entry[per_pass] = [statistics.median(entry[key])]
    entry["pass_medians_s"].append(again["median_s"])
    entry["time_s"] = list(entry["time_s"]) + list(again["time_s"])
    for key, per_pass in listed:
        if again.get(key) and per_pass in entry:
            entry[per_pass].append(statistics.median(again[key]))
            entry[key] = list(entry[key]) + list(again[key])
    entry["median_s"] = statistics.median(entry["time_s"])
    if entry.get("flops") and entry["median_s"] > 0:
        entry["rate_flops"] = entry["flops"] / entry["median_s"]


def ring_slowdown(shared_s: list[float], alone_s: list[float]) -> float:
    """How much slower under sharing than alone: the mean of the samples taken back to
    back under sharing (their throughput: a time-sliced process's calls are either
    untouched or very slow, and only the mean counts both) over the median alone (the
    uncontended time, as the compute part measures it). 0 when nothing was measured."""
    if not shared_s or not alone_s or statistics.median(alone_s) <= 0:
        return 0.0
    return statistics.fmean(shared_s) / statistics.median(alone_s)


def round_slowdown(entry: dict[str, Any], median: bool = False) -> float:
    """A concurrency entry's slowdown: the median over its rounds of each round's shared
    samples over its samples alone (sim.calibration.calibrate.round_ratios: their mean over the
    median alone, as ring_slowdown; with `median`, their medians' ratio), so that the
    host's drift between rounds cancels; an entry without rounds (older files) over all
    its samples. 0 when nothing was measured."""
    ratios = round_ratios(entry.get("rounds"), not median, "concurrency entry")
    if ratios:
        return statistics.median(ratios)
    shared, alone = entry.get("time_s") or [], entry.get("alone_s") or []
    if not median:
        return ring_slowdown(shared, alone)
    return statistics.median(shared) / statistics.median(alone) if shared and alone else 0.0


def concurrency_violation(entry: dict[str, Any], alone_s: float | None, cores: int) -> str | None:
    """Why a concurrency entry cannot be right against the 1-process median block time
    `alone_s` (None: nothing to check against), or None; an entry with rounds is checked
    by its rounds' median (round_slowdown)."""
    if alone_s is None or alone_s <= 0 or entry["processes"] == 1:
        return None
    slowdown = round_slowdown(entry) if entry.get("rounds") else ring_slowdown(entry["time_s"], [alone_s])
    return bound_violation(slowdown, entry["processes"], entry["threads_per_rank"], cores)


def ring_violation(entry: dict[str, Any], cores: int) -> str | None:
    """Why a ring-conditions entry's compute slowdown cannot be right, or None."""
    return bound_violation(entry["compute_slowdown"], entry["processes"], entry["threads_per_rank"], cores)


def measure_within_bounds(measure: Callable[[], dict[str, Any]],
                          violation: Callable[[dict[str, Any]], str | None], what: str,
                          attempts: int = MAX_ATTEMPTS,
                          slowdown: Callable[[dict[str, Any]], float] | None = None) -> dict[str, Any]:
    """`measure()` until `violation` finds nothing wrong, `attempts` times at most. The
    entry gets "attempts"; if the last still breaks its bound it gets "rejected" (why)
    and stderr gets one line.

    With `slowdown`, an entry more than SUSPECT times slower than its physical bound is
    measured again too (other load on the host only ever slows a measurement), and of
    the attempts that keep the bound the least slowed one is kept; every attempt's
    slowdown is recorded ("attempt_slowdowns")."""
    kept: dict[str, Any] | None = None
    seen: list[float] = []
    for attempt in range(1, attempts + 1):
        entry = measure()
        entry["attempts"] = attempt
        why = violation(entry)
        if why is not None:
            continue
        if slowdown is None:
            return entry
        seen.append(slowdown(entry))
        if kept is None or seen[-1] < slowdown(kept):
            kept = entry
        if seen[-1] <= SUSPECT * entry["bound"]:
            break
    if kept is not None:
        kept["attempts"] = attempt
        kept["attempt_slowdowns"] = seen
        return kept
    entry["rejected"] = why
    print(f"{what}: rejected after {attempts} attempts: {why}", file=sys.stderr, flush=True)
    return entry
