"""The options that take a step to a framework and back (sim.frameworks): `--export`, `--out`,
`--force` and `--rank` of `ringsim plan` and `ringsim step`, and `--from` and
`--logged-tflops` of `ringsim step`."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields, replace
from typing import Any

from sim.cli.options import hardware_from_args
from sim.errors import RingsimError
from sim.files import kept_file, read_bytes, write_bytes
from sim.scenario.schema import SCENARIO_OPTIONS
from sim.schemes import DEFAULT as DEFAULT_SCHEME

FRAMEWORKS = ("torchtitan", "megatron", "nemo")
"""sim.frameworks.job.FRAMEWORKS, named here so that `ringsim` starts without loading them."""
JOB_FILE_BYTES = 1 << 20
"""The largest job file read: a launch script or a configuration is a few kilobytes."""
STEP_SETTINGS = {"model": None, "layers": None, "heads": None, "kv_heads": None, "head_dim": None, "hidden": None,
                 "ffn": None, "vocab": None, "params": None, "seq": None, "global_batch": None, "microbatches": None,
                 "tp": 1, "cp": 1, "pp": 1, "dp": 1, "zero": 1, "recompute": "none", "fp8": False, "interleave": 1,
                 "tp_overlap": False, "grad_reduce": "fp32", "scheme": DEFAULT_SCHEME, "layout": "zigzag",
                 "ulysses_degree": None}
"""`ringsim step`'s flags that a job read with --from gives instead, with their defaults."""


def add_framework_args(p: argparse.ArgumentParser, *, plan: bool = False) -> None:
    f = p.add_argument_group("frameworks (docs/cli.md, \"From a plan to a job\")")
    f.add_argument("--export", choices=FRAMEWORKS, default=None,
                   help="write the " + ("plan's best split that the framework runs (or --rank K)" if plan else "step")
                        + " as a torchtitan 0.3.0 job (TOML), Megatron-LM arguments (a torchrun line) or Megatron-Bridge "
                          "recipe overrides; a setting the framework refuses, or a trap, is refused with its reason")
    f.add_argument("--out", metavar="FILE", default=None,
                   help="with --export: write it to FILE (default: print it alone)")
    if plan:
        f.add_argument("--rank", type=int, default=None, help="with --export: the K-th ranked split (default: the "
                                                               "best the framework runs)")
        f.add_argument("--force", action="store_true", help="overwrite --out's file")
    else:
        f.add_argument("--from", dest="from_file", metavar="FILE", default=None,
                       help="simulate a job: a torchtitan TOML or launch line, Megatron-LM arguments (a file of them "
                            "or a torchrun ... pretrain_gpt.py line) or Megatron-Bridge overrides; the hardware flags "
                            "still apply")
        f.add_argument("--logged-tflops", type=float, default=None, metavar="X",
                       help="with --from: the TFLOP/s per GPU the job logged, checked against the GPU's peak and the "
                            "simulation")


def check_framework_args(a: argparse.Namespace) -> None:
    """The framework options' own rules, checked before any work (an existing --out too)."""
    if a.out is not None and a.export is None:
        raise RingsimError("--out needs --export")
    if getattr(a, "rank", None) is not None:
        if a.export is None:
            raise RingsimError("--rank needs --export")
        if a.rank < 1:
            raise RingsimError(f"--rank must be 1 or more, got {a.rank}")
    if getattr(a, "logged_tflops", None) is not None:
        if getattr(a, "from_file", None) is None:
            raise RingsimError("--logged-tflops needs --from")
        if not a.logged_tflops > 0:
            raise RingsimError(f"--logged-tflops must be positive, got {a.logged_tflops}")
    if getattr(a, "from_file", None) is not None:
        given = [f"--{k.replace('_', '-')}" for k, default in STEP_SETTINGS.items() if getattr(a, k) != default]
        if given:
            raise RingsimError(f"--from gives the job; {', '.join(given)} cannot change it (edit the file)")
    why = kept_file(a.out, a.force)
    if why:
        raise RingsimError(why)


def hardware_argv(a: argparse.Namespace) -> list[str]:
    """The hardware flags given on the command line, as `ringsim` arguments."""
    out: list[str] = []
    for o in SCENARIO_OPTIONS:
        if o.group != "hardware":
            continue
        v = getattr(a, o.dest, None)
        if v is None or v == o.default:
            continue
        if o.kind == "bool":
            out.append(o.flag if v else "--no-" + o.flag[2:])
        else:
            out += [o.flag, str(v)]
    return out


def write_export(a: argparse.Namespace, text: str) -> None:
    if a.out is None:
        sys.stdout.write(text)
    else:
        write_bytes(a.out, text.encode(), overwrite=a.force)


def export_step(a: argparse.Namespace, step: Any, source: str, show: Any = None) -> int:
    """`ringsim step --export`: the step as the framework's job, printed alone, or written to
    --out after the step (`show`) is printed."""
    from sim.frameworks.job import export, framework_module

    text = export(a.export, step, source=source)
    if a.out is None:
        write_export(a, text)
        return 0
    write_export(a, text)
    if show is not None:
        show()
    print(f"\nwrote {a.out}: the step as a {framework_module(a.export).TITLE} job")
    return 0


def export_plan(a: argparse.Namespace, candidates: list[dict[str, Any]], model: Any, seq: int, global_batch: int,
                hardware: Any) -> tuple[str, str]:
    """`ringsim plan --export`: the --rank K candidate, or the best the framework runs, as
    its job; (the text, a line saying which was taken and why the better ones were not)."""
    from sim.frameworks.job import export, framework_module, refusal
    from sim.training.plan import label
    from sim.training.step import Parallel, StepRequest, simulate_step

    title = framework_module(a.export).TITLE
    names = {f.name for f in fields(Parallel)}
    if not candidates:
        raise RingsimError("the plan has no split to export")
    if a.rank is not None and a.rank > len(candidates):
        raise RingsimError(f"--rank {a.rank}: the plan ranks {len(candidates)} splits")
    tried = [candidates[a.rank - 1]] if a.rank is not None else candidates
    passed: dict[str, list[int]] = {}         # why a better split was not taken -> its ranks
    for c in tried:
        par = Parallel(**{k: v for k, v in c["parallel"].items() if k in names})
        step = simulate_step(StepRequest(model=model, seq=seq, global_batch=global_batch, parallel=par,
                                         hardware=hardware))
        why = refusal(a.export, step)
        if why is None:
            text = export(a.export, step, source=c["command"])
            said = f"rank {c['rank']} ({label(c)}) as a {title} job"
            for reason, ranks in passed.items():
                said += (f"; not rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))}: "
                         + reason.splitlines()[0])
            return text, said
        if a.rank is not None:
            raise RingsimError(f"rank {c['rank']} ({label(c)}): {why}")
        passed.setdefault(why, []).append(c["rank"])
    first = next(iter(passed))
    more = "" if not a.top else f" (of the first {len(candidates)}; --top 0 ranks every split)"
    raise RingsimError(f"no split of the plan runs as a {title} job{more}; rank 1: {first.splitlines()[0]}")


def step_from(a: argparse.Namespace, simulate: Any, show: Any) -> int:
    """`ringsim step --from FILE`: the job read, said, checked, simulated and shown."""
    from sim.frameworks import traps
    from sim.frameworks.job import framework_module, read

    text = read_bytes(a.from_file, what="job file", max_bytes=JOB_FILE_BYTES).decode("utf-8", errors="replace")
    job = read(text, a.from_file, gpus=a.gpus)
    module = framework_module(job.framework)
    if a.gpus_per_node is None and job.gpus_per_node:
        a.gpus_per_node = job.gpus_per_node
    hw = hardware_from_args(a)
    out = sys.stderr if a.json or (a.export and a.out is None) else sys.stdout
    p = job.parallel
    print(f"{a.from_file}: a {module.TITLE} job: {job.model.name}, {job.seq:,}-token sequences, "
          f"{job.global_batch // job.seq:,} a step; TP {p.tp} x CP {p.cp} x PP {p.pp} x DP {p.dp}"
          + (f", CP {p.scheme}" if p.cp > 1 else ""), file=out)
    if job.ignored:
        print(f"ignored (they do not change the step): {', '.join(job.ignored)}", file=out)
    if job.unknown:
        print(f"not read (unknown to ringsim): {', '.join(job.unknown)}", file=out)
    for note in job.notes:
        print(f"assumed: {note}", file=out)
    called = []
    if job.cp_ignored:
        called.append(f"CALLED OUT: {job.cp_ignored}")
    peak = hw.gpu.peak_tflops.get("fp8" if p.fp8 else "bf16")
    if a.logged_tflops is not None and peak is not None and a.logged_tflops > peak:
        called.append(f"CALLED OUT: the logged {a.logged_tflops:g} TFLOP/s per GPU is above the {hw.gpu.name}'s dense "
                      f"{'FP8' if p.fp8 else 'BF16'} peak of {peak:g}: the run did less work than it counts"
                      + (" (its context parallelism did not run)" if job.cp_ignored else ""))
    for line in called:
        print(line, file=out)
    if job.traps:
        raise RingsimError("\n".join(job.traps))
    # whose implementation of the CP scheme runs is ringsim's choice (--impl), not the job's
    req = job.request(hw)
    step = simulate(replace(req, parallel=replace(p, impl=a.impl)))
    if a.export:
        export_step(a, step, source=f"{a.from_file} (read as a {module.TITLE} job)", show=lambda: show(step))
    else:
        show(step)
    if a.logged_tflops is not None:
        print(f"\nlogged {a.logged_tflops:g} TFLOP/s per GPU; simulated {step.tflops_per_gpu:.0f} (ringsim's count, "
              f"causal attention as half) or {step.palm_tflops_per_gpu:.0f} (PaLM's, attention unmasked)", file=out)
    memory = traps.memory_line(step, module.FLAGS, step.request.micro_batch)
    if memory:
        raise RingsimError(memory)
    return 0
