"""A step as a torchtitan 0.3.0 job, and a torchtitan job read back as a step.

torchtitan 0.3.0 takes its configuration from a config function (`--module llama3 --config
llama3_70b`: torchtitan/models/llama3/config_registry.py) and `--section.key` flags over it,
parsed by tyro into Trainer.Config (torchtitan/config/manager.py, ConfigManager); it reads no
TOML file itself (torchtitan 0.2 did, `--job.config_file`). The export is a TOML file whose
tables and keys are 0.3.0's sections and field names (torchtitan/config/configs.py:
TrainingConfig, ParallelismConfig, CompileConfig; the activation-checkpointing policy, a tyro
subcommand, as `activation_checkpoint`), with the launch line that applies it in its header;
either the file or that line is read back.

What each ringsim setting becomes (and what torchtitan 0.3.0 cannot run):

- TP: `tensor_parallel_degree` with `enable_sequence_parallel`; PP: `pipeline_parallel_degree`,
  `pipeline_parallel_schedule` 1F1B or Interleaved1F1B with `pipeline_parallel_layers_per_stage`,
  `pipeline_parallel_microbatch_size`; the first and last stages' `..._less_layers` set so its
  stages hold ringsim's layers where it can.
- CP: `context_parallel_degree` and `context_parallel_load_balancer` (headtail: zigzag; None:
  contiguous). torchtitan 0.3.0 runs context parallelism as an all-gather of K/V:
  FlexAttention through flex_cp_allgather, SDPA through torch's context_parallel at its default
  rotate method, allgather (torchtitan/distributed/context_parallel/api.py; torch's
  _context_parallel/_attention.py, `rotate_method = ALL_GATHER`); 0.3.0 has no
  `context_parallel_rotate_method` (0.2's field). So only the all-gather scheme is exported
  (the scheme whose `frameworks` names torchtitan).
- Data parallelism: FSDP (ZeRO-3) is `data_parallel_shard_degree`, over which and the CP ranks
  torchtitan shards; DDP (ZeRO-0) `data_parallel_replicate_degree`. ZeRO-1 is not a setting.
- Recomputation: `activation_checkpoint` none, selective or full (torchtitan's selective is
  per-op, saving the matmuls' outputs: close to, not the same as, ringsim's attention-only).
- FP8 (Float8 linear layers) is chosen by the config function, not a key: llama3_405b has it,
  llama3_8b and llama3_70b do not. TP overlap: `compile.enable` with
  `compile.enable_async_tensor_parallel`. Gradients are reduced in float32 only.
- The batch: `training.seq_len`, `training.local_batch_size` (sequences per data-parallel rank
  in one accumulation step), `training.global_batch_size` (sequences a step).
- A pipeline needs `training.disable_cuda_graphs` (Trainer.Config._validate_cuda_graphs: "CUDA
  graphs do not support pipeline parallelism yet").
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from sim.errors import RingsimError
from sim.frameworks import traps
from sim.frameworks.job import Job, launch, tokens, whole
from sim.scenario.models import MODEL_PRESETS
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names
from sim.training.step import Parallel, StepRequest, stage_layers

TITLE = "torchtitan 0.3.0"
FRAMEWORK = "torchtitan"
"""The key of torchtitan's names in a scheme's `frameworks` (sim.schemes.base.Scheme)."""


def cp_scheme() -> str:
    """The one CP scheme torchtitan 0.3.0 runs (its scheme's `frameworks` says so)."""
    return next(name for name in scheme_names() if FRAMEWORK in get_scheme(name).frameworks)


def _cp_word() -> str:
    return get_scheme(cp_scheme()).frameworks[FRAMEWORK][0]
MODULE = "llama3"
CONFIGS = {"llama3-8b": "llama3_8b", "llama3-70b": "llama3_70b", "llama3-405b": "llama3_405b"}
"""ringsim's model presets -> torchtitan's llama3 config functions."""
CONFIG_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama3_8b": {"fp8": False, "training.local_batch_size": 1, "training.seq_len": 8192,
                  "activation_checkpoint": "selective"},
    "llama3_70b": {"fp8": False, "training.local_batch_size": 8, "training.seq_len": 8192,
                   "parallelism.tensor_parallel_degree": 8, "activation_checkpoint": "full"},
    "llama3_405b": {"fp8": True, "training.local_batch_size": 2, "training.seq_len": 8192,
                    "parallelism.tensor_parallel_degree": 8, "activation_checkpoint": "full", "compile.enable": True,
                    "compile.enable_async_tensor_parallel": True},
}
"""What each config function sets that a job may leave unsaid (config_registry.py, 0.3.0); the
rest are the dataclasses' defaults."""
DEFAULTS: dict[str, Any] = {
    "training.local_batch_size": 8, "training.global_batch_size": -1, "training.seq_len": 2048,
    "training.disable_cuda_graphs": False,
    "parallelism.data_parallel_replicate_degree": 1, "parallelism.data_parallel_shard_degree": -1,
    "parallelism.tensor_parallel_degree": 1, "parallelism.enable_sequence_parallel": True,
    "parallelism.pipeline_parallel_degree": 1, "parallelism.pipeline_parallel_schedule": "1F1B",
    "parallelism.pipeline_parallel_microbatch_size": 1, "parallelism.pipeline_parallel_layers_per_stage": None,
    "parallelism.pipeline_parallel_first_stage_less_layers": 1, "parallelism.pipeline_parallel_last_stage_less_layers": 1,
    "parallelism.context_parallel_degree": 1, "parallelism.context_parallel_load_balancer": "headtail",
    "compile.enable": False, "compile.enable_async_tensor_parallel": False, "activation_checkpoint": "selective",
}
"""torchtitan 0.3.0's own defaults of the keys read (configs.py; Trainer.Config's
activation_checkpoint default is SelectiveAC)."""
IGNORED_SECTIONS = {"optimizer", "lr_scheduler", "checkpoint", "metrics", "profiler", "dataloader", "validator", "comm",
                    "debug", "tokenizer", "loss", "override"}
IGNORED_KEYS = {"hf_assets_path", "dump_folder", "training.steps", "training.max_norm", "training.gc_freq",
                "training.gc_debug", "training.dtype", "training.mixed_precision_param",
                "training.mixed_precision_reduce", "training.enable_cpu_offload", "parallelism.spmd_backend",
                "parallelism.fsdp_reshard_after_forward", "parallelism.enable_fsdp_symm_mem",
                "parallelism.expert_parallel_degree", "compile.components", "compile.backend",
                "parallelism.pipeline_parallel_schedule_csv", "parallelism.context_parallel_ptrr_mask_key"}
"""Keys torchtitan knows that do not change the simulated step."""
BOOL_KEYS = {k for k, v in DEFAULTS.items() if isinstance(v, bool)} | {
    "training.enable_cpu_offload", "training.gc_debug", "parallelism.enable_fsdp_symm_mem"}
AC_MODES = {"none": "none", "selective": "selective", "full": "full", "memory-budget": "selective"}
SINGLE_STAGE = {"1F1B", "GPipe"}
MULTI_STAGE = {"Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble", "LoopedBFS", "DualPipeV"}

FLAGS = traps.Flags(tp="parallelism.tensor_parallel_degree", cp="parallelism.context_parallel_degree",
                    pp="parallelism.pipeline_parallel_degree", seq="training.seq_len",
                    cp_comm="parallelism.context_parallel_degree", hierarchical="-",
                    heads="(the model's heads)", kv_heads="(the model's K/V heads)",
                    sp="parallelism.enable_sequence_parallel", micro_batch="training.local_batch_size",
                    recompute="activation_checkpoint", packed="(varlen attention)")


# --- export --------------------------------------------------------------------------------

def refusal(req: StepRequest) -> str | None:
    """Why torchtitan 0.3.0 cannot run `req` as ringsim simulates it, or None."""
    m, p = req.model, req.parallel
    config = CONFIGS.get(m.name)
    if config is None:
        return (f"torchtitan takes its model from a config function (torchtitan/models/llama3/config_registry.py: "
                f"{', '.join(CONFIGS.values())}); {m.name} has none")
    if p.cp > 1 and FRAMEWORK not in get_scheme(p.scheme).frameworks:
        return (f"torchtitan runs context parallelism as an all-gather of K/V (flex_cp_allgather, or torch's "
                f"context_parallel at its default rotate method allgather; 0.3.0 has no rotate-method setting): the "
                f"{p.scheme} scheme is not one of its settings")
    if p.cp > 1 and p.layout not in ("zigzag", "contiguous"):
        return f"torchtitan's CP load balancer is headtail (zigzag) or None (contiguous), not the {p.layout} layout"
    replicas = p.dp * p.cp
    if p.zero == 1 and replicas > 1:
        return ("torchtitan shards with FSDP (ZeRO-3, data_parallel_shard_degree) or replicates (DDP, "
                "data_parallel_replicate_degree): ZeRO-1 is not one of its settings")
    if p.zero == 0 and p.cp > 1:
        return "torchtitan applies FSDP over the CP ranks: DDP with context parallelism is not one of its settings"
    if p.zero == 3 and replicas == 1:
        return "with no data or context parallelism torchtitan applies no FSDP: ZeRO-3 on one replica is not a setting"
    if p.grad_reduce != "fp32":
        return "torchtitan reduces gradients in float32 only (training.mixed_precision_reduce)"
    if p.fp8 != CONFIG_DEFAULTS[config]["fp8"]:
        has = "has" if CONFIG_DEFAULTS[config]["fp8"] else "has no"
        return (f"torchtitan sets Float8 in the config function, not by a key: {config} {has} Float8 linear layers, "
                f"and this step is {'in FP8' if p.fp8 else 'in bf16'}")
    if p.interleave > 1:
        return _stages_refusal(req)
    return None


def _less_layers(layers: int, pp: int) -> tuple[int, int]:
    """pipeline_parallel_first/last_stage_less_layers that give ringsim's stages (the
    embedding and the output layer in a layer's place where the layers do not split evenly)."""
    short = (pp - layers % pp) % pp
    return (1 if short >= 1 else 0), (1 if short >= 2 else 0)


def _layers_per_stage(layers: int, pp: int, v: int) -> int:
    first, last = _less_layers(layers, pp)
    return math.ceil((layers + first + last) / (pp * v))


def _stages_refusal(req: StepRequest) -> str | None:
    m, p = req.model, req.parallel
    first, last = _less_layers(m.layers, p.pp)
    per = _layers_per_stage(m.layers, p.pp, p.interleave)
    stages = math.ceil((m.layers + first + last) / per)
    if stages != p.pp * p.interleave:
        return f"torchtitan's pipeline_parallel_layers_per_stage {per} makes {stages} stages, not {p.pp} x {p.interleave}"
    return None


def values(req: StepRequest, micro_batch: int) -> dict[str, Any]:
    """The job's keys ("section.key" -> value, top-level keys bare) for `req`."""
    m, p = req.model, req.parallel
    seqs = req.global_batch // req.seq
    per_replica = seqs // p.dp
    out: dict[str, Any] = {"module": MODULE, "config": CONFIGS[m.name],
                           "activation_checkpoint": p.recompute,
                           "training.seq_len": req.seq,
                           # a pipeline takes all its micro-batches in one local batch; without one, the
                           # local batch is a micro-batch and the rest is gradient accumulation
                           "training.local_batch_size": per_replica if p.pp > 1 else micro_batch,
                           "training.global_batch_size": seqs}
    if p.pp > 1:
        out["training.disable_cuda_graphs"] = True
    out["parallelism.data_parallel_replicate_degree"] = p.dp if p.zero == 0 else 1
    out["parallelism.data_parallel_shard_degree"] = 1 if p.zero == 0 else p.dp
    out["parallelism.tensor_parallel_degree"] = p.tp
    out["parallelism.enable_sequence_parallel"] = p.tp > 1
    out["parallelism.context_parallel_degree"] = p.cp
    if p.cp > 1:
        out["parallelism.context_parallel_load_balancer"] = "headtail" if p.layout == "zigzag" else "None"
    out["parallelism.pipeline_parallel_degree"] = p.pp
    if p.pp > 1:
        first, last = _less_layers(m.layers, p.pp)
        out["parallelism.pipeline_parallel_schedule"] = "Interleaved1F1B" if p.interleave > 1 else "1F1B"
        out["parallelism.pipeline_parallel_microbatch_size"] = micro_batch
        out["parallelism.pipeline_parallel_first_stage_less_layers"] = first
        out["parallelism.pipeline_parallel_last_stage_less_layers"] = last
        if p.interleave > 1:
            out["parallelism.pipeline_parallel_layers_per_stage"] = _layers_per_stage(m.layers, p.pp, p.interleave)
    out["compile.enable"] = p.tp_overlap
    out["compile.enable_async_tensor_parallel"] = p.tp_overlap
    return out


def arguments(job: dict[str, Any]) -> list[str]:
    """The job's keys as torchtitan 0.3.0's command line (ConfigManager.parse_args): --module,
    --config, `--section.key value` (a flag alone, or --section.no-key, for a bool), the
    activation-checkpointing subcommand last."""
    args = ["--module", str(job["module"]), "--config", str(job["config"])]
    for key, value in job.items():
        if "." not in key:
            continue
        section, name = key.split(".", 1)
        flag = name.replace("_", "-")
        if isinstance(value, bool):
            args.append(f"--{section}.{flag}" if value else f"--{section}.no-{flag}")
        else:
            args += [f"--{section}.{flag}", str(value)]
    if "activation_checkpoint" in job:
        args.append(f"activation-checkpoint:{job['activation_checkpoint']}")
    return args


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def check(req: StepRequest) -> list[str]:
    """The traps `req` falls into as this framework would run it (sim.frameworks.traps)."""
    p = req.parallel
    return traps.check(req.model, req.seq, p, FLAGS, comm=_cp_word(), sequence_parallel=p.tp > 1)


def export_text(req: StepRequest, *, micro_batch: int, source: str) -> str:
    p, hw = req.parallel, req.hardware
    job = values(req, micro_batch)
    gpn = min(hw.gpus_per_node, p.gpus)
    nodes = -(-p.gpus // gpn)
    command = shlex.join(["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(gpn), "-m", "torchtitan.train",
                          *arguments(job)])
    lines = [f"# torchtitan 0.3.0 job of {source}",
             f"# {req.model.name}: TP {p.tp} x CP {p.cp} x PP {p.pp} x DP {p.dp} on {p.gpus} GPUs",
             "# torchtitan 0.3.0 reads no TOML: its ConfigManager takes a config function and --section.key flags "
             "(torchtitan/config/manager.py). Run this job as",
             f"#   {command}",
             "# not set here: data, tokenizer, optimizer, checkpoints (the config function's)"]
    if p.recompute == "selective":
        lines.append("# torchtitan's selective checkpointing is per-op (it keeps the matmuls' outputs); ringsim "
                     "recomputes attention alone")
    top = {k: v for k, v in job.items() if "." not in k}
    body = [f"{k} = {_toml_value(v)}" for k, v in top.items()]
    for section in ("training", "parallelism", "compile"):
        keys = {k.split(".", 1)[1]: v for k, v in job.items() if k.startswith(section + ".")}
        if keys:
            body += ["", f"[{section}]", *(f"{k} = {_toml_value(v)}" for k, v in keys.items())]
    return "\n".join(lines) + "\n" + "\n".join(body) + "\n"


# --- import --------------------------------------------------------------------------------

def recognises(text: str) -> bool:
    return ("[parallelism]" in text or "[training]" in text or "torchtitan" in text
            or "--parallelism." in text or "--training." in text)


def _load_toml(text: str, where: str) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:          # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise RingsimError(f"{where}: reading TOML needs Python 3.11 or the tomli package") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RingsimError(f"{where}: not a TOML file: {e}") from None


def _from_arguments(args: list[str], where: str) -> dict[str, Any]:
    """torchtitan's command line as "section.key" -> value (ConfigManager's form)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        w = args[i]
        if w.startswith(("activation-checkpoint:", "activation_checkpoint:")):
            out["activation_checkpoint"] = w.split(":", 1)[1]
        elif w in ("--module", "--config") or w.startswith(("--module=", "--config=")):
            key, eq, value = w.partition("=")
            if not eq:
                i += 1
                value = args[i] if i < len(args) else ""
            out[key[2:]] = value
        elif w.startswith("--"):
            key, eq, value = w[2:].partition("=")
            section, _, name = key.partition(".")
            negated = name.startswith("no-") or name.startswith("no_")
            name = (name[3:] if negated else name).replace("-", "_")
            full = f"{section}.{name}"
            if full in BOOL_KEYS and not eq:
                out[full] = not negated
            else:
                if not eq:
                    nxt = args[i + 1] if i + 1 < len(args) else None
                    if nxt is None or nxt.startswith("--") or ":" in nxt:
                        out[full] = not negated        # a flag alone: a bool
                        i += 1
                        continue
                    i += 1
                    value = nxt
                out[full] = _scalar(value)
        else:
            out.setdefault("", []).append(w)
        i += 1
    return out


def _scalar(value: str) -> Any:
    for kind in (int,):
        try:
            return kind(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


def read_text(text: str, where: str, gpus: int | None = None) -> Job:
    run = None
    if "[parallelism]" in text or "[training]" in text or "\nconfig =" in text or text.startswith("config ="):
        doc = _load_toml(text, where)
        flat: dict[str, Any] = {}
        for k, v in doc.items():
            if isinstance(v, dict):
                flat.update({f"{k}.{name}": value for name, value in v.items()})
            else:
                flat[k] = v
    else:
        run = launch(tokens(text, where))
        flat = _from_arguments(run.args, where)
    return read_values(flat, where, gpus=gpus or (run.gpus if run else None),
                       gpus_per_node=run.nproc_per_node if run else None)


def read_values(job: dict[str, Any], where: str, *, gpus: int | None, gpus_per_node: int | None) -> Job:
    """The step torchtitan's keys describe ("section.key" -> value)."""
    ignored, unknown, notes = [], [], []
    stray = job.pop("", None)
    if stray:
        unknown += stray
    config = job.get("config")
    if job.get("module", MODULE) != MODULE or config not in CONFIG_DEFAULTS:
        raise RingsimError(f"{where}: --module {job.get('module')} --config {config}: ringsim knows torchtitan's "
                           f"{MODULE} {', '.join(CONFIG_DEFAULTS)}")
    model = MODEL_PRESETS[next(name for name, c in CONFIGS.items() if c == config)]
    value = {**DEFAULTS, **CONFIG_DEFAULTS[config]}
    for key, v in job.items():
        if key in ("module", "config"):
            continue
        if key in DEFAULTS:
            value[key] = None if v == "None" else v
        elif key in IGNORED_KEYS or key.split(".", 1)[0] in IGNORED_SECTIONS:
            ignored.append(key)
        else:
            unknown.append(key)

    def number(key: str) -> int:
        v = value[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise RingsimError(f"{where}: {key} must be a whole number, got {v!r}")
        return v

    seq = whole(number("training.seq_len"), f"{where}: training.seq_len")
    tp, cp, pp = (whole(number(f"parallelism.{k}_parallel_degree"), f"{where}: parallelism.{k}_parallel_degree")
                  for k in ("tensor", "context", "pipeline"))
    replicate = whole(number("parallelism.data_parallel_replicate_degree"), f"{where}: data_parallel_replicate_degree")
    shard = number("parallelism.data_parallel_shard_degree")
    if shard == -1:
        if gpus is None:
            raise RingsimError(f"{where}: data_parallel_shard_degree -1 takes the GPUs left over: give the torchrun "
                               f"line (--nnodes, --nproc-per-node) or --gpus")
        shard, rest = divmod(gpus, replicate * tp * cp * pp)
        if rest or shard < 1:
            raise RingsimError(f"{where}: {gpus} GPUs do not divide into replicate {replicate} x TP {tp} x CP {cp} x "
                               f"PP {pp}")
    shard = whole(shard, f"{where}: data_parallel_shard_degree")
    dp = replicate * shard
    if gpus is not None and gpus != dp * tp * cp * pp:
        raise RingsimError(f"{where}: the degrees make {dp * tp * cp * pp} GPUs, the launch {gpus}")
    if shard * cp > 1:
        zero = 3
        if replicate > 1:
            notes.append(f"HSDP (replicate {replicate} x shard {shard}): simulated as FSDP over all DP x CP ranks")
    else:
        zero = 0 if replicate > 1 else 1
    local = whole(number("training.local_batch_size"), f"{where}: training.local_batch_size")
    seqs = number("training.global_batch_size")
    seqs = local * dp if seqs == -1 else whole(seqs, f"{where}: training.global_batch_size")
    if seqs % (local * dp):
        raise RingsimError(f"{where}: training.global_batch_size {seqs} is not a whole number of local batches of "
                           f"{local} on each of the {dp} data-parallel ranks")
    accumulation = seqs // (local * dp)
    interleave = 1
    if pp > 1:
        micro = whole(number("parallelism.pipeline_parallel_microbatch_size"), f"{where}: microbatch size")
        if local % micro:
            raise RingsimError(f"{where}: training.local_batch_size ({local}) must be evenly divisible by "
                               f"parallelism.pipeline_parallel_microbatch_size ({micro}) (torchtitan's Trainer.Config)")
        if accumulation > 1:
            notes.append(f"{accumulation} accumulation steps, each a pipeline of {local // micro} micro-batches: "
                         f"simulated as one pipeline of {accumulation * local // micro}")
        schedule = value["parallelism.pipeline_parallel_schedule"]
        first = number("parallelism.pipeline_parallel_first_stage_less_layers")
        last = number("parallelism.pipeline_parallel_last_stage_less_layers")
        per = value["parallelism.pipeline_parallel_layers_per_stage"]
        if per is not None:
            stages = math.ceil((model.layers + first + last) / per)
            if stages % pp:
                raise RingsimError(f"{where}: Number of virtual stages ({stages}) must be divisible by pipeline "
                                   f"parallel size ({pp}) (torchtitan)")
            interleave = stages // pp
        elif schedule in MULTI_STAGE:
            interleave = 2
        if schedule in SINGLE_STAGE and interleave != 1:
            raise RingsimError(f"{where}: Single stage schedule requires exactly 1 stage per rank, but got "
                               f"{interleave} stages per rank (torchtitan)")
        if schedule not in SINGLE_STAGE | MULTI_STAGE:
            notes.append(f"pipeline schedule {schedule}: simulated as (interleaved) 1F1B")
        elif schedule not in ("1F1B", "Interleaved1F1B"):
            notes.append(f"pipeline schedule {schedule}: simulated as "
                         + ("1F1B" if interleave == 1 else "interleaved 1F1B"))
        if (first, last) != _less_layers(model.layers, pp):
            notes.append(f"pipeline stages simulated as ringsim splits them "
                         f"({', '.join(map(str, stage_layers(model.layers, pp)))} layers)")
        if not value["training.disable_cuda_graphs"]:
            notes.append("a pipeline without training.disable_cuda_graphs: torchtitan 0.3.0 refuses it "
                         "(CUDA graphs do not support pipeline parallelism yet)")
        microbatches = seqs // dp // micro
    else:
        microbatches = accumulation
    recompute = value["activation_checkpoint"]
    if recompute not in AC_MODES:
        raise RingsimError(f"{where}: activation_checkpoint {recompute}: none, selective, full or memory-budget")
    if recompute == "memory-budget":
        notes.append("memory-budget activation checkpointing: simulated as selective")
    balancer = value["parallelism.context_parallel_load_balancer"]
    layout = "contiguous" if balancer is None else "zigzag"
    if balancer not in (None, "headtail"):
        notes.append(f"CP load balancer {balancer}: simulated as headtail (zigzag)")
    if tp > 1 and not value["parallelism.enable_sequence_parallel"]:
        notes.append("TP without sequence parallelism: simulated with it")
    tp_overlap = bool(value["compile.enable"] and value["compile.enable_async_tensor_parallel"])
    parallel = Parallel(tp=tp, cp=cp, pp=pp, dp=dp, zero=zero, recompute=AC_MODES[recompute],
                        fp8=CONFIG_DEFAULTS[config]["fp8"], microbatches=microbatches, interleave=interleave,
                        scheme=cp_scheme() if cp > 1 else DEFAULT_SCHEME, layout=layout, tp_overlap=tp_overlap)
    found = traps.check(model, seq, parallel, FLAGS, comm=_cp_word(),
                        sequence_parallel=bool(value["parallelism.enable_sequence_parallel"]) and tp > 1)
    return Job(framework="torchtitan", model=model, seq=seq, global_batch=seqs * seq, parallel=parallel, gpus=gpus,
               gpus_per_node=gpus_per_node, ignored=ignored, unknown=unknown, notes=notes, traps=found)
