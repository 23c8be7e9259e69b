"""Validation: how far the simulator's prediction falls from the measured kernel.

The matrix of cases `ringsim validate` measures, and the report over them: a summary of
the rows `sim.calibration.validation.compare_case` gives for each case (the measured spread, the
makespan and per-step errors, the breakdown by part), and its Markdown table.
Everything here reads traces and rows only; running the kernel is the caller's
business (`ringsim validate`, hw.validate_cli).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from hw.kernels import SCHEMES
from sim.calibration.validation import Case, batch_of, error_parts
from sim.layouts import NAMES as LAYOUTS

GPU_COUNTS = [2, 3, 4]


def ulysses_fits(n_gpus: int, heads: int, kv_heads: int) -> bool:
    """Whether Ulysses runs on `n_gpus` ranks: the degree divides the query heads,
    and divides the K/V heads or is a multiple of them (sim.schemes.hybrid.check_degree)."""
    return heads % n_gpus == 0 and (kv_heads % n_gpus == 0 if n_gpus <= kv_heads
                                        else n_gpus % kv_heads == 0)


def default_schemes(quick: bool) -> list[str]:
    return ["ring"] if quick else list(SCHEMES)


def _scheme_cases(scheme: str, *, quick: bool) -> list[tuple[str, bool]]:
    """(layout, causal) pairs measured for `scheme` at each size."""
    if scheme == "allgather":   # the kernel holds the zigzag layout (Llama 3's)
        return [("zigzag", True), ("zigzag", False)]
    if scheme == "ulysses":     # every rank attends the whole sequence: the layout only orders it
        return [("contiguous", True), ("contiguous", False)]
    # one document on the layouts of sim.layouts (the documents-only ones are packed runs);
    # without a mask the ring's layouts do identical work: the quick matrix measures one
    return [(layout, causal) for layout in LAYOUTS for causal in (True, False)
            if not (quick and not causal and layout != "contiguous")]


def matrix(*, quick: bool, seqs: list[int] | None = None, passes: list[str] | None = None,
           gpu_counts: list[int] | None = None, schemes: list[str] | None = None,
           heads: int = 8, kv_heads: int = 8) -> list[Case]:
    """The validation matrix: passes x GPU counts x sizes x schemes x layouts x masks.

    Quick: forward at two sizes and forward-backward at the smaller one (a backward
    costs 2.5x a forward: both sizes would double the run), the ring alone; with three
    GPU counts, 36 cases, under ten minutes on two cores. Full: fwd, bwd and fwdbwd at
    three sizes, every layout and mask, the ring, all-gather and Ulysses. Ulysses is left
    out where the GPU count does not divide the heads (`ulysses_fits`).
    """
    default_seqs = [3072, 6144] if quick else [3072, 6144, 12288]   # multiples of 24: every layout
    if passes is None:                                                 # divides on 2, 3 and 4 ranks
        passes = ["fwd", "fwdbwd"] if quick else ["fwd", "bwd", "fwdbwd"]
    if gpu_counts is None:
        gpu_counts = GPU_COUNTS
    if schemes is None:
        schemes = default_schemes(quick)
    cases = []
    for pass_ in passes:
        sizes = seqs or (default_seqs[:1] if quick and pass_ != "fwd" else default_seqs)
        for ws in gpu_counts:
            for seq in sizes:
                for scheme in schemes:
                    if scheme == "ulysses" and not ulysses_fits(ws, heads, kv_heads):
                        continue
                    for layout, causal in _scheme_cases(scheme, quick=quick):
                        cases.append(Case(layout, causal, ws, seq, pass_, scheme))
    return cases


def summarize(rows: list[dict[str, Any]], *, max_case_error: float = 0.10) -> dict[str, Any]:
    """The whole report in a few numbers, and the median |error| of each scheme and pass."""
    if not rows:
        return {"cases": 0}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(f"{r.get('scheme', 'ring')}/{r['pass']}", []).append(r)
    plain = _plain_scores(rows, max_case_error)
    return {
        "cases": len(rows),
        "median_abs_error": plain["median_abs_error"],
        "max_abs_error": plain["max_abs_error"],
        "worst_case": plain["worst_case"],
        "tolerance": max_case_error,
        "cases_within_range_or_tolerance": plain["cases_within_range_or_tolerance"],
        "step_median_abs_error": plain["step_median_abs_error"],
        "median_measured_cv": statistics.median(r["measured_cv"] for r in rows),
        "median_compute_error": _median_part(rows, "compute_s"),
        "median_transfer_error": _median_part(rows, "mean_transfer_s"),
        "median_error": statistics.median(r["error"] for r in rows),
        "median_error_parts": _median_error_parts(rows),
        "median_abs_error_by_group": {g: _group_scores(v, max_case_error) for g, v in groups.items()},
        **_at_host_speed(rows, max_case_error),
        "measured_again": _measured_again(rows),
    }


def _plain_scores(rows: list[dict[str, Any]], max_case_error: float) -> dict[str, Any]:
    """_scores of the plain predictions of `rows`."""
    return _scores(rows, [r["error"] for r in rows], [r["within_range"] for r in rows],
                   [s["abs_error"] for r in rows for s in r["steps"]], max_case_error)


def _group_scores(rows: list[dict[str, Any]], max_case_error: float) -> dict[str, Any]:
    """One scheme and pass scored as the whole report is: a goal set for forward and
    forward+backward alike is read off each group."""
    g = _plain_scores(rows, max_case_error)
    return {"cases": len(rows), "median_abs_error": g["median_abs_error"], "max_abs_error": g["max_abs_error"],
            "cases_within_range_or_tolerance": g["cases_within_range_or_tolerance"],
            "step_median_abs_error": g["step_median_abs_error"]}


def _measured_again(rows: list[dict[str, Any]]) -> dict[str, int]:
    """The attempts of each group of batches measured more than once, by group (with
    rounds, the most any one round took)."""
    again: dict[str, int] = {}
    for r in rows:
        if r.get("attempts"):
            by_round = Counter(t.get("round", 0) for t in r["attempts"])
            again[batch_of(r)] = max(again.get(batch_of(r), 0), max(by_round.values()))
    return dict(sorted(again.items()))


def _scores(rows: list[dict[str, Any]], errors: list[float], within: list[bool], step_errors: list[float | None],
            max_case_error: float) -> dict[str, Any]:
    """Median and worst |makespan error|, the cases inside their measured range or within
    the tolerance, and the median |step error|, of one set of predictions of `rows`."""
    worst = max(range(len(rows)), key=lambda i: abs(errors[i]))
    steps = [e for e in step_errors if e is not None]
    return {"median_abs_error": statistics.median(abs(e) for e in errors),
            "max_abs_error": abs(errors[worst]),
            "worst_case": _key(rows[worst]),
            "cases_within_range_or_tolerance": sum(w or abs(e) <= max_case_error for e, w in zip(errors, within)),
            "step_median_abs_error": statistics.median(steps) if steps else None}


def _at_host_speed(rows: list[dict[str, Any]], max_case_error: float) -> dict[str, Any]:
    """The errors again with the profile at the host's compute speed of each case's batch
    (hw.reference), where every case has a reading: what is left once the host's drift
    since calibration is taken out."""
    if not all("host_speed" in r for r in rows):
        return {}
    speeds = [r["host_speed"] for r in rows]
    out = {"host_speed": {"median": statistics.median(speeds), "min": min(speeds), "max": max(speeds)},
           "at_host_speed": _scores(rows, [r["error_at_host_speed"] for r in rows],
                                    [r["within_range_at_host_speed"] for r in rows],
                                    [e for r in rows for e in r["step_abs_errors_at_host_speed"]],
                                    max_case_error)}
    if all("host_sharing" in r for r in rows):
        readings = [x for r in rows for x in r["host_sharing_readings"]]
        off = sorted({batch_of(r) for r in rows if abs(r["host_sharing"] - 1) > SHARING_OFF})
        out["host_sharing"] = {"min": min(readings), "max": max(readings),
                               "profile": statistics.median(r["profile_sharing"] for r in rows),
                               "batches_off": off}
        out["at_host_state"] = _scores(rows, [r["error_at_host_state"] for r in rows],
                                       [r["within_range_at_host_state"] for r in rows],
                                       [e for r in rows for e in r["step_abs_errors_at_host_state"]],
                                       max_case_error)
    return out


SHARING_OFF = 0.15
"""A batch whose sharing readings (their mean over the profile's law) lie further than
this from 1 is named in the report: the host shared its cores unlike at calibration."""
STATE_OFF = SHARING_OFF
"""A batch whose speed readings, or sharing readings, lie further than this from the
profile on average is measured again (ringsim validate --remeasure)."""


def _median_part(rows, name: str) -> float | None:
    vals = [r["parts"][name]["error"] for r in rows if r["parts"][name]["error"] is not None]
    return statistics.median(vals) if vals else None


def _median_error_parts(rows) -> dict[str, float] | None:
    """The median over the rows of each part of the makespan error (sim.calibration.validation.error_parts,
    worked out again from the row, so that a report written before it has them too)."""
    parts = [p for p in (error_parts(r) for r in rows) if p is not None]
    if not parts:
        return None
    return {name: statistics.median(p[name] for p in parts) for name in ("compute", "outside_compute")}


def _key(row: dict[str, Any]) -> str:
    return Case.from_row(row).key


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table with its summary."""
    return "\n".join(_summary_lines(report) + [""] + _case_rows(report["cases"])) + "\n"


def _summary_lines(report: dict[str, Any]) -> list[str]:
    """The report's heading and its summary, a bullet each."""
    s = report["summary"]
    tol = s.get("tolerance", 0.10)
    replays = (report.get("settings") or {}).get("replays", 1)
    rounds = report.get("rounds", 1)
    lines = [
        f"Measured on: {report.get('measured_on', {}).get('device', '?')}; profile "
        f"{report.get('profile', '?')}; {s['cases']} cases, "
        f"{report.get('repeats', '?')} repeats each"
        + (f" in {rounds} rounds spread over the run, each" if rounds > 1 else "")
        + f" after {report.get('warmup', '?')} warm-up"
        + (f"; each case predicted by the median of {replays} seeded plays." if replays > 1 else "."),
        "",
        f"- median |makespan error|: {s['median_abs_error']:.1%}; worst {s['max_abs_error']:.1%} ({s['worst_case']})",
    ]
    for group, g in s.get("median_abs_error_by_group", {}).items():
        lines.append(f"  - {group}: median |makespan error| {g['median_abs_error']:.1%} over {g['cases']} cases"
                     + (f"; worst {g['max_abs_error']:.1%}, {g['cases_within_range_or_tolerance']} of {g['cases']} "
                        f"inside their range or within {tol:.0%}" if "max_abs_error" in g else "")
                     + (f", per-step median |error| {g['step_median_abs_error']:.1%}"
                        if g.get("step_median_abs_error") is not None else ""))
    lines += [
        f"- cases inside the measured [min, max] or within {tol:.0%}: "
        f"{s['cases_within_range_or_tolerance']} of {s['cases']}",
        (f"- per-step median |error|: {s['step_median_abs_error']:.1%}"
         if s.get("step_median_abs_error") is not None else "- per-step error: -"),
        f"- median coefficient of variation of the measurements: {s['median_measured_cv']:.1%}",
        f"- median error of compute time {_pct(s['median_compute_error'])}, "
        f"of transfer time {_pct(s['median_transfer_error'])}",
    ]
    if s.get("median_error_parts"):
        ep = s["median_error_parts"]
        lines.append(f"- median makespan error {_pct(s['median_error'])}; its parts, median over cases, as shares of "
                     f"the measured makespan: the mean rank's compute {_pct(ep['compute'])}, the time outside it "
                     f"(waits on transfers and on slower ranks, skew, the time between blocks) "
                     f"{_pct(ep['outside_compute'])}")
    lines += _host_lines(s, tol)
    again = s.get("measured_again")
    if again:
        lines.append(f"- measured again, the host having read more than {STATE_OFF:.0%} off the profile around "
                     "them, in speed or sharing (the attempt read closest to it kept): "
                     + ", ".join(f"{g} ({n} attempts)" for g, n in again.items()))
    used = report.get("profile_compute")
    if used:
        lines.append("- profile compute groups: " + "; ".join(f"{k} from {v}" for k, v in used.items()))
    return lines


def _host_lines(s: dict[str, Any], tol: float) -> list[str]:
    """The summary's bullets on the host's speed and sharing around the batches, and the
    errors at them (none where the host was not read)."""
    lines: list[str] = []
    if "at_host_speed" in s:
        h, at = s["host_speed"], s["at_host_speed"]
        lines += [
            f"- the host's compute speed (the profile's reference block timed before and after each batch, "
            f"against the profile): median {h['median']:.2f}x its time in the profile ({h['min']:.2f}x-{h['max']:.2f}x)",
            f"- at the host's speed of the moment: median |makespan error| {at['median_abs_error']:.1%}; worst "
            f"{at['max_abs_error']:.1%} ({at['worst_case']}); inside the measured [min, max] or within {tol:.0%}: "
            f"{at['cases_within_range_or_tolerance']} of {s['cases']}; per-step median |error| "
            f"{'-' if at['step_median_abs_error'] is None else format(at['step_median_abs_error'], '.1%')}",
        ]
    if "at_host_state" in s:
        h, at = s["host_sharing"], s["at_host_state"]
        lines += [
            f"- the host's sharing (the same block in two processes at once against each alone, before and after "
            f"each batch): {h['min']:.2f}x-{h['max']:.2f}x slower, the profile's law {h['profile']:.2f}x; "
            + (f"batches read more than {SHARING_OFF:.0%} off it: {', '.join(h['batches_off'])}"
               if h["batches_off"] else f"every batch within {SHARING_OFF:.0%} of it"),
            f"- at the host's speed and sharing of the moment: median |makespan error| {at['median_abs_error']:.1%}; "
            f"worst {at['max_abs_error']:.1%} ({at['worst_case']}); inside the measured [min, max] or within "
            f"{tol:.0%}: {at['cases_within_range_or_tolerance']} of {s['cases']}; per-step median |error| "
            f"{'-' if at['step_median_abs_error'] is None else format(at['step_median_abs_error'], '.1%')}",
        ]
    return lines


def _case_rows(cases: list[dict[str, Any]]) -> list[str]:
    """The table of cases, a row each."""
    lines = [
        "| case | measured min | median | max | CV | simulated | error | in range | step err (median) "
        "| compute err | transfer err | exposed (measured / simulated) | skew | host speed | error at host speed "
        "| host sharing | error at host state |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in cases:
        p = r["parts"]
        lines.append(
            f"| {_key(r)} | {r['measured_min_s'] * 1e3:.1f} ms | {r['measured_median_s'] * 1e3:.1f} ms | "
            f"{r['measured_max_s'] * 1e3:.1f} ms | {r['measured_cv']:.1%} | {r['simulated_s'] * 1e3:.1f} ms | "
            f"{r['error']:+.1%} | {'yes' if r['within_range'] else 'no'} | "
            f"{'-' if r['step_median_abs_error'] is None else format(r['step_median_abs_error'], '.1%')} | "
            f"{_pct(p['compute_s']['error'])} | {_pct(p['mean_transfer_s']['error'])} | "
            f"{p['exposed_comm_s']['measured'] * 1e3:.1f} / {p['exposed_comm_s']['simulated'] * 1e3:.1f} ms | "
            f"{p['first_compute_skew_s']['measured'] * 1e6:.0f} µs | "
            + (f"{r['host_speed']:.2f}x | {r['error_at_host_speed']:+.1%} |" if "host_speed" in r else "- | - |")
            + (f" {r['host_sharing']:.2f}x | {r['error_at_host_state']:+.1%} |" if "host_sharing" in r else " - | - |"))
    return lines
