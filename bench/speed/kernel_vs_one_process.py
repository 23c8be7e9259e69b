"""The real ring kernel against one process doing the same work.

Runs the ring (`hw.launch.run_config`: GPU count 2, causal zigzag by default) several times and
reports, from its measured traces:

- per-block compute rate: each ring step's compute span (median over repeats) against
  the same pieces computed by the same fused operator in this single process, with the
  same thread count (ratio = single-process time / ring time; goal >= 90%);
- makespan against the ideal: the whole attention on one rank (one fused call over the
  full sequence, this process, same threads) divided by the GPU count (goal >= 85%),
  per repeat, with the run-to-run spread.

    .venv/bin/python bench/speed/kernel_vs_one_process.py     # forward, 8192 tokens
    .venv/bin/python bench/speed/kernel_vs_one_process.py --pass fwdbwd --seq 4096
    .venv/bin/python bench/speed/kernel_vs_one_process.py -o FILE.json --force   # replace a results file

Prints a table and writes JSON (default
bench/results/speed/cpu-<cores>core/kernel-vs-one-process-<pass>-<seq>.json).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json, timed  # noqa: E402
from hw.blocks import select_block_ops  # noqa: E402
from hw.config import RunConfig  # noqa: E402
from hw.launch import run_config  # noqa: E402
from hw.layouts import shard  # noqa: E402
from hw.reporting import spread  # noqa: E402
from hw.runner import make_inputs  # noqa: E402
from sim.layouts import block_pieces  # noqa: E402
from sim.scenario.config import Workload  # noqa: E402
from sim.trace.metrics import compute_metrics  # noqa: E402
from sim.units import table  # noqa: E402


def busy_cpu_s() -> float:
    """CPU seconds the whole host has spent busy (all processes, every core), /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except OSError:
        return float("nan")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds of this process and every child it has waited for (the ranks)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--layout", default="zigzag", choices=["contiguous", "striped", "zigzag"])
    p.add_argument("--no-causal", dest="causal", action="store_false")
    p.add_argument("--pass", dest="pass_", default="fwd", choices=["fwd", "fwdbwd"])
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--samples", type=int, default=5, help="single-process samples per measurement")
    p.add_argument("-o", "--output", default=None)
    add_force(p)
    a = p.parse_args()
    out_path = a.output or str(RESULTS / "speed" / cpu_host() / f"kernel-vs-one-process-{a.pass_}-{a.seq}.json")
    keep_results("kernel_vs_one_process", out_path, force=a.force, make_folders=True)

    wl = Workload(seq=a.seq, heads=a.heads, kv_heads=a.heads, head_dim=a.head_dim, dtype=a.dtype,
                  causal=a.causal, pass_=a.pass_)
    cfg = RunConfig(workload=wl, n_gpus=a.gpus, layout=a.layout, warmup=a.warmup,
                    repeats=a.repeats, timeout_s=600.0)
    print(f"ring: {a.gpus} ranks, {a.layout}, {'causal' if a.causal else 'full'}, {a.pass_}, "
          f"{a.seq} tokens, {a.heads} heads x {a.head_dim}, {a.dtype}; {a.repeats} repeats", file=sys.stderr)
    # the same work in this one process, same operator, same threads (one per rank here)
    threads = cfg.threads(a.gpus)
    torch.set_num_threads(threads)
    ops = select_block_ops("cpu", a.dtype, a.head_dim)
    inp = make_inputs(cfg)
    # heads-first in memory, as the runner hands the ring its shards
    heads_first = [x.transpose(1, 2).contiguous() for x in (inp.q, inp.k, inp.v)]
    causal = a.causal
    fwd_out, fwd_lse = ops.forward(*heads_first, causal)
    dout = inp.dout.transpose(1, 2).contiguous() if inp.dout is not None else None

    def whole():
        out, lse = ops.forward(*heads_first, causal)
        if a.pass_ == "fwdbwd":
            ops.backward(dout, *heads_first, out, lse, causal)

    jobs = {("whole",): whole}      # what to time alone: the whole attention and every block
    shapes = {}
    n, c = a.gpus, a.seq // a.gpus
    for phase_i, phase in enumerate(["fwd", "bwd"] if a.pass_ == "fwdbwd" else ["fwd"]):
        for r in range(n):
            q_r = shard(inp.q, a.layout, n, r).transpose(1, 2).contiguous()
            # the forward's out/lse rows of this rank, for the backward pieces
            out_r = shard(fwd_out.transpose(1, 2), a.layout, n, r).transpose(1, 2)
            lse_r = shard(fwd_lse.transpose(1, 2), a.layout, n, r).transpose(1, 2)
            dout_r = shard(inp.dout, a.layout, n, r).transpose(1, 2).contiguous() if dout is not None else None
            for k in range(n):
                owner = (r - k) % n
                pieces = block_pieces(a.layout, r, owner, n, c, causal)
                if not pieces:
                    continue
                k_o, v_o = (shard(x, a.layout, n, owner).transpose(1, 2).contiguous() for x in (inp.k, inp.v))

                def block(pieces=pieces, q_r=q_r, k_o=k_o, v_o=v_o, out_r=out_r, lse_r=lse_r,
                          dout_r=dout_r, phase=phase):
                    for pc in pieces:
                        if phase == "fwd":
                            ops.forward(q_r[:, :, pc.q], k_o[:, :, pc.kv], v_o[:, :, pc.kv], pc.causal)
                        else:
                            ops.backward(dout_r[:, :, pc.q], q_r[:, :, pc.q], k_o[:, :, pc.kv],
                                         v_o[:, :, pc.kv], out_r[:, :, pc.q], lse_r[:, :, pc.q], pc.causal)
                key = (r, phase_i * n + k, phase)
                jobs[key] = block
                shapes[key] = [f"{len(range(*pc.q.indices(c)))}x{len(range(*pc.kv.indices(c)))}"
                               f"{' diag' if pc.causal else ''}" for pc in pieces]

    def measure_alone(samples: int) -> dict:
        print(f"single process: {len(jobs)} measurements x {samples}", file=sys.stderr)
        return {key: timed(fn, samples) for key, fn in jobs.items()}

    # half the single-process samples before the ring and half after, so that a change in
    # the load of the (shared) host weighs on both sides alike
    before = measure_alone((a.samples + 1) // 2)
    host0, own0, wall0 = busy_cpu_s(), own_cpu_s(), time.monotonic()
    _results, traces = run_config(cfg)
    ring_wall = time.monotonic() - wall0
    others = (busy_cpu_s() - host0 - (own_cpu_s() - own0)) / ring_wall
    after = measure_alone(a.samples // 2)
    alone = {key: before[key] + after.get(key, []) for key in jobs}
    # blocks of one shape are one measurement: pool their samples (noise on a shared
    # host differs more between two timings of one shape than between shapes)
    def shape_of(key: tuple) -> tuple:
        return (*shapes[key], key[-1])
    pooled: dict = {}
    for key in shapes:
        pooled.setdefault(shape_of(key), []).extend(alone[key])
    single = alone[("whole",)]
    ideal = statistics.median(single) / a.gpus
    blocks = []
    for key in shapes:
        r, step, phase = key
        ring = [s.duration_s for t in traces for s in t.spans
                if s.rank == r and s.stream == "compute" and s.step == step]
        blocks.append({"rank": r, "step": step, "kind": phase, "pieces": shapes[key],
                       "flops": next(s.flops for s in traces[0].spans if s.rank == r
                                     and s.stream == "compute" and s.step == step),
                       "ring_s": ring, "ring_median_s": statistics.median(ring),
                       "single_s": pooled[shape_of(key)],
                       "single_median_s": statistics.median(pooled[shape_of(key)])})
        b = blocks[-1]
        b["rate_ratio"] = b["single_median_s"] / b["ring_median_s"]

    metrics = [compute_metrics(t) for t in traces]
    makespans = [m.makespan_s for m in metrics]
    eff = [ideal / m for m in makespans]
    rows = [[f"rank {b['rank']} step {b['step']} ({b['kind']})", " + ".join(b["pieces"]),
             f"{b['ring_median_s'] * 1e3:.1f} ms", f"{b['single_median_s'] * 1e3:.1f} ms",
             f"{b['flops'] / b['ring_median_s'] / 1e9:.1f}", f"{b['rate_ratio']:.1%}"] for b in blocks]
    print(table(["block", "pieces", "ring", "single process", "ring GFLOP/s", "rate ratio"], rows))
    total_ring = sum(b["ring_median_s"] for b in blocks)
    total_single = sum(b["single_median_s"] for b in blocks)
    print(f"\nall blocks: ring {total_ring * 1e3:.1f} ms, single process {total_single * 1e3:.1f} ms, "
          f"rate ratio {total_single / total_ring:.1%}")
    s_m, s_e = spread(makespans), spread(eff)
    print(f"single rank, whole attention: median {statistics.median(single):.3f} s "
          f"(cv {spread(single)['cv']:.1%}); ideal = that / {n} = {ideal:.3f} s")
    print(f"ring makespan over {len(makespans)} repeats: median {s_m['median']:.3f} s, "
          f"min {s_m['min']:.3f}, max {s_m['max']:.3f}, cv {s_m['cv']:.1%}")
    print(f"efficiency (ideal / makespan): median {s_e['median']:.1%}, min {s_e['min']:.1%}, "
          f"max {s_e['max']:.1%}")
    print(f"other processes on the host used {others:.2f} cores on average during the ring run "
          f"({os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f})")
    mid = metrics[sorted(range(len(makespans)), key=lambda i: makespans[i])[len(makespans) // 2]]
    print(f"median repeat: exposed comm {[round(r.exposed_comm_s * 1e3, 2) for r in mid.ranks]} ms, "
          f"idle {[round(r.idle_s * 1e3, 2) for r in mid.ranks]} ms per rank")

    doc = {"bench": "hw_ring", "command": " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
           "hardware": traces[0].hardware, "config": traces[0].config,
           "other_processes_cores": others,
           "repeats": a.repeats, "warmup": a.warmup,
           "single_rank_s": single, "ideal_s": ideal, "makespan_s": makespans,
           "makespan_spread": s_m, "efficiency": eff, "efficiency_spread": s_e,
           "blocks": blocks, "all_blocks_rate_ratio": total_single / total_ring,
           "exposed_comm_s": [[r.exposed_comm_s for r in m.ranks] for m in metrics],
           "idle_s": [[r.idle_s for r in m.ranks] for m in metrics]}
    save_json(out_path, doc, force=a.force, indent=None)
    print(f"\nwrote {out_path}")
    print(json.dumps({"efficiency_median": s_e["median"], "rate_ratio_all_blocks": total_single / total_ring}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
