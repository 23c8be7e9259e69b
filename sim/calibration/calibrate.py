"""Calibration: microbenchmark measurements in, a hardware profile out.

Reads the JSON that `ringsim hw bench` writes (format documented in hw/bench/__init__.py) and
fits the models of sim.hardware.profile:
- compute, per (dtype, mask kind, pass): the median time of each measured block shape
  against its FLOPs, as a table (piecewise-linear) and as a line time = overhead +
  FLOPs / rate by least squares. Each model predicts every point with that point held
  out (leave-one-out); the one with the smaller median held-out error is used, and the
  residuals of both are kept in the profile's report. A CPU bench times a reference
  block just before every entry; each entry is first brought to the host's median speed
  over the part (at_one_speed), since a shared host drifts by up to 20% in a minute;
  where every sample was timed between two readings of the reference, the entry is its
  median ratio to them times the reference's median. An entry measured in several
  passes counts at the mean of their medians;
- links: alpha-beta by least squares over message sizes, for one direction and for
  both directions at once; the ring uses the latter;
- collectives (all-gather, reduce-scatter, all-to-all), per collective: alpha-beta
  over shard sizes and GPU counts, time = (n_gpus - 1) x alpha + bytes sent / bandwidth,
  the time of the (n_gpus - 1) rounds the simulator plays (sim.hardware.topology), each a flow of
  one shard; a collective that was not measured is played on the point-to-point fit;
- contention: on CPUs, the host model of sim.hardware.contention. Its cores and threads per rank
  come from the bench file's device; its sharing law from the concurrency part (k
  processes computing at once demand k·threads cores and run their time shared / the
  median of the same processes alone, seconds before, slower, where the time shared is
  the median block while they fit the cores and the mean once they are time-sliced);
  the cores a transfer in flight demands, and what slows compute beyond sharing (the
  in-flight slowdown, multiplying), from the ring-conditions part
  by least squares in log space (fit_ring_conditions: forwards beside one hop and, where
  measured, backwards beside a backward step's two, each kind with its own in-flight
  slowdown). Every concurrency and
  ring-conditions slowdown is first checked against the physical bound (k busy
  processes of t threads on C cores: at least k·t/C); one below it is rejected, listed
  in the report, and not fitted. A bench file without the ring-conditions part (older
  ones) gives a host whose transfers demand no cores and the in-flight slowdown of the
  interference part (median time with a transfer / median alone), as before. On GPUs,
  only the in-flight slowdown.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

import numpy as np

from sim.errors import RingsimError
from sim.hardware.contention import Contention, Host, sharing_bound, split_cores
from sim.hardware.profile import MAX_BLOCK_S, MIN_BLOCK_S, CollectiveFit, ComputeGroup, LinkFit, Profile


def _median(x: Any, what: str) -> float:
    vals = x if isinstance(x, list) else [x]
    try:
        vals = [float(v) for v in vals]
    except (TypeError, ValueError):
        raise RingsimError(f"bench: {what} must be a number or a list of numbers") from None
    if not vals or any(not math.isfinite(v) or v < 0 for v in vals):
        raise RingsimError(f"bench: {what} must hold finite non-negative numbers")
    return statistics.median(vals)


def _mean(x: Any, what: str) -> float:
    """The mean of samples taken back to back over a window (their throughput)."""
    if not isinstance(x, list) or not x:
        raise RingsimError(f"bench: {what} must be a non-empty list of numbers")
    _median(x, what)        # the same checks on each value
    return statistics.fmean(float(v) for v in x)


def _entry_heads(r: dict[str, Any]) -> dict[str, int | None]:
    """A compute entry's heads (times batch) and head dim; None where one is missing or
    not a positive integer (older bench files, hand-made entries)."""
    dims = [r.get(k) for k in ("batch", "heads", "head_dim")]
    if all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in dims):
        return {"heads": dims[0] * dims[1], "head_dim": dims[2]}
    return {"heads": None, "head_dim": None}


def fit_line(x: list[float], y: list[float], *, relative: bool = False) -> tuple[float, float]:
    """Least squares y = a + b x with a >= 0 and b > 0; returns (a, b). With `relative`,
    each point's residual counts over its own y (every point's relative error weighs
    alike, where plain least squares lets the largest y decide the line)."""
    xa, ya = np.asarray(x, float), np.asarray(y, float)
    w = 1.0 / ya if relative and (ya > 0).all() else np.ones_like(ya)
    if len(xa) >= 2 and np.ptp(xa) > 0:
        b, a = np.polyfit(xa, ya, 1, w=w)
        if a >= 0 and b > 0:
            return float(a), float(b)
    xw, yw = xa * w, ya * w
    b = float((xw @ yw) / (xw @ xw)) if (xw @ xw) > 0 else 0.0
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
    widths: dict[tuple[str, str, str], set] = {}
    for r in records:
        key = (r["dtype"], r["mask"], r.get("kind", "fwd"))
        # a block timed outside what a block can take (a zero-length span, 1e300 s) is a broken
        # measurement, refused here for every route in (bench entries, traces' spans)
        if not (MIN_BLOCK_S <= r["time_s"] <= MAX_BLOCK_S and 0 < r["flops"] < math.inf):
            raise RingsimError(f"a {'/'.join(key)} block of {r['flops']:g} FLOPs timed at {r['time_s']:g} s: outside "
                               f"the {MIN_BLOCK_S:g} to {MAX_BLOCK_S:g} s a measured block can take")
        by_group.setdefault(key, {}).setdefault(float(r["flops"]), []).append(r["time_s"])
        widths.setdefault(key, set()).add((r.get("heads"), r.get("head_dim")))
    if not by_group:
        raise RingsimError("bench: no compute measurements")
    groups, report = {}, {}
    all_line, all_table = [], []
    for key, pts in sorted(by_group.items()):
        points = sorted((f, statistics.median(ts)) for f, ts in pts.items())
        a, b = fit_line([p[0] for p in points], [p[1] for p in points])
        # one (heads, head dim) for every block of the group, or none (priced by FLOPs alone)
        heads, head_dim = next(iter(widths[key])) if len(widths[key]) == 1 else (None, None)
        if not heads or not head_dim:
            heads = head_dim = None
        g = ComputeGroup(*key, tuple(points), a, 1.0 / b, heads, head_dim)
        groups[key] = g
        line_err, table_err = _held_out(points)
        all_line += line_err
        all_table += table_err
        report["/".join(key)] = {
            "points": len(points), "overhead_s": a, "flops_per_s": 1.0 / b, "heads": heads, "head_dim": head_dim,
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


def hop_link_points(hops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """calibrate_link's points from measured hops (each a `bytes` and a `time_s`): one per
    message size, its median (a ring repeats one size many times over), sizes ascending;
    with one size, the origin beside it (no latency to tell apart: bandwidth through the
    origin)."""
    by_size: dict[float, list[float]] = {}
    for h in hops:
        by_size.setdefault(h["bytes"], []).append(h["time_s"])
    points = [{"bytes": b, "direction": "both_ways", "time_s": statistics.median(ts)}
              for b, ts in sorted(by_size.items())]
    if len(points) == 1:
        points.append({**points[0], "bytes": 0.0, "time_s": 0.0})
    return points


def calibrate_link(records: list[dict[str, Any]]) -> tuple[dict[str, LinkFit], dict]:
    out, report = {}, {}
    for direction in ("one_way", "both_ways"):
        pts = [(float(r["bytes"]), r["time_s"]) for r in records if r["direction"] == direction]
        bad = [(x, y) for x, y in pts if not (0 <= y <= MAX_BLOCK_S and 0 <= x < math.inf)]
        if bad:
            raise RingsimError(f"a transfer of {bad[0][0]:g} bytes timed at {bad[0][1]:g} s: outside the 0 to "
                               f"{MAX_BLOCK_S:g} s a measured transfer can take")
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


def fit_rounds(rounds: list[float], sent: list[float], times: list[float], *,
               relative: bool = False) -> tuple[float, float]:
    """Least squares time = rounds x alpha + sent x beta with alpha, beta >= 0 (the
    two-variable non-negative least squares: the free solution, else the best one-
    variable fit on the boundary); returns (alpha, beta). With `relative`, each point's
    residual counts over its own time (fit_line)."""
    x = np.column_stack([np.asarray(rounds, float), np.asarray(sent, float)])
    y = np.asarray(times, float)
    if relative and (y > 0).all():
        x, y = x / y[:, None], np.ones_like(y)
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


def collective_records(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """A bench's collective entries as calibrate_collectives takes them: op, n_gpus, and
    the median of the bytes sent and of the times; a malformed entry is refused."""
    out = []
    for i, r in enumerate(_records(bench, "collective")):
        n_gpus = r.get("n_gpus", r.get("world"))   # "world": the key of older bench files
        if r.get("op") not in COLLECTIVE_OPS or isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 2:
            raise RingsimError(f"bench: collective entry {i} needs an op among {', '.join(COLLECTIVE_OPS)} "
                               "and n_gpus, two GPUs or more")
        out.append({"op": r["op"], "n_gpus": n_gpus,
                    "sent_bytes": _median(r.get("sent_bytes"), f"collective entry {i} sent_bytes"),
                    "time_s": _median(r.get("time_s", r.get("median_s")), f"collective entry {i} time_s")})
    return out


def calibrate_collectives(records: list[dict[str, Any]]) -> tuple[dict[str, CollectiveFit], dict]:
    """Per collective: the per-round latency and bandwidth of its flows over every GPU
    count, and a fit at each GPU count measured at two sizes or more, each fitted to
    the points' relative errors (fit_line): the sizes span decades, and on the 2-core
    VM a collective's rate falls at the largest (an all-to-all of 16 MB shards at 0.33
    GB/s, of 1-4 MB at 0.6-1.0 GB/s, bench/results/calibration/cpu-2core/microbenchmarks.json),
    which an absolute fit would carry to every size."""
    out, report = {}, {}
    for op in COLLECTIVE_OPS:
        pts = [r for r in records if r["op"] == op]
        if not pts:
            continue
        if len({r["sent_bytes"] for r in pts}) < 2:
            report[op] = {"points": len(pts), "skipped": "needs two sizes or more"}
            continue
        rounds = [r["n_gpus"] - 1 for r in pts]
        alpha, beta = fit_rounds(rounds, [r["sent_bytes"] for r in pts], [r["time_s"] for r in pts], relative=True)
        if beta <= 0:
            report[op] = {"points": len(pts), "skipped": "times do not grow with size"}
            continue
        by_gpus: dict[int, LinkFit] = {}
        errors: dict[int, dict[str, list[float]]] = {}
        for n_gpus in sorted({r["n_gpus"] for r in pts}):
            mine = [r for r in pts if r["n_gpus"] == n_gpus]
            err = errors.setdefault(n_gpus, {"rounds": [], "own": []})
            err["rounds"] = [_rel((n_gpus - 1) * alpha + r["sent_bytes"] * beta, r["time_s"]) for r in mine]
            if len({r["sent_bytes"] for r in mine}) < 2:
                continue
            try:
                a, b = fit_line([r["sent_bytes"] for r in mine], [r["time_s"] for r in mine], relative=True)
            except RingsimError:
                continue
            by_gpus[n_gpus] = LinkFit(a / (n_gpus - 1), 1.0 / b)
            err["own"] = [_rel(a + r["sent_bytes"] * b, r["time_s"]) for r in mine]
        out[op] = CollectiveFit(LinkFit(alpha, 1.0 / beta), by_gpus)
        report[op] = {"latency_per_round_s": alpha, "bandwidth_bytes_per_s": 1.0 / beta, "points": len(pts),
                      "gpu_counts": sorted(errors),
                      "residuals": _stats([e for es in errors.values() for e in es["rounds"]]),
                      "residuals_by_gpus": {str(w): _stats(es["rounds"]) for w, es in errors.items()},
                      "by_gpus": {str(w): {"latency_per_round_s": f.latency_s,
                                           "bandwidth_bytes_per_s": f.bandwidth_bytes_per_s,
                                           "residuals": _stats(errors[w]["own"])}
                                  for w, f in by_gpus.items()}}
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
        for part in ("compute", "transfer", "interference", "concurrency", "ring_conditions", "collective"):
            extra = doc.get(part, [])
            if extra:
                merged[part] = list(merged.get(part, [])) + list(extra)
    return merged


BOUND_TOLERANCE = 0.05
"""How far (relative) below a physical bound a slowdown may be measured before it is
rejected: timer and scheduling noise, not a faster-than-possible host."""


def bound_violation(slowdown: float, processes: float, threads: float, cores: float,
                    tolerance: float = BOUND_TOLERANCE) -> str | None:
    """Why a slowdown of `processes` busy processes of `threads` threads each on `cores`
    cores, against one alone, cannot be right, or None when it can (sharing_bound)."""
    bound = sharing_bound(processes, threads, cores)
    if slowdown < bound * (1.0 - tolerance):
        return (f"{processes:g} processes of {threads:g} threads on {cores:g} cores measured "
                f"{slowdown:.2f}x slower than one alone, below the physical {bound:.2f}x: "
                "they did not run at once (or the one alone was slowed by other load)")
    return None


def _host_counts(device: dict[str, Any]) -> tuple[float, float] | None:
    """(cores, threads per rank) of a CPU bench file, None on a GPU or when unknown."""
    if device.get("kind", "cpu") != "cpu":
        return None
    cores, threads = device.get("cpu_count"), device.get("threads_per_rank") or 1
    if isinstance(cores, int) and cores > 0 and isinstance(threads, int) and threads > 0:
        return float(cores), float(threads)
    return None


def _positive_int(r: dict[str, Any], name: str, what: str) -> int:
    v = r.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise RingsimError(f"bench: {what} needs a positive {name.replace('_', ' ')}")
    return v


def fit_transfer_cores(points: list[dict[str, float]], host: Host) -> tuple[float, float, float, float]:
    """(cores a transfer demands, transfer weight, residual compute slowdown, sum of
    squared log errors) that best explain forward ring-conditions measurements on `host`
    (fit_ring_conditions without backward points)."""
    x, w, sigma, _, err = fit_ring_conditions(points, [], host)
    return x, w, sigma, err


def fit_ring_conditions(forward: list[dict[str, float]], backward: list[dict[str, float]], host: Host
                        ) -> tuple[float, float, float, float | None, float]:
    """(cores a transfer demands, transfer weight, residual compute slowdown of a forward,
    the same of a backward (None without backward points), sum of squared log errors)
    that best explain ring-conditions measurements on `host`.

    Each point: k ranks of t threads computing back to back while k ring transfers run,
    compute slowdown s_c against a block alone and transfer stretch s_x against the same
    ring exchange with no compute. With x cores per transfer and weight w the model
    predicts (sim.hardware.contention.split_cores, at the law's slowdown of k·t + k·x)
    s_c = sigma * compute part (sigma: what sharing does not explain, >= 1, the two
    multiply) and s_x = transfer part / law(k·x). A backward point (the backward block
    beside a backward step's two hops, which go one after the other on the link to the
    next rank, as the simulator plays a link's transfers: one transfer of each rank in
    flight) takes its compute part from the backward law and its own sigma; x and w are
    the transfers' and shared by both. x is searched on a grid of 0.01 core and w on one
    of 0.02 from 0.5 to 4; for each, each kind's log sigma is the mean of its compute
    residuals (least squares), floored at 0. On the 2-core VM the forwards alone, nine
    noisy points, once put 3.32 cores on a transfer at the grid's weight of 4 (run 95);
    with its backward points the fit came to 0.82 core and 1.08, as in the runs before.
    """
    best: tuple[float, float, float, float | None, float] = (0.0, 1.0, 1.0, None, float("inf"))
    t = host.threads_per_rank
    limit = 4.0 * max(host.cores, t)
    weights = [1.0] + [0.5 + 0.02 * i for i in range(176)]
    kinds = [(points, kind == "bwd") for kind, points in (("fwd", forward), ("bwd", backward)) if points]
    for step in range(int(round(limit / 0.01)) + 1):
        x = step * 0.01
        at = [[(p["k"] * t, p["k"] * x, host.slowdown(p["k"] * (t + x), bwd), host.slowdown(p["k"] * x))
               for p in points] for points, bwd in kinds]
        for w in weights:
            err = 0.0
            sigmas = []
            for (points, _), at_kind in zip(kinds, at):
                parts = [split_cores(law, c, xs, w) for c, xs, law, _ in at_kind]
                comp = [np.log(p["compute_slowdown"] / sc) for p, (sc, _) in zip(points, parts)]
                log_sigma = max(0.0, float(np.mean(comp)))
                err += sum((v - log_sigma) ** 2 for v in comp)
                err += sum(np.log(p["transfer_slowdown"] * alone / sx) ** 2
                           for p, (_, sx), (_, _, _, alone) in zip(points, parts, at_kind))
                sigmas.append(float(np.exp(log_sigma)))
            if err < best[4] - 1e-12:
                sigma = sigmas[0] if forward else 1.0
                best = (x, w, sigma, sigmas[-1] if backward else None, float(err))
    return best


def calibrate_contention(bench: dict[str, Any], device: dict[str, Any], link: LinkFit
                         ) -> tuple[Contention, LinkFit, dict[str, Any]]:
    """The contention model, the link (the transfer's own share of the cores taken out of
    its alone time), and the report's sections for them.

    Physical bounds come first: a concurrency or ring-conditions measurement whose
    slowdown is below what the core count allows is rejected (and reported), never
    fitted; so is any entry the bench itself marked rejected.
    """
    rejected: list[str] = []
    slowdowns = _interference_slowdowns(bench)
    measured_slowdown = statistics.median(slowdowns) if slowdowns else None
    counts = _host_counts(device)
    slots = counts[0] / counts[1] if counts else None
    forward, backward = _concurrency_by_kind(bench)
    passes_fwd: dict[float, list[float]] = {}
    passes_bwd: dict[float, list[float]] = {}
    concurrency, threads_of = _sharing_law(forward, counts, rejected, "concurrency",
                                           _compute_baseline(bench, forward), passes_fwd)
    concurrency_bwd, threads_of_bwd = _sharing_law(backward, counts, rejected, "concurrency bwd", None, passes_bwd)
    host = None
    host_report: dict[str, Any] | None = None
    sigma = max(1.0, measured_slowdown or 1.0)
    sigma_bwd = None
    if counts:
        cores, threads = counts
        # the law in cores demanded: k processes of t threads each demand k·t
        law = tuple((k * threads_of.get(k, threads), f) for k, f in concurrency) if concurrency else None
        law_bwd = (tuple((k * threads_of_bwd.get(k, threads), f) for k, f in concurrency_bwd)
                   if concurrency_bwd else None)
        # computes held on the core they start on (sim.hardware.contention.PLACEMENTS): better than
        # even sharing on 14 of the 16 committed runs 45-60 re-simulated
        host = Host(cores=cores, threads_per_rank=threads, law=law, law_bwd=law_bwd, spread=host_spread(forward),
                    placement="held")
        ring_points = _ring_points(bench, cores, rejected)
        backward_points = _ring_points(bench, cores, rejected, "bwd") if ring_points else []
        host_report = _host_report(host, ring_points, passes_fwd, passes_bwd)
        if ring_points:
            host, link, sigma, sigma_bwd = _fit_transfers(host, link, ring_points, backward_points, host_report)
        else:
            host_report["note"] = ("no ring-conditions measurements: transfers demand no cores; "
                                   "the interference slowdown stands in")
    contention = Contention(slowdown_in_flight=sigma, slowdown_in_flight_bwd=sigma_bwd, compute_slots=slots,
                            concurrency=concurrency, host=host)
    report = {"interference": {"measured_slowdowns": slowdowns, "median_slowdown": measured_slowdown,
                               "used": contention.slowdown_in_flight},
              "compute_slots": slots,
              "concurrency_slowdown": [list(p) for p in concurrency] if concurrency else None,
              "concurrency_slowdown_bwd": [list(p) for p in concurrency_bwd] if concurrency_bwd else None,
              "host": host_report, "rejected": rejected}
    return contention, link, report


def _interference_slowdowns(bench: dict[str, Any]) -> list[float]:
    """Each interference entry's compute time with a transfer in flight over its time alone."""
    slowdowns = []
    for i, r in enumerate(_records(bench, "interference")):
        alone = _median(r.get("compute_alone_s", r.get("median_alone_s")), f"interference entry {i} alone")
        with_ = _median(r.get("compute_with_transfer_s", r.get("median_with_s")), f"interference entry {i} with")
        if alone > 0:
            slowdowns.append(with_ / alone)
    return slowdowns


def _concurrency_by_kind(bench: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The concurrency entries of forward blocks and of backward blocks."""
    records = _records(bench, "concurrency")
    for i, r in enumerate(records):
        if r.get("kind", "fwd") not in ("fwd", "bwd"):
            raise RingsimError(f"bench file: concurrency entry {i} has kind {r.get('kind')!r}, not fwd or bwd")
    return ([r for r in records if r.get("kind", "fwd") == "fwd"],
            [r for r in records if r.get("kind", "fwd") == "bwd"])


def _host_report(host: Host, ring_points: list, passes_fwd: dict[float, list[float]],
                 passes_bwd: dict[float, list[float]]) -> dict[str, Any]:
    """The report's section on the host model, before the transfers' share is fitted."""
    out = {"cores": host.cores, "threads_per_rank": host.threads_per_rank,
           "law": [list(p) for p in host.law] if host.law else None,
           "law_bwd": [list(p) for p in host.law_bwd] if host.law_bwd else None,
           "spread": [list(p) for p in host.spread] if host.spread else None, "placement": host.placement,
           "ring_entries": _entry_count(ring_points),
           "transfer_cores": 0.0}
    for name, passes in (("law_passes", passes_fwd), ("law_bwd_passes", passes_bwd)):
        if any(len(v) > 1 for v in passes.values()):
            out[name] = [[k, v] for k, v in sorted(passes.items())]
    return out


def _fit_transfers(host: Host, link: LinkFit, ring_points: list, backward_points: list,
                   host_report: dict[str, Any]) -> tuple[Host, LinkFit, float, float | None]:
    """The transfers' share of the cores and their weight, fitted to the ring-conditions
    entries (fit_ring_conditions), the link's alone time freed of its own demand, and the
    in-flight slowdowns left over, forward and backward; `host_report` takes the fit."""
    x, w, sigma, sigma_bwd, err = fit_ring_conditions(ring_points, backward_points, host)
    host = dataclasses.replace(host, transfer_cores=x, transfer_weight=w)
    host_report.update(transfer_cores=x, transfer_weight=w, residual_in_flight_slowdown=sigma,
                       sum_sq_log_error=err,
                       points=[_ring_residual(p, host, sigma) for p in ring_points])
    # the link was measured alone: two transfers in flight, which may already
    # have been stretched by their own demand
    stretch = host.slowdown(host.demand(0, 2))
    if stretch > 1.0:
        link = LinkFit(link.latency_s / stretch, link.bandwidth_bytes_per_s * stretch)
    host_report["link_alone_stretch"] = stretch
    if backward_points:
        host_report["backward"] = {
            "ring_entries": _entry_count(backward_points),
            "residual_in_flight_slowdown": sigma_bwd,
            "points": [_ring_residual(p, host, sigma_bwd, backward=True) for p in backward_points]}
    return host, link, sigma, sigma_bwd


def _sharing_law(records: list[dict[str, Any]], counts: tuple[float, float] | None, rejected: list[str],
                 label: str, baseline: float | None, passes: dict[float, list[float]] | None = None
                 ) -> tuple[tuple[tuple[float, float], ...] | None, dict[float, float]]:
    """The (processes, slowdown) pairs of one kind's concurrency entries, (1, 1) first,
    or None where no entry of more than one process is accepted; and each count's threads
    per rank. A pair below the physical bound is rejected (into `rejected`, named by
    `label`), never fitted. `baseline`: the compute part's time of the block, for files
    whose entries carry no time alone. Entries of the same count (the bench's
    --host-passes, minutes apart) count by their median: a spell of the host's cores
    serving something else slows one pass, and the law multiplies every block of a
    simulation; `passes` gets each count's slowdowns, one per entry, in order."""
    by_k: dict[float, list[float]] = {}       # median block time under sharing, by k
    ratio_k: dict[float, list[float]] = {}    # ... over the block alone just before it
    threads_of: dict[float, float] = {}
    for i, r in enumerate(records):
        k = _positive_int(r, "processes", f"{label} entry {i}")
        if r.get("rejected"):
            rejected.append(f"{label} {k}: {r['rejected']}")
            continue
        # while the processes fit the cores, the median block: a few blocks slowed by
        # whatever else woke up on the host pull a mean far up, and the law multiplies
        # every block of a simulation; once they are time-sliced, the mean (their
        # throughput): each call is then either untouched or very slow, the median can
        # be an untouched one, and only the mean counts both (as hw.bench checks bounds)
        threads = float(r.get("threads_per_rank") or (counts[1] if counts else 1))
        sliced = counts is not None and k * threads > counts[0]
        samples = r.get("time_s", r.get("median_s"))
        t = (_mean(samples, f"{label} entry {i} time_s") if sliced and isinstance(samples, list)
             else _median(samples, f"{label} entry {i} time_s"))
        rounds = round_ratios(r.get("rounds"), sliced, f"{label} entry {i}")
        ratio = None
        if rounds:
            # the entry alternated alone and shared: the median of its rounds' ratios,
            # each of samples seconds apart (the host's drift between rounds cancels)
            ratio = statistics.median(rounds)
        elif r.get("alone_s"):
            alone = _median(r["alone_s"], f"{label} entry {i} alone_s")
            if alone > 0:
                ratio = t / alone
        if ratio is not None:
            why = bound_violation(ratio, k, threads, counts[0]) if counts and k > 1 else None
            if why:     # each entry is checked on its own: one of several passes cannot hide in their median
                rejected.append(f"{label} {k:g}" + (f" (pass {r['pass']})" if "pass" in r else "") + f": {why}")
                continue
            ratio_k.setdefault(float(k), []).append(ratio)
        elif not r.get("alone_s"):
            by_k.setdefault(float(k), []).append(t)
        threads_of[float(k)] = threads
    concurrency = None
    # the slowdown of k processes: against the same processes alone seconds before (what
    # the bench measures now), so that the host's drift between parts is not counted as
    # sharing; in bench files without that, against the compute part's time for the block
    # (the time the simulator starts from), else the block computed by one process here
    alone = baseline or (statistics.median(by_k[1.0]) if 1.0 in by_k else None)
    factors = {k: statistics.median(v) for k, v in ratio_k.items()}
    if passes is not None:
        passes.update({k: list(v) for k, v in ratio_k.items() if k > 1.0})
    if alone and alone > 0:
        factors.update({k: statistics.median(ts) / alone for k, ts in by_k.items() if k not in factors})
    if any(k > 1.0 for k in factors):
        pairs = []
        for k, f in sorted(factors.items()):
            if k == 1.0:            # one process alone: no sharing, by definition
                continue
            why = bound_violation(f, k, threads_of[k], counts[0]) if counts else None
            if why:
                rejected.append(f"{label} {k:g}: {why}")
            else:
                pairs.append((k, f))
        if pairs:
            pairs.insert(0, (1.0, 1.0))
            concurrency = tuple(pairs)
    return concurrency, threads_of


def round_ratios(rounds: Any, sliced: bool, what: str) -> list[float]:
    """Each round's shared block time (the mean once time-sliced, else the median, as
    for a whole entry) over its median alone; [] without rounds (hw.bench.bounds.round_slowdown
    reads an entry's slowdown by the same rule)."""
    if rounds is None:
        return []
    if not isinstance(rounds, list) or not all(isinstance(x, dict) for x in rounds):
        raise RingsimError(f"bench: {what} rounds must be a list of objects with alone_s and time_s")
    out = []
    for j, rd in enumerate(rounds):
        shared, alone = rd.get("time_s"), rd.get("alone_s")
        if not shared or not alone:
            continue
        t = (_mean(shared, f"{what} round {j} time_s") if sliced and isinstance(shared, list)
             else _median(shared, f"{what} round {j} time_s"))
        a = _median(alone, f"{what} round {j} alone_s")
        if a > 0:
            out.append(t / a)
    return out


def host_spread(records: list[dict[str, Any]]) -> tuple[tuple[float, float, float], ...] | None:
    """(processes, per-rank CV, per-block CV) of each accepted concurrency entry with its
    alone time, ascending; None where there is none (sim.hardware.contention.Host.spread).

    Every sample is taken over the processes' median block alone. With each process's
    samples (`time_by_process_s`), the per-rank CV is the sample standard deviation of
    the processes' means over their mean (how far apart whole processes ran), and the
    per-block CV the mean over processes of their samples' CV; without them (older
    files), the CV of all samples together is the per-block CV and the per-rank CV 0.
    An entry in rounds is read a round at a time, over that round's time alone, and its
    CVs are the rounds' means: the host's drift between rounds is no spread. Entries of
    the same count (the bench's --host-passes) pool their rounds."""
    by_k: dict[float, list[tuple[float, float]]] = {}
    for i, r in enumerate(records):
        if r.get("rejected") or not r.get("alone_s"):
            continue
        what = f"concurrency entry {i}"
        k = float(_positive_int(r, "processes", what))
        rounds = r.get("rounds")
        parts = ([rd for rd in rounds if isinstance(rd, dict) and rd.get("alone_s") and rd.get("time_by_process_s")]
                 if isinstance(rounds, list) else [])
        cvs = [_spread_of(rd, f"{what} round {j}") for j, rd in enumerate(parts)] if parts else [_spread_of(r, what)]
        by_k.setdefault(k, []).extend(c for c in cvs if c is not None)
    points = [(k, statistics.fmean(c[0] for c in cvs), statistics.fmean(c[1] for c in cvs))
              for k, cvs in sorted(by_k.items()) if cvs]
    return tuple(points) or None


def _spread_of(r: dict[str, Any], what: str) -> tuple[float, float] | None:
    """(per-rank CV, per-block CV) of one set of samples and its time alone (host_spread),
    or None where there is nothing to read."""
    alone = _median(r["alone_s"], f"{what} alone_s")
    if not alone > 0:
        return None
    by = r.get("time_by_process_s")
    if isinstance(by, list) and by and all(isinstance(x, list) and x for x in by):
        per = [[_median([t], f"{what} time_by_process_s") / alone for t in x] for x in by]
        means = [statistics.fmean(x) for x in per]
        if min(means) <= 0:
            return None
        rank_cv = statistics.stdev(means) / statistics.fmean(means) if len(means) > 1 else 0.0
        block_cv = statistics.fmean(statistics.pstdev(x) / statistics.fmean(x) for x in per)
        return rank_cv, block_cv
    xs = [t / alone for t in r.get("time_s") or []]
    if len(xs) < 2 or _mean(xs, f"{what} time_s") <= 0:
        return None
    return 0.0, statistics.pstdev(xs) / statistics.fmean(xs)


def _compute_baseline(bench: dict[str, Any], concurrency: list[dict[str, Any]]) -> float | None:
    """The compute part's median time of the block the concurrency part computed, or None.

    For bench files whose concurrency entries carry no `alone_s` (the same processes
    timed alone just before): the simulator times a block from the compute part and
    multiplies it by the sharing law, and the concurrency part's own one-process block
    was measured at another moment, up to 20% faster or slower on a shared VM whose speed
    drifts; this is the better of the two references such a file offers."""
    shape = ("dtype", "heads", "kv_heads", "head_dim", "q_tokens", "kv_tokens", "mask")
    ones = [r for r in concurrency if r.get("processes") == 1 and not r.get("rejected")]
    if not ones:
        return None
    want = {k: ones[0].get(k) for k in shape}
    if want.get("kv_heads") is None:
        want.pop("kv_heads")
    times = [_median(r.get("time_s", r.get("median_s")), "compute entry time_s")
             for r in _records(bench, "compute")
             if r.get("kind", "fwd") == "fwd" and all(r.get(k) == v for k, v in want.items())]
    return statistics.median(times) if times else None


def _ring_points(bench: dict[str, Any], cores: float, rejected: list[str],
                 kind: str = "fwd") -> list[dict[str, float]]:
    """The accepted ring-conditions entries of a block kind (fwd: forwards beside one hop;
    bwd: backwards beside their two): ranks, compute slowdown, transfer slowdown; one point
    per ring size, each slowdown the median over the entries of that size (the bench's
    --host-passes, minutes apart: a spell of the cores serving something else slows one of
    them), with each entry's own ("passes")."""
    by_k: dict[float, list[dict[str, float]]] = {}
    label = "ring conditions" if kind == "fwd" else f"ring conditions {kind}"
    for i, r in enumerate(_records(bench, "ring_conditions")):
        if r.get("kind", "fwd") not in ("fwd", "bwd"):
            raise RingsimError(f"bench file: ring_conditions entry {i} has kind {r.get('kind')!r}, not fwd or bwd")
        if r.get("kind", "fwd") != kind:
            continue
        k = _positive_int(r, "processes", f"ring_conditions entry {i}")
        t = _positive_int(r, "threads_per_rank", f"ring_conditions entry {i}")
        if r.get("rejected"):
            rejected.append(f"{label} {k}: {r['rejected']}")
            continue
        what = f"ring_conditions entry {i}"
        # under ring conditions the mean (throughput), alone the median (as hw.bench)
        c_ring, x_ring = (_mean(r.get(name), f"{what} {name}") for name in ("compute_ring_s", "transfer_ring_s"))
        c_alone, x_alone = (_median(r.get(name), f"{what} {name}") for name in ("compute_alone_s", "transfer_alone_s"))
        if not (c_alone > 0 and x_alone > 0):
            raise RingsimError(f"bench: {what} has a zero time alone")
        why = bound_violation(c_ring / c_alone, k, t, cores)
        if why:
            rejected.append(f"{label} {k}: {why}")
            continue
        by_k.setdefault(float(k), []).append({"compute_slowdown": c_ring / c_alone,
                                              "transfer_slowdown": x_ring / x_alone})
    points = []
    for k, ps in sorted(by_k.items()):
        point = {"k": k, **{name: statistics.median(p[name] for p in ps)
                            for name in ("compute_slowdown", "transfer_slowdown")}}
        if len(ps) > 1:
            point["passes"] = ps
        points.append(point)
    return points


def _entry_count(points: list[dict[str, Any]]) -> int:
    """The ring-conditions entries behind `points` (a point of several passes lists each)."""
    return sum(len(p.get("passes", [p])) for p in points)


def ring_conditions_slowdowns(host: Host, sigma: float, k: int, backward: bool = False) -> tuple[float, float]:
    """What the host model says a ring-conditions entry of k ranks measures: (compute
    slowdown, transfer slowdown), each against its time alone, with k computes (backward
    ones with `backward`) and k transfers in progress; a transfer alone already ran beside
    the other ranks' transfers (hw.bench's ring-conditions part)."""
    compute, transfer = host.slowdowns(k, k, backward=backward)
    return sigma * compute, transfer / host.slowdown(host.demand(0, k))


def _ring_residual(p: dict[str, Any], host: Host, sigma: float, backward: bool = False) -> dict[str, Any]:
    compute, transfer = ring_conditions_slowdowns(host, sigma, int(p["k"]), backward=backward)
    out = {"processes": p["k"], "compute_slowdown": p["compute_slowdown"],
           "predicted_compute_slowdown": compute, "transfer_slowdown": p["transfer_slowdown"],
           "predicted_transfer_slowdown": transfer}
    if "passes" in p:
        out["passes"] = p["passes"]
    return out


def _entry_time(r: dict[str, Any], i: int) -> float:
    """A compute entry's time: the mean of its passes' medians where it was measured in
    several (hw.bench.bounds.add_pass), else the median of its samples. A shared host's speed
    swings within seconds and a run meets it at its typical speed: the least slowed of
    two passes is the host's best moment, and predicted every run 4-9% short (the
    validation of 2026-11-30 and 2026-12-01, re-simulated both ways)."""
    passes = r.get("pass_medians_s")
    if isinstance(passes, list) and len(passes) > 1:
        t = _mean(passes, f"compute entry {i} pass_medians_s")
    else:
        t = _median(r.get("time_s", r.get("median_s")), f"compute entry {i} time_s")
    if not MIN_BLOCK_S <= t <= MAX_BLOCK_S:
        raise RingsimError(f"bench: compute entry {i} took {t:g} s, outside the {MIN_BLOCK_S:g} to {MAX_BLOCK_S:g} s "
                           "a measured block can take")
    return t


def _entry_listed(r: dict[str, Any], i: int, key: str, per_pass: str) -> float | None:
    """A compute entry's `key` (a list of samples): the mean of its passes' medians where
    `per_pass` lists them (hw.bench.bounds.add_pass), else the median of the samples; None where
    it has none."""
    passes = r.get(per_pass)
    if isinstance(passes, list) and len(passes) > 1:
        return _mean(passes, f"compute entry {i} {per_pass}")
    if r.get(key) is None:
        return None
    return _median(r[key], f"compute entry {i} {key}")


def _entry_ratio(r: dict[str, Any], i: int) -> float | None:
    """A compute entry's time in units of the reference block's, from its samples each
    over the references timed just before and after it (hw.bench.measure.measure_compute_paired);
    None in GPU benches and CPU benches written before the samples were paired."""
    return _entry_listed(r, i, "speed_ratios", "pass_speed_ratios")


def _entry_reference(r: dict[str, Any], i: int) -> float | None:
    """The reference block's time around a compute entry; None where it has none."""
    return _entry_listed(r, i, "reference_s", "pass_references_s")


SPEED_WINDOW = 9
"""Compute entries, in the order they were measured, over which the reference block's
median gives the host's speed around an entry (at_one_speed)."""


def at_one_speed(compute: list[dict[str, Any]], window: int | None = None) -> dict[str, Any] | None:
    """Bring every compute entry to one speed of the host, in place, and say how far apart
    they were; None (nothing changed) unless every entry carries the time of the
    reference block taken just before it (`reference_s`, CPU benches).

    A shared host drifts by up to 20% over tens of seconds, so the entries of one part,
    measured a minute apart, would mix speeds: a table or line through them would bend
    where the host changed, not where the operator does. It also swings within seconds:
    a reference block timed at 35 ms was followed by the same block at 27 ms. One
    reading is then noise, not the speed an entry met, and scaling by it moves the entry
    by as much. The host's speed around entry i is the median reference over the
    `window` entries measured around it (local_i; SPEED_WINDOW unless given); the entry is scaled by
    median(ref) / local_i, every entry at the host's median speed over the part, where
    the reference block takes median(ref) (hw.reference reads the host against that).

    An entry whose samples were each timed between two readings of the reference
    (`ratio`: the entry in units of the reference, _entry_ratio) is instead ratio x
    median(ref): the references around a sample, a fraction of a second apart, read the
    speed that sample met, which no window of whole entries can."""
    refs = [r.get("reference_s") for r in compute]
    if not refs or any(x is None or not x > 0 for x in refs):
        return None
    common = statistics.median(refs)
    window = SPEED_WINDOW if window is None else window
    half = max(0, window) // 2
    local = [statistics.median(refs[max(0, i - half):i + half + 1]) for i in range(len(refs))]
    paired = 0
    for r, here in zip(compute, local):
        ratio = r.pop("ratio", None)
        if ratio is not None:       # each sample read against the references around it
            r["time_s"] = ratio * common
            paired += 1
        else:
            r["time_s"] *= common / here
    out = {"entries": len(refs), "window": window, "reference_median_s": common,
           "slowest_over_median": max(local) / common, "fastest_over_median": min(local) / common}
    if paired:
        out["paired"] = paired
    return out


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
                        "flops": float(flops), "time_s": _entry_time(r, i), **_entry_heads(r)})
        reference = _entry_reference(r, i)
        if reference is not None:
            compute[-1]["reference_s"] = reference
            ratio = _entry_ratio(r, i)
            if ratio is not None:
                compute[-1]["ratio"] = ratio
    drift = at_one_speed(compute)
    groups, model, compute_report = calibrate_compute(compute)
    if drift:
        block = bench.get("reference_block")
        if isinstance(block, dict):
            drift["reference_block"] = {k: block.get(k) for k in ("dtype", "heads", "head_dim", "q_tokens")}
        compute_report["host_speed"] = drift
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
    collectives, collective_report = calibrate_collectives(collective_records(bench))
    contention, link, contention_report = calibrate_contention(bench, device, link)
    report = {"compute": compute_report, "link": link_report,
              "link_used": "both_ways" if "both_ways" in links else "one_way", **contention_report,
              "collectives": collective_report}
    measured_on = {"device": device.get("name", "unknown"), **{k: v for k, v in device.items() if k != "name"}}
    return Profile(model, groups, link, contention, measured_on, report, source, collectives)
