"""Measured GPU blocks against the simulator's block model (sim.hardware.kernel_model): a preset,
or a GPU profile fitted by `ringsim calibrate`.

The model times an isolated call of each block of a GPU microbenchmark (`ringsim hw bench
--device cuda --parts compute`, e.g. bench/gpu/block_grid.sh) as the bench calls it: its
host-side floor, then its kernels (the main kernel's CTAs in waves on the SMs at the step
time the published table gives, the other kernels memory-bound); no merge, since the
bench times the block alone. A measured run of the kernel (`ringsim hw run --json`) is
set against the simulation of the same run. The summary groups blocks by tokens (the
accuracy goals: every block of >= 2k tokens within 10%, >= 1k within 20%) and by query
tiles (batch x heads x query tokens / 128).

    .venv/bin/python bench/gpu/vs_preset.py BENCH.json [BENCH.json ...] [--gpu H200] [--kernel fa2]
        [--profile P.json] [--run RUN.json] [--json out.json [--force]]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.errors import RingsimError  # noqa: E402
from sim.files import kept_file, write_json

TILE = 128
"""Query rows of one FlashAttention-2 thread block (head dim 128)."""
TILE_GROUPS = ((1, 256), (257, 1024), (1025, 10**9))
"""The summary's groups of blocks by query tiles (an H100/H200 has 132 multiprocessors)."""


def preset_gpu(name: str, kernel: str):
    from sim.hardware.cluster import Gpu

    return Gpu.preset(name, kernel=kernel)


def block_rows(bench: dict, gpu) -> list[dict]:
    """Every compute entry: measured median, the model's isolated call, their ratio."""
    from sim.calibration.gpu_profile import predict_isolated_s

    rows = []
    for e in bench.get("compute", []):
        q = e["q_tokens"]
        model_s = predict_isolated_s(gpu, e)
        measured = e["median_s"]
        rows.append({"kind": e["kind"], "mask": e["mask"], "batch": e["batch"], "heads": e["heads"],
                     "kv_heads": e["kv_heads"], "head_dim": e["head_dim"], "tokens": q,
                     "tiles": e["batch"] * e["heads"] * -(-q // TILE), "impl": e.get("impl"),
                     "measured_s": measured, "measured_tflops": e["flops"] / measured / 1e12,
                     "preset_s": model_s, "preset_tflops": e["flops"] / model_s / 1e12,
                     "error": model_s / measured - 1.0})
    return rows


def summary(rows: list[dict]) -> dict:
    """Median |error| and the goals' counts: over all, >= 2k tokens (within 10%), >= 1k (within 20%)."""
    def part(sel, within):
        errs = [abs(r["error"]) for r in sel]
        return {"n": len(errs), "median_abs": statistics.median(errs) if errs else None,
                "worst_abs": max(errs) if errs else None, "within": sum(e <= within for e in errs)}
    return {"all": part(rows, 0.05), "from_2k": part([r for r in rows if r["tokens"] >= 2048], 0.10),
            "from_1k": part([r for r in rows if r["tokens"] >= 1024], 0.20)}


def run_row(run: dict, gpu) -> dict:
    """The measured run's median makespan against the preset's simulation of its config."""
    from sim.engine.play import simulate
    from sim.hardware.cluster import Hardware, Link
    from sim.scenario.config import Scenario, Workload
    from sim.trace.metrics import compute_metrics

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
    ap.add_argument("--profile", help="a GPU profile (ringsim calibrate of a GPU's grid) in place of the preset")
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
        if a.profile:
            from sim.calibration.gpu_profile import load_gpu_profile

            profile = load_gpu_profile(a.profile)
            gpu, a.gpu = profile.gpu_for(a.kernel), f"{a.profile} ({profile.gpu})"
        else:
            gpu = preset_gpu(a.gpu, a.kernel)
        try:
            rows = [r for bench in benches for r in block_rows(bench, gpu)]
            rr = run_row(run, gpu) if run is not None else None
        except (KeyError, TypeError, ZeroDivisionError) as e:
            raise RingsimError(f"a bench or run file lacks a field this needs ({e!r})") from e
        device = benches[0]["device"]
        f = gpu.floors
        print(f"{device.get('name')} (torch {device.get('torch')}) against the block model of {a.gpu}, {a.kernel}: "
              f"floors {f.fwd_host_us:g} / {f.bwd_host_us:g} us (forward / backward call), isolated calls; "
              "error = model / measured - 1")
        print(f"{'kind':<4} {'mask':<8} {'batch':>5} {'heads':>5} {'tokens':>6} {'tiles':>5}  "
              f"{'measured':>10} {'TFLOP/s':>7}  {'preset':>10} {'TFLOP/s':>7}  {'error':>7}")
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
        s = summary(rows)
        for key, label, within in (("from_2k", ">= 2k tokens", "10%"), ("from_1k", ">= 1k tokens", "20%")):
            if s[key]["n"]:
                print(f"{label}: median |error| {s[key]['median_abs']:.1%}, worst {s[key]['worst_abs']:.1%}, "
                      f"{s[key]['within']} of {s[key]['n']} within {within}")
        out = {"bench": a.bench, "gpu": a.gpu, "kernel": a.kernel, "device": device, "floors": vars(gpu.floors),
               "rate_scale": gpu.rate_scale, "blocks": rows, "summary": s}
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
