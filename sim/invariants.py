"""What every result that leaves ringsim must satisfy, whatever produced it.

A run's numbers obey bounds no correct model can break (docs/design.md, Definitions): the
makespan is at least the ideal time (total FLOPs / (N x rate), the limit no schedule
beats), so 0 < efficiency <= 1; model FLOPs per second never exceed the GPU's dense peak,
so MFU <= 1; a GPU holding any tensor has memory > 0; every time is a finite number of
seconds, >= 0. A result that breaks one is a bug in ringsim, not the user's mistake, but
it is stopped the same way: `ImpossibleResult` (a RingsimError, so the command line prints
one line and exits 2, the dashboard shows the sentence in place of the figure), naming the
invariant and the configuration, never printed as a number. docs/reliability.md lists
where each check is called.

One check per kind of result: `check_run` (a simulate, compare or plan row, a sweep row),
`check_step` (a training step), `check_calibration` (a fitted profile's report against
the acceptance it states).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from sim.errors import RingsimError

RELATIVE_SLACK = 1e-9
"""How far makespan may fall below the ideal (and efficiency or MFU rise above 1) before it
counts as a violation. The two sides are computed along different chains of float
operations: the ideal is one division of a sum of FLOPs, the makespan a sum of up to a few
million span durations, each a quotient rounded to 2^-53 (1.1e-16) relative; the
accumulated rounding is at most about n x 1.1e-16, below 1e-9 for any trace ringsim can hold
(MAX_TRACE_ARRAY_BYTES / 8 bytes a span column, 2.7e8 spans: 3e-8 at the very worst, and
sums of that length do not occur in a run that meets the ideal). A real model error
(a block faster than the kernel's best rate) is percent-sized, far above this."""

CONFIG_CHARS = 300
"""The configuration in a violation's message is cut to this many characters (one line)."""


class ImpossibleResult(RingsimError):
    """A result that breaks an invariant: a ringsim bug, stopped before it is shown."""


def describe_config(config: Any) -> str:
    """A configuration as one short line: a dict's scalar entries as key=value (nested dicts
    flattened one level), anything else as its str."""
    if isinstance(config, Mapping):
        parts = []
        for k, v in config.items():
            if isinstance(v, Mapping):
                parts += [f"{k2}={v2}" for k2, v2 in v.items() if not isinstance(v2, (Mapping, list, tuple))]
            elif not isinstance(v, (list, tuple)):
                parts.append(f"{k}={v}")
        text = " ".join(parts)
    else:
        text = str(config)
    text = " ".join(text.split())
    return text if len(text) <= CONFIG_CHARS else text[:CONFIG_CHARS - 3] + "..."


def _fail(invariant: str, config: Any) -> None:
    raise ImpossibleResult(f"impossible result, a ringsim bug (please report it): {invariant}; "
                           f"configuration: {describe_config(config)}")


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _numbers(obj: Any, path: str = "") -> Iterable[tuple[str, float]]:
    """Every number in a nested result (dicts and lists), with its dotted path."""
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from _numbers(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}[{i}]")
    elif _number(obj):
        yield path, obj


def _finite_times(result: Any, config: Any, skip: tuple[str, ...] = ()) -> None:
    """Every number is finite; every one named *_s (a time) is >= 0."""
    for path, x in _numbers(result):
        if any(part in path for part in skip):
            continue
        if not math.isfinite(x):
            _fail(f"{path} is {x}, not a finite number", config)
        if path.rsplit(".", 1)[-1].split("[")[0].endswith("_s") and x < 0:
            _fail(f"the time {path} is {x:g} s, below 0", config)


def _at_most_one(name: str, value: Any, config: Any, *, what: str) -> None:
    if value is None:
        return
    if not _number(value) or not 0 < value <= 1 + RELATIVE_SLACK:
        _fail(f"{name} {value!r} is outside (0, 1] ({what})", config)


def _positive(name: str, value: Any, config: Any) -> None:
    if value is not None and (not _number(value) or not value > 0):
        _fail(f"{name} {value!r} is not above 0", config)


def check_run(row: Mapping[str, Any], config: Any) -> Mapping[str, Any]:
    """A simulated run's summary (simulate's JSON, a compare, plan or sweep row): makespan
    >= ideal, 0 < efficiency <= 1, memory > 0, every time finite and >= 0. A row that only
    says why a configuration was refused (`refused`, `error`) holds no numbers to check.
    Returns the row."""
    if row.get("refused") or isinstance(row.get("error"), str):
        return row
    _finite_times(row, config)
    makespan, ideal = row.get("makespan_s"), row.get("ideal_s")
    if _number(makespan) and _number(ideal) and makespan < ideal * (1 - RELATIVE_SLACK):
        _fail(f"makespan {makespan:.6g} s is below the ideal {ideal:.6g} s", config)
    _at_most_one("efficiency", row.get("efficiency"), config, what="ideal time / makespan")
    if _number(makespan) and makespan <= 0 and (row.get("total_flops") or 0) > 0:
        _fail(f"makespan {makespan!r} s for {row['total_flops']:g} FLOPs", config)
    for key in ("peak_mem_bytes", "attention_mem_bytes", "memory_bytes_per_gpu"):
        _positive(key, row.get(key), config)
    for i, r in enumerate(row.get("ranks") or ()):
        if isinstance(r, Mapping):
            _positive(f"rank {i} peak_mem_bytes", r.get("peak_mem_bytes"), config)
    return row


def check_step(step: Mapping[str, Any], config: Any) -> Mapping[str, Any]:
    """A training step (sim.training.step's to_dict, or a whole-step plan's candidate):
    step time > 0, MFU and PaLM's MFU in (0, 1], memory per GPU > 0, every time finite and
    >= 0. Returns the step."""
    _finite_times(step, config)
    _positive("step_s", step.get("step_s"), config)
    for key in ("mfu", "palm_mfu"):
        _at_most_one(key, step.get(key), config, what="model FLOP/s per GPU / the GPU's dense peak")
    _positive("memory_bytes_per_gpu", step.get("memory_bytes_per_gpu"), config)
    return step


ACCEPTED_FIT_ERROR = 1.0
"""The largest median |relative error| a fitted profile's report may show against the data
it was fitted to, and the acceptance every report states (`acceptance`). The committed CPU
profiles' worst is 0.58 (the one-way link on a shared 2-core host); a median above 1 means
the fit is off by more than the measured values themselves for half the points: it no
longer describes them."""


def fit_errors(report: Any, path: str = "") -> Iterable[tuple[str, Any]]:
    """Every median |relative error| of a fit report against its own data (keys containing
    `median_abs_rel`), with its path; the predictions of held-out runs (`holdout`) are a
    validation, not the fit, and are left to their own report."""
    if isinstance(report, Mapping):
        for k, v in report.items():
            if k == "holdout":
                continue
            where = f"{path}.{k}" if path else str(k)
            if "median_abs_rel" in str(k) and not isinstance(v, (Mapping, list)):
                yield where, v
            else:
                yield from fit_errors(v, where)
    elif isinstance(report, list):
        for i, v in enumerate(report):
            yield from fit_errors(v, f"{path}[{i}]")


def check_calibration(report: dict[str, Any], config: Any) -> dict[str, Any]:
    """A fitted profile's report: each median |relative error| of the fit against the data it
    was fitted to (fit_errors) must be a finite number no larger than ACCEPTED_FIT_ERROR,
    which the report states under `acceptance`; otherwise the measurements hold impossible
    values or the fit does not describe them, and the profile is refused (RingsimError
    naming the worst), not written. Returns the report."""
    report["acceptance"] = {"median_abs_rel_at_most": ACCEPTED_FIT_ERROR}
    for name, err in fit_errors(report):
        if err is None:
            continue
        if not _number(err) or not math.isfinite(err):
            raise RingsimError(f"calibration refused: its fit's {name} is {err!r}, not a number; the measurements "
                               f"({describe_config(config)}) hold impossible values")
        if err > ACCEPTED_FIT_ERROR:
            raise RingsimError(f"calibration refused: its fit misses its own data by {err:.1%} ({name}), more than "
                               f"the {ACCEPTED_FIT_ERROR:.0%} it accepts; measure again ({describe_config(config)})")
    return report


def check_rows(rows: Iterable[Mapping[str, Any]], config: Any) -> None:
    """check_run on each row of a table, each named by its position."""
    for i, row in enumerate(rows):
        check_run(row, {"row": i + 1, **config} if isinstance(config, Mapping) else f"row {i + 1}, {config}")
