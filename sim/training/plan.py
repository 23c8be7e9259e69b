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

Asked for the best `top` only, the plan bounds and prunes: every split's memory is known
before anything is simulated (sim.training.step.step_memory), so the ranking's order of
fitting first is; each split gets a lower bound of its step that simulates nothing
(step_bound_s: attention at its ideal time, the pipeline at its fill, work and drain), and
the splits are timed in the order of their bounds, the attention simulated when a split
first needs it and the pipeline played only where its bound once the attention is known
(StepParts.bound_s) is below the `top`-th step timed so far. A split whose bound exceeds
the `top`-th best cannot be among the first `top` and is not timed: it is listed in
`not_ranked` with that bound. The first `top` are the whole plan's first `top`, the same
numbers in the same order.
"""

from __future__ import annotations

import heapq
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from sim.errors import RingsimError
from sim.hardware.cluster import Hardware
from sim.planning.plan import TIE_WITHIN
from sim.planning.spec import configs_from, option
from sim.reasons import LABEL_SEPARATOR, Clause, clause, english
from sim.scenario.models import Model
from sim.scenario.resolve import hardware_of
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names
from sim.schemes.base import divisors
from sim.training.pipeline import pipeline_makespans
from sim.training.step import Parallel, StepRequest, step_bound_s, step_memory, step_parts
from sim.units import fmt_s

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
    fit: int | None = None
    """Splits that fit, timed or not (None: count the candidates that fit)."""
    not_ranked: list[dict[str, Any]] = field(default_factory=list)
    """Splits that cannot be among the first `top` (plan_steps), each with `step_at_least_s`:
    a lower bound of its step, or its step where it was timed; best bound first."""
    bar_s: float | None = None
    """The `top`-th step: the time every split in `not_ranked` cannot beat."""
    timed_behind: int = 0
    """Splits timed that `not_ranked` lists (behind the first `top`)."""

    @property
    def timed(self) -> int:
        """Splits whose step was timed."""
        return len(self.candidates) + self.timed_behind

    @property
    def fitting(self) -> int:
        return self.fit if self.fit is not None else sum(c["fits"] for c in self.candidates)


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


MARGIN = 1e-9
"""A bound prunes a split only where it exceeds the bar by this share: a bound adds its parts
in another order than the step does, so the two may differ in their last bits."""


def plan_steps(model: Model, seq: int, global_batch: int, hardware: Hardware, gpus: int, *,
               hardware_argv: list[str] | None = None, fp8: bool = False,
               on_progress: Callable[[int, int], None] | None = None, top: int | None = None) -> StepPlan:
    """Every split of `gpus` GPUs, ranked (module docstring); with `top`, only the first
    `top` are sure to be timed, the rest bounded (StepPlan.not_ranked)."""
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
    first_refusal = ""
    limit = hardware.gpu.memory_gb * 1e9
    progress = _Progress(on_progress, len(splits))
    # every split's request and memory, nothing simulated: the memory does not wait on a time
    built: list[tuple[int, Parallel, StepRequest, bool]] = []
    refused, skipped = set(), set()
    plain_fits: dict[tuple, bool] = {}           # each split's answer with plain 1F1B (v = 1), by _plain
    memory: dict[int, float] = {}
    for i, par in enumerate(splits):
        if par.interleave > 1 and not plain_fits.get(_plain(par), False):
            # interleaving only adds to the memory (more chunks in flight, sim.training.pipeline.in_flight):
            # a split that does not fit, or cannot be built, with plain 1F1B is not tried deeper
            skipped.add(i)
            continue
        try:
            req = StepRequest(model=model, seq=seq, global_batch=global_batch, parallel=par, hardware=hardware)
            memory[i] = step_memory(req)["total"]
        except RingsimError as e:
            refused.add(i)
            first_refusal = first_refusal or str(e)
            continue
        fits = memory[i] <= limit
        if par.interleave == 1:
            plain_fits[_plain(par)] = fits
        built.append((i, par, req, fits))
    progress.done(len(skipped) + len(refused))
    timed: dict[int, dict[str, Any]] = {}
    bounds: dict[int, float] = {}                  # a split not timed: its step's lower bound
    fitting = [x for x in built if x[3]]
    others = [x for x in built if not x[3]]
    if not top:
        _time_all(built, timed, refused, hardware_argv, progress)
    else:
        # the fitting rank before the others: the others are timed only to fill the first `top`
        _bound_and_time(fitting, top, timed, refused, bounds, hardware_argv, progress)
        room = top - sum(1 for c in timed.values() if c["fits"])
        if room > 0:
            _bound_and_time(others, room, timed, refused, bounds, hardware_argv, progress)
        else:
            bounds.update((x[0], None) for x in others)
            progress.done(len(others))
    _refused_with_plain(splits, refused, skipped, timed, bounds)
    if not timed:
        # an empty table would read as an answer: say why no split runs
        raise RingsimError(f"none of the {len(splits):,} splits of {gpus:,} GPUs can run this step; the first: "
                           f"{first_refusal}")
    out = sorted(timed.values(), key=lambda c: (not c["fits"], -c["tokens_per_s_per_gpu"], c["_index"]))
    behind = set()
    if top and len(out) > top:
        # timed, but behind the first `top`: their step is what they cannot beat the bar with
        bounds.update((c["_index"], c["step_s"]) for c in out[top:])
        behind = {c["_index"] for c in out[top:]}
        out = out[:top]
    for rank, c in enumerate(out, 1):
        c["rank"] = rank
        why = _why(c, out[0], limit)
        c["why"], c["why_clauses"] = english(why), why
        del c["_index"]
    not_ranked, bar = [], None
    if bounds:
        bar = out[-1]["step_s"] if out else None
        fits_of = {x[0]: x[3] for x in built}
        for i, bound in bounds.items():
            par = splits[i]
            not_ranked.append({"parallel": _parallel_dict(par), "fits": fits_of[i],
                               "memory_bytes_per_gpu": memory[i], "step_at_least_s": bound, "timed": i in behind,
                               "command": step_command(model, seq, global_batch, par, hardware_argv or [])})
        not_ranked.sort(key=lambda c: (not c["fits"], c["step_at_least_s"] is None, c["step_at_least_s"] or 0.0))
    return StepPlan(candidates=out, considered=len(splits), refused=len(refused), seconds=time.perf_counter() - t0,
                    gpus=gpus, memory_bytes=limit, skipped=len(skipped), fit=len(fitting) - sum(
                        1 for x in fitting if x[0] in refused or x[0] in skipped),
                    not_ranked=not_ranked, bar_s=bar, timed_behind=len(behind))


def not_ranked_line(p: StepPlan, top: int) -> str:
    """One line on the splits a plan of the first `top` did not rank (StepPlan.not_ranked)."""
    bounded = [c for c in p.not_ranked if c["fits"] and not c["timed"]]
    behind = sum(c["timed"] for c in p.not_ranked)
    unfit = sum(not c["fits"] and not c["timed"] for c in p.not_ranked)
    parts = []
    if bounded:
        least = min(c["step_at_least_s"] for c in bounded)
        parts.append(f"{len(bounded):,} bounded at {fmt_s(least)} or more")
    if behind:
        parts.append(f"{behind:,} timed behind")
    if unfit:
        parts.append(f"{unfit:,} not fitting")
    bar = f", the {_ordinal(top)}'s step" if p.bar_s is not None else ""
    return (f"not ranked: {len(p.not_ranked):,} splits that cannot be among the first {top}"
            f" ({fmt_s(p.bar_s) if p.bar_s is not None else '-'}{bar}): {', '.join(parts)}; --top 0 ranks them all")


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 < 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _plain(par: Parallel) -> tuple:
    """A split but its interleaving (what dataclasses.replace would give, at a tenth of its cost)."""
    return (par.tp, par.cp, par.pp, par.dp, par.zero, par.recompute, par.fp8, par.microbatches, par.tp_overlap,
            par.grad_reduce, par.scheme, par.layout, par.impl)


def _parallel_dict(par: Parallel) -> dict[str, Any]:
    return {"tp": par.tp, "cp": par.cp, "pp": par.pp, "dp": par.dp, "zero": par.zero, "recompute": par.recompute,
            "fp8": par.fp8, "interleave": par.interleave, "scheme": par.scheme, "layout": par.layout,
            "tp_overlap": par.tp_overlap}


def _time_all(built: list[tuple[int, Parallel, StepRequest, bool]], timed: dict[int, dict[str, Any]],
              refused: set[int], hardware_argv: list[str] | None, progress: "_Progress") -> None:
    """Time every split, the pipelines of one shape (stages, micro-batches, depth) played
    together (sim.training.pipeline.pipeline_makespans): the same numbers as one by one."""
    shapes: dict[tuple[int, int, int], list[tuple[int, Parallel, StepRequest, bool]]] = {}
    for x in built:
        p, req = x[1], x[2]
        shapes.setdefault((p.pp, req.microbatches, p.interleave), []).append(x)
    for (_, mb, v), group in shapes.items():
        ready = []                               # (split, its parts)
        for x in group:
            try:
                ready.append((x, step_parts(x[2])))
            except RingsimError:
                refused.add(x[0])
        plays = [parts.pipeline_play for _, parts in ready]
        pipe = pipeline_makespans([f for f, *_ in plays], [b for _, b, *_ in plays], [s for _, _, s, *_ in plays],
                                  mb, v)
        sent = [n for n, (_, _, s, *_) in enumerate(plays) if s]
        bare = dict(zip(sent, pipeline_makespans([plays[n][0] for n in sent], [plays[n][1] for n in sent],
                                                 [0.0] * len(sent), mb, v)))
        for n, (x, parts) in enumerate(ready):
            _time(x, timed, refused, parts, hardware_argv, (pipe[n], bare.get(n, pipe[n])))
        progress.done(len(group))


def _time(x: tuple[int, Parallel, StepRequest, bool], timed: dict[int, dict[str, Any]], refused: set[int],
          parts: Any, hardware_argv: list[str] | None, pipelines: tuple[float, float] | None = None) -> None:
    """Time one split (its StepParts where they are already known, and its pipeline's
    makespans where played) into `timed`."""
    i, par, req, fits = x
    try:
        step = (parts or step_parts(req)).step(pipelines)
    except RingsimError:
        refused.add(i)
        return
    d = step.to_dict()
    d["command"] = step_command(req.model, req.seq, req.global_batch, par, hardware_argv or [])
    d["fits"] = fits
    d["_index"] = i
    timed[i] = d


def _bound_and_time(group: list[tuple[int, Parallel, StepRequest, bool]], slots: int,
                    timed: dict[int, dict[str, Any]], refused: set[int], bounds: dict[int, float | None],
                    hardware_argv: list[str] | None, progress: "_Progress") -> None:
    """Time the splits of `group` (all fitting, or none) in the order of their bounds until
    the next bound exceeds the `slots`-th best step timed (module docstring); the splits
    not timed go to `bounds`."""
    best: list[float] = []                       # the `slots` least steps timed, negated (a max-heap)
    ordered = []
    for x in group:
        try:
            ordered.append((step_bound_s(x[2]), x))
        except RingsimError:
            refused.add(x[0])
            progress.done(1)
    ordered.sort(key=lambda bx: (bx[0], bx[1][0]))
    for n, (bound, x) in enumerate(ordered):
        if len(best) == slots and bound > -best[0] * (1 + MARGIN):
            # every split left has a bound at least this one's
            bounds.update((y[0], b) for b, y in ordered[n:])
            progress.done(len(ordered) - n)
            break
        try:
            parts = step_parts(x[2])
        except RingsimError:
            refused.add(x[0])
            progress.done(1)
            continue
        exact_bound = parts.bound_s()
        if len(best) == slots and exact_bound > -best[0] * (1 + MARGIN):
            bounds[x[0]] = exact_bound          # its attention simulated, its pipeline need not be played
        else:
            _time(x, timed, refused, parts, hardware_argv)
            if x[0] in timed:
                heapq.heappush(best, -timed[x[0]]["step_s"])
                if len(best) > slots:
                    heapq.heappop(best)
        progress.done(1)


def _refused_with_plain(splits: list[Parallel], refused: set[int], skipped: set[int],
                        timed: dict[int, dict[str, Any]], bounds: dict[int, float | None]) -> None:
    """An interleaved split whose plain form could not be simulated is not tried (as the
    plain form that cannot be built), whatever became of it."""
    plain_refused = {_plain(splits[i]) for i in refused if splits[i].interleave == 1}
    if not plain_refused:
        return
    for i, par in enumerate(splits):
        if par.interleave > 1 and i not in skipped and _plain(par) in plain_refused:
            refused.discard(i)
            timed.pop(i, None)
            bounds.pop(i, None)
            skipped.add(i)


class _Progress:
    """Counts the splits settled (timed, bounded, refused or not tried) for `on_progress`."""

    def __init__(self, on_progress: Callable[[int, int], None] | None, total: int) -> None:
        self.on_progress, self.total, self.settled = on_progress, total, 0

    def done(self, n: int) -> None:
        if n and self.on_progress is not None:
            self.settled += n
            self.on_progress(self.settled, self.total)


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
    # within the model's own error of the fastest, a tie (as the planner of one attention step says)
    stand = (clause("step.tie", within=TIE_WITHIN) if slower < 1 + TIE_WITHIN
             else clause("step.slower", ratio=slower))
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
