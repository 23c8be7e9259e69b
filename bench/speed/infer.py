"""`ringsim infer` at 128 GPUs and a million tokens: how long the inference model takes.

Cases (dgx-h100 presets, H100 block model with its default kernel):
- `prefill-405b-tp8-cp16`: Llama 3 405B, 1M tokens prefilled on 16 nodes of 8 (TP 8 x CP 16),
  FP8 linear layers: the paper's setting (docs/inference.md); one call of
  `sim.inference.serve.prefill`, which plays one attention layer under each of the three
  schemes (pass-KV, pass-Q, all-gather) to choose;
- `prefill-8b-tp1-cp128`: Llama 3 8B, 1M tokens on 128 GPUs as one ring of 128 ranks;
- `decode-405b-tp8-cp16`: a decode step at 1M tokens of context on the 128 GPUs;
- `cli-prefill-405b`: the whole `ringsim infer --phase prefill ... --json` process,
  interpreter start and imports included.
Each in-process case is timed cold (the first call in a fresh process) and warm (the best
of `--repeats` more, with the layers already played forgotten, so that each plays them
again). Prints a table and writes JSON.

    .venv/bin/python bench/speed/infer.py [--repeats 3] [--out bench/results/speed/cpu-2core/infer.json] [--force]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
case, repeats = sys.argv[2], int(sys.argv[3])
from sim.inference import serve
from sim.scenario.models import model_preset
from sim.scenario.resolve import hardware_of
hw = hardware_of({"cluster": "dgx-h100"})
if case == "prefill-8b-tp1-cp128":
    s = serve.Serving(model=model_preset("llama3-8b"), hardware=hw, tp=1, cp=128)
else:
    s = serve.Serving(model=model_preset("llama3-405b"), hardware=hw, tp=8, cp=16, dtype="fp8")
if case.startswith("prefill"):
    run = lambda: serve.prefill(s, 0, 1 << 20)
    answer = lambda r: {"prefill_s": r.prefill_s, "chosen_scheme": r.chosen_scheme, "ops": r.trace.meta["ops"]}
else:
    run = lambda: serve.decode(s, [(1 << 20) - 256], 256)
    answer = lambda r: {"tpot_s": r.tpot_s, "kv_cache_gib_per_gpu": r.to_dict()["kv_cache_gib_per_gpu"]}
times = []
for i in range(1 + repeats):
    serve._TRACES.clear()            # play the layers again: time the model, not its memo
    t0 = time.perf_counter()
    r = run()
    times.append(time.perf_counter() - t0)
print(json.dumps({"cold_s": times[0], "warm_s": min(times[1:]) if repeats else None, **answer(r)}))
"""

CASES = ("prefill-405b-tp8-cp16", "prefill-8b-tp1-cp128", "decode-405b-tp8-cp16")
CLI = ["infer", "--phase", "prefill", "--model", "llama3-405b", "--context", "1M", "--tp", "8", "--nodes", "16",
       "--cluster", "dgx-h100", "--dtype", "fp8", "--json"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="warm calls after the cold one (default 3)")
    p.add_argument("--out", default=str(RESULTS / "speed" / cpu_host() / "infer.json"))
    add_force(p)
    a = p.parse_args()
    keep_results("infer", a.out, force=a.force, make_folders=True)
    rows = []
    load = os.getloadavg()[0]
    for case in CASES:
        out = subprocess.run([sys.executable, "-c", CHILD, ROOT, case, str(a.repeats)], check=True,
                             capture_output=True, text=True).stdout
        rows.append({"case": case, **json.loads(out)})
    walls = []
    for _ in range(1 + a.repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sim.cli.main", *CLI], check=True, capture_output=True, cwd=ROOT)
        walls.append(time.perf_counter() - t0)
    rows.append({"case": "cli-prefill-405b", "cold_s": walls[0], "warm_s": min(walls[1:]) if a.repeats else None,
                 "command": "ringsim " + " ".join(CLI)})
    print(f"{'case':<24} {'cold':>8} {'warm':>8}  answer")
    for r in rows:
        warm = "-" if r["warm_s"] is None else f"{r['warm_s']:.3f}"
        answer = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()
                           if k not in ("case", "cold_s", "warm_s", "command"))
        print(f"{r['case']:<24} {r['cold_s']:>8.3f} {warm:>8}  {answer}")
    print(f"load average before: {load:.2f} on {os.cpu_count()} cores")
    save_json(a.out, {"host": cpu_host(), "python": platform.python_version(), "load_average_1min": load,
                      "repeats": a.repeats, "rows": rows}, force=a.force, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
