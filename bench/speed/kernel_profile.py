"""Where a ring rank's time goes: the fused operator, the merge, the rest of the Python
side, and every other thread of the process (gloo's, the clock's watchers).

Two gloo ranks (one thread each) run the kernel (`hw.ring`) as `ringsim hw run` does,
zigzag layout, with and without recording spans. Per rank and call it reports wall
time, and CPU time split as: the fused operator and the merge (thread CPU time around
each call in the rank's thread), the rest of the rank's thread, and the CPU time of
each other thread of the process over all calls (from /proc, 10 ms ticks: use enough
repeats), by thread name.

    .venv/bin/python bench/speed/kernel_profile.py                   # causal fwd, 4096 tokens
    .venv/bin/python bench/speed/kernel_profile.py --pass fwdbwd --repeats 8
    .venv/bin/python bench/speed/kernel_profile.py -o FILE.json --force   # replace a results file

Prints a table and writes JSON (default
bench/results/speed/cpu-<cores>core/kernel-profile-<pass>-<seq>.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402


def thread_cpu_s() -> dict[int, tuple[str, float]]:
    """{thread id: (name, CPU seconds)} of every thread of this process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def worker(ctx, plan: dict) -> dict:
    import torch

    import hw.ring as ring_mod
    from hw.blocks import select_block_ops
    from hw.comm import Ring
    from hw.layouts import shard
    from hw.timing import CpuClock, Recorder

    torch.set_num_threads(1)
    n, r = ctx.n_gpus, ctx.rank
    g = torch.Generator().manual_seed(plan["seq"])
    full = [torch.randn(1, plan["seq"], plan["heads"], plan["head_dim"], generator=g) for _ in range(4)]
    q, k, v, dout = (ring_mod.heads_first_memory(shard(x, "zigzag", n, r)) for x in full)
    fused = select_block_ops("cpu", "fp32", plan["head_dim"], "fused")
    spent = {"op": 0.0, "merge": 0.0}

    def counted(name, fn):
        def call(*a, **kw):
            c0 = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                spent[name] += time.thread_time() - c0
        return call

    class Counted:
        forward = staticmethod(counted("op", fused.forward))
        backward = staticmethod(counted("op", fused.backward))
        describe = staticmethod(fused.describe)

    ring_mod.merge_ = counted("merge", ring_mod.merge_)
    clock = CpuClock(600.0)
    args = dict(layout="zigzag", causal=plan["causal"], ops=Counted())

    def run(record: bool) -> None:
        ring = Ring(r, n, ctx.group, clock, Recorder(clock, r) if record else None)
        out, lse = ring_mod.ring_forward(q, k, v, ring=ring, **args)
        if plan["pass"] == "fwdbwd":
            ring_mod.ring_backward(dout, q, k, v, out, lse, ring=ring, step0=n, **args)
        if record:
            ring.recorder.spans()

    rows = {}
    for record in (True, False):
        run(record)
        spent["op"] = spent["merge"] = 0.0
        main = threading.get_native_id()
        before = thread_cpu_s()
        m0 = time.thread_time()
        walls = []
        for _ in range(plan["repeats"]):
            ctx.barrier()
            t0 = time.perf_counter()
            run(record)
            walls.append(time.perf_counter() - t0)
        main_cpu = time.thread_time() - m0
        others: dict[str, float] = {}
        watchers = {w._t.native_id for w in clock._watchers.values()}   # the clock's threads
        for tid, (name, cpu) in thread_cpu_s().items():
            if tid != main:
                name = "ringsim-watch" if tid in watchers else name
                others[name] = others.get(name, 0.0) + cpu - before.get(tid, (name, 0.0))[1]
        reps = plan["repeats"]
        rows["recorded" if record else "unrecorded"] = {
            "wall_median_s": statistics.median(walls), "wall_min_s": min(walls),
            "op_cpu_s": spent["op"] / reps, "merge_cpu_s": spent["merge"] / reps,
            "rest_cpu_s": (main_cpu - spent["op"] - spent["merge"]) / reps,
            "other_threads_cpu_s": {k_: v_ / reps for k_, v_ in sorted(others.items())}}
    clock.close()
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--no-causal", dest="causal", action="store_false")
    p.add_argument("--pass", dest="pass_", default="fwd", choices=["fwd", "fwdbwd"])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("-o", "--output", default=None)
    add_force(p)
    a = p.parse_args()
    out_path = a.output or str(RESULTS / "speed" / cpu_host() / f"kernel-profile-{a.pass_}-{a.seq}.json")
    keep_results("kernel_profile", out_path, force=a.force, make_folders=True)
    plan = {"seq": a.seq, "heads": a.heads, "head_dim": a.head_dim, "causal": a.causal,
            "pass": a.pass_, "repeats": a.repeats}

    import kernel_profile as me  # the ranks import the worker by this name

    from hw.spawn import spawn
    from sim.units import table

    load0 = os.getloadavg()
    per_rank = spawn(me.worker, 2, args=(plan,), timeout_s=1800.0,
                     env={"PYTHONPATH": os.pathsep.join([ROOT, HERE])})
    load1 = os.getloadavg()
    names = sorted({t for ranks in per_rank for row in ranks.values() for t in row["other_threads_cpu_s"]})
    rows = []
    for rank, runs in enumerate(per_rank):
        for how, d in runs.items():
            rows.append([rank, how, f"{d['wall_median_s'] * 1e3:.1f}", f"{d['wall_min_s'] * 1e3:.1f}",
                         f"{d['op_cpu_s'] * 1e3:.1f}", f"{d['merge_cpu_s'] * 1e3:.2f}",
                         f"{d['rest_cpu_s'] * 1e3:.2f}",
                         *(f"{d['other_threads_cpu_s'].get(t, 0.0) * 1e3:.2f}" for t in names)])
    print(f"ms per call, {a.seq} tokens, {'causal' if a.causal else 'full'} {a.pass_}, zigzag, "
          f"2 gloo ranks x 1 thread, {a.repeats} repeats")
    print(table(["rank", "spans", "wall median", "wall min", "operator CPU", "merge CPU",
                 "rest of rank thread", *(f"{t} CPU" for t in names)], rows))
    print(f"load average (1 min) {load0[0]:.2f} before, {load1[0]:.2f} after; {os.cpu_count()} cores")
    doc = {"bench": "kernel_profile", "command": " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
           **plan, "load_avg_before": list(load0), "load_avg_after": list(load1),
           "ranks": per_rank}
    save_json(out_path, doc, force=a.force, indent=1)
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
