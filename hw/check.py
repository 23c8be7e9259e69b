"""`ringsim calibrate --check PROFILE`: does a profile still predict this host?

A short probe (well under a minute on 2 cores): a few small ring runs of the real
kernel, each measured a few times, and the profile's prediction of each; the same
cases as the validation matrix (hw.validate) uses, at its smallest size. A probe
passes when its median makespan lies within the tolerance of the prediction. Each probe
is scored as `ringsim validate` scores a case (sim.calibration.validation.compare_case), whose
breakdown (compute, transfer) names the part of a miss, and predicted as
`bench/calibration/calibrate_cpu.sh` validates: by the median of `replays` plays seeded with the
host's measured spread (sim.calibration.validation.simulate_replays; one play at the mean rate where
the profile has no spread). The report also sets the host
the profile was measured on against this one (sim.hardware.host) and, on CPU profiles, reads this
host's compute speed against the profile's (hw.reference).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from sim.calibration.validation import REPLAYS, Case, compare_case, simulate_replays
from sim.hardware.host import differences, this_host
from sim.scenario.config import Workload

PROBES = (Case("zigzag", True, 2, 3072), Case("contiguous", False, 2, 3072), Case("zigzag", True, 3, 3072))
"""Cases of the validation matrix at its smallest size (forward, the ring)."""


def _workload(case: Case, dtype: str) -> Workload:
    return Workload(seq=case.seq, heads=8, kv_heads=8, head_dim=64, dtype=dtype, causal=case.causal,
                    pass_=case.pass_)


def dtype_of(profile: Any) -> str:
    """The dtype the profile measured (fp32 on CPU profiles), the first in its groups."""
    return sorted({k[0] for k in profile.groups})[0]


def check(profile: Any, *, tolerance: float = 0.10, repeats: int = 3, warmup: int = 1,
          probes: tuple[Case, ...] = PROBES, on_probe=None, reference_s: float = 3.0,
          replays: int = REPLAYS) -> dict[str, Any]:
    """Run the probes, predict them with `profile`, and say whether it still holds.

    On a CPU profile the host's compute speed against the profile is read first
    (hw.reference, `reference_s` seconds; 0: not read), then, where the profile has a
    host model, how two processes share its cores against the profile's law; each probe
    is also predicted at that speed, and at that speed and sharing: a miss that goes away
    there is the host having changed since calibration, one that stays is the model's."""
    from hw.config import RunConfig, default_threads
    from hw.launch import run_configs

    dtype = dtype_of(profile)
    started = time.perf_counter()
    speed = sharing = None
    if reference_s > 0 and profile.measured_on.get("kind", "cpu") == "cpu":
        from hw import reference

        shape = _workload(probes[0], dtype)      # every probe's heads and head dim
        read = dict(dtype=dtype, heads=shape.heads, head_dim=shape.head_dim,
                    threads=int(profile.measured_on.get("threads_per_rank") or 1), seconds=reference_s)
        speed = reference.host_speed(profile, **read)
        sharing = reference.host_sharing(profile, **read) if speed else None
    at_speed = profile.at_compute_speed(speed["factor"]) if speed else None
    at_state = profile.at_host_state(speed["factor"], sharing["factor"]) if sharing else None
    cfgs = [RunConfig(workload=_workload(p, dtype), n_gpus=p.n_gpus, layout=p.layout,
                      warmup=warmup, repeats=repeats) for p in probes]
    rows = []
    for probe, cfg, (_, traces) in zip(probes, cfgs, run_configs(cfgs, interleave=True)):
        scenario = cfg.scenario()
        plays = simulate_replays(scenario, profile, replays)
        row = compare_case(probe, traces, plays)
        row.update(key=probe.key, within=abs(row["error"]) <= tolerance)
        if at_speed is not None:
            row["error_at_host_speed"] = compare_case(probe, traces,
                                                      simulate_replays(scenario, at_speed, replays))["error"]
        if at_state is not None:
            row["error_at_host_state"] = compare_case(probe, traces,
                                                      simulate_replays(scenario, at_state, replays))["error"]
        rows.append(row)
        if on_probe:
            on_probe(row)
    here = this_host(threads_per_rank=default_threads(2))
    worst = max(abs(r["error"]) for r in rows)
    # the plays each probe was predicted by: `replays`, or one where the profile has no spread
    return {"profile": profile.source, "tolerance": tolerance, "repeats": repeats, "replays": len(plays),
            "probes": rows, "holds": all(r["within"] for r in rows), "worst_abs_error": worst,
            "median_abs_error": statistics.median(abs(r["error"]) for r in rows),
            "host_speed": speed,
            "median_abs_error_at_host_speed": (statistics.median(abs(r["error_at_host_speed"]) for r in rows)
                                               if speed else None),
            "host_sharing": sharing,
            "median_abs_error_at_host_state": (statistics.median(abs(r["error_at_host_state"]) for r in rows)
                                               if sharing else None),
            "measured_on": profile.measured_on, "this_host": here,
            "host_differences": differences(profile.measured_on, here),
            "load_avg_1m": os.getloadavg()[0], "wall_s": time.perf_counter() - started}

