"""A ring's steps on one GPU against the block model: `hw.inprocess` plays the ring's
ranks as threads of one process, each rank's compute of each step alone on the device
(its blocks, and the forward's merges: `play_ring(timed=True)`), and every step's time is
set against the simulator's time for the same block on the same GPU's model (a preset,
or a GPU profile from `ringsim calibrate`), with a fused and with an unfused merge.

    python bench/gpu/ring_steps.py OUT.json [--gpus 2,4,8] [--tokens-per-rank 4096]
        [--heads 32] [--kv-heads 8] [--gpu H200 | --profile P.json] [--repeats 3] [--device cuda] [--force]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import ints  # noqa: E402
from sim.errors import RingsimError  # noqa: E402
from sim.files import kept_file, write_json


def model_steps(n_gpus: int, a, merge: str) -> dict[tuple[int, str, int], float]:
    """(rank, kind, step) -> the simulated compute time of that step."""
    from sim.engine.play import simulate
    from sim.hardware.cluster import Hardware, Link
    from sim.scenario.config import Scenario, Workload

    if a.profile:
        from sim.calibration.gpu_profile import load_gpu_profile

        gpu = load_gpu_profile(a.profile).gpu_for(merge=merge)
    else:
        from sim.hardware.cluster import Gpu

        gpu = Gpu.preset(a.gpu, kernel="fa2", merge=merge)
    w = Workload(seq=n_gpus * a.tokens_per_rank, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim,
                 dtype=a.dtype, causal=True, pass_="fwdbwd")
    sc = Scenario(workload=w, hardware=Hardware(gpu=gpu, link=Link.preset("nvlink4")), n_gpus=n_gpus,
                  layout=a.layout)
    t = simulate(sc)
    out = {}
    for s in t.spans:
        if s.stream == "compute":
            out[s.rank, s.kind, s.step] = out.get((s.rank, s.kind, s.step), 0.0) + s.end_s - s.start_s
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="JSON to write")
    p.add_argument("--gpus", type=ints, default=[2, 4, 8])
    p.add_argument("--tokens-per-rank", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--layout", default="zigzag", choices=["contiguous", "striped", "zigzag"])
    p.add_argument("--gpu", default="H200", help="GPU preset of the model (default H200)")
    p.add_argument("--profile", default=None, help="a GPU profile instead of the preset")
    p.add_argument("--repeats", type=int, default=3, help="timed plays after one warm-up (default 3)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--force", action="store_true", help="overwrite OUT")
    a = p.parse_args(argv)
    try:
        why = kept_file(a.out, a.force)
        if why:
            raise RingsimError(why)
        import torch

        from hw.blocks import select_block_ops
        from hw.inprocess import play_ring

        device = torch.device(a.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RingsimError(f"no CUDA device visible to torch {torch.__version__}")
        a.dtype = "bf16" if device.type == "cuda" else "fp32"
        ops = select_block_ops(device.type, a.dtype, a.head_dim, "fused" if device.type == "cuda" else "auto")
        tdtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
        rows, report = [], {}
        for n_gpus in a.gpus:
            seq = n_gpus * a.tokens_per_rank

            def rnd(h):
                return torch.randn(1, seq, h, a.head_dim, dtype=tdtype, device=device)

            q, k, v, dout = rnd(a.heads), rnd(a.kv_heads), rnd(a.kv_heads), rnd(a.heads)
            play_ring(q, k, v, dout, n_gpus=n_gpus, layout=a.layout, causal=True, ops=ops)     # warm-up
            measured: dict[tuple[int, str, int], list[float]] = {}
            for _ in range(a.repeats):
                _, spans = play_ring(q, k, v, dout, n_gpus=n_gpus, layout=a.layout, causal=True, ops=ops, timed=True)
                for s in spans:
                    measured.setdefault((s.rank, s.kind, s.step), []).append(s.end_s - s.start_s)
            models = {m: model_steps(n_gpus, a, m) for m in ("fused", "unfused")}
            for key, times in sorted(measured.items()):
                med = statistics.median(times)
                row = {"n_gpus": n_gpus, "rank": key[0], "kind": key[1], "step": key[2], "measured_s": med,
                       **{f"model_{m}_s": models[m].get(key) for m in models}}
                rows.append(row)
            for kind in ("fwd", "bwd"):
                mine = [r for r in rows if r["n_gpus"] == n_gpus and r["kind"] == kind and r["model_fused_s"]]
                if not mine:
                    continue
                errs = {m: [r[f"model_{m}_s"] / r["measured_s"] - 1 for r in mine] for m in models}
                report[f"{n_gpus}-{kind}"] = {m: {"median_abs": statistics.median(abs(e) for e in errs[m]),
                                                 "median": statistics.median(errs[m]), "worst_abs": max(map(abs, errs[m]))}
                                             for m in models}
                print(f"{n_gpus} ranks {kind}: {len(mine)} steps, measured median "
                      f"{statistics.median(r['measured_s'] for r in mine) * 1e3:.3f} ms; model error "
                      + ", ".join(f"{m} merge median {report[f'{n_gpus}-{kind}'][m]['median']:+.1%} "
                                  f"(worst {report[f'{n_gpus}-{kind}'][m]['worst_abs']:.1%})" for m in models),
                      flush=True)
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        write_json(a.out, {"device": name, "torch": torch.__version__, "config": {
            k: getattr(a, k) for k in ("gpus", "tokens_per_rank", "heads", "kv_heads", "head_dim", "layout",
                                       "gpu", "profile", "repeats", "dtype")}, "steps": rows, "summary": report},
                   overwrite=True)
    except RingsimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
