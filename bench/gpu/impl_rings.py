"""Each library's ring, step by step, on one GPU against the block model: `hw.inprocess` plays the
ring's ranks as threads of one process, each step as its library launches it (hw.impl_steps:
its attention calls and its merge, read from sim.implementations), under torch.profiler
(Kineto, CPU and CUDA activities, shapes, every thread). The trace is read back with
sim.profiler.reader and every step's kernels, found by the annotation around their launch
(hw.impl_steps.label), are set beside the model's prediction of the same step for that
implementation: the block model's attention call (sim.hardware.kernel_model.call_gpu_s), the
merge's bytes over the memory bandwidth and its kernels' gaps (MERGE_BYTES, MERGE_KERNELS of the
implementation's merge), and the engine's whole step (sim.engine.play.simulate with `impl`).

    python bench/gpu/impl_rings.py OUT.json [--trace-dir DIR] [--gpus 4] [--tokens-per-rank 8192]
        [--heads 32] [--kv-heads 8] [--head-dim 128] [--libraries ideal,te,rfa,torch,usp]
        [--masks causal,full] [--gpu H100] [--kernel fa2] [--device cuda|cpu] [--eager-merges] [--force]

Each step's measured time is the GPU time its kernels occupy: from the first kernel's start to
the last one's end within each annotation they were launched in, gaps between them included;
its call and merge are also given apart. The error is the model's over the measured, less 1.
Each rank's steps run one rank at a time (`play_ring(timed=True)`), so no other rank's kernel
falls between them. `--device cpu` plays the same at small sizes on the CPU: its "kernels" are
the CPU operators each annotation encloses (outermost ones), for the script's own tests; its
numbers say nothing of a GPU.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from sim.errors import RingsimError  # noqa: E402
from sim.files import kept_file, write_json  # noqa: E402

MASKS = {"causal": True, "full": False}
CAUSAL_LAYOUTS = ("contiguous", "zigzag", "striped")
"""The layouts a causal ring is played on where the library runs them; without a mask the layout
changes nothing, and the ring runs contiguous."""


def rings(libraries, masks) -> list[tuple[str, str, bool]]:
    """(library, layout, causal) of every ring to play: each library's layouts it runs."""
    from hw import impl_steps

    out = []
    for lib in libraries:
        impl = impl_steps.ring_implementation(lib)
        for mask in masks:
            causal = MASKS[mask]
            for layout in CAUSAL_LAYOUTS if causal else ("contiguous",):
                if impl_steps.runs(impl, layout, causal):
                    out.append((lib, layout, causal))
    return out


# ------------------------------------------------------------------ the trace's steps

def _enclosing(starts: np.ndarray, ends: np.ndarray, t: float) -> int | None:
    """Index of the interval (sorted by start, disjoint) that holds t, or None."""
    i = int(np.searchsorted(starts, t, side="right")) - 1
    return i if i >= 0 and t <= ends[i] else None


def step_kernels(run, *, gpu: bool) -> dict[tuple[str, int, int], list[dict]]:
    """(kind, rank, step) -> the step's kernels found in `run` (sim.profiler.reader.Run), each
    {part, name, kind, start_s, dur_s, region (the start of its annotation)}: on a GPU every
    kernel, memcpy and memset whose launch (its CUDA runtime call, by correlation) lies inside an
    annotation of hw.impl_steps on the launching thread (by its time alone where that thread
    has none); on the CPU the outermost operators inside one on the same thread."""
    from hw.impl_steps import LABEL
    from sim.profiler.launch import CPU_OP_KINDS

    ev = run.events
    ann: dict[int, list[tuple[float, float, re.Match]]] = {}
    for i in np.flatnonzero(ev.kind == "annotation"):
        m = LABEL.match(str(ev.name[i]))
        if m:
            ann.setdefault(int(ev.stream[i]), []).append((float(ev.start_s[i]), float(ev.end_s[i]), m))
    index = {}
    for tid, rows in ann.items():
        rows.sort(key=lambda x: x[0])
        index[tid] = (np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), [r[2] for r in rows])
    everyone = sorted((r for rows in ann.values() for r in rows), key=lambda x: x[0])
    # a launch on a thread with no annotation (a trace whose runtime rows name threads other
    # than its operators do) is placed by its time alone: one rank at a time holds the device
    by_time = (np.array([r[0] for r in everyone]), np.array([r[1] for r in everyone]), [r[2] for r in everyone])
    out: dict[tuple[str, int, int], list[dict]] = {}

    def put(tid: int, t: float, row: int) -> None:
        starts, ends, labels = index.get(tid, by_time)
        j = _enclosing(starts, ends, t)
        if j is None:
            return
        m = labels[j]
        out.setdefault((m["kind"], int(m["rank"]), int(m["step"])), []).append(
            {"part": m["part"], "name": str(ev.name[row]), "kind": str(ev.kind[row]),
             "start_s": float(ev.start_s[row]), "dur_s": float(ev.dur_s[row]), "region": float(starts[j])})

    if gpu:
        runtime = np.flatnonzero((ev.kind == "runtime") & (ev.correlation >= 0))
        launcher = {int(ev.correlation[i]): i for i in runtime}
        for i in np.flatnonzero(ev.on_gpu):
            j = launcher.get(int(ev.correlation[i]))
            if j is not None:
                put(int(ev.stream[j]), float(ev.start_s[j]), i)
        return out
    ops = np.flatnonzero(np.isin(ev.kind, CPU_OP_KINDS))
    for tid in index:
        mine = ops[ev.stream[ops] == tid]
        mine = mine[np.argsort(ev.start_s[mine], kind="stable")]
        end = -np.inf
        for i in mine:     # outermost: an operator that starts after the one before has ended
            if ev.start_s[i] >= end:
                put(tid, float(ev.start_s[i]), i)
                end = float(ev.end_s[i])
    return out


def busy_s(kernels: list[dict]) -> float:
    """GPU (or CPU) time the kernels occupy: within each annotation they were launched in, the
    first one's start to the last one's end, gaps between them included. A step's parts can lie
    apart in time (TransformerEngine corrects a step's statistics during the next step and its
    output after the loop; a backward adds its dK/dV share after the wait): each counts alone."""
    regions: dict[float, list[dict]] = {}
    for k in kernels:
        regions.setdefault(k["region"], []).append(k)
    return sum(max(k["start_s"] + k["dur_s"] for k in ks) - min(k["start_s"] for k in ks)
               for ks in regions.values())


# ------------------------------------------------------------------ the model's steps

def model_steps(lib: str, layout: str, causal: bool, a) -> dict[tuple[str, int, int], dict]:
    """(kind, rank, step) -> the model's prediction of that step for `lib`: its call, its merge's
    bytes over the memory bandwidth and kernel gaps, their sum, and the engine's whole step."""
    from sim.engine.play import simulate
    from sim.hardware.cluster import Gpu, Hardware, Link
    from sim.hardware.kernel_model import call_gpu_s, merge_bytes, merge_kernels, whole_heads
    from sim.layouts import block_pieces, exact_work
    from sim.layouts.base import ALL
    from sim.scenario.config import Scenario, Workload
    from sim.scenario.quantities import BWD_FLOPS_FACTOR

    n, c = a.gpus, a.tokens_per_rank
    w = Workload(seq=n * c, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim, dtype="bf16", causal=causal,
                 pass_="fwdbwd")
    sc = Scenario(workload=w, hardware=Hardware(gpu=Gpu.preset(a.gpu, kernel=a.kernel), link=Link.preset("nvlink4")),
                  n_gpus=n, layout=layout, impl=lib)
    gpu = sc.implementation.played_on(sc.hardware).gpu
    engine: dict[tuple[str, int, int], float] = {}
    for s in simulate(sc).spans:
        if s.stream == "compute":
            key = (s.kind, s.rank, s.step)
            engine[key] = engine.get(key, 0.0) + s.end_s - s.start_s
    pairs = exact_work(layout, n * c, n, causal)
    pair_flops = Workload(seq=1, heads=a.heads, kv_heads=1, head_dim=a.head_dim).fwd_flops(1)
    bw = gpu.memory_bandwidth_gbps * 1e9
    gap_s = gpu.floors.kernel_gap_us * 1e-6
    kvh = a.kv_heads / a.heads
    out = {}
    for kind, step0 in (("fwd", 0), ("bwd", n)):
        for r in range(n):
            for step in range(n):
                owner = (r - step) % n
                pieces = block_pieces(layout, r, owner, n, c, causal)
                if not pieces:
                    continue
                p = pieces[0]
                q = c if p.q == ALL else len(range(*p.q.indices(c)))
                kv = c if p.kv == ALL else len(range(*p.kv.indices(c)))
                mask = "diagonal" if p.causal else "full"
                flops = float(pairs[r, owner]) * pair_flops * (BWD_FLOPS_FACTOR if kind == "bwd" else 1.0)
                heads = whole_heads(kind, mask, flops, q, kv, a.head_dim)
                call = call_gpu_s(gpu.kernel, kind, mask, q, kv, heads, a.head_dim, kvh, 2, bw,
                                  gpu.sms, gpu.floors.kernel_gap_us, gpu.rate_scale.get(f"{kind}-{mask}", 1.0))
                alone = n == 1
                sliced = p.q != ALL
                moved = 0.0 if alone else float(merge_bytes(kind, mask, flops, q, kv, head_dim=a.head_dim,
                                                            kv_heads_per_head=kvh, elem_bytes=2, merge=gpu.merge,
                                                            sliced=sliced))
                kernels = 0 if alone else int(merge_kernels(kind, gpu.merge, sliced))
                merge = moved / bw + kernels * gap_s
                out[kind, r, step0 + step] = {
                    "call_s": call, "merge_s": merge, "merge_bytes": moved, "merge_kernels": kernels,
                    "gpu_s": call + merge, "engine_step_s": engine.get((kind, r, step0 + step)),
                    "call": {"q_tokens": q, "kv_tokens": kv, "mask": mask}}
    return out


# ------------------------------------------------------------------ one ring

def play_profiled(lib: str, layout: str, causal: bool, a, ops, tensors, trace: Path, *, compiled: bool) -> None:
    """One warm-up play, then one timed play under torch.profiler, written to `trace`."""
    import torch
    import torch.profiler as tp
    from torch._C._profiler import _ExperimentalConfig

    from hw.inprocess import play_ring

    q, k, v, dout = tensors
    kw = dict(n_gpus=a.gpus, layout=layout, causal=causal, ops=ops, library=lib, compiled=compiled)
    play_ring(q, k, v, dout, **kw)
    activities = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if q.device.type == "cuda" else [])
    # the ranks are threads: the profiler follows every thread, not only the one that starts it
    try:
        every_thread = _ExperimentalConfig(profile_all_threads=True)
    except TypeError:
        raise RingsimError(f"torch {torch.__version__}'s profiler cannot follow the ranks' threads "
                           "(no profile_all_threads)") from None
    with tp.profile(activities=activities, record_shapes=True, experimental_config=every_thread) as prof:
        play_ring(q, k, v, dout, timed=True, **kw)
        if q.device.type == "cuda":
            torch.cuda.synchronize(q.device)
    prof.export_chrome_trace(str(trace))


def compare(lib: str, layout: str, causal: bool, a, trace: Path) -> dict:
    """The ring's table: every step's kernels beside the model's step."""
    from sim.profiler.reader import read_run

    run = read_run([trace])
    found = step_kernels(run, gpu=a.device == "cuda")
    model = model_steps(lib, layout, causal, a)
    rows, unmatched = [], []
    for (kind, rank, step), m in sorted(model.items(), key=lambda x: (x[0][0] != "fwd", x[0][1], x[0][2])):
        ks = sorted(found.get((kind, rank, step), []), key=lambda k: k["start_s"])
        if not any(k["part"] == "call" for k in ks):
            unmatched.append({"kind": kind, "rank": rank, "step": step})
        calls = [k for k in ks if k["part"] == "call"]
        merges = [k for k in ks if k["part"] == "merge"]
        measured = busy_s(ks)
        rows.append({
            "kind": kind, "rank": rank, "step": step, "call": m["call"],
            "kernels": [{"part": k["part"], "name": k["name"], "kind": k["kind"], "us": k["dur_s"] * 1e6}
                        for k in ks],
            "measured_us": measured * 1e6, "measured_call_us": busy_s(calls) * 1e6,
            "measured_merge_us": busy_s(merges) * 1e6, "measured_merge_kernels": len(merges),
            "model_us": m["gpu_s"] * 1e6, "model_call_us": m["call_s"] * 1e6, "model_merge_us": m["merge_s"] * 1e6,
            "model_merge_bytes": m["merge_bytes"], "model_merge_kernels": m["merge_kernels"],
            "model_engine_step_us": None if m["engine_step_s"] is None else m["engine_step_s"] * 1e6,
            "error": m["gpu_s"] / measured - 1 if measured > 0 else None,
            "call_error": m["call_s"] / busy_s(calls) - 1 if calls and busy_s(calls) > 0 else None,
            "merge_error": (m["merge_s"] / busy_s(merges) - 1
                            if merges and busy_s(merges) > 0 and m["merge_s"] > 0 else None)})
    extra = sorted(set(found) - set(model))
    return {"library": lib, "layout": layout, "mask": "causal" if causal else "full", "trace": str(trace),
            "steps": rows, "unmatched_steps": unmatched,
            "kernels_outside_model": [{"kind": k, "rank": r, "step": s} for k, r, s in extra]}


def summary(results: list[dict]) -> dict:
    """Median |error| per implementation and pass (and of its calls and merges apart)."""
    out: dict[str, dict] = {}
    for res in results:
        if not res["steps"]:
            continue
        for kind in ("fwd", "bwd"):
            rows = [r for r in res["steps"] if r["kind"] == kind]
            cell = out.setdefault(res["library"], {}).setdefault(kind, {"steps": 0, "_e": [], "_c": [], "_m": []})
            cell["steps"] += len(rows)
            for key, col in (("error", "_e"), ("call_error", "_c"), ("merge_error", "_m")):
                cell[col] += [abs(r[key]) for r in rows if r[key] is not None]
    for lib in out.values():
        for cell in lib.values():
            for col, name in (("_e", "median_abs_error"), ("_c", "median_abs_call_error"),
                              ("_m", "median_abs_merge_error")):
                vals = cell.pop(col)
                cell[name] = statistics.median(vals) if vals else None
    return out


def _print_table(res: dict) -> None:
    print(f"\n{res['library']} {res['layout']} {res['mask']}: {len(res['steps'])} steps")
    print(f"  {'pass':4} {'rank':>4} {'step':>4} {'kernels':>7} {'call µs':>9} {'merge µs':>9} {'meas. µs':>9} "
          f"{'model µs':>9} {'error':>7}")
    for r in res["steps"]:
        err = "" if r["error"] is None else f"{r['error']:+.1%}"
        print(f"  {r['kind']:4} {r['rank']:4d} {r['step']:4d} {len(r['kernels']):7d} {r['measured_call_us']:9.1f} "
              f"{r['measured_merge_us']:9.1f} {r['measured_us']:9.1f} {r['model_us']:9.1f} {err:>7}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="JSON to write")
    p.add_argument("--trace-dir", default=None, help="keep the profiler traces here (default: a temporary folder)")
    p.add_argument("--gpus", type=int, default=4, help="ranks of the ring (default 4)")
    p.add_argument("--tokens-per-rank", type=int, default=8192)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--libraries", default="all", help="comma-separated, or 'all' (every library with a ring)")
    p.add_argument("--masks", default="causal,full")
    p.add_argument("--gpu", default=None, help="GPU preset of the model (default: H200 on an H200, else H100)")
    p.add_argument("--kernel", default="fa2", help="the preset's kernel table (default fa2: torch's flash backend)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--eager-merges", action="store_true",
                   help="run every merge eagerly (default: TransformerEngine's corrections through torch.compile "
                        "and ring-flash-attention's update scripted, as the libraries run them; always on the CPU)")
    p.add_argument("--force", action="store_true", help="overwrite OUT and the traces")
    a = p.parse_args(argv)
    try:
        why = kept_file(a.out, a.force)
        if why:
            raise RingsimError(why)
        import torch

        from hw import impl_steps
        from hw.blocks import select_block_ops

        device = torch.device(a.device)
        a.eager_merges = a.eager_merges or device.type == "cpu"   # a compiler on every CPU host is not given
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RingsimError(f"no CUDA device visible to torch {torch.__version__}")
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        a.gpu = a.gpu or ("H200" if "H200" in name else "H100")
        libraries = impl_steps.ring_libraries() if a.libraries == "all" else tuple(a.libraries.split(","))
        masks = tuple(m for m in a.masks.split(",") if m)
        bad = [m for m in masks if m not in MASKS]
        if bad:
            raise RingsimError(f"unknown mask {bad[0]!r}; choose causal, full")
        todo = rings(libraries, masks)
        dtype = "bf16" if device.type == "cuda" else "fp32"
        ops = select_block_ops(device.type, dtype, a.head_dim, "fused" if device.type == "cuda" else "auto")
        tdtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
        seq = a.gpus * a.tokens_per_rank
        g = torch.Generator(device="cpu").manual_seed(0)
        tensors = [torch.randn(1, seq, h, a.head_dim, generator=g).to(device=device, dtype=tdtype)
                   for h in (a.heads, a.kv_heads, a.kv_heads, a.heads)]
        tmp = None
        if a.trace_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="impl-rings-")
            trace_dir = Path(tmp.name)
        else:
            trace_dir = Path(a.trace_dir)
            trace_dir.mkdir(parents=True, exist_ok=True)
        results, failed = [], []
        try:
            for lib, layout, causal in todo:
                trace = trace_dir / f"{lib}-{layout}-{'causal' if causal else 'full'}.json.gz"
                why = kept_file(trace, a.force)
                if why:
                    raise RingsimError(why)
                ring = {"library": lib, "layout": layout, "mask": "causal" if causal else "full"}
                try:
                    compiled = not a.eager_merges
                    try:
                        play_profiled(lib, layout, causal, a, ops, tensors, trace, compiled=compiled)
                    except Exception as e:   # a compiler the host lacks: the merges run eagerly instead
                        if not compiled:
                            raise
                        compiled = False
                        ring["compile_failed"] = f"{type(e).__name__}: {e}"[:500]
                        print(f"{lib} {layout}: compiling its merge failed ({ring['compile_failed'][:200]}); "
                              "eager merges", file=sys.stderr)
                        play_profiled(lib, layout, causal, a, ops, tensors, trace, compiled=False)
                    res = {**compare(lib, layout, causal, a, trace), **ring, "compiled_merges": compiled}
                except Exception as e:   # one ring that fails leaves the others to run
                    failed.append(ring)
                    results.append({**ring, "failed": f"{type(e).__name__}: {e}"[:1000], "steps": []})
                    print(f"{lib} {layout} {ring['mask']}: failed: {e}", file=sys.stderr)
                    continue
                if tmp is not None:
                    res["trace"] = None
                results.append(res)
                _print_table(res)
        finally:
            if tmp is not None:
                tmp.cleanup()
        report = summary(results)
        print("\nmedian |error| of the model's step (calls, merges) per implementation and pass:")
        for lib, cells in report.items():
            for kind, c in cells.items():
                f = ["-" if c[k] is None else f"{c[k]:.1%}"
                     for k in ("median_abs_error", "median_abs_call_error", "median_abs_merge_error")]
                print(f"  {lib:6} {kind}: {c['steps']} steps, step {f[0]}, calls {f[1]}, merges {f[2]}")
        write_json(a.out, {
            "device": name, "torch": torch.__version__, "block_ops": ops.describe(),
            "config": {"gpus": a.gpus, "tokens_per_rank": a.tokens_per_rank, "heads": a.heads,
                       "kv_heads": a.kv_heads, "head_dim": a.head_dim, "dtype": dtype, "batch": 1,
                       "model_gpu": a.gpu, "model_kernel": a.kernel, "libraries": list(libraries),
                       "masks": list(masks), "eager_merges": a.eager_merges},
            "rings": results, "summary": report}, overwrite=True)
    except RingsimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
