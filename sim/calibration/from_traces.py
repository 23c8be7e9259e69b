"""Calibration from measured runs: real ring traces in, a hardware profile out.

The microbenchmark route (sim.calibration.calibrate) measures compute, links and contention apart
and models how they interact. A measured ring trace already holds every block and every
hop as it ran beside the others: each compute span is a block timed under the ring's
own contention, each send span a hop from the moment both ends had posted it to its
completion. This module fits the same profile models to those spans:

- compute: each measured compute span is matched to the operation of its configuration's
  schedule with the same rank, kind and step (the schedule gives its mask; the FLOPs
  must agree, or the trace is refused as not of its configuration); the (FLOPs, seconds)
  points per (dtype, mask, pass) go through the same table-or-line choice as
  microbenchmarks (sim.calibration.calibrate.calibrate_compute);
- link: alpha-beta over the median send span of each message size (through the origin
  when the traces hold a single size);
- contention: none. The spans were timed under contention, so the model must not add it
  again.

`holdout` then predicts other measured runs (other sizes, layouts, GPU counts: cases
kept out of the fit) with this profile and, when given, with a microbenchmark profile,
and reports the makespan error of each, so a person sees which route predicts better;
each profile predicts as `ringsim validate` does (the median of seeded plays where the
profile kept its host's spread of speeds).
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

import numpy as np

from sim.calibration.calibrate import _stats, calibrate_compute, calibrate_link, hop_link_points
from sim.calibration.validation import Case, compare_case, simulate_replays
from sim.engine.schedule import KINDS, MASKS
from sim.errors import RingsimError
from sim.hardware.contention import Contention
from sim.hardware.kernel_model import whole_heads
from sim.hardware.profile import Profile
from sim.scenario.config import scenario_from_config
from sim.schemes import get as get_scheme
from sim.trace.format import KIND_NAMES, Trace


def _measured(trace: Trace, source: str) -> None:
    if trace.source != "measured":
        raise RingsimError(f"{source}: a {trace.source} trace; calibration needs measured runs "
                           "(`ringsim hw run --trace`)")


def compute_points(trace: Trace, source: str = "") -> list[dict[str, Any]]:
    """(dtype, mask, kind, FLOPs, seconds) of every measured compute span of `trace`."""
    _measured(trace, source)
    scenario = scenario_from_config(trace.config)
    sched = get_scheme(scenario.scheme).build_schedule(scenario)
    comp = np.flatnonzero(~sched.is_transfer)
    ops = {}
    for i in comp.tolist():
        ops.setdefault((int(sched.rank[i]), KINDS[sched.kind[i]], int(sched.step[i])), []).append(i)
    c = trace.columns
    out = []
    seen: dict[tuple, int] = {}
    for j in np.flatnonzero(c.stream == 0).tolist():
        key = (int(c.rank[j]), KIND_NAMES[c.kind[j]], int(c.step[j]))
        mine = ops.get(key)
        n = seen.get(key, 0)
        seen[key] = n + 1
        if not mine or n >= len(mine):
            raise RingsimError(f"{source}: compute span of rank {key[0]}, step {key[2]} ({key[1]}) is not in "
                               f"the schedule of its configuration ({Case.from_config(trace.config).key})")
        op = mine[n]
        flops = float(c.flops[j])
        if abs(flops - float(sched.flops[op])) > 1e-6 * max(1.0, flops):
            raise RingsimError(f"{source}: compute span of rank {key[0]}, step {key[2]} does {flops:g} FLOPs, its "
                               f"configuration's schedule {float(sched.flops[op]):g}: not a trace of that "
                               "configuration")
        if flops <= 0:
            continue
        # the call's heads (times batch), whole ones, from its FLOPs and extent
        mask = MASKS[sched.mask[op]]
        d = scenario.workload.head_dim
        heads = whole_heads(key[1], mask, flops, int(sched.q_tokens[op]), int(sched.kv_tokens[op]), d)
        out.append({"dtype": scenario.workload.dtype, "mask": mask, "kind": key[1], "flops": flops,
                    "time_s": float(c.end_s[j] - c.start_s[j]), "heads": heads or None, "head_dim": d})
    return out


def transfer_points(trace: Trace) -> list[dict[str, Any]]:
    c = trace.columns
    send = np.flatnonzero((c.stream == 1) & (c.bytes > 0))
    return [{"bytes": float(c.bytes[j]), "direction": "both_ways", "time_s": float(c.end_s[j] - c.start_s[j])}
            for j in send.tolist()]


def _measured_on(traces: list[Trace]) -> dict[str, Any]:
    hw = traces[0].hardware
    devices = {t.hardware.get("device") for t in traces}
    if len(devices) > 1:
        raise RingsimError(f"the traces come from several devices ({', '.join(sorted(map(str, devices)))}): "
                           "calibrate one at a time")
    out = {k: hw[k] for k in ("device", "torch", "backend", "threads_per_rank") if k in hw}
    out["kind"] = "cuda" if hw.get("backend") == "nccl" else "cpu"
    return out


def calibrate_from_traces(traces: list[tuple[Trace, str]], source: str = "") -> Profile:
    """A profile fitted to measured ring traces (module docstring)."""
    if not traces:
        raise RingsimError("--from-traces needs at least one measured trace")
    compute, transfer, cases = [], [], {}
    for trace, path in traces:
        compute += compute_points(trace, path)
        transfer += transfer_points(trace)
        cases.setdefault(Case.from_config(trace.config).key, []).append(path)
    if len(transfer) < 2:
        raise RingsimError("the traces hold fewer than two transfers: a link cannot be fitted "
                           "(a GPU count of 2 or more is needed)")
    groups, model, compute_report = calibrate_compute(compute)
    links, link_report = calibrate_link(hop_link_points(transfer))
    report = {"route": "traces", "cases": {k: len(v) for k, v in sorted(cases.items())},
              "compute": compute_report, "link": link_report, "link_used": "both_ways",
              "contention": "none: the spans were timed under the ring's own contention"}
    return Profile(model, groups, links["both_ways"], Contention(), _measured_on([t for t, _ in traces]),
                   report, source)


def holdout(traces: list[tuple[Trace, str]], profiles: dict[str, Any],
            on_case: Callable[[dict[str, Any]], None] | None = None, replays: int = 1) -> dict[str, Any]:
    """Every held-out case (its repeats grouped) predicted by each named profile: the
    makespan error against the measured median and the median per-step error, as
    `ringsim validate` scores a case (sim.calibration.validation.compare_case). With `replays` above
    1, a profile whose host kept its measured spread predicts each case by the median of
    that many seeded plays, as the validation does (sim.calibration.validation.simulate_replays); a
    profile fitted to traces has no spread and plays once."""
    by_case: dict[str, list[Trace]] = {}
    for trace, path in traces:
        _measured(trace, path)
        by_case.setdefault(Case.from_config(trace.config).key, []).append(trace)
    rows = []
    plays = {name: 1 for name in profiles}
    for key, runs in sorted(by_case.items()):
        case = Case.from_config(runs[0].config)
        scenario = scenario_from_config(runs[0].config)
        row: dict[str, Any] = {"key": key, "repeats": len(runs)}
        for name, profile in profiles.items():
            r = compare_case(case, runs, simulate_replays(scenario, profile, replays))
            row.update(measured_s=r["measured_median_s"], measured_min_s=r["measured_min_s"],
                       measured_max_s=r["measured_max_s"])
            row[name] = {"predicted_s": r["simulated_s"], "error": r["error"],
                         "step_median_abs_error": r["step_median_abs_error"]}
            plays[name] = r["simulated_plays"]
        rows.append(row)
        if on_case:
            on_case(row)
    summary = {}
    for name in profiles:
        errs = [abs(r[name]["error"]) for r in rows]
        steps = [r[name]["step_median_abs_error"] for r in rows if r[name]["step_median_abs_error"] is not None]
        summary[name] = {**_stats(errs), "step_median_abs_error": statistics.median(steps) if steps else None,
                         "within_10pct": sum(e <= 0.10 for e in errs), "plays": plays[name]}
    better = min(summary, key=lambda n: summary[n].get("median_abs_rel", float("inf"))) if rows else None
    return {"cases": rows, "summary": summary, "better": better}

