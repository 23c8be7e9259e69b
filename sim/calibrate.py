"""Calibration: microbenchmark measurements in, a hardware profile out.

Reads the JSON that `ringsim hw bench` writes (format documented in hw/bench.py) and
fits the models of sim.profile:
- compute, per (dtype, mask kind, pass): the median time of each measured block shape
  against its FLOPs, as a table (piecewise-linear) and as a line time = overhead +
  FLOPs / rate by least squares. Each model predicts every point with that point held
  out (leave-one-out); the one with the smaller median held-out error is used, and the
  residuals of both are kept in the profile's report;
- links: alpha-beta by least squares over message sizes, for one direction and for
  both directions at once; the ring uses the latter;
- contention: the slowdown of compute while a transfer is in flight (median time with a
  transfer / median alone) and, on CPUs, the compute slots (cores / threads per rank).
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from sim.contention import Contention
from sim.errors import RingsimError
from sim.profile import ComputeGroup, LinkFit, Profile


def _median(x: Any, what: str) -> float:
    vals = x if isinstance(x, list) else [x]
    try:
        vals = [float(v) for v in vals]
    except (TypeError, ValueError):
        raise RingsimError(f"bench: {what} must be a number or a list of numbers") from None
    if not vals or any(v != v or v < 0 for v in vals):
        raise RingsimError(f"bench: {what} must hold non-negative numbers")
    return statistics.median(vals)


def fit_line(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x with a >= 0 and b > 0; returns (a, b)."""
    xa, ya = np.asarray(x, float), np.asarray(y, float)
    if len(xa) >= 2 and np.ptp(xa) > 0:
        b, a = np.polyfit(xa, ya, 1)
        if a >= 0 and b > 0:
            return float(a), float(b)
    b = float((xa @ ya) / (xa @ xa)) if (xa @ xa) > 0 else 0.0
    if b <= 0:
        raise RingsimError("bench: times do not grow with size; cannot fit a rate")
    return 0.0, b


def _rel(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas if meas > 0 else 0.0


def _stats(errors: list[float]) -> dict[str, float]:
    if not errors:
        return {"n": 0}
    return {"n": len(errors), "median_abs_rel": statistics.median(errors), "max_abs_rel": max(errors)}


def _held_out(points: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Leave-one-out relative errors of the line and of the table."""
    line_err, table_err = [], []
    if len(points) < 3:
        return line_err, table_err
    for i, (x, y) in enumerate(points):
        rest = points[:i] + points[i + 1:]
        a, b = fit_line([p[0] for p in rest], [p[1] for p in rest])
        g = ComputeGroup("fp32", "full", "fwd", tuple(rest), a, 1.0 / b)
        line_err.append(_rel(g.fit_s(x), y))
        table_err.append(_rel(g.table_s(x), y))
    return line_err, table_err


def calibrate_compute(records: list[dict[str, Any]]) -> tuple[dict, str, dict]:
    """Groups, the chosen model, and a report of fits and held-out residuals."""
    by_group: dict[tuple[str, str, str], dict[float, list[float]]] = {}
    for r in records:
        key = (r["dtype"], r["mask"], r.get("kind", "fwd"))
        by_group.setdefault(key, {}).setdefault(float(r["flops"]), []).append(r["time_s"])
    if not by_group:
        raise RingsimError("bench: no compute measurements")
    groups, report = {}, {}
    all_line, all_table = [], []
    for key, pts in sorted(by_group.items()):
        points = sorted((f, statistics.median(ts)) for f, ts in pts.items())
        a, b = fit_line([p[0] for p in points], [p[1] for p in points])
        g = ComputeGroup(*key, tuple(points), a, 1.0 / b)
        groups[key] = g
        line_err, table_err = _held_out(points)
        all_line += line_err
        all_table += table_err
        report["/".join(key)] = {
            "points": len(points), "overhead_s": a, "flops_per_s": 1.0 / b,
            "in_sample_fit": _stats([_rel(g.fit_s(x), y) for x, y in points]),
            "held_out_fit": _stats(line_err), "held_out_table": _stats(table_err)}
    line_m = statistics.median(all_line) if all_line else float("inf")
    table_m = statistics.median(all_table) if all_table else float("inf")
    model = "table" if table_m < line_m else "fit"
    report["chosen"] = {"model": model, "held_out_median_abs_rel_fit": line_m,
                        "held_out_median_abs_rel_table": table_m}
    return groups, model, report


def calibrate_link(records: list[dict[str, Any]]) -> tuple[dict[str, LinkFit], dict]:
    out, report = {}, {}
    for direction in ("one_way", "both_ways"):
        pts = [(float(r["bytes"]), r["time_s"]) for r in records if r["direction"] == direction]
        if len(pts) < 2:
            continue
        a, b = fit_line([p[0] for p in pts], [p[1] for p in pts])
        fit = LinkFit(a, 1.0 / b)
        out[direction] = fit
        report[direction] = {"latency_s": a, "bandwidth_bytes_per_s": 1.0 / b, "points": len(pts),
                             "residuals": _stats([_rel(fit.time_s(x), y) for x, y in pts])}
    if not out:
        raise RingsimError("bench: no transfer measurements (need two message sizes or more)")
    return out, report


def calibrate(bench: dict[str, Any], source: str = "") -> Profile:
    """A profile from a decoded `hw bench` JSON object."""
    from hw_bench_format import normalize  # noqa: F401  (replaced below)
    raise NotImplementedError
