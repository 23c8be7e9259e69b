"""A whole request served with tensor parallelism inside a node and context parallelism
across the groups: the prefill's time to first token, each next token's time, and the
K/V cache per GPU (docs/inference.md).

The GPUs are TP x CP, TP consecutive GPUs (inside a node) holding 1/TP of every layer's
weights and heads, the CP groups each holding a copy of the weights and a shard of the
tokens. Per layer:

- **Attention**: one layer as sim.inference.prefill (prefill) or sim.inference.decode (decode)
  plays it on the CP group, each rank one GPU of its TP group with heads / TP query heads
  and max(K/V heads / TP, 1) K/V heads (K/V heads replicated when TP exceeds them, as
  Megatron and vLLM do); the CP group's GPUs sit TP apart, so gpus_per_node / TP of them
  share a node (as the training step places them, sim.training.step).
- **Linear layers** (sim.hardware.gemm, each product queued): QKV, the output projection,
  gate and up, down (sim.training.step.layer_linears) on the tokens a GPU holds: its new
  tokens' share in prefill, one token per request in decode, where the products read
  their weights from memory and the GEMM model's memory roofline decides. `fp8`: the
  products in FP8 (row-wise scaled, as the paper's Llama 3 405B runs them) at the GPU's
  FP8 rate, and each product's input cast to FP8 first (ROWWISE_CAST_BYTES).
- **Tensor parallelism** without sequence parallelism, as inference engines run it: an
  all-reduce after the attention's output projection and after the MLP, of tokens x
  hidden in bf16, over the TP group inside the node (NCCL's model, sim.hardware.nccl).
- **Elementwise work** (norms, residual adds, SwiGLU, RoPE: sim.training.step's forward
  passes) at the streaming rate.

Prefill adds the output layer on each request's last token; decode adds it on every
request's token. A decode step's time is taken at the middle of the output (the cache
grows by a token a step, and attention grows linearly with it).

**Memory per GPU**: the weights (1/TP of every layer, FP8 linear weights under `fp8`, the
embedding and output tables in bf16), the K/V cache of the tokens the GPU's rank holds
(layers x 2 x K/V heads per GPU x head dim x bytes per token), against the share of the
GPU's memory an engine gives itself (MEMORY_UTILIZATION). The longest context that fits is
the cache's room over its bytes per token, times the CP ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sim.errors import RingsimError
from sim.hardware import nccl
from sim.hardware.cluster import Hardware
from sim.hardware.gemm import gemm_time
from sim.inference.decode import (
    DECODE_LAYOUTS,
    MERGES,
    DecodeAttention,
    attention_s,
    merge_kernel_s,
    simulate_decode_attention,
)
from sim.inference.prefill import KV_DTYPES, PrefillAttention, simulate_prefill_attention
from sim.inference.work import ALL_GATHER, SCHEMES, cached_counts, rank_pairs, rule_scheme, rule_threshold
from sim.scenario.models import Model
from sim.trace.format import Trace
from sim.trace.metrics import compute_metrics
from sim.training.step import ELEMENT_BYTES, ELEMENTWISE_PASSES, layer_linears, layer_params

GIB = 1024 ** 3
LINEAR_DTYPES = ("bf16", "fp8")
MEMORY_UTILIZATION = 0.9
"""The share of a GPU's memory an inference engine takes for weights, activations and the
K/V cache: vLLM's default (vllm-project/vllm, vllm/engine/arg_utils.py, EngineArgs of the
v0.6 series: `gpu_memory_utilization: float = 0.90`)."""
ROWWISE_CAST_BYTES = 5
"""Bytes moved per element to cast a product's bf16 input to FP8 with a scale per row:
one read for the row's maximum, one read to scale and cast (2 bytes each), one FP8 write
(assumed: two passes, as an unfused quantize kernel runs them)."""


@dataclass(frozen=True, kw_only=True)
class Serving:
    """A model on TP x CP GPUs of `hardware` (the cluster: its GPUs, nodes and links)."""

    model: Model
    hardware: Hardware = field(default_factory=Hardware)
    tp: int = 8
    cp: int = 1
    dtype: str = "bf16"
    """The linear layers' products: bf16, or fp8 (row-wise scaled)."""
    kv_dtype: str = "bf16"
    """The K/V cache's elements."""

    def __post_init__(self) -> None:
        m, hw = self.model, self.hardware
        for name in ("tp", "cp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise RingsimError(f"--{name} must be a whole number, 1 or more, got {v!r}")
        if m.heads % self.tp:
            raise RingsimError(f"--tp {self.tp} does not divide the model's {m.heads} query heads")
        if m.kv_heads % self.tp and self.tp % m.kv_heads:
            raise RingsimError(f"--tp {self.tp} and the model's {m.kv_heads} K/V heads: one must divide the other")
        if m.ffn is None or m.vocab is None:
            raise RingsimError(f"model {m.name} has no FFN size or vocabulary: give --ffn and --vocab")
        if m.ffn % self.tp or m.vocab % self.tp:
            raise RingsimError(f"--tp {self.tp} does not divide the FFN size {m.ffn} and the vocabulary {m.vocab}")
        if self.tp > hw.gpus_per_node or hw.gpus_per_node % self.tp:
            raise RingsimError(f"--tp {self.tp} must divide the {hw.gpus_per_node} GPUs of a node "
                               "(tensor parallelism stays inside a node)")
        if self.dtype not in LINEAR_DTYPES:
            raise RingsimError(f"--dtype must be one of {', '.join(LINEAR_DTYPES)}, got {self.dtype!r}")
        if self.kv_dtype not in KV_DTYPES:
            raise RingsimError(f"--kv-dtype must be one of {', '.join(KV_DTYPES)}, got {self.kv_dtype!r}")
        if hw.gpu.memory_bandwidth_gbps is None:
            raise RingsimError(f"GPU {hw.gpu.name} has no memory bandwidth: decode and the elementwise work need it")

    @property
    def gpus(self) -> int:
        return self.tp * self.cp

    @property
    def heads(self) -> int:
        """Query heads on each GPU."""
        return self.model.heads // self.tp

    @property
    def kv_heads(self) -> int:
        """K/V heads on each GPU (replicated when TP exceeds them)."""
        return max(self.model.kv_heads // self.tp, 1)

    @property
    def cp_hardware(self) -> Hardware:
        """The CP group's GPUs as the attention plays them: TP apart, gpus_per_node / TP to
        a node, each with its own NIC (sim.training.step places them so)."""
        hw = self.hardware
        return replace(hw, gpus_per_node=max(1, hw.gpus_per_node // self.tp), nics_per_node=None, pcie=None)

    @property
    def stream_gbps(self) -> float:
        return self.hardware.gpu.memory_bandwidth_gbps

    def kv_bytes_per_token(self) -> float:
        """Bytes of K/V cache one token takes on one GPU, over every layer."""
        m = self.model
        return m.layers * 2 * self.kv_heads * m.head_dim * KV_DTYPES[self.kv_dtype]

    def weight_bytes(self) -> float:
        """The weights on one GPU: 1/TP of the layers (FP8 under `fp8`) and of the two tables."""
        m = self.model
        linear = 1 if self.dtype == "fp8" else ELEMENT_BYTES
        return (m.layers * layer_params(m) * linear + 2 * m.vocab * m.hidden * ELEMENT_BYTES) / self.tp

    def usable_bytes(self) -> float:
        return self.hardware.gpu.memory_gb * 1e9 * MEMORY_UTILIZATION

    def describe(self) -> dict[str, Any]:
        hw = self.hardware
        return {"model": self.model.name, "gpu": hw.gpu.name, "gpus": self.gpus, "tp": self.tp, "cp": self.cp,
                "gpus_per_node": hw.gpus_per_node, "nodes": -(-self.gpus // hw.gpus_per_node), "dtype": self.dtype,
                "kv_dtype": self.kv_dtype}


def simulate_config(config: dict, hardware: Hardware) -> Trace:
    """One attention layer as a trace's header describes it (`kind` prefill or decode), played
    on `hardware`: the simulated twin of a measured run, for validation."""
    kind = config.get("kind")
    if kind == "prefill":
        return simulate_prefill_attention(PrefillAttention.from_config(config), hardware)
    if kind == "decode":
        return simulate_decode_attention(DecodeAttention.from_config(config), hardware)
    raise RingsimError(f"the trace's header names no inference layer (kind {kind!r}; prefill or decode)")


# --- what every layer does beside attention ----------------------------------------------

def linear_s(serving: Serving, tokens: int) -> float:
    """A layer's four products on `tokens` tokens per GPU (queued), and under fp8 the casts
    of their inputs."""
    m, gpu = serving.model, serving.hardware.gpu.name
    fp8 = serving.dtype == "fp8"
    lin = layer_linears(m, serving.tp)
    t = sum(gemm_time(tokens, n, k, gpu, fp8=fp8, alone=False).time_s for k, n in lin.values())
    if fp8:
        t += tokens * sum(k for k, _ in lin.values()) * ROWWISE_CAST_BYTES / (serving.stream_gbps * 1e9)
    return t


def elementwise_s(serving: Serving, tokens: int) -> float:
    """A layer's norms, residual adds, SwiGLU and RoPE on `tokens` tokens per GPU, streamed."""
    m, tp = serving.model, serving.tp
    elems = tokens * (m.hidden * (2 * ELEMENTWISE_PASSES["norm"] + 2 * ELEMENTWISE_PASSES["residual"])
                      + m.ffn / tp * ELEMENTWISE_PASSES["swiglu"]
                      + (serving.heads + serving.kv_heads) * m.head_dim * ELEMENTWISE_PASSES["rope"])
    return elems * ELEMENT_BYTES / (serving.stream_gbps * 1e9)


def all_reduce_s(serving: Serving, nbytes: float) -> float:
    """One all-reduce of `nbytes` over the TP group inside a node: NCCL's model where NCCL
    runs on the GPU, else a ring's 2 (TP - 1) steps of alpha-beta."""
    tp, hw = serving.tp, serving.hardware
    if tp <= 1:
        return 0.0
    if hw.nccl_arch is not None:
        return nccl.collective(hw.nccl_comm(np.arange(tp)), "all_reduce", nbytes).time_s
    return 2 * (tp - 1) * (hw.link.latency_us * 1e-6 + nbytes / tp / (hw.link.bandwidth_gbps * 1e9))


def head_s(serving: Serving, tokens: int) -> float:
    """The output layer (hidden -> vocabulary / TP, bf16) on `tokens` tokens."""
    m = serving.model
    return gemm_time(tokens, m.vocab // serving.tp, m.hidden, serving.hardware.gpu.name, alone=False).time_s


def _others(serving: Serving, tokens: int) -> dict[str, float]:
    """Per layer, beside attention: the products, the TP all-reduces, the elementwise work."""
    return {"linear_s": linear_s(serving, tokens),
            "tp_comm_s": 2 * all_reduce_s(serving, tokens * serving.model.hidden * ELEMENT_BYTES),
            "elementwise_s": elementwise_s(serving, tokens)}


def check_fits(serving: Serving, kv_bytes_per_gpu: float, what: str) -> None:
    """RingsimError unless the weights and the K/V cache fit the GPU's usable memory."""
    weights, usable = serving.weight_bytes(), serving.usable_bytes()
    if weights > usable:
        raise RingsimError(
            f"the weights do not fit: {weights / GIB:.1f} GiB per GPU at TP {serving.tp}, and a "
            f"{serving.hardware.gpu.memory_gb:g} GB GPU leaves {usable / GIB:.1f} GiB ({MEMORY_UTILIZATION:.0%}); "
            "raise --tp or use --dtype fp8")
    if weights + kv_bytes_per_gpu > usable:
        raise RingsimError(
            f"the K/V cache does not fit: {what} needs {kv_bytes_per_gpu / GIB:.1f} GiB per GPU beside "
            f"{weights / GIB:.1f} GiB of weights, and a {serving.hardware.gpu.memory_gb:g} GB GPU leaves "
            f"{usable / GIB:.1f} GiB ({MEMORY_UTILIZATION:.0%}); add GPUs to --cp, shorten the context or use "
            "--kv-dtype fp8")


def max_context_tokens(serving: Serving, batch: int = 1) -> int:
    """The longest context each of `batch` requests may hold: the room the weights leave for
    the cache, over its bytes per token on a GPU, times the CP ranks (each holds 1/CP)."""
    room = serving.usable_bytes() - serving.weight_bytes()
    if room <= 0:
        return 0
    return int(room // serving.kv_bytes_per_token()) * serving.cp // batch


# --- prefill -------------------------------------------------------------------------------

@dataclass
class Prefill:
    """A prefill's answer: times in seconds, bytes per GPU."""

    serving: Serving
    attention: PrefillAttention
    prefill_s: float
    parts: dict[str, float]
    """What the prefill is made of, over every layer (attention_s, linear_s, tp_comm_s,
    elementwise_s, head_s)."""
    per_layer: dict[str, float]
    scheme_attention_s: dict[str, float]
    """One layer's attention under each scheme, simulated."""
    rule_scheme: str
    chosen_scheme: str
    """ringsim's choice: the faster of pass-KV and pass-Q as simulated (pass-KV on one rank,
    where there is no ring)."""
    rank_pairs: list[int]
    kv_cache_bytes_per_gpu: float
    trace: Trace

    @property
    def load_imbalance(self) -> float:
        p = np.asarray(self.rank_pairs, dtype=float)
        return float(p.max() / p.mean()) if p.mean() > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        a = self.attention
        return {"phase": "prefill", **self.serving.describe(), "context": a.cached + a.new, "cached": a.cached,
                "new": a.new, "new_padded": a.new_padded, "batch": a.batch, "scheme": a.scheme, "layout": a.layout,
                "cache_layout": a.cache_layout, "prefill_s": self.prefill_s, "parts": self.parts,
                "per_layer": self.per_layer, "scheme_attention_s": self.scheme_attention_s,
                "rule_scheme": self.rule_scheme, "rule_threshold": rule_threshold(a.heads, a.kv_heads),
                "new_share": a.new / (a.new + a.cached), "chosen_scheme": self.chosen_scheme,
                "rank_pairs": self.rank_pairs, "load_imbalance": self.load_imbalance,
                "kv_cache_gib_per_gpu": self.kv_cache_bytes_per_gpu / GIB,
                "weights_gib_per_gpu": self.serving.weight_bytes() / GIB}


def prefill_attention_shape(serving: Serving, cached: int, new: int, *, batch: int = 1, scheme: str = "pass-kv",
                            layout: str = "zigzag", cache_layout: str = "zigzag") -> PrefillAttention:
    return PrefillAttention(n_ranks=serving.cp, cached=cached, new=new, heads=serving.heads,
                            kv_heads=serving.kv_heads, head_dim=serving.model.head_dim, batch=batch, dtype="bf16",
                            kv_dtype=serving.kv_dtype, layout=layout, cache_layout=cache_layout, scheme=scheme)


def prefill(serving: Serving, cached: int, new: int, *, batch: int = 1, scheme: str | None = None,
            layout: str = "zigzag", cache_layout: str = "zigzag") -> Prefill:
    """The prefill of `batch` requests, each `new` tokens over a cached prefix of `cached`
    (module docstring); `scheme` None: ringsim's choice."""
    if isinstance(new, bool) or not isinstance(new, int) or new < 1:
        raise RingsimError(f"a prefill computes 1 new token or more, got {new!r} (--new)")
    if scheme is not None and scheme not in SCHEMES:
        raise RingsimError(f"--scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    shapes = {s: prefill_attention_shape(serving, cached, new, batch=batch, scheme=s, layout=layout,
                                         cache_layout=cache_layout)
              for s in SCHEMES if not (s == ALL_GATHER and layout == "striped")}
    kv_gpu = _prefill_kv_bytes(serving, shapes["pass-kv"])
    check_fits(serving, kv_gpu, f"a context of {cached + new:,} tokens x {batch}")
    traces = {s: _attention_trace(sh, serving.cp_hardware) for s, sh in shapes.items()}
    times = {s: compute_metrics(t).makespan_s for s, t in traces.items()}
    # one rank holds every token: no ring, and both schemes are its local attention
    chosen = "pass-kv" if serving.cp == 1 else min(("pass-kv", "pass-q"), key=lambda s: times[s])
    use = scheme or chosen
    if use not in shapes:
        raise RingsimError("allgather prefill cuts the new tokens in chunks: give --layout zigzag or contiguous")
    shape = shapes[use]
    m = serving.model
    tokens = batch * shape.new_per_rank
    per_layer = {"attention_s": times[use], **_others(serving, tokens)}
    parts = {k: m.layers * v for k, v in per_layer.items()}
    parts["head_s"] = head_s(serving, batch)
    return Prefill(serving=serving, attention=shape, prefill_s=sum(parts.values()), parts=parts,
                   per_layer=per_layer, scheme_attention_s=times,
                   rule_scheme=rule_scheme(cached, new, serving.heads, serving.kv_heads), chosen_scheme=chosen,
                   rank_pairs=[int(x) for x in rank_pairs(cached, shape.new_padded, serving.cp, layout, cache_layout,
                                                          use)],
                   kv_cache_bytes_per_gpu=kv_gpu, trace=traces[use])


_TRACES: dict[tuple, Trace] = {}
"""Layers already played, by shape and hardware (a plan and the dashboard ask for the same few often)."""


def _attention_trace(shape: PrefillAttention, hardware: Hardware) -> Trace:
    key = (shape, repr(hardware))
    if key not in _TRACES:
        if len(_TRACES) > 64:
            _TRACES.clear()
        _TRACES[key] = simulate_prefill_attention(shape, hardware)
    return _TRACES[key]


def _prefill_kv_bytes(serving: Serving, shape: PrefillAttention) -> float:
    """The cache one GPU holds after the prefill: its rank's cached and new tokens."""
    tokens = int(cached_counts(shape.cached, shape.n_ranks, shape.cache_layout).max()) + shape.new_per_rank
    return shape.batch * tokens * serving.kv_bytes_per_token()


# --- decode ----------------------------------------------------------------------------------

@dataclass
class Decode:
    serving: Serving
    attention: DecodeAttention
    output: int
    tpot_s: float
    parts: dict[str, float]
    """One step's time, over every layer: attention_s, merge_comm_s, merge_s, linear_s,
    tp_comm_s, elementwise_s, head_s."""
    per_layer: dict[str, float]
    kv_cache_bytes_per_gpu: float
    max_context_tokens: int
    trace: Trace

    def to_dict(self) -> dict[str, Any]:
        a = self.attention
        return {"phase": "decode", **self.serving.describe(), "prompts": [int(p) for p in a.prompts],
                "output": self.output, "batch": a.batch, "layout": a.layout, "merge": a.merge,
                "tpot_s": self.tpot_s, "tokens_per_s": a.batch / self.tpot_s, "parts": self.parts,
                "per_layer": self.per_layer, "kv_cache_gib_per_gpu": self.kv_cache_bytes_per_gpu / GIB,
                "weights_gib_per_gpu": self.serving.weight_bytes() / GIB,
                "max_context_tokens": self.max_context_tokens}


def decode(serving: Serving, prompts: list[int] | tuple[int, ...], output: int, *, layout: str = "round-robin",
           merge: str = "all-gather") -> Decode:
    """Time per output token of a batch of requests (their prompts' lengths) generating
    `output` tokens each: a step at the middle of the output (module docstring)."""
    if isinstance(output, bool) or not isinstance(output, int) or output < 1:
        raise RingsimError(f"decode generates 1 token or more, got {output!r} (--new)")
    if layout not in DECODE_LAYOUTS:
        raise RingsimError(f"--layout for decode must be one of {', '.join(DECODE_LAYOUTS)}, got {layout!r}")
    if merge not in MERGES:
        raise RingsimError(f"--merge must be one of {', '.join(MERGES)}, got {merge!r}")
    prompts = tuple(int(p) for p in prompts)
    end = DecodeAttention(n_ranks=serving.cp, prompts=prompts, generated=output, heads=serving.heads,
                          kv_heads=serving.kv_heads, head_dim=serving.model.head_dim, kv_dtype=serving.kv_dtype,
                          layout=layout, merge=merge)
    kv_gpu = float(end.tokens().sum(axis=0).max()) * serving.kv_bytes_per_token()
    lengths = ", ".join(f"{p + output:,}" for p in sorted(set(prompts)))
    check_fits(serving, kv_gpu, f"{len(prompts)} request{'s' if len(prompts) > 1 else ''} of {lengths} tokens")
    mid = replace(end, generated=output // 2)
    trace = simulate_decode_attention(mid, serving.cp_hardware)
    layer_s = compute_metrics(trace).makespan_s
    attn = float(attention_s(mid, serving.stream_gbps).max())
    merge_k = merge_kernel_s(mid, serving.stream_gbps) if serving.cp > 1 else 0.0
    per_layer = {"attention_s": attn, "merge_comm_s": max(0.0, layer_s - attn - merge_k), "merge_s": merge_k,
                 **_others(serving, len(prompts))}
    m = serving.model
    parts = {k: m.layers * v for k, v in per_layer.items()}
    parts["head_s"] = head_s(serving, len(prompts))
    return Decode(serving=serving, attention=mid, output=output, tpot_s=sum(parts.values()), parts=parts,
                  per_layer=per_layer, kv_cache_bytes_per_gpu=kv_gpu,
                  max_context_tokens=max_context_tokens(serving, len(prompts)), trace=trace)
