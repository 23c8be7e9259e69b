"""Plan a training run over tensor, context, pipeline and data parallelism together.

Given a model, a sequence length, a global batch (tokens a step) and a cluster, every
candidate of its GPUs is a TP x CP x PP x DP split with a ZeRO stage, a recomputation,
for CP > 1 a CP scheme, for TP > 1 its collectives exposed or overlapped with the GEMMs
and for PP > 1 plain or interleaved 1F1B (INTERLEAVES; an interleaved split is timed only
where its plain form fits, as interleaving adds memory), each timed by
`sim.training.step.simulate_step` exactly as `ringsim step` would run the command it carries. A
degree that does not fit the model (TP not dividing
the heads, the FFN or the vocabulary; a sequence that does not split over CP; more stages
than layers; a batch that is not whole sequences per replica) is not a candidate. TP stays
inside a node (its collectives are on every layer's critical path). The fitting
candidates are ranked by tokens/s per GPU, each with one sentence on what costs it most.

Attention is simulated once per (TP, CP, scheme, micro-batch) and pass, so a plan over
thousands of candidates simulates a few dozen attention layers.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from sim.errors import RingsimError
from sim.hardware.cluster import Hardware
from sim.planning.spec import configs_from, option
from sim.reasons import LABEL_SEPARATOR, Clause, clause, english
from sim.scenario.models import Model
from sim.scenario.resolve import hardware_of
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names
from sim.schemes.base import divisors
from sim.training.step import Parallel, StepRequest, simulate_step

CP_SCHEMES = tuple(name for name in scheme_names() if get_scheme(name).training_cp)
"""CP schemes tried, each with its default settings (sim.schemes.base.Scheme.training_cp):
the zigzag ring and the all-gather (Llama 3's)."""
RECOMPUTES = ("none", "selective", "full")
INTERLEAVES = (1, 2, 4)
"""Virtual stages per GPU tried when PP > 1: plain 1F1B and the interleaved schedule at two
depths (each where the micro-batches and the layers allow it)."""
PARTS = ("gemm_s", "attention_s", "elementwise_s", "tp_comm_s", "recompute_s", "pp_bubble_s", "pp_comm_s",
         "dp_comm_s", "optimizer_s")
"""The parts of a step's breakdown a candidate's sentence may name (sim.reasons.WORDS["part"])."""


@dataclass
class StepPlan:
    candidates: list[dict[str, Any]]
    considered: int
    refused: int
    seconds: float
    gpus: int
    memory_bytes: float
    skipped: int = 0
    """Interleaved splits not timed: their plain-1F1B form does not fit or cannot be built."""
    extras: dict[str, Any] = field(default_factory=dict)


def request_hardware(req: Any) -> tuple[Hardware, list[str]]:
    """The hardware of a `sim.planning.plan.PlanRequest` (its cluster, GPU, links, nodes, PCIe
    flags) and the `ringsim` flags that give it."""
    config = configs_from([{k: v for k, v in req.base_options().items() if option(k).group == "hardware"}])[0]
    return hardware_of(config.values), config.argv


def step_argv(model: Model, seq: int, global_batch: int, par: Parallel) -> list[str]:
    """The `ringsim step` arguments (after `step`) of one configuration, hardware aside."""
    argv = ["--model", model.name, "--seq", str(seq), "--global-batch", str(global_batch)]
    if par.microbatches is not None:
        argv += ["--microbatches", str(par.microbatches)]
    argv += ["--tp", str(par.tp), "--cp", str(par.cp), "--pp", str(par.pp), "--dp", str(par.dp),
             "--zero", str(par.zero), "--recompute", par.recompute]
    if par.cp > 1:
        argv += ["--scheme", par.scheme, "--layout", par.layout]
    if par.interleave > 1:
        argv += ["--interleave", str(par.interleave)]
    if par.fp8:
        argv.append("--fp8")
    if par.tp_overlap:
        argv.append("--tp-overlap")
    if par.grad_reduce != "fp32":
        argv += ["--grad-reduce", par.grad_reduce]
    return argv


def step_command(model: Model, seq: int, global_batch: int, par: Parallel, hardware_argv: list[str]) -> str:
    return shlex.join(["ringsim", "step", *step_argv(model, seq, global_batch, par), *hardware_argv])


def plan_steps(model: Model, seq: int, global_batch: int, hardware: Hardware, gpus: int, *,
               hardware_argv: list[str] | None = None, fp8: bool = False,
               on_progress: Callable[[int, int], None] | None = None) -> StepPlan:
    t0 = time.perf_counter()
    if global_batch < seq:
        raise RingsimError(f"--global-batch {global_batch:,} tokens is less than one {seq:,}-token sequence")
    splits = []
    for tp in divisors(gpus):
        if tp > hardware.gpus_per_node:
            continue
        for cp in divisors(gpus // tp):
            for pp in divisors(gpus // (tp * cp)):
                dp = gpus // (tp * cp * pp)
                for zero in ((1, 3) if dp > 1 else (1,)):
                    for recompute in RECOMPUTES:
                        for scheme in (CP_SCHEMES if cp > 1 else (DEFAULT_SCHEME,)):
                            for overlap in ((False, True) if tp > 1 else (False,)):
                                for v in (INTERLEAVES if pp > 1 else (1,)):
                                    splits.append(Parallel(tp=tp, cp=cp, pp=pp, dp=dp, zero=zero,
                                                           recompute=recompute, fp8=fp8, scheme=scheme,
                                                           tp_overlap=overlap, interleave=v))
    out, refused, skipped = [], 0, 0
    first_refusal = ""
    limit = hardware.gpu.memory_gb * 1e9
    plain_fits: dict[Parallel, bool] = {}        # each split's answer with plain 1F1B (v = 1)
    for i, par in enumerate(splits):
        if on_progress is not None:
            on_progress(i + 1, len(splits))
        plain = replace(par, interleave=1)
        if par.interleave > 1 and not plain_fits.get(plain, False):
            # interleaving only adds to the memory (more chunks in flight, sim.training.pipeline.in_flight):
            # a split that does not fit, or cannot be built, with plain 1F1B is not tried deeper
            skipped += 1
            continue
        try:
            req = StepRequest(model=model, seq=seq, global_batch=global_batch, parallel=par, hardware=hardware)
            step = simulate_step(req)
        except RingsimError as e:
            refused += 1
            first_refusal = first_refusal or str(e)
            continue
        d = step.to_dict()
        d["command"] = step_command(model, seq, global_batch, par, hardware_argv or [])
        d["fits"] = step.memory_bytes_per_gpu <= limit
        if par.interleave == 1:
            plain_fits[par] = d["fits"]
        out.append(d)
    if not out:
        # an empty table would read as an answer: say why no split runs
        raise RingsimError(f"none of the {len(splits):,} splits of {gpus:,} GPUs can run this step; the first: "
                           f"{first_refusal}")
    out.sort(key=lambda c: (not c["fits"], -c["tokens_per_s_per_gpu"]))
    for rank, c in enumerate(out, 1):
        c["rank"] = rank
        why = _why(c, out[0], limit)
        c["why"], c["why_clauses"] = english(why), why
    return StepPlan(candidates=out, considered=len(splits), refused=refused, seconds=time.perf_counter() - t0,
                    gpus=gpus, memory_bytes=limit, skipped=skipped)


def _why(c: dict[str, Any], best: dict[str, Any], limit: float) -> list[Clause]:
    """How it stands against the fastest, and its largest cost besides the GEMMs."""
    if not c["fits"]:
        return [clause("step.unfit", memory_gb=c["memory_bytes_per_gpu"] / 1e9, limit_gb=limit / 1e9)]
    b = c["breakdown"]
    costs = {k: v for k, v in b.items() if k in PARTS and k != "gemm_s"}
    worst = max(costs, key=costs.get) if costs else None
    share = [clause("step.share", part=worst, share=b[worst] / c["step_s"])] if worst else []
    if c is best:
        return [clause("step.fastest"), *share]
    slower = best["tokens_per_s_per_gpu"] / c["tokens_per_s_per_gpu"]
    stand = clause("step.tie") if slower < 1.01 else clause("step.slower", ratio=slower)
    return [stand, *share]


def split_clauses(parallel: dict[str, Any]) -> list[Clause]:
    """A candidate's split (its `parallel`) as sim.reasons clauses, said with LABEL_SEPARATOR."""
    p = parallel
    out = [clause("split.degrees", tp=p["tp"], cp=p["cp"], pp=p["pp"], dp=p["dp"]), clause("split.zero", zero=p["zero"]),
           clause("split.recompute", recompute=p["recompute"])]
    if p["cp"] > 1:
        out.append(clause("split.scheme", scheme=p["scheme"]))
    if p.get("tp_overlap"):
        out.append(clause("split.overlapped"))
    if p.get("interleave", 1) > 1:
        out.append(clause("split.virtual", stages=p["interleave"]))
    return out


def label(c: dict[str, Any]) -> str:
    """A candidate's split in English: "TP 2 CP 4 PP 1 DP 1, ZeRO-1, recompute none, CP ring"."""
    return english(split_clauses(c["parallel"]), LABEL_SEPARATOR)
