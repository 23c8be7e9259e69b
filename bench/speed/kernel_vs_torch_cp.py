"""The ring kernel against torch's own context_parallel and one process, in one run.

Two gloo ranks (one thread each) run, for every sequence length and mask:

- ringsim: `hw.ring.ring_forward` (and `ring_backward` for fwdbwd), zigzag layout,
  recording its spans as `ringsim hw run` does;
- torch CP: torch's `context_parallel` ring attention with the "alltoall" and the
  "allgather" rotation (forward only: the CPU patch of the peer covers the forward),
  head-tail balancing under the causal mask, as the peer's `bench_cp.py` runs it;
- one process: fused attention (`F.scaled_dot_product_attention`, autograd for fwdbwd)
  on rank 0 with 2 threads while rank 1 waits at a barrier.

Repeats are interleaved (repeat i of every case, then repeat i+1), so that a change in
the load of the shared host weighs on every column alike. A repeat's time is that of
the slowest rank from leaving a barrier to the end of the call, as the peer times it.

    .venv/bin/python bench/speed/kernel_vs_torch_cp.py                      # 4096 and 8192 tokens
    .venv/bin/python bench/speed/kernel_vs_torch_cp.py --seqs 4096 --repeats 3
    .venv/bin/python bench/speed/kernel_vs_torch_cp.py --against /tmp/old   # another tree's kernel too
    .venv/bin/python bench/speed/kernel_vs_torch_cp.py -o FILE.json --force  # replace a results file

`--against TREE` (a checkout of another commit, e.g. `git worktree add /tmp/old COMMIT`)
runs that tree's kernel too, as the column `ringsim@LABEL`, interleaved with the rest:
its hw and sim packages are imported beside this tree's in each rank.

Needs the peer's folder (`--peer-dir`, default ../shared/peers/torch_cp from the
repository, or $RINGSIM_TORCH_CP) for `cpu_cp_patch.py`. Prints a table and writes JSON
(default bench/results/speed/cpu-<cores>core/kernel-vs-torch-cp.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402

IMPLS = ("ringsim", "cp-alltoall", "cp-allgather", "one-process")


def _inputs(seq: int, heads: int, head_dim: int, seed: int):
    """q, k, v, dout of the whole sequence, (batch, seq, heads, head_dim) fp32."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, seq, heads, head_dim, generator=g) for _ in range(4)]


def _kernel(root: str | None):
    """The ring kernel's entry points, from this tree (None) or from the tree at `root`,
    imported beside this tree's: its `hw` and `sim` modules are loaded with the path set
    to it, kept by the functions that refer to them, then this tree's put back."""
    import importlib
    from types import SimpleNamespace

    def ours(name: str) -> bool:
        return name.split(".")[0] in ("hw", "sim")

    saved = {}
    if root is not None:
        saved = {m: sys.modules.pop(m) for m in list(sys.modules) if ours(m)}
        sys.path.insert(0, root)
    try:
        blocks, comm, layouts, ring, timing = (importlib.import_module(f"hw.{m}") for m in
                                               ("blocks", "comm", "layouts", "ring", "timing"))
        return SimpleNamespace(select_block_ops=blocks.select_block_ops, Ring=comm.Ring, shard=layouts.shard,
                               heads_first_memory=ring.heads_first_memory, ring_forward=ring.ring_forward,
                               ring_backward=ring.ring_backward, CpuClock=timing.CpuClock,
                               Recorder=timing.Recorder)
    finally:
        if root is not None:
            sys.path.remove(root)
            for m in [m for m in sys.modules if ours(m)]:
                del sys.modules[m]
            sys.modules.update(saved)


def worker(ctx, plan: dict) -> dict:
    """Both ranks: every case, repeats interleaved; rank 0 returns the times."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from hw.blocks import select_block_ops
    from hw.layouts import shard
    from hw.ring import heads_first_memory
    from hw.timing import CpuClock

    kernels = {"ringsim": _kernel(None)}
    if plan["against"]:
        kernels[f"ringsim@{plan['against_label']}"] = _kernel(plan["against"])
    sys.path.insert(0, plan["peer_dir"])
    import cpu_cp_patch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import _cp_options, set_rotate_method

    torch.set_num_threads(1)
    cpu_cp_patch.install()
    mesh = init_device_mesh("cpu", (ctx.n_gpus,), mesh_dim_names=("cp",))
    n, r = ctx.n_gpus, ctx.rank
    ops = select_block_ops("cpu", "fp32", plan["head_dim"], "fused")
    clock = CpuClock(plan["timeout_s"])
    # each kernel with its own block operators and clock (its own classes)
    own = {name: (k, k.select_block_ops("cpu", "fp32", plan["head_dim"], "fused"),
                  clock if name == "ringsim" else k.CpuClock(plan["timeout_s"])) for name, k in kernels.items()}

    cases = []
    for seq in plan["seqs"]:
        for causal in plan["causal"]:
            full = _inputs(seq, plan["heads"], plan["head_dim"], seed=seq)
            # each side gets its inputs as it runs them: heads-first in memory (what
            # `ringsim hw run` hands the kernel; torch's attention takes (b, h, s, d))
            mine = [heads_first_memory(shard(x, "zigzag", n, r)) for x in full]
            heads_first = [x.transpose(1, 2).contiguous() for x in full]
            for pass_ in plan["passes"]:
                impls = [i for i in [*kernels, *IMPLS[1:]] if pass_ == "fwd" or not i.startswith("cp-")]
                for impl in impls:
                    cases.append((seq, causal, pass_, impl, mine, heads_first))

    def ours(impl, mine, causal, pass_):
        k_, ops_, clock_ = own[impl]
        rec = k_.Recorder(clock_, r)
        ring = k_.Ring(r, n, ctx.group, clock_, rec)
        q, k, v, dout = mine
        out, lse = k_.ring_forward(q, k, v, ring=ring, layout="zigzag", causal=causal, ops=ops_)
        if pass_ == "fwdbwd":
            k_.ring_backward(dout, q, k, v, out, lse, ring=ring, layout="zigzag", causal=causal,
                             ops=ops_, step0=n)
        rec.spans()

    def timed(fn) -> tuple[float, float]:
        """(wall, CPU) seconds of fn(): CPU of the whole process, every thread."""
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - t0, time.process_time() - c0

    def torch_cp(heads_first, causal, rotate):
        set_rotate_method(rotate)
        # head-tail balancing is legal only under the causal mask (as in the peer's script)
        _cp_options.enable_load_balance = causal
        q, k, v = (x.clone() for x in heads_first[:3])
        with torch.no_grad(), context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            ctx.barrier()
            return timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))

    def one_process(heads_first, causal, pass_):
        torch.set_num_threads(2)
        try:
            if pass_ == "fwd":
                with torch.no_grad():
                    return timed(lambda: F.scaled_dot_product_attention(*heads_first[:3], is_causal=causal))
            q, k, v = (x.detach().requires_grad_() for x in heads_first[:3])

            def fwdbwd():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(heads_first[3])
            return timed(fwdbwd)
        finally:
            torch.set_num_threads(1)

    def once(case) -> tuple[float | None, float]:
        seq, causal, pass_, impl, mine, heads_first = case
        if impl == "one-process":
            if r == 0:
                got = one_process(heads_first, causal, pass_)
                ctx.barrier()
                return got
            # rank 1 waits at the barrier while rank 0 has both cores (its CPU is counted)
            return None, timed(ctx.barrier)[1]
        if impl.startswith("cp-"):
            return torch_cp(heads_first, causal, impl[3:])
        ctx.barrier()
        return timed(lambda: ours(impl, mine, causal, pass_))

    times: dict[str, list] = {}
    cpu: dict[str, list] = {}
    for rep in range(plan["warmup"] + plan["repeats"]):
        # a different case first in each repeat: no case always follows the same one
        shift = rep % len(cases)
        for case in cases[shift:] + cases[:shift]:
            got = once(case)
            if rep < plan["warmup"]:
                continue
            every = [None] * n
            dist.all_gather_object(every, got)
            key = json.dumps(case[:4])
            times.setdefault(key, []).append(max(w for w, _ in every if w is not None))
            cpu.setdefault(key, []).append(sum(c for _, c in every))
        if r == 0:
            ctx.report(rep)
    for _k, _ops, c in own.values():
        if c is not clock:
            c.close()
    clock.close()
    return {"times": times, "cpu": cpu, "block_impl": ops.describe()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seqs", default="4096,8192", help="comma list of sequence lengths (default 4096,8192)")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--masks", default="causal,full", help="comma list of causal,full")
    p.add_argument("--passes", default="fwd,fwdbwd", help="comma list of fwd,fwdbwd")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--peer-dir", default=os.environ.get(
        "RINGSIM_TORCH_CP", os.path.join(ROOT, "..", "shared", "peers", "torch_cp")))
    p.add_argument("--against", metavar="TREE", default=None,
                   help="also run the kernel of the checkout at TREE (another commit), interleaved")
    p.add_argument("--against-label", default=None, help="its column's name (default: TREE's commit)")
    p.add_argument("-o", "--output", default=str(RESULTS / "speed" / cpu_host() / "kernel-vs-torch-cp.json"))
    add_force(p)
    a = p.parse_args()
    keep_results("kernel_vs_torch_cp", a.output, force=a.force, make_folders=True)
    against = os.path.abspath(a.against) if a.against else None
    if against and not os.path.exists(os.path.join(against, "hw", "ring.py")):
        p.error(f"no hw/ring.py in {against} (--against)")
    label = a.against_label
    if against and not label:
        import subprocess

        label = subprocess.run(["git", "-C", against, "rev-parse", "--short", "HEAD"], capture_output=True,
                               text=True).stdout.strip() or os.path.basename(against)
    peer_dir = os.path.abspath(a.peer_dir)
    if not os.path.exists(os.path.join(peer_dir, "cpu_cp_patch.py")):
        p.error(f"no cpu_cp_patch.py in {peer_dir} (--peer-dir)")
    plan = {"seqs": [int(x) for x in a.seqs.split(",")], "heads": a.heads, "head_dim": a.head_dim,
            "causal": [m == "causal" for m in a.masks.split(",")], "passes": a.passes.split(","),
            "repeats": a.repeats, "warmup": a.warmup, "peer_dir": peer_dir, "timeout_s": 600.0,
            "against": against, "against_label": label}

    import kernel_vs_torch_cp as me  # the ranks import the worker by this name
    import torch

    from hw.spawn import spawn
    from sim.units import table

    load0 = os.getloadavg()
    t0 = time.monotonic()
    res = spawn(me.worker, 2, args=(plan,), timeout_s=plan["timeout_s"],
                env={"PYTHONPATH": os.pathsep.join([ROOT, HERE])},
                on_progress=lambda _r, rep: print(f"repeat {rep + 1}/{a.warmup + a.repeats} done",
                                                  file=sys.stderr, flush=True))[0]
    wall = time.monotonic() - t0
    load1 = os.getloadavg()

    cases: dict[tuple, dict] = {}
    for key, ts in res["times"].items():
        seq, causal, pass_, impl = json.loads(key)
        cpu = res["cpu"][key]
        cases.setdefault((seq, causal, pass_), {})[impl] = {
            "median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts), "times_s": ts,
            "cpu_median_s": statistics.median(cpu), "cpu_s": cpu}

    def ms(d: dict | None) -> str:
        if d is None:
            return "-"
        return f"{d['median_s'] * 1e3:.0f} ({d['min_s'] * 1e3:.0f}-{d['max_s'] * 1e3:.0f})"

    impls = (*IMPLS, *([f"ringsim@{label}"] if against else []))
    peers = (*IMPLS[1:], *impls[len(IMPLS):])
    rows, cpu_rows, out_cases = [], [], []
    for (seq, causal, pass_), by_impl in cases.items():
        ours = by_impl["ringsim"]
        # a peer's time over ours: > 1 when ringsim is faster; by medians, by minima
        # (the repeat least disturbed by the host's other load) and by CPU seconds
        # and paired: the median over repeats of (peer / ringsim) in the same repeat,
        # which a drift of the host's load between repeats does not move
        # (paired_min, paired_max: the range of the repeats' own ratios)
        paired = {i: [p / o for p, o in zip(by_impl[i]["times_s"], ours["times_s"])] for i in peers if i in by_impl}
        ratios = {f"{i}/ringsim": {"median": by_impl[i]["median_s"] / ours["median_s"],
                                   "min": by_impl[i]["min_s"] / ours["min_s"],
                                   "paired": statistics.median(paired[i]),
                                   "paired_min": min(paired[i]), "paired_max": max(paired[i]),
                                   "cpu": by_impl[i]["cpu_median_s"] / ours["cpu_median_s"]}
                  for i in paired}

        def ratio(i: str, how: str) -> str:
            got = ratios.get(f"{i}/ringsim")
            return f"{got[how]:.2f}" if got else "-"
        head = [seq, "causal" if causal else "full", pass_]
        rows.append([*head, *(ms(by_impl.get(i)) for i in impls),
                     *(f"{ratio(i, 'median')} / {ratio(i, 'paired')} / {ratio(i, 'min')}" for i in peers)])
        cpu_rows.append([*head, *(f"{by_impl[i]['cpu_median_s'] * 1e3:.0f}" if i in by_impl else "-"
                                  for i in impls), *(ratio(i, "cpu") for i in peers)])
        out_cases.append({"seq": seq, "mask": "causal" if causal else "full", "pass": pass_,
                          **{i: by_impl.get(i) for i in impls}, "ratios": ratios})
    names = ["ringsim", "torch CP a2a", "torch CP allgather", "one process 2 thr", *impls[len(IMPLS):]]
    ratio_names = ["a2a/ours", "ag/ours", "1p/ours", *(f"{i[len('ringsim'):]}/ours" for i in impls[len(IMPLS):])]
    print(f"wall ms, slowest rank: median (min-max) over {a.repeats} interleaved repeats; "
          f"ratios = peer / ringsim by medians / paired by repeat / by minima (> 1: ringsim "
          f"faster; goal: >= 1 against torch CP, >= 0.95 against one process)")
    print(table(["S", "mask", "pass", *names, *ratio_names], rows))
    print("\nCPU ms, both ranks' processes (every thread) over the timed call, median; ratios peer / ringsim")
    print(table(["S", "mask", "pass", *names, *ratio_names], cpu_rows))
    print("\npaired ratios, peer / ringsim in the same repeat: median (min-max) over the repeats")
    print(table(["S", "mask", "pass", *ratio_names],
                [[c["seq"], c["mask"], c["pass"],
                  *(f"{r['paired']:.2f} ({r['paired_min']:.2f}-{r['paired_max']:.2f})"
                    if (r := c["ratios"].get(f"{i}/ringsim")) else "-" for i in peers)] for c in out_cases]))
    print(f"load average (1 min) {load0[0]:.2f} before, {load1[0]:.2f} after; {os.cpu_count()} cores; "
          f"{wall:.0f} s")
    if max(load0[0], load1[0]) > (os.cpu_count() or 1):
        # two ranks of one thread each want both cores: beyond that the host's other
        # work decides the wall clock as much as the kernels do
        print(f"the host was busy (load above its {os.cpu_count()} cores): wall-clock ratios spread with "
              "its load; read the CPU ratios and the paired ranges")
    doc = {"bench": "kernel_vs_torch_cp",
           "command": " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
           "torch": torch.__version__, "cpu_count": os.cpu_count(), "n_gpus": 2,
           "threads_per_rank": 1, "one_process_threads": 2, "layout": "zigzag (ringsim), "
           "head-tail under the causal mask (torch CP)", "heads": a.heads, "head_dim": a.head_dim,
           "dtype": "fp32", "block_impl": res["block_impl"], "repeats": a.repeats, "warmup": a.warmup,
           "against": {"tree": against, "label": label} if against else None,
           "load_avg_before": list(load0), "load_avg_after": list(load1), "wall_s": wall,
           "cases": out_cases}
    save_json(a.output, doc, force=a.force, indent=1)
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
