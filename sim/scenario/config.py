"""Validated, immutable configuration: the workload, the hardware and the schedule.

Every field is keyword-only and checked where the object is made, so a bad value fails
with a sentence naming the field (`RingsimError`). Definitions of work, FLOPs, bytes,
compute and link time are those of docs/design.md.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from sim.errors import RingsimError
from sim.hardware.kernel_model import (
    Floors,
    best_rate_flops,
    block_times_s,
    kernel_table,
    merge_bytes,
    merge_kernels,
    varlen_times_s,
)
from sim.hardware.pcie import Fabric, Pcie
from sim.hardware.presets import KERNEL_GAP_US, LAUNCH_OVERHEAD_US, MERGE_BYTES, MERGE_SLICE_BYTES, gpu_preset, link_preset
from sim.layouts import NAMES as LAYOUT_NAMES
from sim.layouts import get as get_layout
from sim.layouts.packed import DOC_LAYOUTS, uses_documents
from sim.scenario.documents import bounds as doc_bounds
from sim.scenario.documents import check_spec as check_docs
from sim.scenario.documents import check_window
from sim.scenario.quantities import ACCUM_BYTES, BWD_FLOPS_FACTOR, DTYPE_BYTES  # noqa: F401  (read here by many)
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import Settings
from sim.schemes import get as get_scheme
from sim.units import positive_ints

RATE_GROUPS = ("fwd-full", "fwd-diagonal", "bwd-full", "bwd-diagonal")
PASSES = ("fwd", "bwd", "fwdbwd")
LAYOUTS = LAYOUT_NAMES + DOC_LAYOUTS
GRANULARITIES = ("exact", "tile")
SYNCS = ("step", "buffered")


def _positive(obj: Any, *names: str, allow_zero: bool = False) -> None:
    for name in names:
        v = getattr(obj, name)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v != float("inf")
        if not ok or v < 0 or (v == 0 and not allow_zero):
            kind = "non-negative" if allow_zero else "positive"
            raise RingsimError(f"{name} must be a {kind} finite number, got {v!r}")


@dataclass(frozen=True, kw_only=True)
class Workload:
    """One attention layer's shape and pass."""

    batch: int = 1
    """Sequences per step."""
    seq: int = 131072
    """Total tokens per sequence, before sharding."""
    heads: int = 32
    """Query heads."""
    kv_heads: int = 8
    """Key/value heads (fewer than `heads` is GQA; 1 is MQA)."""
    head_dim: int = 128
    """Elements per head."""
    dtype: str = "bf16"
    """Element type of Q, K, V: fp32, bf16 or fp16."""
    causal: bool = True
    """Token t attends to keys 0..t only."""
    pass_: str = "fwd"
    """fwd, bwd (backward alone, given the forward's output and log-sum-exp) or fwdbwd."""
    docs: str | None = None
    """Packed documents (sim.scenario.documents: a list of lengths repeated to fill the sequence,
    or a distribution drawn with `seed`); None: one sequence, one document."""
    seed: int = 0
    """The seed that draws the documents of a distribution."""
    window: int | None = None
    """Sliding-window attention: a query sees itself and the window - 1 keys before it."""

    def __post_init__(self) -> None:
        positive_ints(self, "batch", "seq", "heads", "kv_heads", "head_dim")
        if self.docs is not None:
            check_docs(self.docs)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise RingsimError(f"seed must be a whole number, 0 or more, got {self.seed!r}")
        check_window(self.window)
        if self.dtype not in DTYPE_BYTES:
            raise RingsimError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.pass_ not in PASSES:
            raise RingsimError(f"pass must be one of {', '.join(PASSES)}, got {self.pass_!r}")
        if self.heads % self.kv_heads:
            raise RingsimError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        if not isinstance(self.causal, bool):
            raise RingsimError(f"causal must be true or false, got {self.causal!r}")

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def fwd_flops(self, pairs: float) -> float:
        """Forward FLOPs of `pairs` unmasked (query, key) pairs over all heads and batch."""
        return 4.0 * self.head_dim * pairs * self.heads * self.batch

    def kv_bytes(self, tokens: int) -> int:
        """Bytes of K and V for `tokens` tokens."""
        return 2 * self.batch * self.kv_heads * tokens * self.head_dim * self.elem_bytes

    def dkv_bytes(self, tokens: int) -> int:
        """Bytes of the dK and dV accumulators for `tokens` tokens (fp32)."""
        return 2 * self.batch * self.kv_heads * tokens * self.head_dim * ACCUM_BYTES


_GEOMETRY = Workload()
"""The head dim and K/V heads per query head the kernel model assumes when not told
(the engine passes neither to the hardware model)."""


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """A GPU's compute: the rate of each attention block and its fixed overheads.

    Two models. With `kernel` (a published kernel table, sim.hardware.presets.KERNEL_TABLES) and a
    16-bit dtype, the block model (sim.hardware.kernel_model): each block is cut into the kernel's
    thread blocks, played in waves on the GPU's SMs at the step time the table gives, with
    its other kernels, its merge and the per-call floor. Otherwise, flat: every block runs
    at peak x efficiency (or `achieved_tflops`) after a fixed launch overhead.
    """

    name: str = "custom"
    peak_tflops: dict[str, float] = field(default_factory=lambda: {"bf16": 989.4, "fp16": 989.4, "fp32": 66.9})
    """Dense peak TFLOP/s by dtype."""
    efficiency: float = 0.5
    """Flat model: fraction of peak an attention kernel achieves (assumed; calibrate to measure it)."""
    achieved_tflops: float | None = None
    """If set, the achieved TFLOP/s for every dtype and block: the flat model."""
    launch_overhead_us: float = LAUNCH_OVERHEAD_US
    """Fixed cost per block computed (kernel launches and tails), in µs (assumed)."""
    memory_gb: float = 80.0
    """Device memory capacity, GB (10^9 bytes)."""
    memory_bandwidth_gbps: float | None = None
    """The rate memory-bound work streams at, GB/s: the merge after each block (kernel
    model). A preset gives the measured rate of a streaming kernel on that GPU where one is
    published (sim.hardware.presets, `stream_bandwidth_gbps`), else the datasheet's HBM peak."""
    kernel: str | None = None
    """Published kernel table the block rates come from (for example 'fa2-h100'); None: flat."""
    merge: str = "fused"
    """How the (out, lse) merge moves memory: 'fused' (one pass) or 'unfused' (one
    elementwise kernel per operation, as ring-flash-attention writes it)."""
    sms: int | None = None
    """Streaming multiprocessors (block model); None: those of the GPU the table was measured on."""
    floors: Floors = field(default_factory=Floors)
    """Block model: the per-call floor (host time of a call and of an elementwise operation,
    the gap between queued kernels)."""
    rate_scale: dict[str, float] = field(default_factory=dict)
    """Block model: a calibrated factor on the table's rate by 'fwd-full', 'fwd-diagonal',
    'bwd-full', 'bwd-diagonal' (`ringsim calibrate` of a GPU's block grid); missing: 1."""

    def __post_init__(self) -> None:
        if not 0 < self.efficiency <= 1:
            raise RingsimError(f"efficiency must be in (0, 1], got {self.efficiency!r}")
        if self.achieved_tflops is not None:
            _positive(self, "achieved_tflops")
        _positive(self, "launch_overhead_us", allow_zero=True)
        _positive(self, "memory_gb")
        for dt, v in self.peak_tflops.items():
            if not isinstance(v, (int, float)) or v <= 0:
                raise RingsimError(f"peak TFLOP/s for {dt} must be positive, got {v!r}")
        if self.merge not in MERGE_BYTES:
            raise RingsimError(f"merge must be one of {', '.join(MERGE_BYTES)}, got {self.merge!r}")
        if self.kernel is not None:
            kernel_table(self.kernel)
            if self.memory_bandwidth_gbps is None:
                raise RingsimError(f"GPU {self.name}: a kernel table needs memory_bandwidth_gbps (for the merge)")
        if self.memory_bandwidth_gbps is not None:
            _positive(self, "memory_bandwidth_gbps")
        if self.sms is not None:
            positive_ints(self, "sms")
        if not isinstance(self.floors, Floors):
            raise RingsimError(f"floors must be a sim.hardware.kernel_model.Floors, got {self.floors!r}")
        _positive(self.floors, "fwd_host_us", "bwd_host_us", "kernel_gap_us", "op_host_us", allow_zero=True)
        for key, v in self.rate_scale.items():
            if key not in RATE_GROUPS:
                raise RingsimError(f"rate_scale: unknown group {key!r}; choose from {', '.join(RATE_GROUPS)}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v == float("inf"):
                raise RingsimError(f"rate_scale {key} must be a positive finite number, got {v!r}")

    @classmethod
    def preset(cls, name: str, *, kernel: str | None = "default", **overrides: Any) -> "Gpu":
        """The preset `name`. `kernel`: 'default' (the preset's first published kernel,
        unless `achieved_tflops` or `efficiency` is given: then flat), a kernel the preset
        has a table for ('fa2', 'fa3'), or 'flat' / None for the flat model."""
        p = gpu_preset(name)
        if kernel == "default":
            flat = "achieved_tflops" in overrides or "efficiency" in overrides
            kernel = None if flat or not p.kernels else next(iter(p.kernels))
        if kernel in (None, "flat"):
            table = None
        elif kernel in p.kernels:
            table = p.kernels[kernel]
        else:
            have = ", ".join([*p.kernels, "flat"])
            raise RingsimError(f"GPU {p.name} has no published table for kernel {kernel!r}; choose from {have}")
        fields = {"name": p.name, "peak_tflops": dict(p.peak_tflops), "memory_gb": p.memory_gb,
                  "memory_bandwidth_gbps": p.stream_bandwidth_gbps or p.memory_bandwidth_gbps, "kernel": table,
                  "sms": p.sms}
        fields.update(overrides)
        return cls(**fields)

    def uses_kernel_table(self, dtype: str) -> bool:
        """Whether blocks of `dtype` are timed from the kernel table (16-bit only)."""
        return self.kernel is not None and self.achieved_tflops is None and dtype in ("bf16", "fp16")

    def rate_flops(self, dtype: str, head_dim: int | None = None) -> float:
        """The rate of the ideal time (docs/design.md): with a kernel table, its fastest
        published rate (dense forward at its longest length); flat, the achieved rate."""
        if self.uses_kernel_table(dtype):
            return best_rate_flops(kernel_table(self.kernel), head_dim or _GEOMETRY.head_dim)
        if self.achieved_tflops is not None:
            return self.achieved_tflops * 1e12
        if dtype not in self.peak_tflops:
            raise RingsimError(f"GPU {self.name} has no peak rate for {dtype}")
        return self.peak_tflops[dtype] * self.efficiency * 1e12


@dataclass(frozen=True, kw_only=True)
class Link:
    """One direction of a point-to-point link: alpha-beta."""

    name: str = "custom"
    bandwidth_gbps: float = 450.0
    """GB/s per direction (10^9 bytes/s)."""
    latency_us: float = 3.0
    """Fixed cost per transfer, µs."""

    def __post_init__(self) -> None:
        _positive(self, "bandwidth_gbps")
        _positive(self, "latency_us", allow_zero=True)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "Link":
        p = link_preset(name)
        fields = {"name": p.name, "bandwidth_gbps": p.bandwidth_gbps, "latency_us": p.latency_us}
        fields.update(overrides)
        return cls(**fields)

    def time_s(self, nbytes: float) -> float:
        return self.latency_us * 1e-6 + nbytes / (self.bandwidth_gbps * 1e9)


@functools.lru_cache(maxsize=32)
def _fabric(pcie: Pcie, gpus_per_node: int, port_gbps: float) -> Fabric:
    return pcie.fabric(gpus_per_node, port_gbps)


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """GPUs, the links between them, and how they sit in nodes (sim.hardware.topology).

    Ranks are packed `gpus_per_node` to a node; a transfer inside a node uses `link`
    (each GPU's own NVLink or PCIe port in each direction), one between nodes uses
    `inter_link` (if not given, `link` everywhere), through the NICs of the two ends.
    """

    gpu: Gpu = field(default_factory=lambda: Gpu.preset("H100-SXM"))
    link: Link = field(default_factory=lambda: Link.preset("nvlink4"))
    inter_link: Link | None = None
    """Between nodes: one direction of one NIC (a flow between nodes runs at its bandwidth)."""
    gpus_per_node: int = 8
    nics_per_node: int | None = None
    """NICs that carry a node's traffic to other nodes, each shared by gpus_per_node /
    nics_per_node GPUs; None: one per GPU."""
    pcie: Pcie | None = None
    """The PCIe fabric inside a node (sim.hardware.pcie): switches, root complexes and sockets whose
    links flows share; None: every GPU's port reaches every other directly (NVSwitch)."""

    def __post_init__(self) -> None:
        positive_ints(self, "gpus_per_node")
        if self.pcie is not None:
            self.pcie.check_node(self.gpus_per_node)
        if self.nics_per_node is not None:
            positive_ints(self, "nics_per_node")
            if self.gpus_per_node % self.nics_per_node:
                raise RingsimError(f"nics_per_node ({self.nics_per_node}) must divide gpus_per_node "
                                   f"({self.gpus_per_node})")

    @property
    def fabric(self) -> Fabric | None:
        """The node's PCIe links and routes (sim.hardware.pcie.Fabric), None without a PCIe fabric."""
        if self.pcie is None:
            return None
        return _fabric(self.pcie, self.gpus_per_node, self.link.bandwidth_gbps)

    def link_between(self, src: int, dst: int) -> Link:
        if self.inter_link is None or src // self.gpus_per_node == dst // self.gpus_per_node:
            return self.link
        return self.inter_link

    def compute_time_s(self, flops: float, *, dtype: str, kind: str, mask: str,
                       q_tokens: int, kv_tokens: int, head_dim: int | None = None,
                       kv_heads_per_head: float | None = None, sliced: bool = False, alone: bool = False,
                       isolated: bool = False) -> float:
        """Time of one block: overhead + FLOPs / achieved rate (docs/design.md); with a kernel
        table, the rate of its pass, mask and size plus its merge (sim.hardware.kernel_model).
        head_dim and kv_heads_per_head (the engine passes the workload's) default to
        those of sim.scenario.config.Workload; sliced: the block's queries are part of its rank's
        (the engine passes it where `merge_copies_slices`); alone: the only block of its
        pass on its rank, whose result is the output (nothing to merge); isolated: the GPU is idle when
        it is called (the first block of its rank): the call's host-side floor is paid in
        front, not hidden behind queued work (the engine passes both: `takes_call_order`)."""
        if self.gpu.uses_kernel_table(dtype):
            return float(self.compute_times_s(
                np.array([flops], dtype=float), dtype=dtype, kind=np.array([kind], dtype=object),
                mask=np.array([mask], dtype=object), q_tokens=np.array([q_tokens]),
                kv_tokens=np.array([kv_tokens]), head_dim=head_dim, kv_heads_per_head=kv_heads_per_head,
                sliced=np.array([sliced]), alone=np.array([alone]), isolated=np.array([isolated]))[0])
        return float(self._flat_times_s(np.array([flops], dtype=float), dtype=dtype, kind=np.array([kind]),
                                        mask=np.array([mask]), q_tokens=np.array([q_tokens]),
                                        kv_tokens=np.array([kv_tokens]), head_dim=head_dim,
                                        kv_heads_per_head=kv_heads_per_head, sliced=np.array([sliced]),
                                        alone=np.array([alone]))[0])

    def _flat_times_s(self, flops: np.ndarray, *, dtype: str, kind: np.ndarray, mask: np.ndarray,
                      q_tokens: np.ndarray, kv_tokens: np.ndarray, head_dim: int | None,
                      kv_heads_per_head: float | None, sliced: np.ndarray | None,
                      alone: np.ndarray | None) -> np.ndarray:
        """The flat model: overhead + FLOPs / (peak x efficiency). Its efficiency is an
        attention kernel's merged in one fused pass; with the unfused merge
        (ring-flash-attention's chain of elementwise kernels), each block that merges also
        pays what that chain moves beyond one fused pass (sim.hardware.presets.MERGE_BYTES), at the
        GPU's memory bandwidth, and the gap after each of its extra kernels."""
        g = self.gpu
        t = g.launch_overhead_us * 1e-6 + flops / g.rate_flops(dtype, head_dim)
        if not self._flat_unfused:
            return t
        hd = head_dim or _GEOMETRY.head_dim
        ratio = kv_heads_per_head or _GEOMETRY.kv_heads / _GEOMETRY.heads
        sliced = np.zeros(len(flops), dtype=bool) if sliced is None else np.asarray(sliced, dtype=bool)
        merges = np.ones(len(flops), dtype=bool) if alone is None else ~np.asarray(alone, dtype=bool)
        extra = np.zeros(len(flops))
        for k in ("fwd", "bwd"):
            for m in ("full", "diagonal"):
                sel = (kind == k) & (mask == m) & merges
                if not sel.any():
                    continue
                moved = [merge_bytes(k, m, flops[sel], q_tokens[sel], kv_tokens[sel], head_dim=hd,
                                     kv_heads_per_head=ratio, elem_bytes=DTYPE_BYTES[dtype], merge=merge,
                                     sliced=sliced[sel]) for merge in ("unfused", "fused")]
                kernels = merge_kernels(k, "unfused", sliced[sel]) - merge_kernels(k, "fused", sliced[sel])
                extra[sel] = (moved[0] - moved[1]) / (g.memory_bandwidth_gbps * 1e9) + kernels * KERNEL_GAP_US * 1e-6
        return t + extra

    @property
    def _flat_unfused(self) -> bool:
        return self.gpu.merge == "unfused" and self.gpu.memory_bandwidth_gbps is not None

    @property
    def merge_copies_slices(self) -> bool:
        """Whether a block on part of its rank's queries costs more to merge (the unfused
        merge copies the slice back: sim.hardware.presets.MERGE_SLICE_BYTES)."""
        return any(MERGE_SLICE_BYTES[self.gpu.merge])

    p2p_queue = True
    """GPUs run their ring hops through NCCL: one queue of batches per device (sim.engine.queues)."""

    @property
    def takes_call_order(self) -> bool:
        """Whether blocks depend on `alone` and `isolated` (the block model's merge and floor),
        which sim.engine.players.durations_s then passes to compute_time(s)_s."""
        return (self.gpu.kernel is not None and self.gpu.achieved_tflops is None) or self._flat_unfused

    takes_head_geometry = True
    """compute_time(s)_s and rate_flops take the workload's head dim and K/V heads per
    query head (a kernel table's rates and merge depend on them); the engine passes them."""

    def transfer_time_s(self, nbytes: float, src: int, dst: int) -> float:
        return float(self.transfer_times_s(np.array([nbytes], dtype=float), np.array([src]), np.array([dst]))[0])

    # The engine times whole schedules at once through these two when a hardware object
    # offers them; each must give, element for element, the per-op method's float.

    def compute_times_s(self, flops: np.ndarray, *, dtype: str, kind: np.ndarray, mask: np.ndarray,
                        q_tokens: np.ndarray, kv_tokens: np.ndarray, head_dim: int | None = None,
                        kv_heads_per_head: float | None = None, sliced: np.ndarray | None = None,
                        alone: np.ndarray | None = None, isolated: np.ndarray | None = None) -> np.ndarray:
        """compute_time_s over arrays of blocks (kind and mask: arrays of names)."""
        g = self.gpu
        if g.uses_kernel_table(dtype):
            return block_times_s(
                kernel_table(g.kernel), flops, kind=kind, mask=mask, q_tokens=q_tokens, kv_tokens=kv_tokens,
                head_dim=head_dim or _GEOMETRY.head_dim,
                kv_heads_per_head=kv_heads_per_head or _GEOMETRY.kv_heads / _GEOMETRY.heads,
                elem_bytes=DTYPE_BYTES[dtype], merge=g.merge, memory_bandwidth_gbps=g.memory_bandwidth_gbps,
                sms=g.sms, floors=g.floors, rate_scale=g.rate_scale, sliced=sliced, alone=alone, isolated=isolated)
        return self._flat_times_s(np.asarray(flops, dtype=float), dtype=dtype, kind=np.asarray(kind, dtype=str),
                                  mask=np.asarray(mask, dtype=str), q_tokens=np.asarray(q_tokens),
                                  kv_tokens=np.asarray(kv_tokens), head_dim=head_dim,
                                  kv_heads_per_head=kv_heads_per_head, sliced=sliced, alone=alone)

    def times_varlen(self, dtype: str) -> bool:
        """Whether blocks of packed documents are timed as varlen calls (the block model);
        the flat model times them by their FLOPs like any block."""
        return self.gpu.uses_kernel_table(dtype)

    def varlen_times_s(self, calls, flops: np.ndarray, *, dtype: str, kind: np.ndarray,
                       head_dim: int | None = None, kv_heads_per_head: float | None = None,
                       sliced: np.ndarray | None = None, alone: np.ndarray | None = None,
                       isolated: np.ndarray | None = None) -> np.ndarray:
        """compute_times_s for blocks that are varlen calls (sim.hardware.kernel_model.varlen_times_s)."""
        g = self.gpu
        return varlen_times_s(
            kernel_table(g.kernel), calls, flops, kind=kind, head_dim=head_dim or _GEOMETRY.head_dim,
            kv_heads_per_head=kv_heads_per_head or _GEOMETRY.kv_heads / _GEOMETRY.heads,
            elem_bytes=DTYPE_BYTES[dtype], merge=g.merge, memory_bandwidth_gbps=g.memory_bandwidth_gbps,
            sms=g.sms, floors=g.floors, rate_scale=g.rate_scale, sliced=sliced, alone=alone, isolated=isolated)

    def transfer_times_s(self, nbytes: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """transfer_time_s over arrays of transfers: alpha + bytes / bandwidth of the link
        between the two (inside a PCIe node, of their route: sim.hardware.pcie)."""
        t = self.link.time_s(nbytes)
        fabric = self.fabric
        if fabric is not None:
            g = self.gpus_per_node
            src, dst = np.asarray(src), np.asarray(dst)
            i, j = src % g, dst % g
            staged = fabric.staged[i, j]
            inside = self.link.latency_us * (1 + staged) * 1e-6 + np.asarray(nbytes) / (fabric.rate[i, j] * 1e9)
            t = np.where(src // g == dst // g, inside, t)
        if self.inter_link is None:
            return t
        between_nodes = src // self.gpus_per_node != dst // self.gpus_per_node
        return np.where(between_nodes, self.inter_link.time_s(nbytes), t)

    def rate_flops(self, dtype: str, head_dim: int | None = None) -> float:
        return self.gpu.rate_flops(dtype, head_dim)

    def describe(self) -> dict[str, Any]:
        out = {"kind": "preset", **asdict(self)}
        if self.nics_per_node is None:
            del out["nics_per_node"]          # one per GPU: as before the field existed
        if self.pcie is None:
            del out["pcie"]                   # NVSwitch: as before the field existed
        if self.gpu.kernel is not None:
            t = kernel_table(self.gpu.kernel)
            out["kernel_table"] = {"name": t.name, "kernel": t.kernel, "measured_on": t.measured_on}
        return out


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """Everything one simulation needs."""

    workload: Workload = field(default_factory=Workload)
    hardware: Hardware = field(default_factory=Hardware)
    n_gpus: int = 8
    """Ranks in the sequence-parallel group."""
    scheme: str = DEFAULT_SCHEME
    """The sequence-parallel scheme (a module of sim.schemes)."""
    settings: Settings | None = None
    """The scheme's own settings, of its type (sim.schemes.base.Scheme.settings_type); None
    (as given) stands for its defaults, and is replaced by them."""
    layout: str = "zigzag"
    """How tokens map to ranks: contiguous, striped or zigzag."""
    overlap: bool = True
    """Double-buffered K/V: transfers run while the current block computes."""
    sync: str = "step"
    """With overlap, when a rank forwards a block: 'step' (post send and receive at the
    start of each step, compute, wait for both: how ring kernels are written) or
    'buffered' (as soon as the block has arrived and the receiver has a free buffer)."""
    granularity: str = "exact"
    """Work counted as exact unmasked pairs, or as tiles (a partial tile costs a full one)."""
    tile: int = 128
    """Tile edge in tokens when granularity is 'tile'."""

    def __post_init__(self) -> None:
        positive_ints(self, "n_gpus", "tile")
        scheme = get_scheme(self.scheme)
        if self.settings is None:
            object.__setattr__(self, "settings", scheme.settings_type())
        elif type(self.settings) is not scheme.settings_type:
            raise RingsimError(f"settings of the {self.scheme} scheme are a {scheme.settings_type.__name__}, "
                               f"got {self.settings!r}")
        if self.layout not in LAYOUTS:
            raise RingsimError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.sync not in SYNCS:
            raise RingsimError(f"sync must be step or buffered, got {self.sync!r}")
        if self.granularity not in GRANULARITIES:
            raise RingsimError(f"granularity must be exact or tile, got {self.granularity!r}")
        if self.workload.dtype not in self.hardware.gpu.peak_tflops and self.hardware.gpu.achieved_tflops is None:
            raise RingsimError(f"GPU {self.hardware.gpu.name} has no rate for {self.workload.dtype}")
        scheme.check(self)

    @property
    def packed(self) -> bool:
        """Whether the run takes the packed-documents path (sim.layouts.packed.uses_documents)."""
        return uses_documents(self.workload, self.layout)

    def check_layout_chunks(self, ranks: int | None = None, times: int = 1) -> None:
        """RingsimError unless the sequence cuts into the layout's chunks on `ranks`
        ranks (n_gpus if None), each cut `times` ways. Packed documents: the sequence
        divides over the ranks (sim.layouts.packed), and the documents fit it."""
        n = self.n_gpus if ranks is None else ranks
        if self.packed:
            if self.workload.seq % (n * times):
                raise RingsimError(f"sequence length {self.workload.seq} does not divide over {n * times} GPUs")
            doc_bounds(self.workload.docs, self.workload.seq, self.workload.seed)
            return
        chunks = get_layout(self.layout).n_chunks(n) * times
        if self.workload.seq % chunks:
            raise RingsimError(
                f"sequence length {self.workload.seq} does not divide into {chunks} equal chunks "
                f"({self.layout} layout on {n} GPUs" + (f", each chunk {times} ways" if times > 1 else "")
                + f"); use a multiple of {chunks}")

    @property
    def n_chunks(self) -> int:
        """How many equal chunks the layout cuts the sequence into (packed documents: a
        rank's shard is its chunk)."""
        return self.n_gpus if self.packed else get_layout(self.layout).n_chunks(self.n_gpus)

    @property
    def tokens_per_rank(self) -> int:
        return self.workload.seq // self.n_gpus

    def with_(self, **changes: Any) -> "Scenario":
        """The scenario with `changes`; another scheme, given without its settings, takes
        its defaults (`with_(scheme=DEFAULT_SCHEME)`: the plain ring)."""
        if changes.get("scheme", self.scheme) != self.scheme:
            changes.setdefault("settings", None)
        return replace(self, **changes)

    def describe(self) -> dict[str, Any]:
        """The configuration for a trace's header: the common fields, and the scheme's own
        settings as the run takes them (sim.schemes.base.Scheme.resolved_settings)."""
        w = asdict(self.workload)
        w["pass"] = w.pop("pass_")
        for name, default in (("docs", None), ("seed", 0), ("window", None)):
            if w[name] == default:      # one document: the header as it always was
                del w[name]
        return {"workload": w, "n_gpus": self.n_gpus, "scheme": self.scheme, "layout": self.layout,
                "overlap": self.overlap, "sync": self.sync, "granularity": self.granularity,
                "tile": self.tile, **asdict(get_scheme(self.scheme).resolved_settings(self))}


def scenario_from_config(config: dict[str, Any], hardware: Any = None) -> Scenario:
    """The scenario a trace header describes (Scenario.describe() shape): its scheme (the
    default where the header names none) and the settings the header records for it; on
    `hardware` when given, else the default."""
    try:
        w = dict(config["workload"])
        w["pass_"] = w.pop("pass")
        scheme = config.get("scheme", DEFAULT_SCHEME)
        own = fields(get_scheme(scheme).settings_type)
        settings = get_scheme(scheme).settings_type(**{f.name: config[f.name] for f in own
                                                       if config.get(f.name) is not None})
        extra = {} if hardware is None else {"hardware": hardware}
        return Scenario(workload=Workload(**w), n_gpus=config["n_gpus"], scheme=scheme, settings=settings,
                        layout=config["layout"], overlap=config["overlap"], sync=config.get("sync", "step"),
                        granularity=config.get("granularity", "exact"), tile=config.get("tile", 128), **extra)
    except RingsimError as e:
        raise RingsimError(f"the trace's configuration is not a valid scenario: {e}") from None
    except (KeyError, TypeError, AttributeError) as e:
        raise RingsimError(f"the trace's header has no usable configuration (missing or bad {e})") from None
