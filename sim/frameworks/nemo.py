"""A step as a NeMo / Megatron-Bridge recipe run with overrides, and such a run read back as a
step.

Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge at 067f987d) runs a recipe with
scripts/training/run_recipe.py: `--model llama3_70b --mode pretrain` picks the recipe
(src/megatron/bridge/recipes/llama: llama3_8b, llama3_70b, llama31_405b), and trailing
KEY=VALUE overrides set the fields of its ConfigContainer (src/megatron/bridge/training/
config.py): `model.*` the GPT model provider's fields, which are megatron-core's
TransformerConfig and ModelParallelConfig fields (tensor_model_parallel_size,
context_parallel_size, cp_comm_type, hierarchical_context_parallel_sizes, sequence_parallel,
virtual_pipeline_model_parallel_size, recompute_*), `train.micro_batch_size` and
`train.global_batch_size`, `dataset.seq_length` (the runner copies it to model.seq_length),
`ddp.*` and `optimizer.use_distributed_optimizer`, `mixed_precision` (a recipe name:
bf16_mixed, bf16_with_fp8_current_scaling_mixed) and `comm_overlap.tp_comm_overlap`. The
mapping of each ringsim setting is Megatron-LM's (sim.frameworks.megatron), field for flag.

Read back, a value the overrides leave unsaid is the recipe's, which ringsim does not know:
degrees default to 1 and the batch must be given, each assumption named.
"""

from __future__ import annotations

import shlex
from typing import Any

from sim.errors import RingsimError
from sim.frameworks import megatron, traps
from sim.frameworks.job import Job, launch, tokens, whole
from sim.scenario.models import MODEL_PRESETS
from sim.training.step import Parallel, StepRequest

TITLE = "Megatron-Bridge"
SCRIPT = "scripts/training/run_recipe.py"
RECIPES = {"llama3-8b": "llama3_8b", "llama3-70b": "llama3_70b", "llama3-405b": "llama31_405b"}
"""ringsim's presets -> Megatron-Bridge's recipe stems (src/megatron/bridge/recipes/llama/__init__.py)."""
CP_IGNORED = ("Megatron-Bridge ran cp_comm_type a2a+p2p without hierarchical_context_parallel_sizes without context "
              "parallelism (each rank attended only to its own chunk, 'producing artificially high throughput'); it "
              "refuses it since commit 91c39a0 (PR #2665; src/megatron/bridge/training/config.py, _validate_cp_comm_type)")
FLAGS = traps.Flags(tp="model.tensor_model_parallel_size", cp="model.context_parallel_size",
                    pp="model.pipeline_model_parallel_size", seq="dataset.seq_length", cp_comm="model.cp_comm_type",
                    hierarchical="model.hierarchical_context_parallel_sizes", heads="model.num_attention_heads",
                    kv_heads="model.num_query_groups", sp="model.sequence_parallel",
                    micro_batch="train.micro_batch_size", recompute="model.recompute_granularity",
                    packed="dataset.packed_sequence_specs")
SHORT = {"-tp": "model.tensor_model_parallel_size", "--tensor_model_parallel_size": "model.tensor_model_parallel_size",
         "-pp": "model.pipeline_model_parallel_size",
         "--pipeline_model_parallel_size": "model.pipeline_model_parallel_size",
         "-cp": "model.context_parallel_size", "--context_parallel_size": "model.context_parallel_size",
         "-vp": "model.virtual_pipeline_model_parallel_size",
         "--virtual_pipeline_model_parallel_size": "model.virtual_pipeline_model_parallel_size",
         "-gb": "train.global_batch_size", "--global_batch_size": "train.global_batch_size",
         "-mb": "train.micro_batch_size", "--micro_batch_size": "train.micro_batch_size",
         "-sl": "dataset.seq_length", "--seq_length": "dataset.seq_length"}
"""run_recipe.py's convenience options and the overrides they stand for (its docstring)."""
READ = {"model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.context_parallel_size",
        "model.virtual_pipeline_model_parallel_size", "model.cp_comm_type", "model.hierarchical_context_parallel_sizes",
        "model.sequence_parallel", "model.recompute_granularity", "model.recompute_method", "model.recompute_num_layers",
        "model.account_for_embedding_in_pipeline_split", "model.account_for_loss_in_pipeline_split",
        "model.seq_length", "dataset.seq_length", "train.micro_batch_size", "train.global_batch_size",
        "ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer", "ddp.use_megatron_fsdp",
        "ddp.data_parallel_sharding_strategy", "ddp.grad_reduce_in_fp32", "mixed_precision",
        "comm_overlap.tp_comm_overlap", "dataset.packed_sequence_specs.packed_sequence_size"}
IGNORED_PREFIXES = ("optimizer.", "scheduler.", "checkpoint.", "logger.", "tokenizer.", "rng.", "profiling.",
                    "train.train_iters", "train.eval", "validation.", "dataset.", "dist.", "ft.", "straggler.")
IGNORED_OPTIONS = {"--mode", "--dataset", "--max_steps", "-ms", "--lr", "--min_lr", "--warmup_iters",
                   "--pretrained_checkpoint", "--save_dir", "--load_dir", "--save_interval", "--dry-run", "--dry_run",
                   "--deterministic", "--dump-env", "--dump_env"}


# --- export --------------------------------------------------------------------------------

def refusal(req: StepRequest) -> str | None:
    if req.model.name not in RECIPES:
        return (f"Megatron-Bridge takes its model from a recipe (src/megatron/bridge/recipes/llama: "
                f"{', '.join(RECIPES.values())}); {req.model.name} has none")
    return megatron.refusal(req)


def values(req: StepRequest, micro_batch: int) -> dict[str, Any]:
    """The overrides ("section.key" -> value) for `req`, from Megatron-LM's flags."""
    m, p = req.model, req.parallel
    out: dict[str, Any] = {"model.tensor_model_parallel_size": p.tp, "model.pipeline_model_parallel_size": p.pp,
                           "model.context_parallel_size": p.cp, "model.sequence_parallel": p.tp > 1}
    if p.cp > 1:
        out["model.cp_comm_type"] = megatron.comm_type(p.scheme)
        sizes = megatron.hierarchical_sizes(req)
        out["model.hierarchical_context_parallel_sizes"] = list(sizes) if sizes else None
    out["model.virtual_pipeline_model_parallel_size"] = p.interleave if p.interleave > 1 else None
    if p.pp > 1:
        extra = megatron._counted_layers(m.layers, p.pp) - m.layers
        out["model.account_for_embedding_in_pipeline_split"] = extra >= 1
        out["model.account_for_loss_in_pipeline_split"] = extra == 2
    out["model.recompute_granularity"] = None if p.recompute == "none" else p.recompute
    out["model.recompute_method"] = "uniform" if p.recompute == "full" else None
    out["model.recompute_num_layers"] = 1 if p.recompute == "full" else None
    out["dataset.seq_length"] = req.seq
    out["train.micro_batch_size"] = micro_batch
    out["train.global_batch_size"] = req.global_batch // req.seq
    out["ddp.use_distributed_optimizer"] = out["optimizer.use_distributed_optimizer"] = p.zero >= 1
    if p.zero == 3:
        out["ddp.use_megatron_fsdp"] = True
        out["ddp.data_parallel_sharding_strategy"] = "optim_grads_params"
    out["ddp.grad_reduce_in_fp32"] = p.grad_reduce == "fp32"
    out["mixed_precision"] = "bf16_with_fp8_current_scaling_mixed" if p.fp8 else "bf16_mixed"
    out["comm_overlap.tp_comm_overlap"] = p.tp_overlap
    return out


def _override(key: str, v: Any) -> str:
    if v is None:
        text = "null"
    elif isinstance(v, bool):
        text = "true" if v else "false"
    elif isinstance(v, list):
        text = "[" + ",".join(map(str, v)) + "]"
    else:
        text = str(v)
    return f"{key}={text}"


def check(req: StepRequest) -> list[str]:
    """The traps `req` falls into as this framework would run it (sim.frameworks.traps)."""
    p = req.parallel
    return traps.check(req.model, req.seq, p, FLAGS, comm=megatron.comm_type(p.scheme) or p.scheme,
                      hierarchical=megatron.hierarchical_sizes(req), sequence_parallel=p.tp > 1)


def export_text(req: StepRequest, *, micro_batch: int, source: str) -> str:
    p, hw = req.parallel, req.hardware
    gpn = min(hw.gpus_per_node, p.gpus)
    nodes = -(-p.gpus // gpn)
    lines = [f"# Megatron-Bridge (NeMo) recipe run of {source}",
             f"# {req.model.name}: TP {p.tp} x CP {p.cp} x PP {p.pp} x DP {p.dp} on {p.gpus} GPUs; KEY=VALUE overrides "
             "of the recipe's ConfigContainer (src/megatron/bridge/training/config.py)",
             "# not set here: data (mock), optimizer, checkpoints (the recipe's)"]
    body = [f"torchrun --nnodes {nodes} --nproc-per-node {gpn} {SCRIPT} --model {RECIPES[req.model.name]} "
            f"--mode pretrain --dataset mock"]
    body += ["    " + shlex.quote(_override(k, v)) for k, v in values(req, micro_batch).items()]
    return "\n".join(lines) + "\n" + " \\\n".join(body) + "\n"


# --- import --------------------------------------------------------------------------------

def recognises(text: str) -> bool:
    return "run_recipe" in text or "model.tensor_model_parallel_size=" in text or "model.context_parallel_size=" in text


def _value(text: str) -> Any:
    t = text.strip()
    if t.lower() in ("null", "none", "~"):
        return None
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    if t.startswith("[") and t.endswith("]"):
        return [_value(x) for x in t[1:-1].split(",") if x.strip()]
    try:
        return int(t)
    except ValueError:
        return t.strip("'\"")


def read_text(text: str, where: str, gpus: int | None = None) -> Job:
    run = launch(tokens(text, where))
    overrides: dict[str, Any] = {}
    ignored, unknown, notes = [], [], []
    recipe = None
    args = run.args
    i = 0
    while i < len(args):
        w = args[i]
        if "=" in w and not w.startswith("-"):
            key, _, v = w.partition("=")
            key = key.lstrip("+")
            if key in READ:
                overrides[key] = _value(v)
            elif key.startswith(IGNORED_PREFIXES):
                ignored.append(key)
            else:
                unknown.append(key)
        elif w in ("--model", "--recipe"):
            i += 1
            recipe = args[i] if i < len(args) else None
        elif w in SHORT:
            i += 1
            overrides[SHORT[w]] = _value(args[i]) if i < len(args) else None
        elif w in IGNORED_OPTIONS:
            ignored.append(w)
            if i + 1 < len(args) and not args[i + 1].startswith("-") and "=" not in args[i + 1]:
                i += 1
        else:
            unknown.append(w)
        i += 1
    stem = next((s for s in RECIPES.values() if recipe and recipe.startswith(s)), None)
    if stem is None:
        raise RingsimError(f"{where}: --model {recipe}: ringsim knows Megatron-Bridge's {', '.join(RECIPES.values())}")
    model = MODEL_PRESETS[next(name for name, s in RECIPES.items() if s == stem)]
    gpus = gpus or run.gpus
    if gpus is None:
        raise RingsimError(f"{where}: how many GPUs? give the torchrun line (--nnodes, --nproc-per-node) or --gpus")

    def get(key: str, default: Any = None, *, assumed: bool = True) -> Any:
        if key in overrides:
            return overrides[key]
        if assumed:
            notes.append(f"{key} not given: the recipe's value is not known to ringsim; taken as {default}")
        return default

    tp = whole(get("model.tensor_model_parallel_size", 1), f"{where}: model.tensor_model_parallel_size")
    pp = whole(get("model.pipeline_model_parallel_size", 1), f"{where}: model.pipeline_model_parallel_size")
    cp = whole(get("model.context_parallel_size", 1), f"{where}: model.context_parallel_size")
    seq = overrides.get("dataset.seq_length", overrides.get("model.seq_length"))
    micro, seqs = overrides.get("train.micro_batch_size"), overrides.get("train.global_batch_size")
    if seq is None or micro is None or seqs is None:
        raise RingsimError(f"{where}: give dataset.seq_length, train.micro_batch_size and train.global_batch_size "
                           f"(the recipe's are not known to ringsim)")
    seq, micro, seqs = (whole(x, f"{where}: {k}") for x, k in ((seq, "seq_length"), (micro, "micro_batch_size"),
                                                              (seqs, "global_batch_size")))
    if gpus % (tp * pp * cp):
        raise RingsimError(f"{where}: {gpus} GPUs do not divide into TP {tp} x PP {pp} x CP {cp}")
    dp = gpus // (tp * pp * cp)
    if seqs % (micro * dp):
        raise RingsimError(f"{where}: train.global_batch_size {seqs} is not a whole number of micro-batches of "
                           f"{micro} on each of the {dp} data-parallel ranks")
    comm = get("model.cp_comm_type", "p2p", assumed=cp > 1) or "p2p"
    scheme = megatron.scheme_of(comm)
    if scheme is None:
        raise RingsimError(f"{where}: model.cp_comm_type {comm}: p2p, all_gather, a2a or a2a+p2p")
    sizes = overrides.get("model.hierarchical_context_parallel_sizes")
    hierarchical = tuple(whole(x, f"{where}: hierarchical_context_parallel_sizes") for x in sizes) if sizes else None
    two_levels = comm == traps.HIERARCHICAL
    cp_ignored = CP_IGNORED if cp > 1 and two_levels and not hierarchical else None
    v = overrides.get("model.virtual_pipeline_model_parallel_size") or 1
    granularity = get("model.recompute_granularity", None, assumed=False)
    fsdp = bool(overrides.get("ddp.use_megatron_fsdp"))
    zero = 3 if fsdp else (1 if get("ddp.use_distributed_optimizer", True) else 0)
    mixed = get("mixed_precision", "bf16_mixed")
    fp8 = isinstance(mixed, str) and "fp8" in mixed
    if fp8 and "current_scaling" not in mixed:
        notes.append(f"mixed_precision {mixed}: simulated with current scaling's casts")
    parallel = Parallel(tp=tp, cp=cp, pp=pp, dp=dp, zero=zero, recompute=granularity or "none", fp8=fp8,
                        microbatches=seqs // dp // micro, interleave=v, scheme=scheme, layout="zigzag",
                        ulysses_degree=hierarchical[0] if two_levels and hierarchical else None,
                        tp_overlap=bool(overrides.get("comm_overlap.tp_comm_overlap")),
                        grad_reduce="fp32" if get("ddp.grad_reduce_in_fp32", True) else "bf16")
    packed = "dataset.packed_sequence_specs.packed_sequence_size" in overrides
    sp = overrides.get("model.sequence_parallel")
    found = traps.check(model, seq, parallel, FLAGS, comm=comm, hierarchical=hierarchical,
                        sequence_parallel=sp, packed=packed)
    if cp > 1 and hierarchical and not two_levels:
        notes.append(f"model.hierarchical_context_parallel_sizes with cp_comm_type {comm}: not used")
    return Job(framework="nemo", model=model, seq=seq, global_batch=seqs * seq, parallel=parallel, gpus=gpus,
               gpus_per_node=run.nproc_per_node, ignored=ignored, unknown=unknown, notes=notes, traps=found,
               cp_ignored=cp_ignored)
