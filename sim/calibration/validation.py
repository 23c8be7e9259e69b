"""How far a simulated run falls from measured runs of the same case.

For one case (a scheme, layout, mask, GPU count, sequence length and pass) the real
kernel gives several measured traces (repeats) and the simulator one, or, when asked,
several seeded plays where the profile's host has a measured spread of speeds
(`simulate_replays`; then the median of the plays is the prediction, as the median of
the repeats is the measurement).
`compare_case` reports the measured spread (min, median, max, coefficient of variation),
the makespan error against the median, the error of every rank's every step, and a
breakdown that says which part of the model misses: compute (sum of compute spans),
transfer (mean time of a transfer: a ring hop from the moment both its ends had posted,
an all-gather or all-to-all piece),
exposed communication, and the clock skew between ranks (how far apart their first
computes start); and the makespan error in two parts that add up to it (`error_parts`):
the mean rank's compute, and the time outside it (waits on transfers and on slower
ranks, the start skew, the time between blocks). `compare_again` scores a report's row
against new simulated runs from what the report kept of its measurement, so that a
changed model or profile can predict runs measured before. Over several runs of the same cases
`error_spread` splits each error into the case's own part, its batch's shift in that
run and the rest; `run_to_run` says how far two runs of the same cases
measured them apart, a floor under any model's error on that host. It reads traces only: `ringsim
validate` (hw.validate), `ringsim calibrate --check` (hw.check) and the held-out runs of
calibration from traces (sim.calibration.from_traces) all score their runs with it. A step's duration is
sim.trace.metrics.step_durations.

Step errors are |simulated - measured| / measured per (rank, step),
the measured side the median over repeats.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from sim.errors import RingsimError
from sim.hardware.model import HardwareModel
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.trace.format import Trace
from sim.trace.metrics import step_durations


@dataclass(frozen=True)
class Case:
    """One measured configuration: its layout, mask, ranks, tokens, pass and scheme."""

    layout: str
    causal: bool
    n_gpus: int
    seq: int
    pass_: str = "fwd"
    scheme: str = DEFAULT_SCHEME

    @property
    def key(self) -> str:
        return (f"{self.scheme}/{self.layout}/{'causal' if self.causal else 'full'}/gpus{self.n_gpus}/"
                f"seq{self.seq}/{self.pass_}")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "Case":
        """The case a trace header describes (Scenario.describe() shape)."""
        try:
            w = config["workload"]
            return cls(config["layout"], bool(w["causal"]), int(config["n_gpus"]), int(w["seq"]), w["pass"],
                       config.get("scheme", DEFAULT_SCHEME))
        except (KeyError, TypeError, ValueError) as e:
            raise RingsimError(f"the trace's header has no usable configuration (missing or bad {e})") from None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Case":
        """The case a validation report's row describes."""
        return cls(row["layout"], bool(row["causal"]), row_gpus(row), int(row["seq"]), row["pass"],
                   row.get("scheme", DEFAULT_SCHEME))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pass"] = d.pop("pass_")
        return d


def row_gpus(row: dict[str, Any]) -> int:
    """A report row's GPU count: `n_gpus`, or `world_size` in reports written before that name."""
    return int(row["n_gpus"] if "n_gpus" in row else row["world_size"])


def _hop_times(trace: Trace) -> list[float]:
    """Each send's time from the moment both its ends had posted to its end: a measured
    send runs from its own post and so holds the wait for a receiver that posts later,
    which the simulated one (its transfer alone, its receive beside it) does not. A send
    is paired with its receiver's receive of the same kind and step; one without a
    receive to pair (a collective's) keeps its span."""
    posted = {(s.rank, s.peer, s.kind, s.step): s.start_s for s in trace.spans if s.stream == "recv" and s.peer >= 0}
    out = []
    for s in trace.spans:
        if s.stream != "send":
            continue
        start = max(s.start_s, posted.get((s.peer, s.rank, s.kind, s.step), s.start_s))
        out.append(max(0.0, s.end_s - start))
    return out


def _components(trace: Trace) -> dict[str, float]:
    compute = sum(s.duration_s for s in trace.spans if s.stream == "compute")
    sends = _hop_times(trace)
    exposed = sum(s.duration_s for s in trace.spans if s.stream == "wait" and s.kind != "idle")
    first = {}
    for s in trace.spans:
        if s.stream == "compute":
            first[s.rank] = min(first.get(s.rank, s.start_s), s.start_s)
    skew = (max(first.values()) - min(first.values())) if first else 0.0
    return {"compute_s": compute, "mean_transfer_s": statistics.mean(sends) if sends else 0.0,
            "exposed_comm_s": exposed, "first_compute_skew_s": skew}


def _rel(sim: float, meas: float) -> float | None:
    return (sim - meas) / meas if meas > 0 else None


def error_parts(row: dict[str, Any]) -> dict[str, float] | None:
    """A report row's makespan error in two parts, each a fraction of the measured
    makespan, that add up to it: "compute", how much longer the simulated mean rank
    computes than the measured one (the compute part over the GPU count), and
    "outside_compute", the rest: how much longer the simulation spends outside its
    computes (waiting on transfers and on slower ranks, the skew of the start, the time
    between blocks). A ring that waits on its slowest rank while its mean rank computes
    as predicted shows as a negative outside part. Rows of any report carry what it
    needs; None where the measured makespan is not positive."""
    m = row["measured_median_s"]
    c = row["parts"]["compute_s"]
    if not m > 0:
        return None
    compute = (c["simulated"] - c["measured"]) / row_gpus(row) / m
    return {"compute": compute, "outside_compute": row["error"] - compute}


def batch_of(row: dict[str, Any]) -> str:
    """The group of batches a report row's case ran in: its scheme, GPU count and pass."""
    return f"{row.get('scheme', DEFAULT_SCHEME)} {row_gpus(row)} GPUs {row['pass']}"


def error_spread(reports: list[dict[str, Any]], field: str = "error") -> dict[str, Any]:
    """Several validation runs of the same cases: each case's signed `field` ("error", or
    "error_at_host_speed") split in three parts that add up to it, to say whose a miss
    is. The case's own part is its mean over the runs (the model's: it comes back in
    every run); a group's shift is how far the cases of one GPU count and pass (a batch
    of processes in the quick matrix, measured within a minute or two) lie, on average,
    from their own means in one run (the host's drift around that batch, with the run's
    own lean); the rest is what is left of each case in each run (its repeats' noise).
    The parts are orthogonal, so the three spreads' squares add up to the variance of
    every error. Only cases every report has with a value are counted."""
    if len(reports) < 2:
        raise RingsimError("the spread of errors needs at least two validation runs")
    rows = [{r["key"]: r for r in rep.get("cases") or [] if r.get(field) is not None} for rep in reports]
    keys = [k for k in rows[0] if all(k in run for run in rows[1:])]
    if not keys:
        raise RingsimError(f"no case has {field!r} in every run")
    err = {k: [run[k][field] for run in rows] for k in keys}
    n = len(reports)
    own = {k: statistics.fmean(v) for k, v in err.items()}
    groups: dict[str, list[str]] = {}
    for k in keys:
        groups.setdefault(batch_of(rows[0][k]), []).append(k)
    shift = {g: [statistics.fmean(err[k][i] - own[k] for k in ks) for i in range(n)] for g, ks in groups.items()}
    group_of = {k: g for g, ks in groups.items() for k in ks}
    rest = [err[k][i] - own[k] - shift[group_of[k]][i] for k in keys for i in range(n)]
    all_errors = [e for v in err.values() for e in v]
    return {"runs": n, "cases": len(keys), "field": field,
            "mean": statistics.fmean(all_errors), "sd": statistics.pstdev(all_errors),
            "case_sd": statistics.pstdev(own.values()),
            "group_sd": statistics.fmean(shift[group_of[k]][i] ** 2 for k in keys for i in range(n)) ** 0.5,
            "rest_sd": statistics.fmean(x * x for x in rest) ** 0.5,
            "case_means": own, "group_shifts": shift}


def run_to_run(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """How far two validation runs of the same cases measured them apart: the median over
    the cases both have of |ln(m_a / m_b)| / sqrt(2), m each run's measured median. Where
    the two runs' deviations from a case's own time are independent and alike, it is the
    median |error| that a prediction of each case's own time, exact, would show against
    one run: a floor under the makespan error of any model on that host, from the host's
    own irreproducibility (the drift between batches and runs, and the repeats' noise)."""
    def medians(rep: dict[str, Any]) -> dict[str, float]:
        return {Case.from_row(r).key: float(r["measured_median_s"])
                for r in rep.get("cases") or [] if r.get("measured_median_s", 0) > 0}
    ma, mb = medians(a), medians(b)
    keys = [k for k in ma if k in mb]
    if not keys:
        raise RingsimError("the two runs have no measured case in common")
    apart = [abs(math.log(ma[k] / mb[k])) / math.sqrt(2) for k in keys]
    return {"cases": len(keys), "median": statistics.median(apart)}


def step_spread(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the per-step error lies: every step row of every case of the reports,
    grouped by the case's scheme, pass and GPU count and the step's index, with the
    median signed error (simulated against measured, over the measured step) and the
    median |error| of each step index, and the median |error| of each scheme, pass and
    GPU count over all its steps. A step index whose signed median leans one way in
    every group of runs is the model's shape; steps that only scatter are noise."""
    by_step: dict[tuple[str, int, int], list[tuple[float, float]]] = {}
    for rep in reports:
        for r in rep.get("cases") or []:
            for st in r.get("steps") or []:
                if st.get("abs_error") is None or not st["measured_s"] > 0:
                    continue
                key = (f"{r.get('scheme', DEFAULT_SCHEME)}/{r['pass']}", row_gpus(r), int(st["step"]))
                by_step.setdefault(key, []).append(((st["simulated_s"] - st["measured_s"]) / st["measured_s"],
                                                    st["abs_error"]))
    if not by_step:
        raise RingsimError("no step with a measured duration in the reports")
    steps = [{"group": g, "n_gpus": n, "step": k, "n": len(v),
              "median_error": statistics.median(e for e, _ in v),
              "median_abs_error": statistics.median(a for _, a in v)}
             for (g, n, k), v in sorted(by_step.items())]
    groups: dict[tuple[str, int], list[float]] = {}
    for (g, n, _), v in by_step.items():
        groups.setdefault((g, n), []).extend(a for _, a in v)
    return {"steps": steps,
            "groups": [{"group": g, "n_gpus": n, "n": len(v), "median_abs_error": statistics.median(v)}
                       for (g, n), v in sorted(groups.items())]}


REPLAYS = 31
"""Seeded plays a validation asks for when it plays the host's spread of speeds
(`ringsim validate --replays`): the prediction is their median, as the measurement is
the median of its repeats. Off by default: on four calibrations of the 2-core VM the
plays did not help on balance (median |error| on the same measurements 12.0%, 4.8%,
18.1%, 15.7% with 31 plays against 12.8%, 4.3%, 16.4%, 15.6% without, docs/cpu-validation.md); their
draws are independent where the host's cores couple them (a rank served less leaves
more to the others)."""


def simulate_replays(scenario: Any, profile: HardwareModel, replays: int = 1) -> list[Trace]:
    """The simulated runs a measured case is compared with: one play at the mean rate
    (every rank and block), or, with `replays` above 1 where the profile's host has a
    measured spread of speeds, that many plays seeded 0, 1, ... (sim.hardware.contention)."""
    # `ringsim` imports this module on every start (REPLAYS and the cases name the validate
    # and calibrate options): the engine loads when a case is simulated
    from sim.engine.play import simulate

    host = profile.contention.host if profile.contention is not None else None
    if host is None or not host.spread or replays <= 1:
        return [simulate(scenario, profile)]
    return [simulate(scenario, profile, jitter=seed) for seed in range(replays)]


def compare_case(case: Case, measured: list[Trace], simulated: Trace | list[Trace]) -> dict[str, Any]:
    """One row of the validation report; several simulated traces (seeded plays) count
    by their median, as the measured repeats do."""
    spans = sorted(t.makespan_s for t in measured)
    mean = statistics.mean(spans)
    per_repeat = [step_durations(t) for t in measured]
    keys = sorted({key for d in per_repeat for key in d})
    comp_meas = [_components(t) for t in measured]
    side = {
        "repeats": len(spans), "measured_min_s": spans[0], "measured_median_s": statistics.median(spans),
        "measured_max_s": spans[-1],
        "measured_cv": statistics.stdev(spans) / mean if len(spans) > 1 and mean > 0 else 0.0,
        # per-step errors against the median of the repeats
        "steps": {key: statistics.median(d[key] for d in per_repeat if key in d) for key in keys},
        "parts": {name: statistics.median(c[name] for c in comp_meas)
                  for name in ("compute_s", "mean_transfer_s", "exposed_comm_s", "first_compute_skew_s")},
    }
    return _row(case, side, simulated)


def compare_again(row: dict[str, Any], simulated: Trace | list[Trace]) -> dict[str, Any]:
    """A report row predicted again: its measured side as the report kept it (the
    spread, each step's median over the repeats, the parts), set against new simulated
    runs and scored as compare_case scores them. What a changed model or profile
    predicts for runs measured before, without measuring them again."""
    try:
        case = Case.from_row(row)
        side = {name: row[name] for name in ("repeats", "measured_min_s", "measured_median_s", "measured_max_s",
                                             "measured_cv")}
        side["steps"] = {(int(s["rank"]), int(s["step"])): float(s["measured_s"]) for s in row["steps"]}
        side["parts"] = {name: part["measured"] for name, part in row["parts"].items()}
    except (KeyError, TypeError, ValueError) as e:
        raise RingsimError(f"the report's row has no usable measurement (missing or bad {e})") from None
    return _row(case, side, simulated)


def _row(case: Case, side: dict[str, Any], simulated: Trace | list[Trace]) -> dict[str, Any]:
    """The report row of a case's measured side (compare_case) against its simulated runs."""
    sims = [simulated] if isinstance(simulated, Trace) else list(simulated)
    if not sims:
        raise RingsimError("no simulated run to compare with")
    med = side["measured_median_s"]
    played = sorted(t.makespan_s for t in sims)
    sim = statistics.median(played)
    per_play = [step_durations(t) for t in sims]
    sim_steps = {key: statistics.median(d[key] for d in per_play if key in d) for key in per_play[0]}
    step_errors = []
    steps = []
    for key in sorted(sim_steps):
        if key not in side["steps"]:
            continue
        m = side["steps"][key]
        err = abs(sim_steps[key] - m) / m if m > 0 else None
        steps.append({"rank": key[0], "step": key[1], "measured_s": m,
                      "simulated_s": sim_steps[key], "abs_error": err})
        if err is not None:
            step_errors.append(err)
    comp_plays = [_components(t) for t in sims]
    comp_sim = {name: statistics.median(c[name] for c in comp_plays) for name in comp_plays[0]}
    parts = {}
    for name in ("compute_s", "mean_transfer_s", "exposed_comm_s"):
        m = side["parts"][name]
        parts[name] = {"measured": m, "simulated": comp_sim[name], "error": _rel(comp_sim[name], m)}
    # the clock skew is the measurement's (how far apart the ranks began); the simulator's
    # ranks start together unless the schedule holds one back
    parts["first_compute_skew_s"] = {"measured": side["parts"]["first_compute_skew_s"],
                                     "simulated": comp_sim["first_compute_skew_s"]}
    row = {
        **case.to_dict(),
        "repeats": side["repeats"],
        "measured_min_s": side["measured_min_s"], "measured_median_s": med,
        "measured_max_s": side["measured_max_s"],
        "measured_cv": side["measured_cv"],
        "simulated_s": sim,
        "simulated_plays": len(sims),
        "simulated_min_s": played[0], "simulated_max_s": played[-1],
        "error": (sim - med) / med,
        "abs_error": abs(sim - med) / med,
        "within_range": side["measured_min_s"] <= sim <= side["measured_max_s"],
        "step_median_abs_error": statistics.median(step_errors) if step_errors else None,
        "step_max_abs_error": max(step_errors) if step_errors else None,
        "parts": parts,
        "steps": steps,
    }
    row["error_parts"] = error_parts(row)
    return row
