"""Plan a long-context run: which scheme, which degrees, which layout, and does it fit.

Given a model (sim.scenario.models), a sequence length and batch and a cluster, `plan` lists every
sequence-parallel candidate over all the GPUs: each scheme's own (sim.schemes.base.Scheme.candidates,
in the registry's order: the ring with each layout; the all-gather with each head-group count
that divides the K/V heads; each hybrid Ulysses degree u x ring degree r = N with each
placement where it decides what the flows cross, and each ring layout; Ulysses over every
GPU). A candidate the configuration refuses (a degree that does not divide the heads, a
length that does not cut into the layout's chunks) is listed as not possible, with the
reason. The others are simulated (sim.planning.sweep, in this process or on Dask) exactly as
`ringsim simulate` would run the command each candidate carries.

Only attention is modelled, one layer at a time, for the pass chosen (forward, backward
or both). Time per step = the layer's attention makespan x the model's layers (the
layers run one after another and are alike).

Memory per GPU, the largest over the GPUs (what `fits` compares with the GPU's memory
less the headroom):
- the layer's working memory, as its scheme itemizes it (sim.schemes): own Q/K/V shard,
  ring buffers, gathered K/V (all-gather), head-sharded copies (Ulysses, hybrid),
  output, accumulators and softmax statistics, and backward's buffers;
- what the other layers keep: with a backward pass, each keeps for it its attention
  inputs and output and the log-sum-exp (ring and all-gather: its Q, K/V and output
  token shards; Ulysses and hybrid: the head-sharded Q/K/V and output its local
  attention saw, replicated K/V heads included) for (layers - 1) layers; forward only,
  each keeps its K/V shard (the prefill's cache);
- with `param_shards`, the parameters and their state sharded over that many GPUs:
  16 bytes per parameter with a backward pass (bf16 weights and gradients, fp32 master
  weights and two Adam moments), else the weights alone.
Nothing else is counted (the MLP's activations, the embedding, framework and
communication buffers): that is what the headroom is for.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from sim.errors import RingsimError
from sim.hardware.cluster import Hardware
from sim.hardware.presets import cluster_preset, gpu_preset
from sim.planning.spec import Config, configs_from
from sim.planning.sweep import Runner, run_configs
from sim.reasons import Clause, clause, english
from sim.scenario.config import Scenario, Workload
from sim.scenario.documents import bounds as doc_bounds
from sim.scenario.documents import describe_packed
from sim.scenario.memory import peak_memory
from sim.scenario.models import Model
from sim.scenario.resolve import hardware_of, scenario_of, workload_of
from sim.scenario.schema import SCHEME_OPTIONS
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names
from sim.schemes.base import Variant
from sim.units import fmt_bytes, fmt_s, parse_count, require_whole, table

ADAM_BYTES_PER_PARAM = 16
"""bf16 weights (2) and gradients (2), fp32 master weights (4) and Adam's two moments (8)."""
MEMORY_MODEL = (
    "per GPU: the layer's attention working memory (the scheme's own itemization: shards, ring "
    "buffers, gathered K/V, head-sharded copies, accumulators, backward buffers), plus what each "
    "other layer keeps (with backward: its attention inputs, output and log-sum-exp; forward: its "
    "K/V shard), plus parameters and optimizer state when a sharding is given; MLP activations "
    "and framework buffers are not counted (keep headroom for them)")


def parse_headroom(value: Any) -> tuple[float, float]:
    """(fraction of the GPU's memory, bytes) to keep free: '10%' -> (0.1, 0),
    '8GB' -> (0, 8e9), '8GiB' -> (0, 8 x 2^30), a bare number is GB."""
    if value is None or value == "":
        return 0.0, 0.0
    text = str(value).strip()
    try:
        if text.endswith("%"):
            frac = float(text[:-1]) / 100
            if not 0 <= frac < 1:
                raise ValueError
            return frac, 0.0
        for unit, scale in (("GIB", 2 ** 30), ("GB", 1e9), ("MIB", 2 ** 20), ("MB", 1e6)):
            if text.upper().endswith(unit):
                text, mult = text[: -len(unit)], scale
                break
        else:
            mult = 1e9
        b = float(text) * mult
        if not math.isfinite(b) or b < 0:
            raise ValueError
        return 0.0, b
    except ValueError:
        raise RingsimError(f"headroom must be a share such as 10% or an amount such as 8GB, got {value!r}") from None


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """The question: a model, a sequence and a cluster."""

    model: Model
    seq: int
    """Tokens per sequence."""
    batch: int = 1
    nodes: int = 1
    gpus_per_node: int = 8
    gpu: str | None = None
    """GPU preset (default: the cluster's, else H100-SXM)."""
    link: str | None = None
    inter_link: str | None = None
    cluster: str | None = None
    nics_per_node: int | None = None
    kernel: str = "default"
    merge: str = "fused"
    """How each block's partial result is merged: 'fused' or 'unfused' (sim.hardware.presets.MERGE_BYTES)."""
    impl: str = "ideal"
    """Whose implementation of each scheme runs (sim.implementations); a scheme or layout
    the library lacks is listed as not possible."""
    profile: str | None = None
    """A calibrated profile (`ringsim calibrate`) instead of the presets."""
    dtype: str = "bf16"
    causal: bool = True
    pass_: str = "fwdbwd"
    headroom: str | float | None = None
    """Memory to keep free per GPU: '10%' or '8GB'."""
    memory_gb: float | None = None
    """The GPU's memory, replacing the preset's (needed with a profile)."""
    param_shards: int | None = None
    """GPUs the parameters and optimizer state are sharded over; None: not counted."""
    docs: str | None = None
    """Packed documents (sim.scenario.documents: a list of lengths, or a distribution drawn with
    `seed`); None: one document per sequence."""
    seed: int = 0
    window: int | None = None
    """Sliding-window attention: a query sees itself and window - 1 keys before it."""
    pcie: dict[str, Any] = field(default_factory=dict)
    """The PCIe flags over the cluster's node (simulate's --pcie-gen, --gpus-per-switch,
    --gpus-per-socket, --p2p, --socket-link, --staged-gbps, by flag name without the
    leading dashes)."""

    def __post_init__(self) -> None:
        for name in ("seq", "batch", "nodes", "gpus_per_node"):
            require_whole(name.replace("_", "-"), getattr(self, name))
        if self.param_shards is not None and (not isinstance(self.param_shards, int) or self.param_shards <= 0):
            raise RingsimError(f"param-shards must be a positive whole number, got {self.param_shards!r}")
        if self.param_shards is not None and self.model.params is None:
            raise RingsimError("counting parameters needs the model's parameter count (--params)")
        if self.memory_gb is not None and not (isinstance(self.memory_gb, (int, float)) and self.memory_gb > 0):
            raise RingsimError(f"memory-gb must be positive, got {self.memory_gb!r}")
        parse_headroom(self.headroom)
        if self.merge not in ("fused", "unfused"):
            raise RingsimError(f"merge must be fused or unfused, got {self.merge!r}")
        if self.docs is not None:
            doc_bounds(self.docs, self.seq, self.seed)       # a list that does not fill the sequence: here

    @property
    def packed(self) -> bool:
        """Whether the candidates run on packed documents (or a window)."""
        return self.docs is not None or self.window is not None

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def base_options(self) -> dict[str, Any]:
        """simulate's options every candidate shares."""
        m = self.model
        o: dict[str, Any] = {"gpus": self.n_gpus, "seq": self.seq, "batch": self.batch, "heads": m.heads,
                             "kv-heads": m.kv_heads, "head-dim": m.head_dim, "dtype": self.dtype,
                             "pass": self.pass_}
        if not self.causal:
            o["causal"] = False
        for name, value in (("docs", self.docs), ("window", self.window)):
            if value is not None:
                o[name] = value
        if self.docs is not None and self.seed:
            o["seed"] = self.seed
        for name, value in (("cluster", self.cluster), ("gpu", self.gpu), ("link", self.link),
                            ("inter-link", self.inter_link)):
            if value is not None:
                o[name] = value
        o["gpus-per-node"] = self.gpus_per_node
        o.update({k: v for k, v in self.pcie.items() if v is not None})
        if self.nics_per_node is not None:
            o["nics-per-node"] = self.nics_per_node
        if self.kernel != "default":
            o["kernel"] = self.kernel
        if self.merge != "fused":
            o["merge"] = self.merge
        if self.impl != "ideal":
            o["impl"] = self.impl
        if self.profile is not None:
            o["profile"] = self.profile
        return o

    def describe(self) -> dict[str, Any]:
        return {"model": self.model.describe(), "seq": self.seq, "batch": self.batch, "nodes": self.nodes,
                "gpus_per_node": self.gpus_per_node, "gpus": self.n_gpus, "gpu": self.gpu, "link": self.link,
                "inter_link": self.inter_link, "cluster": self.cluster, "nics_per_node": self.nics_per_node,
                "kernel": self.kernel, "merge": self.merge, **({"impl": self.impl} if self.impl != "ideal" else {}),
                "profile": self.profile, "dtype": self.dtype,
                "causal": self.causal, "pass": self.pass_, "headroom": self.headroom, "memory_gb": self.memory_gb,
                "param_shards": self.param_shards, **({"pcie": dict(self.pcie)} if self.pcie else {}),
                **({"docs": self.docs, "seed": self.seed} if self.docs is not None else {}),
                **({"window": self.window} if self.window is not None else {})}



# --- candidates ------------------------------------------------------------------------------

SETTINGS = ("layout", *(o.name for o in SCHEME_OPTIONS))
"""What a candidate's `settings` give, in this order: its layout, then its scheme's own."""


def candidates(workload: Workload, hardware: Hardware, n_gpus: int) -> list[tuple[str, Variant]]:
    """Every scheme's candidates on `n_gpus` GPUs (sim.schemes.base.Scheme.candidates), in the
    registry's order: (scheme, candidate)."""
    return [(name, v) for name in scheme_names() for v in get_scheme(name).candidates(workload, hardware, n_gpus)]


# --- memory ------------------------------------------------------------------------------------

def plan_memory(req: PlanRequest, scenario: Scenario) -> dict[str, int]:
    """Bytes per GPU of a candidate, itemized (see the module's docstring); 'total' is
    what must fit."""
    items = peak_memory(scenario)
    working = int(items["total"])
    w = scenario.workload
    if w.pass_ in ("bwd", "fwdbwd"):
        lse = int(items["softmax_stats"]) // 2       # log-sum-exp: one of the two fp32 statistics
        if "qkv_heads" in items:
            per_layer = int(items["qkv_heads"]) + int(items["out_heads"]) + lse
        else:
            per_layer = int(items["q"]) + int(items["kv_own"]) + int(items["out"]) + lse
        kept_what = "kept_for_backward"
    else:
        per_layer = w.kv_bytes(scenario.tokens_per_rank)
        kept_what = "kv_cache"
    out = {"attention_working": working, kept_what: per_layer * (req.model.layers - 1)}
    if req.param_shards is not None:
        per_param = ADAM_BYTES_PER_PARAM if w.pass_ != "fwd" else w.elem_bytes
        out["params_and_optimizer" if w.pass_ != "fwd" else "params"] = int(
            math.ceil(req.model.params * per_param / req.param_shards))
    out["total"] = sum(out.values())
    return out


def memory_limit_bytes(req: PlanRequest, capacity_bytes: float | None) -> tuple[float, float]:
    """(the GPU's memory, the limit after headroom), bytes."""
    cap = req.memory_gb * 1e9 if req.memory_gb is not None else capacity_bytes
    if cap is None and req.gpu is not None:
        cap = gpu_preset(req.gpu).memory_gb * 1e9
    if cap is None:
        raise RingsimError("the GPU's memory is not known (a calibrated profile does not say it); give --memory-gb")
    frac, b = parse_headroom(req.headroom)
    limit = cap * (1 - frac) - b
    if limit <= 0:
        raise RingsimError(f"headroom {req.headroom} leaves none of the GPU's {cap / 1e9:g} GB to plan with")
    return cap, limit


# --- the plan ----------------------------------------------------------------------------------

@dataclass
class Plan:
    request: PlanRequest
    candidates: list[dict[str, Any]]
    """Every simulated candidate, best first: those that fit by time per step, then the others."""
    not_possible: list[dict[str, str]]
    memory_bytes: float
    limit_bytes: float
    elapsed_s: float
    failed: list[dict[str, str]] = field(default_factory=list)

    @property
    def fitting(self) -> list[dict[str, Any]]:
        return [c for c in self.candidates if c["fits"]]

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        shown = self.candidates if not top else self.candidates[:top]
        return {"request": self.request.describe(), "memory_model": MEMORY_MODEL,
                "time_model": "only attention is modelled, one layer, the pass chosen; step = layer x layers",
                "memory_bytes": self.memory_bytes, "memory_limit_bytes": self.limit_bytes,
                "considered": len(self.candidates) + len(self.not_possible) + len(self.failed),
                "simulated": len(self.candidates), "fit": len(self.fitting),
                "candidates": shown, "not_possible": self.not_possible, "failed": self.failed}


def plan(req: PlanRequest, runner: Runner | None = None,
         on_progress: Callable[[int, int], None] | None = None) -> Plan:
    """Simulate every legal candidate and rank them (see the module's docstring)."""
    t0 = time.perf_counter()
    base = req.base_options()
    hardware = hardware_of(base)
    tried = candidates(workload_of(base), hardware, req.n_gpus)
    options_list = [base | {"scheme": scheme} | v.values for scheme, v in tried]
    configs = configs_from(options_list)
    legal: list[tuple[dict[str, Any], Variant, Config, Scenario]] = []
    not_possible = []
    for opts, (_, variant), config in zip(options_list, tried, configs):
        try:
            legal.append((opts, variant, config, scenario_of(config.values, hardware)))
        except RingsimError as e:
            reason = _why_not(opts, e)
            not_possible.append({"scheme": opts["scheme"], "variant": variant.name,
                                 "reason": str(e) if reason is None else english(reason),
                                 "variant_clause": variant.label, "reason_clause": reason})
    rows = run_configs([c for _, _, c, _ in legal], runner, on_progress)
    capacity = next((r["memory_bytes"] for r in rows if r.get("memory_bytes")), None)
    cap, limit = memory_limit_bytes(req, capacity)
    out, failed = [], []
    for (opts, variant, config, scenario), row in zip(legal, rows):
        if row.get("error"):
            failed.append({"scheme": opts["scheme"], "variant": variant.name, "error": row["error"],
                           "variant_clause": variant.label})
            continue
        mem = plan_memory(req, scenario)
        out.append({
            "scheme": opts["scheme"], "variant": variant.name, "command": config.command,
            "makespan_s": row["makespan_s"], "step_s": row["makespan_s"] * req.model.layers,
            "efficiency": row["efficiency"], "exposed_comm_s": row["exposed_comm_s"],
            "exposed_by_kind_s": {k: row[f"exposed_{k}_s"] for k in ("kv", "dkv", "ag", "rs", "a2a")
                                  if row.get(f"exposed_{k}_s")},
            "load_imbalance": row["load_imbalance"], "bytes_per_gpu": row["bytes_per_gpu"],
            "peak_mem_bytes": mem["total"], "attention_mem_bytes": row["peak_mem_bytes"], "memory": mem,
            "fits": mem["total"] <= limit, "bound": row["explanation"],
            "settings": {k: opts[k] for k in SETTINGS if k in opts},
            "variant_clause": variant.label, "bound_clauses": row["explanation_clauses"],
        })
    out.sort(key=lambda c: (not c["fits"], c["makespan_s"]))
    for i, c in enumerate(out):
        c["rank"] = i + 1
        why = _why(req, c, out, limit)
        c["why"], c["why_clauses"] = english(why), why
    return Plan(req, out, not_possible, cap, limit, time.perf_counter() - t0, failed)


HEAD_REASONS = ("refused.heads", "refused.kv-heads")
"""The refusals the head count gives."""


def _why_not(opts: dict[str, Any], e: RingsimError) -> Clause | None:
    """Why the configuration refuses a candidate, as a clause (None where the refusal is not one
    sim.reasons knows): for a scheme whose degree the heads bound, a degree they refuse says so."""
    if (e.reason is not None and get_scheme(opts["scheme"]).limited_by_heads
            and e.reason["clause"] in HEAD_REASONS):
        return clause("refused.head-count", reason=e.reason)
    return e.reason


TIE_WITHIN = 0.05
"""Candidates closer than this are tied: the GPU kernel model's median error on measured
blocks is 3-4% (docs/gpu-model.md), a profile's on measured runs 2-7% (docs/calibration.md)."""


def tied(makespans: Sequence[float]) -> list[int]:
    """The positions of the runs tied with the fastest, within TIE_WITHIN of its time: the
    fastest first, then by time (the fastest alone where it wins outright; none of none)."""
    order = sorted(range(len(makespans)), key=lambda i: makespans[i])
    if not order:
        return []
    best = makespans[order[0]]
    return [order[0]] + [i for i in order[1:] if makespans[i] < best * (1 + TIE_WITHIN)]


def tie_clause(c: dict[str, Any], nxt: dict[str, Any], ahead: float) -> Clause:
    """The fastest and the next are within the model's error: say so, and what differs."""
    diffs = []
    mem = nxt["peak_mem_bytes"] - c["peak_mem_bytes"]
    if abs(mem) > 0.05 * max(c["peak_mem_bytes"], 1):
        diffs.append(clause("plan.less-memory" if mem > 0 else "plan.more-memory", memory_bytes=abs(mem)))
    exposed = nxt["exposed_comm_s"] - c["exposed_comm_s"]
    if abs(exposed) > 0.02 * c["makespan_s"]:
        diffs.append(clause("plan.less-exposed" if exposed > 0 else "plan.more-exposed", exposed_s=abs(exposed)))
    return clause("plan.tie", scheme=nxt["scheme"], variant=nxt["variant_clause"], apart=ahead,
                  diffs=diffs or [clause("plan.same")])


def _why(req: PlanRequest, c: dict[str, Any], ranked: list[dict[str, Any]], limit: float) -> list[Clause]:
    """Why a candidate wins or loses: how it stands (it does not fit, it is the fastest, it is
    slower), what bounds it, and what its scheme holds."""
    best = next((x for x in ranked if x["fits"]), None)
    out = []
    if not c["fits"]:
        mem = c["memory"]
        kept = mem.get("kept_for_backward", mem.get("kv_cache", 0))
        items = [clause("plan.kept-for-backward" if "kept_for_backward" in mem else "plan.kv-cache",
                        kept_bytes=kept, layers=req.model.layers - 1),
                 clause("plan.working", working_bytes=mem["attention_working"])]
        if req.param_shards:
            items.append(clause("plan.params", params_bytes=mem.get("params_and_optimizer", mem.get("params", 0))))
        out.append(clause("plan.no-fit", peak_bytes=c["peak_mem_bytes"], limit_bytes=limit, items=items))
    elif c is best:
        rest = [x for x in ranked if x["fits"] and x is not c]
        if rest:
            nxt = rest[0]
            ahead = nxt["makespan_s"] / c["makespan_s"] - 1
            if ahead < TIE_WITHIN:
                out.append(tie_clause(c, nxt, ahead))
            else:
                out.append(clause("plan.fastest", ahead=ahead, scheme=nxt["scheme"], variant=nxt["variant_clause"]))
        else:
            out.append(clause("plan.only"))
    else:
        ratio = c["makespan_s"] / best["makespan_s"] if best else None
        if ratio is not None:
            out.append(clause("plan.slower", slower=ratio - 1) if ratio < 1.1 else clause("plan.times", ratio=ratio))
    out += c["bound_clauses"]
    out += get_scheme(c["scheme"]).plan_notes(c["settings"], req.n_gpus, req.model.kv_heads)
    return out


# --- text ---------------------------------------------------------------------------------------

def describe_question(req: PlanRequest) -> str:
    m, n = req.model, req.n_gpus
    c = cluster_preset(req.cluster) if req.cluster else None
    hw = req.gpu or (c.gpu if c else "H100-SXM")
    if req.profile:
        hw = f"the profile {req.profile}"
    links = req.link or (c.link if c else "nvlink4")
    inter = req.inter_link or (c.inter_link if c else None)
    between = f", {inter} between nodes" if inter and req.nodes > 1 else ""
    return (f"{m.name} ({m.layers} layers, {m.heads}/{m.kv_heads} heads x {m.head_dim}) at {req.seq:,} tokens, "
            f"batch {req.batch}, {req.dtype}, {'causal' if req.causal else 'full'}, {req.pass_}; "
            f"{n} x {hw} ({req.nodes} node{'s' if req.nodes > 1 else ''} of {req.gpus_per_node}, "
            f"{links} inside{between})" + _documents(req))


def _documents(req: PlanRequest) -> str:
    """'; packed: 37 documents, median ..., seed 1, window 4,096 tokens' (nothing for one document)."""
    if not req.packed:
        return ""
    return f"; packed: {describe_packed(req.docs, req.seq, req.seed, req.window)}"


def format_plan(p: Plan, top: int) -> str:

    req = p.request
    lines = [describe_question(req),
             f"memory per GPU: {fmt_bytes(p.limit_bytes)} usable of {p.memory_bytes / 1e9:g} GB "
             f"({fmt_bytes(p.memory_bytes)}); "
             f"{len(p.candidates)} candidates simulated, {len(p.fitting)} fit, {len(p.not_possible)} not possible; "
             f"{p.elapsed_s:.1f} s",
             "time: attention only, per layer and per step (x " + f"{req.model.layers} layers), {req.pass_}",
             ""]
    shown = p.candidates[:top]
    rows = [[c["rank"], c["scheme"], c["variant"], fmt_s(c["makespan_s"]), fmt_s(c["step_s"]),
             "-" if c["efficiency"] is None else f"{c['efficiency']:.1%}", fmt_s(c["exposed_comm_s"]),
             fmt_bytes(c["peak_mem_bytes"]), "yes" if c["fits"] else "NO"] for c in shown]
    lines.append(table(["#", "scheme", "variant", "per layer", "per step", "efficiency", "exposed comm",
                        "memory per GPU", "fits"], rows))
    if p.candidates and not p.fitting:
        least = min(p.candidates, key=lambda c: c["peak_mem_bytes"])
        lines.append(f"none fits: the least memory per GPU is {fmt_bytes(least['peak_mem_bytes'])} "
                     f"({least['scheme']}, {least['variant']}), {fmt_bytes(p.limit_bytes)} usable")
    lines.append("")
    for c in shown:
        lines.append(f"{c['rank']}. {c['scheme']} {c['variant']}: {c['why']}")
        lines.append(f"   {c['command']}")
    others = best_of_each_scheme(p, exclude=shown)
    if others:
        lines.append("")
        lines.append("the best of each other scheme:")
        for c in others:
            lines.append(f"{c['rank']}. {c['scheme']} {c['variant']} ({fmt_s(c['makespan_s'])} per layer, "
                         f"{fmt_bytes(c['peak_mem_bytes'])}): {c['why']}")
    if p.not_possible:
        lines.append("")
        lines.append("not possible:")
        seen = set()
        for x in p.not_possible:
            key = (x["scheme"], x["reason"])
            if key in seen:
                continue
            seen.add(key)
            same = sum(1 for y in p.not_possible if (y["scheme"], y["reason"]) == key)
            lines.append(f"  {x['scheme']} {x['variant']}" + (f" (and {same - 1} more)" if same > 1 else "")
                         + f": {x['reason']}")
    for x in p.failed:
        lines.append(f"failed: {x['scheme']} {x['variant']}: {x['error']}")
    return "\n".join(lines)


def best_of_each_scheme(p: Plan, exclude: list[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The best-ranked candidate of each scheme that has none in `exclude`."""
    taken = {c["scheme"] for c in exclude}
    out = []
    for c in p.candidates:
        if c["scheme"] not in taken:
            taken.add(c["scheme"])
            out.append(c)
    return out


def request_from(model: Model, *, seq: Any, **fields: Any) -> PlanRequest:
    """A PlanRequest with the sequence length given as a number or a size ('1M')."""
    return PlanRequest(model=model, seq=parse_count(seq, "seq"), **fields)
