"""What a measured run leaves behind: where each repeat's trace goes, those outputs checked
before the run (sim.files), and the spread of its repeated times. Shared by the ring's
runs (`ringsim hw run`) and the inference kernels' (`ringsim hw infer`)."""

from __future__ import annotations

import argparse
import os
import statistics

from sim.files import check_output


def trace_paths(pattern: str, repeats: int) -> list[str]:
    """Where each repeat's trace goes (see --trace)."""
    if repeats == 1 and "{i}" not in pattern:
        return [pattern]
    if "{i}" in pattern:
        return [pattern.replace("{i}", str(i)) for i in range(repeats)]
    stem, ext = os.path.splitext(pattern)
    return [f"{stem}-r{i}{ext}" for i in range(repeats)]


def check_outputs(a: argparse.Namespace, repeats: int) -> None:
    """Refuse before the run, not after it, an output that could not be written (sim.files)."""
    paths = (trace_paths(a.trace, repeats) if a.trace is not None else []) + [a.chrome_trace]
    for path in paths:
        check_output(path, a.force)


def spread(values: list[float]) -> dict[str, float]:
    """Median, extremes and coefficient of variation of repeated measurements."""
    mean = statistics.fmean(values)
    cv = statistics.pstdev(values) / mean if len(values) > 1 and mean > 0 else 0.0
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "mean": mean, "cv": cv, "n": len(values)}
