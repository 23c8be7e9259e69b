"""Profiler traces of CPU rings, a profile fitted to each, and the run replayed on it.

For each implementation (the project's ring, torch `context_parallel` with the "alltoall"
and the "allgather" rotation) and sequence length, 2 gloo ranks, causal, zigzag (torch's
head-tail balancing), 8 heads x 64, fp32: record the run under torch.profiler (hw.profiled)
several times, and for each recording find its ring (sim.profiler.ring), fit a profile to
it and replay its configuration (sim.calibration.from_profiler): the simulated attention
phase against the measured one (the slowest rank's, median and range over the recording's
iterations), and against the median rank's phase (a rank that waited on no slower one).
Then the what-if the profile is for: the profile fitted at one length predicts the
recording of the same implementation at the other lengths (held out), recorded right
after it (recording i of every case runs before recording i + 1 of any).

    .venv/bin/python bench/calibration/kineto_replay.py                     # record and replay
    .venv/bin/python bench/calibration/kineto_replay.py --seqs 2048 --recordings 2
    .venv/bin/python bench/calibration/kineto_replay.py --from DIR           # traces recorded before
    .venv/bin/python bench/calibration/kineto_replay.py -o FILE.json --force  # replace a results file

Recordings go to --keep DIR (default: a temporary folder), one folder per implementation,
length and recording. Prints a table and writes JSON (default
bench/results/calibration/cpu-<cores>core/kineto-replay.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from bench.common import RESULTS, add_force, cpu_host, ints, keep_results, save_json  # noqa: E402

IMPLS = ("ring", "cp-alltoall", "cp-allgather")


def record(impl: str, seq: int, iterations: int, folder: str) -> None:
    from hw.config import RunConfig
    from hw.profiled import TorchCP, record_ring, record_torch_cp
    from sim.scenario.config import Workload

    if impl == "ring":
        cfg = RunConfig(workload=Workload(seq=seq, heads=8, kv_heads=8, head_dim=64, dtype="fp32", causal=True),
                        n_gpus=2, layout="zigzag", warmup=1, repeats=iterations)
        record_ring(cfg, folder, overwrite=True)
    else:
        record_torch_cp(TorchCP(n_gpus=2, seq=seq, rotation=impl[3:], iterations=iterations), folder, overwrite=True)


def stats(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    p.add_argument("--seqs", type=ints, default=[2048, 4096], help="comma-separated lengths (default 2048,4096)")
    p.add_argument("--recordings", type=int, default=3, help="recordings per case (default 3)")
    p.add_argument("--iterations", type=int, default=5, help="profiled iterations per recording (default 5)")
    p.add_argument("--from", dest="from_dir", default=None, help="take the recordings in DIR instead of recording")
    p.add_argument("--keep", default=None, help="where recordings go (default: a temporary folder)")
    p.add_argument("-o", "--output", default=str(RESULTS / "calibration" / cpu_host() / "kineto-replay.json"))
    add_force(p)
    a = p.parse_args()
    keep_results("kineto_replay", a.output, force=a.force, make_folders=True)

    from sim.calibration.from_profiler import calibrate_from_ring, replay
    from sim.profiler.reader import read_run
    from sim.profiler.ring import find_ring
    from sim.units import table

    base = a.from_dir or a.keep or tempfile.mkdtemp(prefix="kineto-replay-")
    load0 = os.getloadavg()
    started = time.time()
    rows, cases = [], []
    fitted: dict[tuple[str, int, int], tuple] = {}
    by_case: dict[tuple[str, int], list[dict]] = {}
    # recording i of every case, then recording i + 1: a case's lengths are recorded back to back,
    # so that a profile fitted at one length predicts the other as the host ran then
    for i in range(a.recordings):
        for impl in a.impls:
            for seq in a.seqs:
                folder = os.path.join(base, f"{impl}-s{seq}-r{i}")
                if not a.from_dir:
                    record(impl, seq, a.iterations, folder)
                ring = find_ring(read_run([folder]))
                profile = calibrate_from_ring(ring, folder)
                r = replay(ring, profile)
                fitted[(impl, seq, i)] = (ring, profile)
                by_case.setdefault((impl, seq), []).append(
                    {"folder": folder, "measured": r["measured"], "simulated_s": r["simulated_s"],
                     "error": r["error"], "error_vs_rank_median": r["error_vs_rank_median"],
                     "within_range": r["within_range"], "config": r["config"], "unmatched": ring.unmatched})
                print(f"{impl} {seq} #{i}: measured {r['measured']['median_s'] * 1e3:.1f} ms "
                      f"({r['measured']['min_s'] * 1e3:.1f}-{r['measured']['max_s'] * 1e3:.1f}), simulated "
                      f"{r['simulated_s'] * 1e3:.1f} ms ({r['error']:+.1%})", file=sys.stderr, flush=True)
    for (impl, seq), runs in by_case.items():
        cases.append({"impl": impl, "seq": seq, "runs": runs,
                      "measured_median_s": stats([x["measured"]["median_s"] for x in runs]),
                      "simulated_s": stats([x["simulated_s"] for x in runs]),
                      "error": stats([x["error"] for x in runs]),
                      "error_vs_rank_median": stats([x["error_vs_rank_median"] for x in runs]),
                      "abs_error_median": statistics.median(abs(x["error"]) for x in runs),
                      "within_10pct": sum(abs(x["error"]) <= 0.10 for x in runs)})
    # what-ifs held out: a profile fitted at one length predicts the other lengths' recordings
    held = []
    for impl in a.impls:
        for s_fit in a.seqs:
            for s_run in a.seqs:
                if s_fit == s_run:
                    continue
                errs = []
                for i in range(a.recordings):
                    ring_run = fitted[(impl, s_run, i)][0]
                    errs.append(replay(ring_run, fitted[(impl, s_fit, i)][1])["error"])
                held.append({"impl": impl, "fitted_at": s_fit, "predicts": s_run, "error": stats(errs),
                             "errors": errs})
    load1 = os.getloadavg()
    for c in cases:
        m, s, e = c["measured_median_s"], c["simulated_s"], c["error"]
        rows.append([c["impl"], c["seq"], len(c["runs"]),
                     f"{m['median'] * 1e3:.1f} ({m['min'] * 1e3:.1f}-{m['max'] * 1e3:.1f})",
                     f"{s['median'] * 1e3:.1f} ({s['min'] * 1e3:.1f}-{s['max'] * 1e3:.1f})",
                     f"{e['median']:+.1%} ({e['min']:+.1%}..{e['max']:+.1%})", f"{c['within_10pct']}/{len(c['runs'])}",
                     f"{c['error_vs_rank_median']['median']:+.1%}"])
    print(table(["impl", "seq", "recordings", "slowest rank ms (range)", "replayed ms (range)", "error (range)",
                 "within 10%", "vs median rank"], rows))
    if held:
        print()
        print(table(["impl", "fitted at", "predicts", "error median (range)"],
                    [[h["impl"], h["fitted_at"], h["predicts"],
                      f"{h['error']['median']:+.1%} ({h['error']['min']:+.1%}..{h['error']['max']:+.1%})"]
                     for h in held]))
    print(f"load average (1 min) {load0[0]:.2f} before, {load1[0]:.2f} after; {os.cpu_count()} cores; "
          f"{time.time() - started:.0f} s")
    import torch

    doc = {"bench": "kineto_replay", "torch": torch.__version__, "cpu_count": os.cpu_count(), "n_gpus": 2,
           "heads": 8, "head_dim": 64, "dtype": "fp32", "causal": True, "iterations": a.iterations,
           "recordings": a.recordings, "recorded_in_this_run": not a.from_dir,
           "load_average_before": load0, "load_average_after": load1,
           "measured": "the slowest rank's attention phase of each profiled iteration (sim.profiler.ring)",
           "cases": cases, "held_out": held}
    save_json(a.output, doc, force=a.force, indent=1)
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
