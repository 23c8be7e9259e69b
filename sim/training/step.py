"""One training step of a decoder-only transformer over tensor, context, pipeline and
data parallelism (docs/step.md): its time per GPU, what it is made of, and its memory.

The GPUs are TP x CP x PP x DP, ranked tensor-fastest (Megatron's order: a TP group on
consecutive GPUs, then CP, then DP, then PP), so a TP group of at most a node's GPUs is
inside one node and the CP, DP and PP groups cross nodes once TP x CP fills a node.

One micro-batch is `micro_batch` whole sequences of `seq` tokens; a GPU holds seq / CP of
each sequence's tokens (the CP layout's share) and 1/TP of every layer's weights. Per
layer and micro-batch, forward:

- **GEMMs** (sim.hardware.gemm, each product queued, not called alone): QKV, the output
  projection, gate and up (one product), down, on the CP shard's tokens gathered over
  TP (sequence parallelism: the GEMMs see every token of the shard, 1/TP of the
  weights). Backward: each product's input gradient and weight gradient. With `--fp8` the
  layers' products run at the GPU's FP8 rate and their operands are cast with current
  scaling (FP8_CAST_BYTES, fp8_cast_elements); the output layer stays in bf16.
- **Attention**: the CP scheme's makespan on the CP group (sim.engine.play.simulate: its
  scheme, layout and kernel model, heads / TP per GPU), forward and backward.
- **Elementwise work**: the two RMSNorms and residual adds on the TP-sharded tokens,
  SwiGLU and RoPE on the gathered ones, at the streaming rate (ELEMENTWISE_PASSES).
- **Tensor parallelism** (Megatron with sequence parallelism): an all-gather before
  attention and before the MLP, a reduce-scatter after each, of the shard's activations
  (tokens x hidden); backward the mirror. Ring collectives on the node's link,
  `(TP - 1) / TP` of the tensor through each GPU's port plus a latency per step;
  exposed, or with `tp_overlap` (Megatron's --tp-comm-overlap) hidden behind the layer's
  GEMMs as far as they last.
- **Recomputation**: `selective` recomputes attention in backward (one more attention
  forward per layer, its output and statistics not kept); `full` recomputes the whole
  layer forward (its GEMMs, attention, elementwise work and TP collectives) and keeps
  only the layer's input.

The last stage adds the output layer (hidden -> vocabulary / TP) and its loss, the first
the embedding lookup (a gather, counted as its bytes). A stage's time per micro-batch is
its layers' forward (t_f) and backward (t_b).

**Pipeline**: 1F1B over `microbatches` micro-batches, played on the engine
(sim.training.pipeline): every stage's forwards and backwards in Megatron's order, plain or
interleaved over v virtual stages per GPU (a stage's time split evenly over its chunks;
the embedding and the output layer may fill a chunk of their own, as Llama 3's pipeline
and Megatron-Core's account_for_embedding/loss_in_pipeline_split place them, so 126
layers make 16 stages of 8 chunks), and the activations and gradients sent between
stages (tokens x hidden / TP each, across the NICs when the stages are in different
nodes). With equal stages and free sends its makespan is m (t_f + t_b) + (PP - 1) / v
(t_f + t_b); the breakdown's bubble is what the pipeline adds to the slowest stage's m
micro-batches without the sends, its PP communication what the sends add.

**Data parallelism** over the GPUs that hold the same weights: the DP replicas and, inside
each, the CP ranks, which hold one copy of the weights and compute gradients from their own
tokens (Megatron-LM reduces gradients and shards its distributed optimizer over the data-
and context-parallel group; torchtitan applies FSDP over its `dp_shard_cp` mesh). So
gradients are reduced, and ZeRO shards, over DP x CP GPUs, on the NICs when they are in
different nodes. Gradients travel in fp32 (GRAD_BYTES; `--grad-reduce bf16` halves them),
weights in bf16: DDP all-reduces
the gradients, ZeRO-1 reduce-scatters them and all-gathers the updated weights, ZeRO-3
(FSDP) all-gathers each layer's weights before its forward and its backward and
reduce-scatters the layer's gradients after its backward. What hides: a stage's gradient
reduction overlaps the last micro-batch's backward on its stage (what exceeds it is
exposed); ZeRO-1's gather of the updated weights overlaps the first micro-batch's
forward; FSDP's per-layer collectives overlap the layer beside them (a layer whose
collectives outlast its compute exposes the difference). The optimizer step (Adam)
streams its state once.

**Memory per GPU**, with r = DP x CP: DDP and ZeRO-1 keep the bf16 weights and the
gradients whole, and the fp32 master weights and Adam's two moments (12 bytes a
parameter; 16 with bf16 gradients, which the optimizer copies to fp32) whole or in r
shards: 18, or 6 + 12 / r, bytes a parameter with fp32 gradients, 4 + 16 / r with bf16
ones (Megatron-LM's distributed-optimizer table). ZeRO-3 keeps the fp32 weights (the
master copy), their gradients and the moments in r shards, 16 / r, plus the bf16
weights of the two layers it has gathered (the one computing and the one prefetched).
Then the activations every layer keeps for its backward (ACTIVATION_BYTES per token, or
the layer's input alone under full recomputation) for the micro-batches in flight on the
stage that holds the most (the first: PP of them in 1F1B; interleaved, (v + 1) PP - 1
chunks of 1/v of its layers, sim.training.pipeline.in_flight), the output layer's logits on the
last, the attention
scheme's working memory for one layer, and under recomputation what one layer's
backward holds of its rebuilt forward.

**Model FLOPs** (the MFU's numerator): 6 x parameters x tokens (every parameter once
forward, twice backward) plus attention, 3 x 4 x seq x heads x head_dim per token and
layer with the causal mask counted as half (6 x seq x heads x head_dim); recomputation is
not counted. Published MFUs often use PaLM's count instead (Chowdhery et al., "PaLM",
2022, Appendix B: 6N + 12LHQT per token, attention with no mask), as the Llama 3 paper
(section 3.3.2 cites it for its Table 4) and torchtitan (`get_num_flop_per_token`) do;
a step gives both (`palm_tflops_per_gpu`, `palm_mfu`), for comparing with numbers
counted that way.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, replace
from typing import Any

from sim.errors import RingsimError
from sim.hardware.cluster import Hardware
from sim.hardware.gemm import FP8_PEAK_FACTOR, gemm_time
from sim.scenario.config import LAYOUTS, Scenario, Workload
from sim.scenario.models import Model
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.trace.format import Trace
from sim.trace.metrics import compute_metrics
from sim.training.pipeline import in_flight, pipeline_makespan, play_pipeline
from sim.units import is_whole, require_whole

RECOMPUTE = ("none", "selective", "full")
MLPS = ("swiglu", "gelu")
"""A layer's feed-forward block: SwiGLU (gate and up in one product, then down: Llama's) or
a plain GeLU MLP (up, then down: GPT's and Megatron-LM's default without --swiglu)."""
ZERO_STAGES = (0, 1, 3)
ELEMENTWISE_PASSES = {"norm": 2, "residual": 3, "swiglu": 3, "rope": 2}
"""Bytes moved per element (in units of an element) of the forward's elementwise work:
an RMSNorm reads and writes its row (2), a residual add reads two and writes one (3),
SwiGLU reads gate and up and writes their product (3 per FFN element), RoPE reads and
writes Q and K (2). The backward moves twice the forward's."""
ELEMENT_BYTES = 2
GRAD_BYTES = {"fp32": 4, "bf16": 2}
"""Bytes of a gradient, by the dtype it is reduced and kept in (`--grad-reduce`). fp32 is
the default of bf16 training: Megatron-LM forces it ("bfloat16 requires gradient
accumulation and all-reduce to be done in fp32", megatron/training/arguments.py; its
README's distributed-optimizer table counts bf16 parameters with fp32 gradients), and
torchtitan's FSDP reduces in fp32 by default (`training.mixed_precision_reduce`). NeMo's
benchmark recipes turn it off (`grad_reduce_in_fp32 = False`,
megatron/bridge/perf_recipes/_common.py): bf16."""


MAX_MICROBATCHES = 65536
"""The most micro-batches a replica's step is played with: the play holds every micro-batch's
forward and backward on every stage (a million took minutes and 1.5 GB), and 65,536 is 32
times the 2,048 sequences of Llama 3 405B's whole 16M-token batch at 8k tokens."""


@dataclass(frozen=True, kw_only=True)
class Parallel:
    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    zero: int = 1
    """0: DDP, 1: ZeRO-1 (optimizer state sharded), 3: FSDP (everything sharded)."""
    recompute: str = "none"
    fp8: bool = False
    """GEMMs in FP8 (e4m3), at the GPU's FP8 rate."""
    microbatches: int | None = None
    """Micro-batches per step per replica; None: one sequence each."""
    interleave: int = 1
    """Virtual pipeline stages per GPU (interleaved 1F1B)."""
    tp_overlap: bool = False
    """TP collectives overlapped with the GEMMs (Megatron's --tp-comm-overlap): only what
    a layer's GEMMs do not cover is exposed."""
    grad_reduce: str = "fp32"
    """The dtype gradients are reduced and kept in (GRAD_BYTES): fp32, the frameworks'
    training default, or bf16 (Megatron's grad_reduce_in_fp32=False, as NeMo's
    benchmark recipes set it)."""
    scheme: str = DEFAULT_SCHEME
    """The CP scheme (sim.schemes) and its layout."""
    layout: str = "zigzag"
    ulysses_degree: int | None = None
    """A CP scheme with an all-to-all (ulysses, hybrid): GPUs in each all-to-all group, as
    Megatron's first hierarchical CP size gives it; None: the scheme's own choice."""
    impl: str = "ideal"
    """Whose implementation of the CP scheme runs (sim.implementations)."""

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp


@dataclass(frozen=True, kw_only=True)
class StepRequest:
    model: Model
    seq: int
    global_batch: int
    """Tokens per step, over all replicas."""
    parallel: Parallel = field(default_factory=Parallel)
    hardware: Hardware = field(default_factory=Hardware)
    mlp: str = "swiglu"
    """The feed-forward block (MLPS)."""
    gemm_rate: tuple[float, str] | None = None
    """(TFLOP/s, source) the GEMMs run at in place of the GPU's MAMF (sim.hardware.gemm): a
    rate fitted to a profiled run's own GEMM kernels (sim.profiler.step_replay)."""

    def __post_init__(self) -> None:
        m, p = self.model, self.parallel
        if self.mlp not in MLPS:
            raise RingsimError(f"the MLP must be one of {', '.join(MLPS)}, got {self.mlp!r}")
        for name, v in (("tp", p.tp), ("cp", p.cp), ("pp", p.pp), ("dp", p.dp), ("interleave", p.interleave),
                        ("seq", self.seq), ("global-batch", self.global_batch)):
            require_whole(f"--{name}", v)
        if m.ffn is None or m.vocab is None:
            raise RingsimError(f"model {m.name} has no FFN size or vocabulary: give --ffn and --vocab")
        if m.params is None:
            raise RingsimError(f"model {m.name} has no parameter count: give --params")
        if p.zero not in ZERO_STAGES:
            raise RingsimError(f"--zero must be one of {', '.join(map(str, ZERO_STAGES))}, got {p.zero!r}")
        if p.grad_reduce not in GRAD_BYTES:
            raise RingsimError(f"--grad-reduce must be one of {', '.join(GRAD_BYTES)}, got {p.grad_reduce!r}")
        if p.layout not in LAYOUTS:
            # checked whatever --cp: a layout nothing uses is still a mistake to say
            raise RingsimError(f"--layout must be one of {', '.join(LAYOUTS)}, got {p.layout!r}")
        if p.recompute not in RECOMPUTE:
            raise RingsimError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got {p.recompute!r}")
        if m.heads % p.tp:
            raise RingsimError(f"--tp {p.tp} does not divide the model's {m.heads} query heads")
        if m.kv_heads % p.tp and p.tp % m.kv_heads:
            raise RingsimError(f"--tp {p.tp} and the model's {m.kv_heads} K/V heads: one must divide the other")
        if m.ffn % p.tp or m.vocab % p.tp:
            raise RingsimError(f"--tp {p.tp} does not divide the FFN size {m.ffn} and the vocabulary {m.vocab}")
        if p.interleave > 1 and p.pp == 1:
            raise RingsimError(f"--interleave {p.interleave} needs a pipeline: give --pp of 2 or more")
        for s, n in enumerate(stage_layers(m.layers, p.pp)):
            tables = (s == 0) + (s == p.pp - 1)        # the embedding and the output layer fill a chunk too
            if n + tables < p.interleave:
                raise RingsimError(f"{m.layers} layers cannot fill {p.pp} stages of {p.interleave} virtual stages: "
                                   f"stage {s} holds {n} layers" + (" and a table" * (tables == 1))
                                   + (" and two tables" * (tables == 2)))
        if self.seq % p.cp:
            raise RingsimError(f"--seq {self.seq} does not divide into --cp {p.cp} shards")
        per_replica, rest = divmod(self.global_batch, self.seq * p.dp)
        if rest or per_replica == 0:
            raise RingsimError(f"--global-batch {self.global_batch} tokens is not a whole number of "
                               f"{self.seq}-token sequences for each of the {p.dp} replicas")
        mb = p.microbatches if p.microbatches is not None else per_replica
        if not is_whole(mb) or per_replica % mb:
            raise RingsimError(f"--microbatches {mb} does not divide the {per_replica} sequences of a replica")
        if p.interleave > 1 and mb % p.pp:
            raise RingsimError(f"interleaved 1F1B needs the micro-batches ({mb}) to be a multiple of --pp {p.pp}")
        if mb > MAX_MICROBATCHES:
            raise RingsimError(f"{mb:,} micro-batches a step per replica: more than the {MAX_MICROBATCHES:,} the "
                               "pipeline is played with; give --microbatches (larger micro-batches) or more --dp")

    @property
    def sequences_per_replica(self) -> int:
        return self.global_batch // (self.seq * self.parallel.dp)

    @property
    def microbatches(self) -> int:
        p = self.parallel
        return p.microbatches if p.microbatches is not None else self.sequences_per_replica

    @property
    def micro_batch(self) -> int:
        """Sequences per micro-batch."""
        return self.sequences_per_replica // self.microbatches

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch a GPU holds: the CP shard of each sequence."""
        return self.micro_batch * self.seq // self.parallel.cp


# --- what the model is made of ------------------------------------------------------------

def layer_linears(model: Model, tp: int, mlp: str = "swiglu") -> dict[str, tuple[int, int]]:
    """Each linear layer of a transformer layer as (k_in, n_out) on one GPU of a TP group;
    a GeLU MLP (MLPS) has one up projection where SwiGLU has gate and up."""
    h, d = model.hidden, model.head_dim
    kv = max(model.kv_heads // tp, 1)
    linears = {"qkv": (h, (model.heads // tp + 2 * kv) * d), "out": (model.heads * d // tp, h)}
    if mlp == "gelu":
        linears["up"] = (h, model.ffn // tp)
    else:
        linears["gate_up"] = (h, 2 * model.ffn // tp)
    linears["down"] = (model.ffn // tp, h)
    return linears


FP8_CAST_BYTES = 6
"""Bytes moved per element when a GEMM operand is put in FP8 with current (dynamic)
scaling, as NeMo's "fp8_cs" recipes and torchao's tensorwise Float8 do: one read for its
amax, one read to cast, and two FP8 writes, row-wise for this product and column-wise for
the weight-gradient product that takes it transposed. The FP8 GEMM rate (sim.hardware.gemm) is
measured on operands already in FP8, so these casts are counted here."""


def fp8_cast_elements(model: Model, tp: int) -> tuple[float, float]:
    """Elements cast to FP8 per token of one layer, forward and backward, on one GPU of a
    TP group: forward the inputs of the four linear layers (the two gathered over TP cast
    as their shard, before the gather), backward the gradients of their outputs (those of
    the row-parallel layers also as a shard). Fused QKV and gate/up products, as Megatron
    builds them."""
    h, d = model.hidden, model.head_dim
    kv = max(model.kv_heads // tp, 1)
    forward = h / tp + model.heads * d / tp + h / tp + model.ffn / tp
    backward = (model.heads // tp + 2 * kv) * d + h / tp + 2 * model.ffn / tp + h / tp
    return forward, backward


def layer_params(model: Model) -> int:
    """Parameters of one layer (the TP group's whole), norms included."""
    h, d = model.hidden, model.head_dim
    return (h * (model.heads + 2 * model.kv_heads) * d + model.heads * d * h + 3 * h * model.ffn + 2 * h)


def layer_forward_flops(model: Model, seq: int, tokens: int) -> float:
    """Forward FLOPs of one layer on `tokens` tokens of `seq`-token causal sequences: two per
    weight per token in its linear layers, plus attention at half of 4 x seq x heads x
    head_dim per token (the causal mask)."""
    linear = 2.0 * sum(k * n for k, n in layer_linears(model, 1).values())
    attention = 2.0 * seq * model.heads * model.head_dim
    return tokens * (linear + attention)


def model_flops_per_token(model: Model, seq: int) -> float:
    """The MFU's convention (module docstring): 6 x parameters plus 6 x seq x heads x
    head_dim per layer."""
    return 6.0 * model.params + 6.0 * model.layers * seq * model.heads * model.head_dim


def palm_flops_per_token(model: Model, seq: int) -> float:
    """PaLM's count (module docstring): 6N + 12LHQT, N every parameter, attention over the
    whole seq x seq square whatever the mask."""
    return 6.0 * model.params + 12.0 * model.layers * model.heads * model.head_dim * seq


def stage_layers(layers: int, pp: int) -> list[int]:
    """Layers of each stage: as even as possible, the first and last stages taking the
    fewer (Llama 3's 126 layers over 16 stages: 7, 8 x 14, 7)."""
    base, extra = divmod(layers, pp)
    if extra == 0:
        return [base] * pp
    out = [base + 1] * pp
    short = pp - extra                      # stages with one layer fewer
    order = [0, pp - 1] + list(range(1, pp - 1))
    for s in order[:short]:
        out[s] -= 1
    return out


def activation_bytes_per_token(model: Model, tp: int, recompute: str) -> float:
    """Bytes one layer keeps per token for its backward on one GPU, with sequence
    parallelism (every tensor kept sharded over TP) and a fused attention (no scores):
    the inputs of the two RMSNorms and of the two GEMM groups (hidden each), Q, K and V,
    the attention output and its log-sum-exp (fp32 per head), gate and up and SwiGLU's
    output (3 x FFN). Selective: without the attention output and statistics
    (recomputed); full: the layer's input alone."""
    h, d = model.hidden, model.head_dim
    kv = max(model.kv_heads // tp, 1) * tp
    if recompute == "full":
        return ELEMENT_BYTES * h / tp
    kept = 4 * h + (model.heads + 2 * kv) * d + 3 * model.ffn
    out = ELEMENT_BYTES * kept / tp
    if recompute == "none":
        out += (ELEMENT_BYTES * model.heads * d + 4 * model.heads) / tp
    return out


def bubble_fraction(pp: int, microbatches: int, interleave: int = 1) -> float:
    """1F1B's idle share over the useful time: (PP - 1) / (m v)."""
    return (pp - 1) / (microbatches * interleave)


# --- collectives --------------------------------------------------------------------------

def ring_collective_s(nbytes: float, group: int, bandwidth_gbps: float, latency_us: float) -> float:
    """A ring all-gather or reduce-scatter of a tensor of `nbytes` (the whole) over `group`
    GPUs: group - 1 steps, each a latency and 1/group of the tensor through every port."""
    if group <= 1:
        return 0.0
    return (group - 1) * (latency_us * 1e-6 + nbytes / group / (bandwidth_gbps * 1e9))


def _link(req: StepRequest, span: int) -> tuple[float, float]:
    """(GB/s, latency µs) of a group whose members lie within `span` consecutive GPUs:
    the NIC when that crosses a node (and the nodes have one), else the node's link."""
    hw = req.hardware
    link = hw.inter_link if span > hw.gpus_per_node and hw.inter_link is not None else hw.link
    return link.bandwidth_gbps, link.latency_us


# --- the step -----------------------------------------------------------------------------

@dataclass
class Step:
    """One step's answer (module docstring): times in seconds, bytes per GPU."""

    request: StepRequest
    step_s: float
    breakdown: dict[str, float]
    per_layer: dict[str, float]
    memory: dict[str, float]
    model_flops: float
    stage_layers: list[int]
    notes: list[str]
    stage_s: list[tuple[float, float]] = field(default_factory=list)
    """Each stage's forward and backward of one micro-batch."""
    pipeline_play: tuple | None = None
    """play_pipeline's arguments for this step's pipeline (its trace is recorded on demand)."""

    @functools.cached_property
    def pipeline(self) -> Trace | None:
        """The pipeline as the engine played it: stage s is rank s (sim.training.pipeline)."""
        return play_pipeline(*self.pipeline_play) if self.pipeline_play is not None else None

    @property
    def gpus(self) -> int:
        return self.request.parallel.gpus

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.request.global_batch / self.step_s / self.gpus

    @property
    def tflops_per_gpu(self) -> float:
        return self.model_flops / self.step_s / self.gpus / 1e12

    @property
    def peak_tflops(self) -> float:
        hw = self.request.hardware
        peak = hw.gpu.peak_tflops.get("fp8" if self.request.parallel.fp8 else "bf16")
        if peak is None and self.request.parallel.fp8:
            peak = FP8_PEAK_FACTOR * hw.gpu.peak_tflops["bf16"]
        return peak

    @property
    def mfu(self) -> float:
        return self.tflops_per_gpu / self.peak_tflops

    @property
    def palm_tflops_per_gpu(self) -> float:
        """TFLOP/s per GPU by PaLM's count (palm_flops_per_token)."""
        r = self.request
        return palm_flops_per_token(r.model, r.seq) * r.global_batch / self.step_s / self.gpus / 1e12

    @property
    def palm_mfu(self) -> float:
        return self.palm_tflops_per_gpu / self.peak_tflops

    @property
    def memory_bytes_per_gpu(self) -> float:
        return self.memory["total"]

    @property
    def fits(self) -> bool:
        return self.memory["total"] <= self.request.hardware.gpu.memory_gb * 1e9

    def to_dict(self) -> dict[str, Any]:
        r, p = self.request, self.request.parallel
        return {"model": r.model.describe(), "seq": r.seq, "global_batch": r.global_batch,
                "parallel": {"tp": p.tp, "cp": p.cp, "pp": p.pp, "dp": p.dp, "zero": p.zero,
                             "recompute": p.recompute, "fp8": p.fp8, "microbatches": r.microbatches,
                             "micro_batch": r.micro_batch, "interleave": p.interleave, "scheme": p.scheme,
                             "layout": p.layout, "tp_overlap": p.tp_overlap, "grad_reduce": p.grad_reduce,
                             **({"ulysses_degree": p.ulysses_degree} if p.ulysses_degree is not None else {}),
                             **({"impl": p.impl} if p.impl != "ideal" else {})},
                "gpus": self.gpus, "gpu": r.hardware.gpu.name, "step_s": self.step_s,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "tflops_per_gpu": self.tflops_per_gpu,
                "mfu": self.mfu, "palm_tflops_per_gpu": self.palm_tflops_per_gpu, "palm_mfu": self.palm_mfu,
                "memory_bytes_per_gpu": self.memory_bytes_per_gpu, "fits": self.fits,
                "breakdown": self.breakdown, "per_layer": self.per_layer, "memory": self.memory,
                "stage_layers": self.stage_layers, "stage_s": [list(x) for x in self.stage_s], "notes": self.notes}


_ATTENTION: dict[tuple, tuple[float, float]] = {}
"""Attention layers already simulated, by everything that decides them (a plan asks for
the same few many times)."""
_ATTENTION_MEMORY: dict[tuple, float] = {}
"""The CP scheme's working memory of a layer's attention, by the same key (a plan reads it
for every split before it simulates any attention)."""
_ATTENTION_BOUND: dict[tuple, float] = {}
"""attention_bound_s, by the same key."""
_HARDWARE_KEYS: dict[int, tuple[Hardware, str]] = {}
"""Each hardware's repr, by the object (a plan's splits share one: its repr costs more
than the look-up)."""


def _hardware_key(hw: Hardware) -> str:
    hit = _HARDWARE_KEYS.get(id(hw))
    if hit is None or hit[0] is not hw:
        if len(_HARDWARE_KEYS) > 64:
            _HARDWARE_KEYS.clear()
        hit = _HARDWARE_KEYS[id(hw)] = (hw, repr(hw))
    return hit[1]


def _attention_key(req: StepRequest, pass_: str) -> tuple:
    m, p = req.model, req.parallel
    return (m.heads, m.kv_heads, m.head_dim, p.tp, p.cp, p.scheme, p.layout, p.ulysses_degree, p.impl,
            req.micro_batch, req.seq, pass_, _hardware_key(req.hardware))


def _attention_s(req: StepRequest, pass_: str) -> tuple[float, float]:
    """(makespan, the scheme's working memory) of one layer's attention for one
    micro-batch on the CP group (sim.engine.play.simulate)."""
    key = _attention_key(req, pass_)
    if key not in _ATTENTION:
        if len(_ATTENTION) > 4096:
            _ATTENTION.clear()
        _ATTENTION[key] = _simulate_attention(req, pass_)
    return _ATTENTION[key]


def attention_memory_bytes(req: StepRequest) -> float:
    """The CP scheme's working memory for one layer's attention (what `_attention_s` gives
    beside the makespan), without simulating it."""
    key = _attention_key(req, "fwd")
    if key in _ATTENTION:
        return _ATTENTION[key][1]
    if key not in _ATTENTION_MEMORY:
        # the memory model loads with the first attention, as in _simulate_attention
        from sim.scenario.memory import peak_memory

        if len(_ATTENTION_MEMORY) > 4096:
            _ATTENTION_MEMORY.clear()
        _ATTENTION_MEMORY[key] = float(peak_memory(attention_scenario(req, "fwd"))["total"])
    return _ATTENTION_MEMORY[key]


def attention_bound_s(req: StepRequest, pass_: str) -> float:
    """A lower bound of `_attention_s`'s makespan that simulates nothing: the pass's ideal
    time (docs/design.md), the causal FLOPs of the micro-batch's sequences over the CP
    group at the rate no block of the kernel model beats (sim.engine.play.ideal_rate_flops).
    The busiest GPU computes at least the group's mean, each block no faster than that
    rate, and contention only stretches a block, so no simulated attention is shorter
    (efficiency at most 1). The pairs counted are seq^2 / 2 a sequence, a little under the
    seq (seq + 1) / 2 a causal mask computes."""
    from sim.engine.play import ideal_rate_flops
    from sim.scenario.quantities import PASS_FLOPS_FACTOR

    key = _attention_key(req, pass_)
    if key not in _ATTENTION_BOUND:
        sc = attention_scenario(req, pass_)
        w = sc.workload
        rate = ideal_rate_flops(sc.implementation.played_on(sc.hardware), w)
        flops = w.fwd_flops(w.seq * w.seq / 2) * PASS_FLOPS_FACTOR[pass_]          # over the batch
        if len(_ATTENTION_BOUND) > 4096:
            _ATTENTION_BOUND.clear()
        _ATTENTION_BOUND[key] = flops / (sc.n_gpus * rate)
    return _ATTENTION_BOUND[key]


def attention_scenario(req: StepRequest, pass_: str) -> Scenario:
    """One layer's attention for one micro-batch on the CP group, as a Scenario: its
    scheme (with the all-to-all degree the step gives), layout and kernel model, heads / TP
    per GPU."""
    m, p = req.model, req.parallel
    heads = m.heads // p.tp
    kv = max(m.kv_heads // p.tp, 1)
    w = Workload(batch=req.micro_batch, seq=req.seq, heads=heads, kv_heads=kv, head_dim=m.head_dim,
                 dtype="bf16", causal=True, pass_=pass_)
    hw = req.hardware
    # the CP group's GPUs sit TP apart: as many of them share a node as TP leaves room for
    cp_hw = replace(hw, gpus_per_node=max(1, hw.gpus_per_node // p.tp), nics_per_node=None, pcie=None)
    scheme = p.scheme if p.cp > 1 else DEFAULT_SCHEME
    settings = None
    if p.cp > 1 and p.ulysses_degree is not None:
        settings_type = get_scheme(scheme).settings_type
        if "ulysses_degree" not in {f.name for f in fields(settings_type)}:
            raise RingsimError(f"--ulysses-degree {p.ulysses_degree}: the {scheme} scheme has no all-to-all")
        settings = settings_type(ulysses_degree=p.ulysses_degree)
    return Scenario(workload=w, hardware=cp_hw, n_gpus=p.cp, scheme=scheme, settings=settings,
                    layout=p.layout if p.cp > 1 else "contiguous", impl=p.impl if p.cp > 1 else "ideal")


def _simulate_attention(req: StepRequest, pass_: str) -> tuple[float, float]:
    # `ringsim` imports this module on every start (the step command's options): the
    # engine and the memory model load when a step's attention is first simulated
    from sim.engine.play import simulate
    from sim.scenario.memory import peak_memory

    sc = attention_scenario(req, pass_)
    trace = simulate(sc, player="recurrence")
    return compute_metrics(trace).makespan_s, float(peak_memory(sc)["total"])


_PIPELINES: dict[tuple, float] = {}
"""Pipelines' makespans already played, by their stage times, send, micro-batches and depth
(a plan's ZeRO stages share one)."""


def _pipeline(stage_f: list[float], stage_b: list[float], send: float, mb: int, v: int) -> float:
    """The pipeline's makespan as the engine plays it (sim.training.pipeline)."""
    key = (tuple(stage_f), tuple(stage_b), send, mb, v)
    if key not in _PIPELINES:
        if len(_PIPELINES) > 4096:
            _PIPELINES.clear()
        _PIPELINES[key] = pipeline_makespan(stage_f, stage_b, send, mb, v)
    return _PIPELINES[key]


def _gemms_s(req: StepRequest, products: list[tuple[int, int, int]], *, fp8: bool | None = None) -> float:
    """The queued products' time, in FP8 as the step asks unless `fp8` says otherwise."""
    gpu = req.hardware.gpu.name
    fp8 = req.parallel.fp8 if fp8 is None else fp8
    return sum(gemm_time(mm, nn, kk, gpu, fp8=fp8, alone=False, rate=req.gemm_rate).time_s
               for mm, nn, kk in products)


@dataclass(frozen=True)
class _LayerTimes:
    """One transformer layer's work for one micro-batch on one GPU, in seconds."""

    gemm_fwd_s: float
    gemm_bwd_s: float
    attention_fwd_s: float
    attention_bwd_s: float
    elementwise_fwd_s: float
    elementwise_bwd_s: float
    tp_fwd_s: float
    """The TP collectives, what of them shows (all of it without `tp_overlap`)."""
    tp_bwd_s: float
    recompute_s: float
    """What backward computes again (`recompute`)."""
    attention_working_bytes: float
    """The CP scheme's working memory for the layer's attention."""

    @property
    def forward_s(self) -> float:
        return self.gemm_fwd_s + self.attention_fwd_s + self.elementwise_fwd_s + self.tp_fwd_s

    @property
    def backward_s(self) -> float:
        return self.gemm_bwd_s + self.attention_bwd_s + self.elementwise_bwd_s + self.tp_bwd_s + self.recompute_s


_LAYER_WORK: dict[tuple, tuple[float, float, float, float, float]] = {}
"""A layer's work besides attention, by everything that decides it (a plan's splits of one
TP degree and micro-batch share it)."""


def _layer_work(req: StepRequest) -> tuple[float, float, float, float, float]:
    """A layer's GEMMs forward and backward, its elementwise work forward, and what of its
    TP collectives shows forward and backward (module docstring), for one micro-batch."""
    m, p, hw = req.model, req.parallel, req.hardware
    t = req.tokens                                   # tokens a GPU's GEMMs see per micro-batch
    key = (m, req.mlp, p.tp, p.fp8, p.tp_overlap, t, req.gemm_rate, _hardware_key(hw))
    hit = _LAYER_WORK.get(key)
    if hit is not None:
        return hit
    stream = hw.gpu.memory_bandwidth_gbps
    lin = layer_linears(m, p.tp, req.mlp)
    fwd_products = [(t, n, k) for k, n in lin.values()]
    bwd_products = [x for k, n in lin.values() for x in ((t, k, n), (k, n, t))]
    gemm_f, gemm_b = _gemms_s(req, fwd_products), _gemms_s(req, bwd_products)
    if p.fp8:            # the operands' casts to FP8 (FP8_CAST_BYTES), counted with the products
        cast_f, cast_b = fp8_cast_elements(m, p.tp)
        gemm_f += t * cast_f * FP8_CAST_BYTES / (stream * 1e9)
        gemm_b += t * cast_b * FP8_CAST_BYTES / (stream * 1e9)
    kv = max(m.kv_heads // p.tp, 1)
    elem_elems = t * (m.hidden / p.tp * (2 * ELEMENTWISE_PASSES["norm"] + 2 * ELEMENTWISE_PASSES["residual"])
                      + m.ffn / p.tp * ELEMENTWISE_PASSES["swiglu"]
                      + (m.heads // p.tp + kv) * m.head_dim * ELEMENTWISE_PASSES["rope"])
    elem_f = elem_elems * ELEMENT_BYTES / (stream * 1e9)
    tp_one = ring_collective_s(_activation_bytes(req), p.tp, hw.link.bandwidth_gbps, hw.link.latency_us)
    tp_f = tp_b = 4 * tp_one
    if p.tp_overlap:
        # each collective runs in chunks beside the GEMM it feeds or follows: only what the
        # layer's GEMMs cannot cover shows
        tp_f, tp_b = max(0.0, tp_f - gemm_f), max(0.0, tp_b - gemm_b)
    if len(_LAYER_WORK) > 4096:
        _LAYER_WORK.clear()
    _LAYER_WORK[key] = (gemm_f, gemm_b, elem_f, tp_f, tp_b)
    return _LAYER_WORK[key]


def _layer_times(req: StepRequest, attention: tuple[float, float, float] | None = None) -> _LayerTimes:
    """A layer's GEMMs, attention, elementwise work and TP collectives, forward and
    backward, and what recomputation adds (module docstring). `attention`: (forward,
    backward, working memory) in place of the simulated attention's (a plan's bound)."""
    p = req.parallel
    gemm_f, gemm_b, elem_f, tp_f, tp_b = _layer_work(req)
    if attention is None:
        attn_f, attn_mem = _attention_s(req, "fwd")
        attn_b, _ = _attention_s(req, "bwd")
    else:
        attn_f, attn_b, attn_mem = attention
    recompute_b = 0.0
    if p.recompute == "selective":
        recompute_b = attn_f
    elif p.recompute == "full":
        recompute_b = gemm_f + attn_f + elem_f + tp_f
    return _LayerTimes(gemm_fwd_s=gemm_f, gemm_bwd_s=gemm_b, attention_fwd_s=attn_f, attention_bwd_s=attn_b,
                       elementwise_fwd_s=elem_f, elementwise_bwd_s=2 * elem_f, tp_fwd_s=tp_f, tp_bwd_s=tp_b,
                       recompute_s=recompute_b, attention_working_bytes=attn_mem)


def _activation_bytes(req: StepRequest) -> float:
    """The shard's activations, gathered over TP: what a TP collective moves, and (over
    TP) what one stage sends the next."""
    return req.tokens * req.model.hidden * ELEMENT_BYTES


@dataclass(frozen=True)
class _EndTimes:
    """The output layer's work on the last stage and the embedding's on the first, for
    one micro-batch, in seconds."""

    head_gemm_fwd_s: float
    head_gemm_bwd_s: float
    loss_s: float
    """The fp32 logits read, the softmax written and read back, forward and again backward."""
    embedding_s: float
    """The embedding's gather, counted as its bytes, forward and again backward."""

    @property
    def head_fwd_s(self) -> float:
        return self.head_gemm_fwd_s + self.loss_s

    @property
    def head_bwd_s(self) -> float:
        return self.head_gemm_bwd_s + self.loss_s


def _end_times(req: StepRequest) -> _EndTimes:
    m, p, t = req.model, req.parallel, req.tokens
    stream = req.hardware.gpu.memory_bandwidth_gbps
    head_k, head_n = m.hidden, m.vocab // p.tp
    # the output layer stays in bf16 under FP8 (torchtitan's Float8 skips `output`; Megatron's
    # output layer is not a Transformer Engine module)
    return _EndTimes(head_gemm_fwd_s=_gemms_s(req, [(t, head_n, head_k)], fp8=False),
                     head_gemm_bwd_s=_gemms_s(req, [(t, head_k, head_n), (head_k, head_n, t)], fp8=False),
                     loss_s=3 * t * head_n * 4 / (stream * 1e9),
                     embedding_s=2 * t * m.hidden * ELEMENT_BYTES / p.tp / (stream * 1e9))


def _stage_params(req: StepRequest, layers: list[int], stage: int) -> float:
    """A stage's parameters on one GPU: its layers, the input embedding on the first
    stage and the output layer on the last (both on a single stage; untied, as in Llama 3)."""
    m, p = req.model, req.parallel
    tables = (stage == 0) + (stage == p.pp - 1)
    return (layers[stage] * layer_params(m) + tables * m.vocab * m.hidden) / p.tp


def _data_parallel_s(req: StepRequest, layers: list[int], slow: int, layer: _LayerTimes,
                     stage_f: float, stage_b: float, notes: list[str]) -> float:
    """What the gradients' reduction (and ZeRO's gathers of weights) exposes on the
    slowest stage, whose micro-batch takes `stage_f` forward and `stage_b` backward
    (module docstring, "Data parallelism")."""
    m, p = req.model, req.parallel
    stage_params = _stage_params(req, layers, slow)
    replicas = p.dp * p.cp                                          # GPUs holding the same weights
    dbw, dlat = _link(req, p.tp * p.cp * p.dp)                     # a replica group
    grad = GRAD_BYTES[p.grad_reduce]
    rs = ring_collective_s(stage_params * grad, replicas, dbw, dlat)
    if replicas <= 1:
        return 0.0
    last_backward = stage_b
    if p.zero == 0:
        return max(0.0, 2 * rs - last_backward)          # an all-reduce: two rings' worth
    if p.zero == 1:
        gather = ring_collective_s(stage_params * ELEMENT_BYTES, replicas, dbw, dlat)
        return max(0.0, rs - last_backward) + max(0.0, gather - stage_f)
    gather = ring_collective_s(layer_params(m) / p.tp * ELEMENT_BYTES, replicas, dbw, dlat)
    layer_rs = ring_collective_s(layer_params(m) / p.tp * grad, replicas, dbw, dlat)
    per_layer = (max(0.0, gather - layer.forward_s) + max(0.0, gather + layer_rs - layer.backward_s)) * layers[slow]
    notes.append("FSDP: each layer's weights gathered before its forward and its backward, and its "
                 "gradients reduce-scattered, in every micro-batch")
    return req.microbatches * per_layer


def _optimizer_s(req: StepRequest, layers: list[int], slow: int) -> float:
    """The optimizer step (Adam) on the slowest stage: its state streamed once, sharded by ZeRO."""
    p = req.parallel
    shard = p.dp * p.cp if p.zero >= 1 else 1
    # read and write 16 bytes of state a parameter
    return _stage_params(req, layers, slow) / shard * 16 * 2 / (req.hardware.gpu.memory_bandwidth_gbps * 1e9)


def _memory(req: StepRequest, layers: list[int], attention_working_bytes: float) -> dict[str, float]:
    """Bytes per GPU on the stage that holds the most, by what holds them (module
    docstring, "Memory per GPU")."""
    m, p, t = req.model, req.parallel, req.tokens
    replicas = p.dp * p.cp
    grad = GRAD_BYTES[p.grad_reduce]
    head_n = m.vocab // p.tp
    params_gpu = max(_stage_params(req, layers, s) for s in _distinct_stages(layers))
    # each stage's peak of chunks in flight (sim.training.pipeline.in_flight), each of 1/v of its layers
    held = in_flight(p.pp, req.microbatches, p.interleave)
    kept_layers = max(layers[s] * held[s] / p.interleave for s in range(p.pp))
    if p.zero == 3:      # fp32 shards (the master copy) and their gradients, two gathered bf16 layers, the moments
        weight_bytes = params_gpu * 4 / replicas + 2 * layer_params(m) / p.tp * ELEMENT_BYTES
        grad_bytes, state_bytes = params_gpu * 4 / replicas, params_gpu * 8 / replicas
    else:                # bf16 weights and the gradients whole; master weights and moments (and, for bf16
        #                  gradients, an fp32 copy of them), sharded by ZeRO-1: Megatron-LM's 6 + 12/r, 4 + 16/r
        weight_bytes, grad_bytes = params_gpu * ELEMENT_BYTES, params_gpu * grad
        state_bytes = params_gpu * (12 + (4 if grad < 4 else 0)) / (replicas if p.zero == 1 else 1)
    memory = {
        "weights": weight_bytes,
        "gradients": grad_bytes,
        "optimizer": state_bytes,
        "activations": kept_layers * activation_bytes_per_token(m, p.tp, p.recompute) * t,
        "logits": t * head_n * 4.0 if p.pp == 1 else 0.0,
        "attention_working": attention_working_bytes,
        # the backward of a recomputed layer holds what its forward rebuilt, one layer at a time
        "recompute_working": (activation_bytes_per_token(m, p.tp, "none")
                              - activation_bytes_per_token(m, p.tp, p.recompute)) * t,
    }
    if p.pp > 1:
        memory["logits_last_stage"] = t * head_n * 4.0
    memory["total"] = sum(memory.values()) - memory.get("logits_last_stage", 0.0)
    return memory


def _distinct_stages(layers: list[int]) -> list[int]:
    """One stage of each kind: the first, the last and, between them, the first stage of each
    layer count (stages of one kind hold the same parameters and do the same work)."""
    pp = len(layers)
    seen, out = set(), [0]
    for s in range(1, pp - 1):
        if layers[s] not in seen:
            seen.add(layers[s])
            out.append(s)
    if pp > 1:
        out.append(pp - 1)
    return out


def step_memory(req: StepRequest) -> dict[str, float]:
    """The step's memory per GPU (Step.memory), without simulating its attention."""
    return _memory(req, stage_layers(req.model.layers, req.parallel.pp), attention_memory_bytes(req))


def _stage_times(layer: _LayerTimes, ends: _EndTimes, layers: list[int]) -> tuple[list[float], list[float]]:
    """Each stage's forward and backward of one micro-batch: its layers, the output layer
    on the last stage and the embedding on the first."""
    stage_f = [n * layer.forward_s for n in layers]
    stage_b = [n * layer.backward_s for n in layers]
    stage_f[-1] += ends.head_fwd_s
    stage_b[-1] += ends.head_bwd_s
    stage_f[0] += ends.embedding_s
    stage_b[0] += ends.embedding_s
    return stage_f, stage_b


def pipeline_bound_s(stage_f: list[float], stage_b: list[float], send: float, mb: int, v: int) -> float:
    """A lower bound of the pipeline's makespan (sim.training.pipeline) that plays nothing.
    Stage s runs its m micro-batches' forwards and backwards one at a time; its first op
    (chunk 0 of micro-batch 0) waits for that chunk's forward on every stage before it and
    the send after each, and after its last op (a backward of chunk 0) that backward still
    runs on every stage before it: (stage_f[j] + stage_b[j]) / v + 2 sends for each j < s."""
    best, before = 0.0, 0.0
    for f, b in zip(stage_f, stage_b):
        best = max(best, before + mb * (f + b))
        before += (f + b) / v + 2 * send
    return best


@dataclass
class StepParts:
    """A step's answer before its pipeline is played: everything `simulate_step` gives but
    the pipeline's makespan (a planner bounds the step with it before it plays the pipeline)."""

    request: StepRequest
    layer: _LayerTimes
    ends: _EndTimes
    layers: list[int]
    stage_f: list[float]
    stage_b: list[float]
    slow: int
    """The stage with the most work a micro-batch."""
    send: float
    """One send between two stages, s (0 without a pipeline)."""
    data_parallel_s: float
    optimizer_s: float
    notes: list[str]

    @property
    def pipeline_play(self) -> tuple:
        p = self.request.parallel
        return (self.stage_f, self.stage_b, self.send, self.request.microbatches, p.interleave)

    def bound_s(self) -> float:
        """A lower bound of the step's time (pipeline_bound_s, the rest as it is)."""
        return pipeline_bound_s(*self.pipeline_play) + self.data_parallel_s + self.optimizer_s

    def step(self, pipelines: tuple[float, float] | None = None) -> Step:
        """The step, its pipeline played on the engine (sim.training.pipeline); `pipelines`:
        the pipeline's makespan with its sends and without them, played already."""
        req, layer, ends, layers, slow = self.request, self.layer, self.ends, self.layers, self.slow
        m, p = req.model, req.parallel
        stage_f, stage_b, send, mb = self.stage_f, self.stage_b, self.send, req.microbatches
        tf, tb = stage_f[slow], stage_b[slow]
        work = mb * (tf + tb)
        # the pipeline played on the engine (sim.training.pipeline), with its sends and without them
        if pipelines is not None:
            pipe, pipe_bare = pipelines
        else:
            pipe = _pipeline(stage_f, stage_b, send, mb, p.interleave)
            pipe_bare = _pipeline(stage_f, stage_b, 0.0, mb, p.interleave) if send else pipe
        bubble = max(0.0, pipe_bare - work)
        pp_comm = max(0.0, pipe - pipe_bare)
        dp_exposed, optimizer = self.data_parallel_s, self.optimizer_s
        step_s = pipe + dp_exposed + optimizer
        last, first, n = slow == p.pp - 1, slow == 0, layers[slow]
        breakdown = {
            "gemm_s": mb * (n * (layer.gemm_fwd_s + layer.gemm_bwd_s)
                            + (ends.head_gemm_fwd_s + ends.head_gemm_bwd_s if last else 0.0)),
            "attention_s": mb * n * (layer.attention_fwd_s + layer.attention_bwd_s),
            "elementwise_s": mb * (n * (layer.elementwise_fwd_s + layer.elementwise_bwd_s)
                                   + (2 * ends.loss_s if last else 0.0) + (2 * ends.embedding_s if first else 0.0)),
            "tp_comm_s": mb * n * (layer.tp_fwd_s + layer.tp_bwd_s),
            "recompute_s": mb * n * layer.recompute_s,
            "pp_bubble_s": bubble,
            "pp_comm_s": pp_comm,
            "dp_comm_s": dp_exposed,
            "optimizer_s": optimizer,
        }
        breakdown["other_s"] = max(0.0, step_s - sum(breakdown.values()))
        per_layer = {"gemm_fwd_s": layer.gemm_fwd_s, "gemm_bwd_s": layer.gemm_bwd_s,
                     "attention_fwd_s": layer.attention_fwd_s, "attention_bwd_s": layer.attention_bwd_s,
                     "elementwise_fwd_s": layer.elementwise_fwd_s, "tp_fwd_s": layer.tp_fwd_s,
                     "tp_bwd_s": layer.tp_bwd_s, "recompute_s": layer.recompute_s}
        return Step(request=req, step_s=step_s, breakdown=breakdown, per_layer=per_layer,
                    memory=_memory(req, layers, layer.attention_working_bytes),
                    model_flops=model_flops_per_token(m, req.seq) * req.global_batch, stage_layers=layers,
                    notes=self.notes, stage_s=list(zip(stage_f, stage_b)), pipeline_play=self.pipeline_play)


def step_parts(req: StepRequest) -> StepParts:
    """The step up to its pipeline (StepParts), its attention simulated."""
    m, p, hw = req.model, req.parallel, req.hardware
    if hw.gpu.memory_bandwidth_gbps is None:
        raise RingsimError(f"GPU {hw.gpu.name} has no memory bandwidth: the step's elementwise work needs it")
    notes: list[str] = []
    layer = _layer_times(req)                        # per layer, per micro-batch
    ends = _end_times(req)                           # the output layer (last stage) and the embedding (first)
    layers = stage_layers(m.layers, p.pp)
    stage_f, stage_b = _stage_times(layer, ends, layers)
    slow = max(range(p.pp), key=lambda s: stage_f[s] + stage_b[s])
    tf, tb = stage_f[slow], stage_b[slow]
    bw, lat = _link(req, p.tp * p.cp * p.dp * min(p.pp, 2))      # two neighbouring stages
    send = lat * 1e-6 + _activation_bytes(req) / p.tp / (bw * 1e9) if p.pp > 1 else 0.0
    dp_exposed = _data_parallel_s(req, layers, slow, layer, tf, tb, notes)
    optimizer = _optimizer_s(req, layers, slow)
    return StepParts(request=req, layer=layer, ends=ends, layers=layers, stage_f=stage_f, stage_b=stage_b,
                     slow=slow, send=send, data_parallel_s=dp_exposed, optimizer_s=optimizer, notes=notes)


def simulate_step(req: StepRequest) -> Step:
    return step_parts(req).step()


def step_bound_s(req: StepRequest) -> float:
    """A lower bound of simulate_step(req).step_s that simulates nothing: the step with
    each attention at its bound (attention_bound_s) and the pipeline at pipeline_bound_s.
    What data parallelism exposes shrinks as the stage it hides behind grows, so it is
    bounded with that stage's own work, which grows at least as much: for each stage s
    taken as the slowest, m micro-batches of its work with (DDP) the all-reduce beyond the
    last backward, (ZeRO-1) the reduce-scatter beyond it and the gather beyond the first
    forward, (FSDP) each layer's forward at least its gather and its backward at least its
    gather and reduce-scatter; the least over the stages, as the slowest is not known
    before the attention is."""
    m, p = req.model, req.parallel
    if req.hardware.gpu.memory_bandwidth_gbps is None:
        return 0.0
    layer = _layer_times(req, (attention_bound_s(req, "fwd"), attention_bound_s(req, "bwd"), 0.0))
    ends = _end_times(req)
    layers = stage_layers(m.layers, p.pp)
    stage_f, stage_b = _stage_times(layer, ends, layers)
    mb = req.microbatches
    distinct = _distinct_stages(layers)
    optimizer = {s: _optimizer_s(req, layers, s) for s in distinct}
    pipe = pipeline_bound_s(stage_f, stage_b, 0.0, mb, p.interleave) + min(optimizer.values())
    replicas = p.dp * p.cp
    if replicas <= 1:
        return pipe
    dbw, dlat = _link(req, p.tp * p.cp * p.dp)
    grad = GRAD_BYTES[p.grad_reduce]
    stages = []
    for s in distinct:
        f, b = stage_f[s], stage_b[s]
        params = _stage_params(req, layers, s)
        rs = ring_collective_s(params * grad, replicas, dbw, dlat)
        if p.zero == 0:
            exposed = mb * f + (mb - 1) * b + max(b, 2 * rs)
        elif p.zero == 1:
            gather = ring_collective_s(params * ELEMENT_BYTES, replicas, dbw, dlat)
            exposed = (mb - 1) * (f + b) + max(b, rs) + max(f, gather)
        else:
            gather = ring_collective_s(layer_params(m) / p.tp * ELEMENT_BYTES, replicas, dbw, dlat)
            layer_rs = ring_collective_s(layer_params(m) / p.tp * grad, replicas, dbw, dlat)
            n, tables = layers[s], (s == 0) * 2 * ends.embedding_s + (s == p.pp - 1) * (ends.head_fwd_s + ends.head_bwd_s)
            exposed = mb * (n * (max(layer.forward_s, gather) + max(layer.backward_s, gather + layer_rs)) + tables)
        stages.append(exposed + optimizer[s])
    return max(pipe, min(stages))


def check_gpus(parallel: Parallel, gpus: int | None) -> None:
    if gpus is not None and parallel.gpus != gpus:
        raise RingsimError(f"--tp x --cp x --pp x --dp = {parallel.gpus}, not the {gpus} GPUs given")
