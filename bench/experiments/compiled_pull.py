"""Would compiled code make NCCL's pull on the computes (sim.engine.pull) cheap enough for
the dashboard's comparisons at 1,024 GPUs?

The pull is the largest stage of a large run (its plays of the wave player and, per play,
each compute's stretch: sim.engine.pull._extra_s, whole-array NumPy). Here the per-play
stretch is also written as one compiled loop per GPU (numba): the GPU's transfer starts
and ends in time order (the last play's order, re-sorted where a breakpoint moved past
another), the shares in flight summed as it goes, each compute's integral read off by a
walk from the last one found, with no temporary of a whole column. For the runs of the
dashboard's Compare schemes with the most pull, this times the whole simulation, the pull
(`times_pulled`) and its stretches alone, with NumPy's stretch and with the compiled
one, one core, and how far the compiled one's times are from NumPy's (as a share of the
run's makespan). The compiled loop's first call (its compilation) is not timed.

    pip install numba       (an experiment's need: not one of ringsim's dependencies)
    .venv/bin/python bench/experiments/compiled_pull.py [--gpus 1024] [--repeats 3]
        [--runs "ring (zigzag)" ...] [--json out.json [--force]]

Prints a table (median of --repeats timed calls after one untimed, and their range).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import add_force, keep_results, timed  # noqa: E402
from sim.files import write_json  # noqa: E402

RUNS = ("ring (zigzag)", "allgather (8 head groups)", "hybrid (2 x 512 ring-inner)")
"""Compare schemes' runs with the most pull at 1,024 GPUs (bench/speed/comparison_runs.py)."""


def compiled_sweep():
    """The per-play stretch as one compiled loop per GPU (module docstring)."""
    import numba
    import numpy as np

    @numba.njit(nogil=True, cache=False)
    def sweep(op, is_end, d_ctas, d_bps, first, comp, comp_first, m, start, end, sms, hbm_scale,
              max_share, out):
        n_gpus = len(first) - 1
        most = 1
        for g in range(n_gpus):
            most = max(most, first[g + 1] - first[g])
        u, sm, hb = np.empty(most), np.empty(most), np.empty(most)
        ssm, shb, times = np.empty(most), np.empty(most), np.empty(most)
        resorted = 0
        for g in range(n_gpus):
            a, b = first[g], first[g + 1]
            c0, c1 = comp_first[g], comp_first[g + 1]
            if a == b:
                for i in range(c0, c1):
                    out[i] = 0.0
                continue
            ordered = True
            for k in range(a, b):
                times[k - a] = end[op[k]] if is_end[k] else start[op[k]]
                if k > a and times[k - a] < times[k - a - 1]:
                    ordered = False
            if not ordered:                       # a breakpoint moved past another: sort this GPU's again
                resorted += 1
                p = np.argsort(times[:b - a], kind="mergesort")
                op[a:b] = op[a:b][p]
                is_end[a:b] = is_end[a:b][p]
                d_ctas[a:b] = d_ctas[a:b][p]
                d_bps[a:b] = d_bps[a:b][p]
                times[:b - a] = times[:b - a][p]
            # of breakpoints at one time the last holds what is in flight from then on
            nu, lc, lb = 0, 0.0, 0.0
            for k in range(a, b):
                lc += d_ctas[k]
                lb += d_bps[k]
                t = times[k - a]
                if k + 1 < b and times[k + 1 - a] == t:
                    continue
                u[nu] = t
                sm[nu] = min((0.0 if abs(lc) < 1e-9 else lc) / sms, max_share)
                hb[nu] = min((0.0 if abs(lb) < 1e-3 else lb) * hbm_scale, max_share)
                nu += 1
            ssm[0], shb[0] = 0.0, 0.0
            for j in range(1, nu):
                step = u[j] - u[j - 1]
                ssm[j] = ssm[j - 1] + sm[j - 1] * step
                shb[j] = shb[j - 1] + hb[j - 1] * step
            k = -1
            for i in range(c0, c1):
                o = comp[i]
                f_sm, f_hb = np.zeros(2), np.zeros(2)
                for side in range(2):
                    t = start[o] if side == 0 else end[o]
                    if k >= 0 and u[k] > t:       # back: a binary search below the last one found
                        lo, hi = 0, k
                        while lo < hi:
                            mid = (lo + hi) // 2
                            if u[mid] <= t:
                                lo = mid + 1
                            else:
                                hi = mid
                        k = lo - 1
                    while k + 1 < nu and u[k + 1] <= t:
                        k += 1
                    if k >= 0:
                        f_sm[side] = ssm[k] + sm[k] * (t - u[k])
                        f_hb[side] = shb[k] + hb[k] * (t - u[k])
                out[i] = (1.0 - m[i]) * (f_sm[1] - f_sm[0]) + m[i] * (f_hb[1] - f_hb[0])
        return resorted

    return sweep


def install_compiled(pull, sweep):
    """sim.engine.pull with the compiled stretch in place of NumPy's; returns what to restore."""
    import numpy as np

    from sim.hardware.contention import HBM_PASSES, MAX_SHARE

    saved = (pull._ByGpu.__init__, pull._extra_s)
    numpy_init = saved[0]

    def init(self, schedule, by_gpu, ctas, copy_bps, lo, hi):
        numpy_init(self, schedule, by_gpu, ctas, copy_bps, lo, hi)
        ns, nr = len(self.sent), len(self.received)
        op = np.concatenate([self.sent, self.received, self.sent, self.received])
        is_end = np.concatenate([np.zeros(ns + nr, bool), np.ones(ns + nr, bool)])
        g = np.concatenate([self.sender, self.receiver, self.sender, self.receiver]).astype(np.int64) - lo
        order = np.argsort(g, kind="stable")
        self.k_op, self.k_end, self.k_c, self.k_b = op[order], is_end[order], self.ctas[order], self.bps[order]
        self.k_first = np.searchsorted(g[order], np.arange(hi - lo + 1))
        self.k_comp_first = np.searchsorted(self.computer.astype(np.int64) - lo, np.arange(hi - lo + 1))

    def extra(gpus, start, end, m, gpu):
        out = np.zeros(gpus.comp.size)
        if gpus.comp.size and gpus.ctas.size:
            sweep(gpus.k_op, gpus.k_end, gpus.k_c, gpus.k_b, gpus.k_first, gpus.comp, gpus.k_comp_first,
                  np.ascontiguousarray(m, dtype=float), start, end, float(gpu.sms),
                  HBM_PASSES / (gpu.hbm_gbps * 1e9), MAX_SHARE, out)
        return out

    pull._ByGpu.__init__, pull._extra_s = init, extra
    return saved


def scenarios(gpus: int, names) -> dict:
    from dashboard import compute
    from dashboard.state import defaults, scenario_from_values
    from sim.errors import RingsimError
    from sim.planning.compare import scheme_variants, vary

    base = compute.scheme_base(scenario_from_values(defaults() | {"gpus": gpus}))
    out = {}
    for scheme, variant in scheme_variants(base):
        name = f"{scheme} ({variant.name})"
        if name in names:
            try:
                out[name] = vary(base, scheme, variant.values)
            except RingsimError:
                pass
    return out


def pull_inputs(scenario):
    """The arguments `simulate` passes to times_pulled for `scenario` (the schedule kept whole)."""
    import sim.engine.play as play
    from sim.engine.schedule import Schedule

    got = {}
    times_pulled, release = play.times_pulled, Schedule.release

    def grab(*args):
        got["args"] = args
        return times_pulled(*args)

    play.times_pulled, Schedule.release = grab, lambda self, *names: None
    try:
        play.simulate(scenario, None, player="recurrence")
    finally:
        play.times_pulled, Schedule.release = times_pulled, release
    return got["args"]


def measure(name: str, scenario, repeats: int, sweep) -> dict:
    import numpy as np

    import sim.engine.pull as pull
    from sim.engine.play import simulate

    args = pull_inputs(scenario)
    schedule = args[0]
    spent: list[float] = []

    def counted(extra_s):
        def call(*a):
            t = time.perf_counter()
            out = extra_s(*a)
            spent.append(time.perf_counter() - t)
            return out
        return call

    row = {"run": name, "ops": len(schedule)}
    row["simulate_s"] = timed(lambda: simulate(scenario, None, player="recurrence"), repeats)
    results = {}
    for way in ("numpy", "compiled"):
        saved = install_compiled(pull, sweep) if way == "compiled" else (pull._ByGpu.__init__, pull._extra_s)
        pull._extra_s = counted(pull._extra_s)
        try:
            per_call: list[float] = []

            def once():
                spent.clear()
                results[way] = pull.times_pulled(*args)
                per_call.append(sum(spent))

            row[f"pull_{way}_s"] = timed(once, repeats)
            row[f"stretch_{way}_s"] = per_call[1:]
        finally:
            pull._ByGpu.__init__, pull._extra_s = saved
    span = float(results["numpy"][1].max())
    row["max_move_share"] = max(float(np.abs(a - b).max()) for a, b in zip(results["numpy"], results["compiled"])) / span
    return row


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3, help="timed calls of each, after one untimed (default 3)")
    ap.add_argument("--runs", nargs="+", default=list(RUNS), help="Compare schemes' runs by name")
    ap.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    add_force(ap)
    a = ap.parse_args(argv)
    if a.gpus < 2 or a.repeats < 1:
        print("compiled_pull: --gpus must be at least 2 and --repeats at least 1", file=sys.stderr)
        return 2
    keep_results("compiled_pull", a.json, force=a.force)
    try:
        import numba
    except ModuleNotFoundError:
        print("compiled_pull: needs numba (pip install numba), which ringsim itself does not use", file=sys.stderr)
        return 2
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})   # one core: the threads hide nothing
    found = scenarios(a.gpus, set(a.runs))
    missing = [r for r in a.runs if r not in found]
    if missing:
        print(f"compiled_pull: no run {', '.join(map(repr, missing))} at {a.gpus} GPUs", file=sys.stderr)
        return 2
    sweep = compiled_sweep()
    rows = []
    print(f"{'run':30} {'ops':>10}  {'simulate s':>20}  {'pull: numpy s':>20}  {'pull: compiled s':>20}  "
          f"{'stretches: numpy s':>20}  {'stretches: compiled s':>21}  max move")
    for name in a.runs:
        r = measure(name, found[name], a.repeats, sweep)
        rows.append(r)
        print(f"{name:30} {r['ops']:>10,}  {spread(r['simulate_s']):>20}  {spread(r['pull_numpy_s']):>20}  "
              f"{spread(r['pull_compiled_s']):>20}  {spread(r['stretch_numpy_s']):>20}  "
              f"{spread(r['stretch_compiled_s']):>21}  {r['max_move_share']:.1e}", flush=True)
    if a.json:
        write_json(a.json, {"gpus": a.gpus, "repeats": a.repeats, "numba": numba.__version__,
                            "cpu": platform.processor() or platform.machine(), "rows": rows}, overwrite=a.force)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
