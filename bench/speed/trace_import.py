"""Trace import's speed and memory: `sim.profiler.reader.read_run` plus the breakdown on each
vendored profiler trace (tests/data/traces/) and on a large synthetic one, in a fresh process
each time so that peak memory is that read's own.

The synthetic trace repeats a real trace's events (hta-nccl-a100 by default) end to end, each
copy shifted by the trace's span and its correlations and External ids renumbered, until the
uncompressed JSON reaches `--large-mb`; it is written to a temporary folder (plain JSON, one
event a line as Kineto writes it) and removed afterwards.

Per trace: the uncompressed size, the seconds of read + breakdown after the imports (median
and range of `--repeats` fresh processes; the imports' own seconds apart), MB/s of
uncompressed JSON, the same per CPU second of the process (the machine is shared: wall-clock
MB/s falls with its load, CPU seconds much less), the peak resident memory above what the
process held once its imports were done (the kernel's high-water mark reset before the read:
/proc/self/clear_refs), and that as a multiple of the uncompressed size. The aim
(docs/traces.md): >= 50 MB/s and under 2x.

    .venv/bin/python bench/speed/trace_import.py [--repeats 3] [--large-mb 300] [--out FILE.json] [--force]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402

TRACES = Path(ROOT) / "tests" / "data" / "traces"

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
import numpy, orjson
from sim.profiler.reader import read_run
from sim.profiler.breakdown import breakdown
imports_s = time.perf_counter() - t0

def status_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024

before = status_mb("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak resident size (VmHWM) restarts from now: the read's own
t0 = time.perf_counter()
c0 = time.process_time()
run = read_run(sys.argv[2:])
rows = breakdown(run)
seconds = time.perf_counter() - t0
cpu = time.process_time() - c0
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "imports_s": imports_s, "import_rss_mb": before,
                  "peak_rss_mb": status_mb("VmHWM"), "events": len(run.events), "ranks": len(run.ranks)}))
"""


def uncompressed_bytes(path: Path) -> int:
    if path.name.endswith(".gz"):
        n = 0
        with gzip.open(path, "rb") as f:
            while chunk := f.read(1 << 24):
                n += len(chunk)
        return n
    return path.stat().st_size


def synthetic(source: Path, target_mb: float, folder: Path) -> Path:
    """A trace of about `target_mb` MB: `source`'s events repeated end to end."""
    import orjson

    doc = orjson.loads(gzip.open(source).read())
    events = doc.pop("traceEvents")
    times = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in events if isinstance(e.get("ts"), (int, float)))
    span = max(times) - start + 1000.0
    lines = [orjson.dumps(e) for e in events]
    per_copy = sum(len(x) + 2 for x in lines)
    copies = max(1, int(target_mb * 1e6 / per_copy))
    head = orjson.dumps(doc)[:-1]  # the header's object, still open
    out = folder / "synthetic.json"
    with open(out, "wb") as f:
        f.write(head + b', "traceEvents": [\n')
        first = True
        for k in range(copies):
            shift = k * span
            renumber = k * 10_000_000
            for e in events:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + shift
                if e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                    e2["id"] += renumber
                args = e2.get("args")
                if isinstance(args, dict) and ("correlation" in args or "External id" in args):
                    args = dict(args)
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int):
                            args[key] += renumber
                    e2["args"] = args
                if isinstance(e2.get("name"), str) and e2["name"].startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(e2['name'][13:]) + 3 * k}"
                f.write((b"" if first else b",\n") + orjson.dumps(e2))
                first = False
        f.write(b"\n]}\n")
    return out


def measure(paths: list[Path], repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", CHILD, ROOT, *map(str, paths)], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"import of {paths[0]} failed: {out.stderr.strip().splitlines()[-1]}")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    mb = sum(uncompressed_bytes(p) for p in paths) / 1e6
    secs = [r["seconds"] for r in runs]
    cpu = [r["cpu_seconds"] for r in runs]
    extra = [r["peak_rss_mb"] - r["import_rss_mb"] for r in runs]
    med = statistics.median(secs)
    return {"uncompressed_mb": mb, "files": len(paths), "events": runs[0]["events"], "ranks": runs[0]["ranks"],
            "seconds_median": med, "seconds_min": min(secs), "seconds_max": max(secs),
            "mb_per_s_median": mb / med, "mb_per_s_min": mb / max(secs), "mb_per_s_max": mb / min(secs),
            "cpu_seconds_median": statistics.median(cpu), "mb_per_cpu_s_median": mb / statistics.median(cpu),
            "imports_s_median": statistics.median(r["imports_s"] for r in runs),
            "peak_extra_mb_median": statistics.median(extra), "peak_extra_mb_max": max(extra),
            "peak_over_size": statistics.median(extra) / mb, "import_rss_mb": runs[0]["import_rss_mb"],
            "repeats": repeats}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--large-mb", type=float, default=300.0, help="size of the synthetic trace (0: none)")
    p.add_argument("--large-from", default="hta-nccl-a100.rank0-of-2.json.gz")
    p.add_argument("--out", default=str(RESULTS / "speed" / cpu_host() / "trace-import.json"))
    add_force(p)
    a = p.parse_args()
    keep_results("trace_import", a.out, force=a.force, make_folders=True)
    sets = {
        "megatron-tp8-a100 (8 ranks)": sorted(TRACES.glob("megatron-tp8-a100.rank*.json.gz")),
        "megatron-tp8-a100 rank 0": [TRACES / "megatron-tp8-a100.rank0.json.gz"],
        "hta-nccl-a100": [TRACES / "hta-nccl-a100.rank0-of-2.json.gz"],
        "tracelens-qwen0.5b-h100": [TRACES / "tracelens-qwen0.5b-h100.json.gz"],
        "tracelens-capture-mi300x": [TRACES / "tracelens-capture-mi300x.json.gz"],
    }
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        if a.large_mb > 0:
            t0 = time.perf_counter()
            big = synthetic(TRACES / a.large_from, a.large_mb, Path(tmp))
            print(f"synthetic trace: {big.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.0f} s",
                  flush=True)
            sets[f"synthetic {a.large_from.split('.')[0]} x N"] = [big]
        for name, paths in sets.items():
            rows[name] = measure(paths, a.repeats)
            r = rows[name]
            print(f"{name:34s} {r['uncompressed_mb']:8.1f} MB  {r['seconds_median']:7.2f} s "
                  f"({r['seconds_min']:.2f}-{r['seconds_max']:.2f})  {r['mb_per_s_median']:6.1f} MB/s  "
                  f"({r['mb_per_cpu_s_median']:.1f} MB per CPU s)  "
                  f"peak +{r['peak_extra_mb_median']:.0f} MB = {r['peak_over_size']:.2f} x size", flush=True)
    load = os.getloadavg()
    result = {"machine": cpu_host(), "python": platform.python_version(), "load_avg_1_5_15": load,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "traces": rows}
    save_json(a.out, result, force=a.force, indent=2)
    print(f"load average {load[0]:.1f}; wrote {a.out}")


if __name__ == "__main__":
    main()
