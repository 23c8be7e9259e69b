"""Measured GPU blocks against the simulator's GPU preset, which measured nothing.

A preset times a block from the throughput FlashAttention's authors published for their
kernel (sim.presets, sim.kernel_model): the rate of its pass, mask and inner-loop length,
after a launch overhead. This sets each block of a GPU microbenchmark (`ringsim hw bench
--device cuda --parts compute`, e.g. bench/gpu_block_grid.sh) against that time (the
merge left out: the bench times the block alone), and a measured run of the kernel
(`ringsim hw run --json`) against the preset's simulation of the same run. Each row also
gives the block's query tiles (batch x heads x query tokens / 128): the published
benchmark kept them at 16k tokens x 16 heads / 128 = 2,048 at every length, so a block
with far fewer tiles than the GPU has multiprocessors x 2 runs below the table's rate.

    .venv/bin/python bench/gpu_vs_preset.py BENCH.json [BENCH.json ...] [--gpu H200] [--kernel fa2]
        [--run RUN.json] [--json out.json [--force]]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.errors import RingsimError  # noqa: E402
from sim.trace import kept_file, write_json  # noqa: E402

TILE = 128
"""Query rows of one FlashAttention-2 thread block (head dim 128)."""
TILE_GROUPS = ((1, 256), (257, 1024), (1025, 10**9))
"""The summary's groups of blocks by query tiles (an H100/H200 has 132 multiprocessors)."""


def preset_gpu(name: str, kernel: str):
    from sim.config import Gpu

    return Gpu.preset(name, kernel=kernel)


def block_rows(bench: dict, gpu) -> list[dict]:
    """Every compute entry: measured median, the preset's time (no merge), their ratio."""
    import numpy as np

    from sim.kernel_model import kernel_table, loop_tokens, rate_tflops

    table = kernel_table(gpu.kernel)
    rows = []
    for e in bench.get("compute", []):
        q, kv = e["q_tokens"], e["kv_tokens"]
        rate = float(rate_tflops(table, e["kind"], e["mask"], e["head_dim"],
                                 np.array([loop_tokens(e["kind"], e["mask"], q, kv)]))[0]) * 1e12
        preset_s = gpu.launch_overhead_us * 1e-6 + e["flops"] / rate
        measured = e["median_s"]
        rows.append({"kind": e["kind"], "mask": e["mask"], "batch": e["batch"], "heads": e["heads"],
                     "head_dim": e["head_dim"], "tokens": q, "tiles": e["batch"] * e["heads"] * -(-q // TILE),
                     "measured_s": measured, "measured_tflops": e["flops"] / measured / 1e12,
                     "preset_s": preset_s, "preset_tflops": rate / 1e12, "error": preset_s / measured - 1.0})
    return rows


def run_row(run: dict, gpu) -> dict:
    """The measured run's median makespan against the preset's simulation of its config."""
    from sim.config import Hardware, Link, Scenario, Workload
    from sim.engine import simulate
    from sim.metrics import compute_metrics

    cfg = run["config"]
    w = cfg["workload"]
    workload = Workload(batch=w["batch"], seq=w["seq"], heads=w["heads"], kv_heads=w["kv_heads"],
                        head_dim=w["head_dim"], dtype=w["dtype"], causal=w["causal"], pass_=w["pass"])
    hw = Hardware(gpu=gpu, link=Link.preset("nvlink4"))
    sc = Scenario(workload=workload, hardware=hw, n_gpus=cfg["n_gpus"], layout=cfg["layout"], overlap=True,
                  sync=cfg.get("sync", "step"))
    simulated = compute_metrics(simulate(sc)).makespan_s
    measured = run["makespan_s"]["median"]
    return {"workload": w, "n_gpus": cfg["n_gpus"], "layout": cfg["layout"], "device": run["hardware"]["device"],
            "measured_s": measured, "simulated_s": simulated, "error": simulated / measured - 1.0}


def _read(path: str):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise RingsimError(f"cannot read {path}: {e}") from e


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench", nargs="+", help="GPU bench files (ringsim hw bench --device cuda)")
    ap.add_argument("--gpu", default="H200", help="GPU preset (default H200)")
    ap.add_argument("--kernel", default="fa2", help="its kernel table (default fa2: what torch's flash path runs)")
    ap.add_argument("--run", help="a measured run (ringsim hw run --json) to set against the preset's simulation")
    ap.add_argument("--json", metavar="OUT", help="also write the rows to OUT")
    ap.add_argument("--force", action="store_true", help="overwrite OUT")
    a = ap.parse_args(argv)
    try:
        why = kept_file(a.json, a.force)
        if why:
            raise RingsimError(why)
        benches = [_read(path) for path in a.bench]
        run = _read(a.run) if a.run else None
        for path, bench in zip(a.bench, benches):
            if not isinstance(bench, dict) or not isinstance(bench.get("device"), dict) \
                    or bench["device"].get("kind") != "cuda" or not bench.get("compute"):
                raise RingsimError(f"{path}: no GPU compute entries (a bench of ringsim hw bench --device cuda)")
        gpu = preset_gpu(a.gpu, a.kernel)
        try:
            rows = [r for bench in benches for r in block_rows(bench, gpu)]
            rr = run_row(run, gpu) if run is not None else None
        except (KeyError, TypeError, ValueError) as e:
            raise RingsimError(f"a bench or run file lacks a field this needs ({e!r})") from e
        device = benches[0]["device"]
        print(f"{device.get('name')} (torch {device.get('torch')}) against the {a.gpu} preset's "
              f"{a.kernel} table, launch {gpu.launch_overhead_us:g} us; error = preset / measured - 1")
        print(f"{'kind':<4} {'mask':<8} {'batch':>5} {'heads':>5} {'tokens':>6} {'tiles':>5}  {'measured':>10} {'TFLOP/s':>7}  "
              f"{'preset':>10} {'TFLOP/s':>7}  {'error':>7}")
        for r in rows:
            print(f"{r['kind']:<4} {r['mask']:<8} {r['batch']:>5} {r['heads']:>5} {r['tokens']:>6} {r['tiles']:>5}  "
                  f"{r['measured_s'] * 1e3:>7.3f} ms {r['measured_tflops']:>7.1f}  {r['preset_s'] * 1e3:>7.3f} ms "
                  f"{r['preset_tflops']:>7.1f}  {r['error']:>+7.1%}")
        parts = []
        for lo, hi in TILE_GROUPS:
            group = [abs(r["error"]) for r in rows if lo <= r["tiles"] <= hi]
            if group:
                label = f"{lo}-{hi}" if hi < 10**9 else f"over {lo - 1}"
                parts.append(f"{label} tiles {statistics.median(group):.1%} ({len(group)})")
        print(f"median |error| {statistics.median(abs(r['error']) for r in rows):.1%} over {len(rows)} blocks; "
              f"by query tiles: {', '.join(parts)}")
        out = {"bench": a.bench, "gpu": a.gpu, "kernel": a.kernel, "device": device, "blocks": rows}
        if rr is not None:
            w = rr["workload"]
            print(f"\nmeasured run: {rr['n_gpus']} x {rr['device']}, {w['seq']} tokens, {w['heads']}/{w['kv_heads']} "
                  f"heads x {w['head_dim']}, {w['dtype']}, {'causal' if w['causal'] else 'full'}, {w['pass']}: "
                  f"measured {rr['measured_s'] * 1e3:.3f} ms, the preset simulates {rr['simulated_s'] * 1e3:.3f} ms "
                  f"({rr['error']:+.1%})")
            out["run"] = rr
        if a.json:
            write_json(a.json, out, overwrite=a.force)
    except RingsimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
