"""Where a ring rank's time outside its computes goes, measured against simulated.

Runs the ring kernel (gloo, CPU) on a few cases at each GPU count, and plays the same
cases on a calibrated profile, and splits every rank's time outside its computes into
the parts a trace tells apart: before its first compute (the start), between its
computes, and after its last (waiting for the slowest rank to finish). Between
computes it also counts two parts of its own: the exposed waits on transfers, and the
time from posting a step's transfers to that step's compute starting (a send is written
by the posting rank itself when its receiver posted first: on a host whose cores are
all busy, that takes as long as the transfer). Each part is the mean over the ranks, and
the table gives, per case, the mean over the repeats (measured) and over the plays
(simulated), in ms, so that compute, start, between and end add up to the makespan;
the shares of the makespan follow. `sim.calibration.validation.error_parts` is
the same split in every validation report, without the detail.

    .venv/bin/python bench/experiments/outside_compute.py [--profile P.json] [--gpus 2 3 4]
        [--seq 6144] [--repeats 5] [--plays 31] [--json out.json [--force]]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.errors import RingsimError  # noqa: E402
from sim.files import kept_file, write_json
from sim.trace.format import COMPUTE, IDLE, SEND, WAIT, Trace  # noqa: E402

PARTS = ("compute", "start", "between", "exposed", "post", "end")
CASES = (("contiguous", False), ("zigzag", True))


def split(trace: Trace) -> dict[str, float]:
    """The mean rank's time in each part (seconds): its computes, before the first,
    between them (of which exposed waits, and the time from a step's post to its
    compute), and after the last; per rank they add up to the makespan."""
    c = trace.columns
    t0, t1 = float(c.start_s.min()), float(c.end_s.max())
    out = dict.fromkeys(PARTS, 0.0)
    ranks = 0
    for r in range(trace.n_gpus):
        mine = c.rank == r
        comp = np.flatnonzero(mine & (c.stream == COMPUTE))
        if not comp.size:
            continue
        ranks += 1
        comp = comp[np.argsort(c.start_s[comp], kind="stable")]
        starts, ends = c.start_s[comp], c.end_s[comp]
        out["compute"] += float((ends - starts).sum())
        out["start"] += float(starts[0] - t0)
        out["between"] += float((starts[1:] - ends[:-1]).sum())
        out["end"] += t1 - float(ends[-1])
        waits = np.flatnonzero(mine & (c.stream == WAIT) & (c.kind != IDLE))
        out["exposed"] += float((c.end_s[waits] - c.start_s[waits]).sum())
        # a send posted after the compute before it ended and before this one started
        sends = np.flatnonzero(mine & (c.stream == SEND))
        for i in range(1, len(comp)):
            posted = c.start_s[sends][(c.start_s[sends] >= ends[i - 1]) & (c.start_s[sends] <= starts[i])]
            if posted.size:
                out["post"] += float(starts[i] - posted.min())
    return {k: v / max(ranks, 1) for k, v in out.items()}


def measure_cases(gpu_counts: list[int], cases, seq: int, repeats: int, pass_: str = "fwd") -> tuple[list, list]:
    """The ring kernel (gloo, CPU; 8 heads x 64, fp32) on each (layout, causal) case at
    each GPU count, repeats interleaved: (configurations, their (results, traces))."""
    from hw.config import RunConfig
    from hw.launch import run_configs
    from sim.scenario.config import Workload

    cfgs = [RunConfig(workload=Workload(seq=seq, heads=8, kv_heads=8, head_dim=64, dtype="fp32", causal=causal,
                                        pass_=pass_),
                      n_gpus=ws, layout=layout, warmup=1, repeats=repeats, seed=0, device="cpu")
            for ws in gpu_counts for layout, causal in cases]
    return cfgs, run_configs(cfgs, interleave=True)


def _mean_parts(traces: list[Trace]) -> dict[str, float]:
    """Each part's mean over the traces, and the mean makespan: means, so that the parts
    of a case still add up to its makespan."""
    parts = [split(t) for t in traces]
    out = {k: statistics.fmean(p[k] for p in parts) for k in PARTS}
    out["makespan"] = statistics.fmean(t.makespan_s for t in traces)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="bench/results/calibration/cpu-2core/profile.json", help="calibrated CPU profile")
    ap.add_argument("--gpus", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--seq", type=int, default=6144, help="tokens (default 6144)")
    ap.add_argument("--repeats", type=int, default=5, help="measured runs of each case (default 5)")
    ap.add_argument("--plays", type=int, default=31, help="seeded plays of each case (default 31)")
    ap.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    ap.add_argument("--force", action="store_true", help="overwrite the --json file")
    a = ap.parse_args(argv)
    if a.repeats < 1 or a.plays < 1 or any(w < 2 for w in a.gpus):
        print("outside_compute: --repeats and --plays must be at least 1, GPU counts at least 2", file=sys.stderr)
        return 2
    why = kept_file(a.json, a.force)
    if why:
        print(f"outside_compute: {why}", file=sys.stderr)
        return 2
    from sim.calibration.validation import simulate_replays
    from sim.hardware.profile import load_profile

    try:
        profile = load_profile(a.profile)
        cfgs, measured = measure_cases(a.gpus, CASES, a.seq, a.repeats)
    except RingsimError as e:
        print(f"outside_compute: {e}", file=sys.stderr)
        return 2
    rows = []
    print(f"profile {a.profile}; {a.repeats} measured runs and {a.plays} plays each; the mean rank, ms "
          "(measured / simulated)")
    print(f"{'case':<22} {'makespan':>15} {'compute':>15} {'start':>11} {'between':>13} {'exposed':>11} "
          f"{'post':>11} {'end':>13}")
    for cfg, (_, traces) in zip(cfgs, measured):
        m = _mean_parts(traces)
        s = _mean_parts(simulate_replays(cfg.scenario(), profile, a.plays))
        name = f"{cfg.layout}/{'causal' if cfg.workload.causal else 'full'}/gpus{cfg.n_gpus}"
        rows.append({"case": name, "seq": a.seq, "measured": m, "simulated": s})
        print(f"{name:<22} " + " ".join(
            f"{m[k] * 1e3:>{w}.1f}/{s[k] * 1e3:<{w}.1f}" for k, w in
            (("makespan", 7), ("compute", 7), ("start", 5), ("between", 6), ("exposed", 5), ("post", 5),
             ("end", 6))), flush=True)
    print("\nas shares of the makespan, measured / simulated:")
    for r in rows:
        m, s = r["measured"], r["simulated"]
        outside_m = 1 - m["compute"] / m["makespan"]
        outside_s = 1 - s["compute"] / s["makespan"]
        print(f"{r['case']:<22} outside compute {outside_m:6.1%} / {outside_s:6.1%}; "
              + "; ".join(f"{k} {m[k] / m['makespan']:5.1%} / {s[k] / s['makespan']:5.1%}"
                          for k in ("start", "between", "post", "end")))
    if a.json:
        write_json(a.json, {"profile": a.profile, "repeats": a.repeats, "plays": a.plays, "rows": rows},
                   overwrite=a.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
