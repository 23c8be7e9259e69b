"""The host's launch costs in every vendored profiler trace (sim.profiler.launch), set beside
the host-floor constants sim.hardware.presets assumes (docs/calibration.md, "Launch costs
from profiler traces").

The traces (tests/data/traces/README.md gives each source and licence): Megatron-LM TP 8 on
8 x A100 (all ranks pooled), a 2-rank NCCL job on A100 (rank 0), Qwen1.5-0.5B on one H100,
FLUX.1 inference on one MI300X. Per trace: median, 10th and 90th percentiles in µs.

    .venv/bin/python bench/calibration/launch_costs.py   # prints the tables, writes
                                                         # bench/results/calibration/launch-costs-vendored-traces.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import RESULTS, add_force, keep_results, save_json  # noqa: E402
from sim.hardware.presets import CALL_HOST_US, KERNEL_GAP_US, OP_HOST_US  # noqa: E402
from sim.profiler.launch import host_floor_s, launch_costs  # noqa: E402
from sim.profiler.reader import read_run  # noqa: E402
from sim.units import table  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "traces"
TRACES = {"megatron-tp8-a100": [DATA / f"megatron-tp8-a100.rank{r}.json.gz" for r in range(8)],
          "hta-nccl-a100": [DATA / "hta-nccl-a100.rank0-of-2.json.gz"],
          "tracelens-qwen0.5b-h100": [DATA / "tracelens-qwen0.5b-h100.json.gz"],
          "tracelens-capture-mi300x": [DATA / "tracelens-capture-mi300x.json.gz"]}
MEASURES = (("launch_to_start", "launch -> kernel start, all"),
            ("launch_to_start_idle", "launch -> kernel start, idle stream"),
            ("launch_call", "launch call's duration"),
            ("op_to_start_idle", "CPU op -> its first kernel, idle stream"),
            ("attention_op_to_start_idle", "attention op -> its kernel, idle stream"),
            ("gap_queued", "kernel-to-kernel gap, queued"),
            ("gap_idle", "kernel-to-kernel gap, launched late"),
            ("issue_interval", "between launches on one CPU thread"))
PRESETS = {"op_to_start_idle": ("OP_HOST_US", OP_HOST_US), "attention_op_to_start_idle":
           ("CALL_HOST_US['fwd']", CALL_HOST_US["fwd"]), "gap_queued": ("KERNEL_GAP_US", KERNEL_GAP_US)}


def _cell(s) -> str:
    return "-" if s.median_us is None else f"{s.median_us:.1f} ({s.p10_us:.1f}-{s.p90_us:.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS / "calibration" / "launch-costs-vendored-traces.json"))
    add_force(ap)
    a = ap.parse_args()
    keep_results("launch_costs", a.out, force=a.force, make_folders=True)
    costs = {name: launch_costs(read_run([str(p) for p in paths], partial=True), name)
             for name, paths in TRACES.items()}
    print("median (p10-p90), µs")
    rows = [[what] + [_cell(getattr(c, key)) for c in costs.values()]
            + [f"{PRESETS[key][0]} = {PRESETS[key][1]:g}" if key in PRESETS else ""] for key, what in MEASURES]
    rows.append(["kernels tied to a launch"] + [f"{c.kernels:,}" for c in costs.values()] + [""])
    print(table(["", *costs, "sim.hardware.presets"], rows))
    print("\nthe host floor of 1,000 eager launches (host_floor_s: 1,000 median issue intervals and one launch's "
          "latency), against 1,000 x OP_HOST_US = " + f"{1000 * OP_HOST_US / 1e3:g} ms:")
    for name, c in costs.items():
        print(f"  {name}: {host_floor_s(c, 1000) * 1e3:.1f} ms ({c.device})")
    out = {"what": "host launch costs per vendored trace (sim.profiler.launch), µs",
           "presets": {"OP_HOST_US": OP_HOST_US, "CALL_HOST_US": CALL_HOST_US, "KERNEL_GAP_US": KERNEL_GAP_US},
           "traces": {name: {"files": [str(p.relative_to(ROOT)) for p in TRACES[name]], **c.to_dict(),
                             "host_floor_1000_launches_s": host_floor_s(c, 1000)} for name, c in costs.items()}}
    save_json(a.out, out, force=a.force, indent=2)
    print(f"wrote {Path(a.out).relative_to(ROOT) if Path(a.out).is_relative_to(ROOT) else a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
