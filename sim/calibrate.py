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
- collectives (all-gather, reduce-scatter, all-to-all), per collective: alpha-beta
  over shard sizes and world sizes, time = (world - 1) x alpha + bytes sent / bandwidth,
  the time of the (world - 1) rounds the simulator plays (sim.topology), each a flow of
  one shard; a collective that was not measured is played on the point-to-point fit;
- contention: the slowdown of compute while a transfer is in flight (median time with a
  transfer / median alone) and, on CPUs, how much slower a block runs when k processes
  compute at once (median with k / median with one), or, when that was not measured,
  the compute slots (cores / threads per rank).
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from sim.contention import Contention
from sim.errors import RingsimError
from sim.profile import CollectiveFit, ComputeGroup, LinkFit, Profile


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
    # ties (within 0.1 point) go to the line: two parameters, and it extrapolates
    model = "table" if table_m + 1e-3 < line_m else "fit"
    # None where no group had the three points a held-out error needs
    report["chosen"] = {"model": model, "held_out_median_abs_rel_fit": line_m if all_line else None,
                        "held_out_median_abs_rel_table": table_m if all_table else None}
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


COLLECTIVE_OPS = ("allgather", "reducescatter", "alltoall")


def fit_rounds(rounds: list[float], sent: list[float], times: list[float]) -> tuple[float, float]:
    """Least squares time = rounds x alpha + sent x beta with alpha, beta >= 0 (the
    two-variable non-negative least squares: the free solution, else the best one-
    variable fit on the boundary); returns (alpha, beta)."""
    x = np.column_stack([np.asarray(rounds, float), np.asarray(sent, float)])
    y = np.asarray(times, float)
    candidates = []
    if len(y) >= 2 and np.linalg.matrix_rank(x) == 2:
        coef = np.linalg.lstsq(x, y, rcond=None)[0]
        if (coef >= 0).all():
            candidates.append((float(coef[0]), float(coef[1])))
    for j in (0, 1):
        col = x[:, j]
        c = max(0.0, float(col @ y) / float(col @ col)) if col @ col > 0 else 0.0
        candidates.append((c, 0.0) if j == 0 else (0.0, c))
    return min(candidates, key=lambda ab: float(np.sum((x @ np.array(ab) - y) ** 2)))


def calibrate_collectives(records: list[dict[str, Any]]) -> tuple[dict[str, CollectiveFit], dict]:
    """Per collective: the per-round latency and bandwidth of its flows over every world
    size, and a fit at each world size measured at two sizes or more."""
    out, report = {}, {}
    for op in COLLECTIVE_OPS:
        pts = [r for r in records if r["op"] == op]
        if not pts:
            continue
        if len({r["sent_bytes"] for r in pts}) < 2:
            report[op] = {"points": len(pts), "skipped": "needs two sizes or more"}
            continue
        rounds = [r["world"] - 1 for r in pts]
        alpha, beta = fit_rounds(rounds, [r["sent_bytes"] for r in pts], [r["time_s"] for r in pts])
        if beta <= 0:
            report[op] = {"points": len(pts), "skipped": "times do not grow with size"}
            continue
        by_world: dict[int, LinkFit] = {}
        errors: dict[int, dict[str, list[float]]] = {}
        for world in sorted({r["world"] for r in pts}):
            mine = [r for r in pts if r["world"] == world]
            err = errors.setdefault(world, {"rounds": [], "world": []})
            err["rounds"] = [_rel((world - 1) * alpha + r["sent_bytes"] * beta, r["time_s"]) for r in mine]
            if len({r["sent_bytes"] for r in mine}) < 2:
                continue
            try:
                a, b = fit_line([r["sent_bytes"] for r in mine], [r["time_s"] for r in mine])
            except RingsimError:
                continue
            by_world[world] = LinkFit(a / (world - 1), 1.0 / b)
            err["world"] = [_rel(a + r["sent_bytes"] * b, r["time_s"]) for r in mine]
        out[op] = CollectiveFit(LinkFit(alpha, 1.0 / beta), by_world)
        report[op] = {"latency_per_round_s": alpha, "bandwidth_bytes_per_s": 1.0 / beta, "points": len(pts),
                      "worlds": sorted(errors),
                      "residuals": _stats([e for es in errors.values() for e in es["rounds"]]),
                      "residuals_by_world": {str(w): _stats(es["rounds"]) for w, es in errors.items()},
                      "by_world": {str(w): {"latency_per_round_s": f.latency_s,
                                            "bandwidth_bytes_per_s": f.bandwidth_bytes_per_s,
                                            "residuals": _stats(errors[w]["world"])}
                                   for w, f in by_world.items()}}
    return out, report


def _records(bench: dict[str, Any], part: str) -> list[dict[str, Any]]:
    raw = bench.get(part, [])
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise RingsimError(f"bench: {part} must be a list of objects")
    return raw


def merge_benches(benches: list[tuple[Any, str]]) -> dict[str, Any]:
    """One bench document from several (`ringsim hw bench --parts ...` run apart) measured
    on one device: their entries, part by part."""
    first, first_src = benches[0]
    for doc, src in benches:
        if not isinstance(doc, dict) or doc.get("format") != "ringsim-hw-bench":
            raise RingsimError(f"{src or 'input'}: not a `ringsim hw bench` result")
    if len(benches) == 1:
        return first
    name = (first.get("device") or {}).get("name")
    merged = dict(first)
    for doc, src in benches[1:]:
        other = (doc.get("device") or {}).get("name")
        if other != name:
            raise RingsimError(f"{src} was measured on {other!r}, {first_src} on {name!r}: "
                               "calibrate one device at a time")
        for part in ("compute", "transfer", "interference", "concurrency", "collective"):
            extra = doc.get(part, [])
            if extra:
                merged[part] = list(merged.get(part, [])) + list(extra)
    return merged


def calibrate(bench: Any, source: str = "") -> Profile:
    """A profile from a decoded `ringsim hw bench` JSON object."""
    if not isinstance(bench, dict) or bench.get("format") != "ringsim-hw-bench":
        raise RingsimError(f"{source or 'input'}: not a `ringsim hw bench` result")
    if bench.get("version") != 1:
        raise RingsimError(f"bench: unsupported version {bench.get('version')!r}")
    device = bench.get("device") if isinstance(bench.get("device"), dict) else {}
    compute = []
    for i, r in enumerate(_records(bench, "compute")):
        if r.get("dtype") not in ("fp32", "bf16", "fp16") or r.get("mask") not in ("full", "diagonal") \
                or r.get("kind", "fwd") not in ("fwd", "bwd"):
            raise RingsimError(f"bench: compute entry {i} has a bad dtype, mask or kind")
        flops = r.get("flops")
        if isinstance(flops, bool) or not isinstance(flops, (int, float)) or not flops > 0:
            raise RingsimError(f"bench: compute entry {i} needs positive flops")
        compute.append({"dtype": r["dtype"], "mask": r["mask"], "kind": r.get("kind", "fwd"),
                        "flops": float(flops),
                        "time_s": _median(r.get("time_s", r.get("median_s")), f"compute entry {i} time_s")})
    groups, model, compute_report = calibrate_compute(compute)
    transfers = []
    for i, r in enumerate(_records(bench, "transfer")):
        if r.get("direction") not in ("one_way", "both_ways"):
            raise RingsimError(f"bench: transfer entry {i} has a bad direction")
        transfers.append({"bytes": _median(r.get("bytes"), f"transfer entry {i} bytes"),
                          "direction": r["direction"],
                          "time_s": _median(r.get("time_s", r.get("median_s")), f"transfer entry {i} time_s")})
    links, link_report = calibrate_link(transfers)
    # a ring step sends and receives at once on every rank: the both-ways fit applies
    link = links.get("both_ways") or links["one_way"]
    slowdowns = []
    for i, r in enumerate(_records(bench, "interference")):
        alone = _median(r.get("compute_alone_s", r.get("median_alone_s")), f"interference entry {i} alone")
        with_ = _median(r.get("compute_with_transfer_s", r.get("median_with_s")), f"interference entry {i} with")
        if alone > 0:
            slowdowns.append(with_ / alone)
    measured_slowdown = statistics.median(slowdowns) if slowdowns else None
    slots = None
    if device.get("kind", "cpu") == "cpu":
        cores, threads = device.get("cpu_count"), device.get("threads_per_rank") or 1
        if isinstance(cores, int) and cores > 0 and isinstance(threads, int) and threads > 0:
            slots = cores / threads
    by_k: dict[float, list[float]] = {}
    for i, r in enumerate(_records(bench, "concurrency")):
        k = r.get("processes")
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise RingsimError(f"bench: concurrency entry {i} needs a positive process count")
        by_k.setdefault(float(k), []).append(_median(r.get("time_s", r.get("median_s")),
                                                     f"concurrency entry {i} time_s"))
    concurrency = None
    if 1.0 in by_k and len(by_k) >= 2:
        alone = statistics.median(by_k[1.0])
        if alone > 0:
            concurrency = tuple(sorted((k, statistics.median(ts) / alone) for k, ts in by_k.items()))
    collective = []
    for i, r in enumerate(_records(bench, "collective")):
        world = r.get("world")
        if r.get("op") not in COLLECTIVE_OPS or isinstance(world, bool) or not isinstance(world, int) or world < 2:
            raise RingsimError(f"bench: collective entry {i} needs an op among {', '.join(COLLECTIVE_OPS)} "
                               "and a world of two ranks or more")
        collective.append({"op": r["op"], "world": world,
                           "sent_bytes": _median(r.get("sent_bytes"), f"collective entry {i} sent_bytes"),
                           "time_s": _median(r.get("time_s", r.get("median_s")), f"collective entry {i} time_s")})
    collectives, collective_report = calibrate_collectives(collective)
    contention = Contention(slowdown_in_flight=max(1.0, measured_slowdown or 1.0), compute_slots=slots,
                            concurrency=concurrency)
    report = {"compute": compute_report, "link": link_report, "link_used": "both_ways" if "both_ways" in links else "one_way",
              "interference": {"measured_slowdowns": slowdowns, "median_slowdown": measured_slowdown,
                               "used": contention.slowdown_in_flight},
              "compute_slots": slots,
              "concurrency_slowdown": [list(p) for p in concurrency] if concurrency else None,
              "collectives": collective_report}
    measured_on = {"device": device.get("name", "unknown"), **{k: v for k, v in device.items() if k != "name"}}
    return Profile(model, groups, link, contention, measured_on, report, source, collectives)
