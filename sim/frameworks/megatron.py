"""A step as Megatron-LM's command line (pretrain_gpt.py under torchrun), and Megatron-LM's
command line read back as a step.

The flags are Megatron-LM's at core_v0.16.1 (megatron/training/arguments.py, 55ac7082; most
are generated from megatron-core's ModelParallelConfig and TransformerConfig fields, the
field's name with dashes). What each ringsim setting becomes:

- TP, CP, PP: `--tensor-model-parallel-size`, `--context-parallel-size`,
  `--pipeline-model-parallel-size`; DP is what is left of the GPUs. `--sequence-parallel`
  with TP > 1 (the step model's TP is Megatron's with sequence parallelism).
- The CP scheme, as TransformerEngine names it (`--cp-comm-type`, megatron-core
  TransformerConfig.cp_comm_type; each scheme's `frameworks`): the ring is p2p, the
  all-gather all_gather, Ulysses a2a, and the hybrid a2a+p2p with
  `--hierarchical-context-parallel-sizes u r` (the all-to-all degree, then the ring's).
  Megatron splits each sequence into 2 x CP chunks, rank r holding r and 2CP-1-r
  (get_batch_on_this_cp_rank): the zigzag layout, the only one exported.
- Pipeline stages: ringsim gives the first and last stages the fewer layers where they do not
  split evenly (sim.training.step.stage_layers), which is Megatron's
  `--account-for-embedding-in-pipeline-split` (and `--account-for-loss-in-pipeline-split`):
  the embedding and the loss take a layer's place. Interleaving: `--num-layers-per-virtual-
  pipeline-stage` (layers, with the embedding and loss so counted, / PP / v).
- ZeRO: 0 DDP, 1 `--use-distributed-optimizer`, 3 Megatron-FSDP (`--use-megatron-fsdp
  --data-parallel-sharding-strategy optim_grads_params`). Gradients in bf16:
  `--grad-reduce-in-bf16`.
- Recomputation: selective -> `--recompute-granularity selective` (core attention, the
  default recompute_modules); full -> `--recompute-granularity full --recompute-method
  uniform --recompute-num-layers 1` (every layer's forward, its input kept).
- FP8: `--fp8-format e4m3 --fp8-recipe tensorwise` (current scaling, as the step's FP8 casts
  model); TP overlap: `--tp-comm-overlap`.
- The batch: `--seq-length`, `--micro-batch-size` (sequences), `--global-batch-size`
  (sequences a step). The model: `--num-layers --hidden-size --num-attention-heads
  --group-query-attention --num-query-groups --kv-channels --ffn-hidden-size --swiglu
  --vocab-size` with Llama's RMSNorm, RoPE, untied embeddings and no biases.
"""

from __future__ import annotations

import shlex

from sim.errors import RingsimError
from sim.frameworks import traps
from sim.frameworks.job import Job, flag_values, launch, model_of, tokens, whole
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names
from sim.training.step import Parallel, StepRequest, attention_scenario, stage_layers

TITLE = "Megatron-LM"
SCRIPT = "pretrain_gpt.py"
FRAMEWORK = "megatron"
"""The key of Megatron's names in a scheme's `frameworks` (sim.schemes.base.Scheme)."""


def comm_type(scheme: str) -> str | None:
    """The cp_comm_type (TransformerEngine's name, megatron-core TransformerConfig.cp_comm_type)
    of ringsim's CP scheme, or None where Megatron has none."""
    names = get_scheme(scheme).frameworks.get(FRAMEWORK)
    return names[0] if names else None


def scheme_of(comm: str) -> str | None:
    """ringsim's CP scheme of a cp_comm_type (any name Megatron accepts), or None."""
    return next((name for name in scheme_names() if comm in get_scheme(name).frameworks.get(FRAMEWORK, ())), None)

FLAGS = traps.Flags(tp="--tensor-model-parallel-size", cp="--context-parallel-size",
                    pp="--pipeline-model-parallel-size", seq="--seq-length", cp_comm="--cp-comm-type",
                    hierarchical="--hierarchical-context-parallel-sizes", heads="--num-attention-heads",
                    kv_heads="--num-query-groups", sp="--sequence-parallel", micro_batch="--micro-batch-size",
                    recompute="--recompute-granularity", packed="--reset-attention-mask")

LLAMA_SHAPE = ["--normalization", "RMSNorm", "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights",
               "--disable-bias-linear"]
"""The flags of Llama's layer that the step model assumes (no values of its own)."""

IGNORED = frozenset("""
--lr --min-lr --lr-decay-style --lr-decay-iters --lr-warmup-iters --lr-warmup-fraction --lr-warmup-init --weight-decay
--clip-grad --adam-beta1 --adam-beta2 --adam-eps --init-method-std --train-iters --train-samples --eval-iters
--eval-interval --save --load --save-interval --log-interval --tensorboard-dir --wandb-project --wandb-exp-name
--data-path --split --tokenizer-type --tokenizer-model --vocab-file --merge-file --seed --attention-dropout
--hidden-dropout --max-position-embeddings --rotary-base --rotary-percent --use-rotary-position-embeddings
--normalization --position-embedding-type --untie-embeddings-and-output-weights --disable-bias-linear --bf16
--use-mcore-models --transformer-impl --attention-backend --use-flash-attn --overlap-grad-reduce
--overlap-param-gather --make-vocab-size-divisible-by --distributed-backend --distributed-timeout-minutes
--no-masked-softmax-fusion --no-bias-gelu-fusion --no-bias-swiglu-fusion --no-gradient-accumulation-fusion
--no-rope-fusion --log-throughput --log-timers-to-tensorboard --log-memory-to-tensorboard --log-params-norm
--mock-data --num-workers --dataloader-type --exit-duration-in-mins --ckpt-format --no-load-optim --no-load-rng
--no-save-optim --no-save-rng --manual-gc --manual-gc-interval --num-distributed-optimizer-instances --norm-epsilon
--use-checkpoint-args --no-async-tensor-model-parallel-allreduce --sequence-parallel-overlap --fp8-amax-history-len
--fp8-amax-compute-algo --tp-comm-overlap-cfg --cross-entropy-loss-fusion --timing-log-level --timing-log-option
--eod-mask-loss --reset-position-ids --calculate-per-token-loss --use-distributed-optimizer-fp32-master-weights
""".split())
"""Megatron-LM flags read and known that do not change the simulated step (optimizer's
numbers, data, logging, checkpoints, fusions the step model does not separate, the layer
shape it assumes)."""


# --- export --------------------------------------------------------------------------------

def refusal(req: StepRequest) -> str | None:
    """Why Megatron-LM cannot run `req` as ringsim simulates it, or None."""
    p = req.parallel
    if p.cp > 1 and comm_type(p.scheme) is None:
        return f"Megatron has no cp_comm_type for the {p.scheme} scheme"
    if p.cp > 1 and p.layout != "zigzag":
        return (f"Megatron splits a sequence into 2 x CP chunks, rank r holding r and 2CP-1-r "
                f"(get_batch_on_this_cp_rank): the zigzag layout, not {p.layout}")
    if req.mlp != "swiglu":
        return None
    return _pipeline_refusal(req)


def _pipeline_refusal(req: StepRequest) -> str | None:
    m, p = req.model, req.parallel
    if p.pp == 1:
        return None
    layers = stage_layers(m.layers, p.pp)
    counted = _counted_layers(m.layers, p.pp)
    if counted is None:
        return (f"ringsim's split of {m.layers} layers over {p.pp} stages ({', '.join(map(str, layers))}) has shorter "
                f"middle stages, which Megatron's --account-for-embedding/loss-in-pipeline-split cannot make")
    if p.interleave > 1 and (counted // p.pp) % p.interleave:
        return (f"--num-layers-per-virtual-pipeline-stage: {counted // p.pp} layers a stage (the embedding and "
                f"loss counted as layers where they even the split) do not divide into {p.interleave} virtual stages "
                f"(Megatron-LM: 'number of layers per pipeline stage must be divisible number of layers per virtual "
                f"pipeline stage')")
    return None


def _counted_layers(layers: int, pp: int) -> int | None:
    """Megatron's layer count with the embedding and the loss as its pipeline split counts
    them, to match ringsim's stages: as is where they split evenly, + 1 (the embedding) where
    only the first is short, + 2 where the first and last are; None where ringsim shortens
    middle stages too."""
    short = (pp - layers % pp) % pp
    return layers + short if short <= 2 else None


def hierarchical_sizes(req: StepRequest) -> tuple[int, int] | None:
    """a2a+p2p's (all-to-all degree, ring degree), as the step runs them."""
    p = req.parallel
    if p.cp == 1 or comm_type(p.scheme) != traps.HIERARCHICAL:
        return None
    u = attention_scenario(req, "fwd").describe()["ulysses_degree"]
    return u, p.cp // u


def arguments(req: StepRequest, micro_batch: int) -> list[str]:
    """pretrain_gpt.py's arguments for `req`."""
    m, p = req.model, req.parallel
    args = ["--num-layers", m.layers, "--hidden-size", m.hidden, "--num-attention-heads", m.heads]
    if m.kv_heads != m.heads:
        args += ["--group-query-attention", "--num-query-groups", m.kv_heads]
    if m.head_dim * m.heads != m.hidden:
        args += ["--kv-channels", m.head_dim]
    args += ["--ffn-hidden-size", m.ffn, "--swiglu", "--vocab-size", m.vocab, *LLAMA_SHAPE,
             "--max-position-embeddings", req.seq, "--bf16"]
    args += ["--tensor-model-parallel-size", p.tp, "--pipeline-model-parallel-size", p.pp,
             "--context-parallel-size", p.cp]
    if p.tp > 1:
        args.append("--sequence-parallel")
    if p.cp > 1:
        args += ["--cp-comm-type", comm_type(p.scheme)]
        sizes = hierarchical_sizes(req)
        if sizes:
            args += ["--hierarchical-context-parallel-sizes", *sizes]
    if p.pp > 1:
        counted = _counted_layers(m.layers, p.pp)
        extra = counted - m.layers
        if extra >= 1:
            args.append("--account-for-embedding-in-pipeline-split")
        if extra == 2:
            args.append("--account-for-loss-in-pipeline-split")
        if p.interleave > 1:
            args += ["--num-layers-per-virtual-pipeline-stage", counted // p.pp // p.interleave]
    if p.zero >= 1:
        args.append("--use-distributed-optimizer")
    if p.zero == 3:
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
    if p.grad_reduce == "bf16":
        args.append("--grad-reduce-in-bf16")
    if p.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif p.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", 1]
    if p.fp8:
        args += ["--fp8-format", "e4m3", "--fp8-recipe", "tensorwise"]
    if p.tp_overlap:
        args.append("--tp-comm-overlap")
    args += ["--seq-length", req.seq, "--micro-batch-size", micro_batch,
             "--global-batch-size", req.global_batch // req.seq]
    return [str(a) for a in args]


def check(req: StepRequest) -> list[str]:
    """The traps `req` falls into as this framework would run it (sim.frameworks.traps)."""
    p = req.parallel
    return traps.check(req.model, req.seq, p, FLAGS, comm=comm_type(p.scheme) or p.scheme,
                      hierarchical=hierarchical_sizes(req), sequence_parallel=p.tp > 1)


def export_text(req: StepRequest, *, micro_batch: int, source: str) -> str:
    p, hw = req.parallel, req.hardware
    gpn = min(hw.gpus_per_node, p.gpus)
    nodes = -(-p.gpus // gpn)
    lines = [f"# Megatron-LM (core_v0.16.1 flags) job of {source}",
             f"# {req.model.name}: TP {p.tp} x CP {p.cp} x PP {p.pp} x DP {p.dp} on {p.gpus} GPUs",
             "# not set here: data, tokenizer, learning rate, checkpoints; Megatron pads the vocabulary to a multiple "
             "of 128 x TP (--make-vocab-size-divisible-by)"]
    args = arguments(req, micro_batch)
    body = [f"torchrun --nnodes {nodes} --nproc-per-node {gpn} {SCRIPT}"]
    for flag, values in flag_values(args):
        body.append("    " + shlex.join([flag, *values]))
    return "\n".join(lines) + "\n" + " \\\n".join(body) + "\n"


# --- import --------------------------------------------------------------------------------

def recognises(text: str) -> bool:
    words = text.split()
    return any(w.startswith("--") for w in words)


def read_text(text: str, where: str, gpus: int | None = None) -> Job:
    run = launch(tokens(text, where))
    return read_arguments(run.args, where, gpus=gpus or run.gpus, gpus_per_node=run.nproc_per_node)


def read_arguments(args: list[str], where: str, *, gpus: int | None = None, gpus_per_node: int | None = None) -> Job:
    """The step Megatron-LM's `args` describe."""
    flags: dict[str, list[str]] = {}
    ignored, unknown, notes = [], [], []
    known = {"--num-layers", "--hidden-size", "--num-attention-heads", "--group-query-attention", "--num-query-groups",
             "--kv-channels", "--ffn-hidden-size", "--swiglu", "--vocab-size", "--padded-vocab-size",
             "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
             "--sequence-parallel", "--cp-comm-type", "--hierarchical-context-parallel-sizes",
             "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
             "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
             "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
             "--use-distributed-optimizer", "--use-megatron-fsdp", "--data-parallel-sharding-strategy",
             "--grad-reduce-in-bf16", "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
             "--recompute-activations", "--fp8-format", "--fp8-recipe", "--tp-comm-overlap", "--seq-length",
             "--micro-batch-size", "--global-batch-size", "--reset-attention-mask", "--fp16"}
    for flag, values in flag_values(args):
        if flag in known:
            flags[flag] = values
        elif flag in IGNORED:
            ignored.append(flag)
        else:
            unknown.append(flag or values[0])
    if "--fp16" in flags:
        notes.append("--fp16: simulated in bf16 (the same rates)")

    def one(flag: str, default: int | None = None) -> int | None:
        if flag not in flags:
            return default
        if len(flags[flag]) != 1:
            raise RingsimError(f"{where}: {flag} takes one number, got {' '.join(flags[flag]) or 'none'}")
        return whole(flags[flag][0], f"{where}: {flag}")

    missing = [f for f in ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length",
                           "--micro-batch-size") if f not in flags]
    if missing:
        raise RingsimError(f"{where}: {', '.join(missing)} missing (ringsim reads the model and batch from them)")
    layers, hidden, heads = one("--num-layers"), one("--hidden-size"), one("--num-attention-heads")
    kv = one("--num-query-groups", heads) if "--group-query-attention" in flags else heads
    if "--num-query-groups" in flags and "--group-query-attention" not in flags:
        notes.append("--num-query-groups without --group-query-attention: Megatron-LM ignores it (K/V heads = heads)")
    mlp = "swiglu" if "--swiglu" in flags else "gelu"
    default_ffn = int((4 * hidden * 2 / 3) / 64) * 64 if mlp == "swiglu" else 4 * hidden    # arguments.py's defaults
    ffn = one("--ffn-hidden-size", default_ffn)
    vocab = one("--padded-vocab-size") or one("--vocab-size")
    if vocab is None:
        raise RingsimError(f"{where}: --vocab-size missing (Megatron-LM takes it from the tokenizer; ringsim needs it)")
    model = model_of(layers, hidden, heads, kv, ffn, vocab, one("--kv-channels"), mlp=mlp, where=where)
    seq, micro_batch = one("--seq-length"), one("--micro-batch-size")
    tp, pp, cp = one("--tensor-model-parallel-size", 1), one("--pipeline-model-parallel-size", 1), \
        one("--context-parallel-size", 1)
    if gpus is None:
        raise RingsimError(f"{where}: how many GPUs? give the torchrun line (--nnodes, --nproc-per-node) or --gpus")
    if gpus % (tp * pp * cp):
        raise RingsimError(f"{where}: {gpus} GPUs do not divide into TP {tp} x PP {pp} x CP {cp}")
    dp = gpus // (tp * pp * cp)
    global_seqs = one("--global-batch-size", micro_batch * dp)
    if global_seqs % (micro_batch * dp):
        raise RingsimError(f"{where}: --global-batch-size {global_seqs} is not a whole number of micro-batches of "
                           f"--micro-batch-size {micro_batch} on each of the {dp} data-parallel ranks")
    # the CP scheme
    comm = flags.get("--cp-comm-type", ["p2p"])
    if len(set(comm)) > 1:
        raise RingsimError(f"{where}: --cp-comm-type {' '.join(comm)}: one type a layer is not simulated; give one")
    comm_type = comm[0]
    scheme = scheme_of(comm_type)
    if scheme is None:
        raise RingsimError(f"{where}: --cp-comm-type {comm_type}: Megatron's types are p2p, all_gather, a2a, a2a+p2p")
    hierarchical = tuple(whole(v, f"{where}: --hierarchical-context-parallel-sizes")
                         for v in flags.get("--hierarchical-context-parallel-sizes", []))
    two_levels = comm_type == traps.HIERARCHICAL
    ulysses = hierarchical[0] if two_levels and hierarchical else None
    # the pipeline
    interleave = 1
    extra = ("--account-for-embedding-in-pipeline-split" in flags) + ("--account-for-loss-in-pipeline-split" in flags)
    if pp > 1:
        counted = layers + extra
        if counted % pp:
            raise RingsimError(f"{where}: {counted} layers{' (the embedding and loss counted)' * bool(extra)} do not "
                               f"split evenly over --pipeline-model-parallel-size {pp}")
        if "--num-layers-per-virtual-pipeline-stage" in flags:
            per = one("--num-layers-per-virtual-pipeline-stage")
            if (counted // pp) % per:
                raise RingsimError(f"{where}: --num-layers-per-virtual-pipeline-stage {per} does not divide the "
                                   f"{counted // pp} layers of a stage")
            interleave = counted // pp // per
        interleave = one("--num-virtual-stages-per-pipeline-rank", interleave)
        mine = stage_layers(layers, pp)
        theirs = [counted // pp - (s == 0 and extra >= 1) - (s == pp - 1 and extra == 2) for s in range(pp)]
        if "--decoder-first-pipeline-num-layers" in flags or "--decoder-last-pipeline-num-layers" in flags or \
                mine != theirs:
            notes.append(f"pipeline stages simulated as ringsim splits them ({', '.join(map(str, mine))} layers)")
    # ZeRO, recomputation
    if "--use-megatron-fsdp" in flags:
        zero = 3
        strategy = flags.get("--data-parallel-sharding-strategy", ["no_shard"])[0]
        if strategy != "optim_grads_params":
            notes.append(f"--use-megatron-fsdp with --data-parallel-sharding-strategy {strategy}: simulated as "
                         f"ZeRO-3 (optim_grads_params)")
    else:
        zero = 1 if "--use-distributed-optimizer" in flags else 0
    granularity = (flags.get("--recompute-granularity") or [None])[0]
    if "--recompute-activations" in flags:
        granularity = "selective"
    recompute = granularity or "none"
    if recompute not in ("none", "selective", "full"):
        raise RingsimError(f"{where}: --recompute-granularity {recompute}: full or selective")
    if recompute == "full":
        method = (flags.get("--recompute-method") or [None])[0]
        n = one("--recompute-num-layers", 1)
        if not (method == "uniform" and n == 1) and not (method == "block" and n >= stage_layers(layers, pp)[0]):
            notes.append(f"--recompute-method {method} --recompute-num-layers {n}: simulated as every layer recomputed")
    fp8 = "--fp8-format" in flags
    if fp8 and (flags.get("--fp8-recipe") or ["delayed"])[0] != "tensorwise":
        notes.append("FP8 with a recipe other than tensorwise: simulated with current scaling's casts")
    parallel = Parallel(tp=tp, cp=cp, pp=pp, dp=dp, zero=zero if dp * cp > 1 else 1, recompute=recompute, fp8=fp8,
                        microbatches=global_seqs // dp // micro_batch, interleave=interleave, scheme=scheme,
                        layout="zigzag", ulysses_degree=ulysses, tp_overlap="--tp-comm-overlap" in flags,
                        grad_reduce="bf16" if "--grad-reduce-in-bf16" in flags else "fp32")
    if tp > 1 and "--sequence-parallel" not in flags:
        notes.append("TP without --sequence-parallel: simulated with it (the step model's TP is Megatron's with "
                     "sequence parallelism)")
    found = traps.check(model, seq, parallel, FLAGS, comm=comm_type, hierarchical=hierarchical or None,
                        sequence_parallel="--sequence-parallel" in flags, packed="--reset-attention-mask" in flags)
    if hierarchical and not two_levels:
        notes.append(f"--hierarchical-context-parallel-sizes with --cp-comm-type {comm_type}: not used")
    return Job(framework="megatron", model=model, seq=seq, global_batch=global_seqs * seq, parallel=parallel, mlp=mlp,
               gpus=gpus, gpus_per_node=gpus_per_node, ignored=ignored, unknown=unknown, notes=notes, traps=found)
