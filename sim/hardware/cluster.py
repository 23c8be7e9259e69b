"""The datasheet hardware model: GPUs, the links between them, and how they sit in nodes.

Validated, immutable, keyword-only dataclasses: a bad value fails where it is made, with a
sentence naming the field (`RingsimError`). `Gpu` times a block with a published kernel
table (sim.hardware.kernel_model) or flat, `Link` is alpha-beta, and `Hardware` packs GPUs
into nodes with their NICs and PCIe fabric (sim.hardware.topology, sim.hardware.pcie): a
hardware model the engine plays a schedule on (sim.hardware.model.HardwareModel).
Definitions of compute and link time are those of docs/design.md.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sim.arrays import distinct_ints, unique_columns, unique_values
from sim.errors import RingsimError
from sim.hardware import nccl
from sim.hardware.contention import GpuPull
from sim.hardware.kernel_model import (
    Floors,
    best_rate_flops,
    block_times_s,
    kernel_table,
    merge_bytes,
    merge_kernels,
    varlen_times_s,
)
from sim.hardware.model import HardwareModel
from sim.hardware.pcie import Fabric, Pcie
from sim.hardware.presets import KERNEL_GAP_US, LAUNCH_OVERHEAD_US, MERGE_BYTES, MERGE_SLICE_BYTES, gpu_preset, link_preset
from sim.reasons import refusal
from sim.scenario.quantities import DTYPE_BYTES
from sim.units import positive_ints

RATE_GROUPS = ("fwd-full", "fwd-diagonal", "bwd-full", "bwd-diagonal")
COMM_COSTS = ("nccl", "link")
"""How Hardware times its transfers: 'nccl' (NCCL's tuning model, sim.hardware.nccl, and
NCCL's pull on the compute beside it) or 'link' (alpha + bytes / bandwidth of the link)."""
_COLLECTIVE_FUNCTIONS = {"ag": "all_gather", "rs": "reduce_scatter"}


def _positive(obj: Any, *names: str, allow_zero: bool = False) -> None:
    for name in names:
        v = getattr(obj, name)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v != float("inf")
        if not ok or v < 0 or (v == 0 and not allow_zero):
            raise refusal("refused.not-negative" if allow_zero else "refused.positive", field=name,
                          value=v if isinstance(v, (int, float)) and not isinstance(v, bool) else repr(v))


ASSUMED_HEAD_DIM = 128
ASSUMED_KV_HEADS_PER_HEAD = 8 / 32
"""The head dim and K/V heads per query head the kernel model assumes when not told (a
GPU's rate asked without a workload): those of the default Workload."""


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
            raise refusal("refused.fraction", field="efficiency", value=self.efficiency)
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
        published rate (dense forward at its longest length), times the largest calibrated
        `rate_scale` above 1 (a group measured faster than the table runs its blocks
        faster, and the ideal must stay a bound); flat, the achieved rate."""
        if self.uses_kernel_table(dtype):
            faster = max([1.0, *self.rate_scale.values()])
            return best_rate_flops(kernel_table(self.kernel), head_dim or ASSUMED_HEAD_DIM) * faster
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


def _merging_blocks(flops: np.ndarray, *, dtype: str, kind, mask, q_tokens, kv_tokens, head_dim: int | None,
                    kv_heads_per_head: float | None, sliced, alone, merges: tuple[str, ...], opens=None):
    """For each (pass, mask) of the blocks that merge (all but those `alone` in their pass):
    (which blocks, the pass, their `sliced` and `opens` flags, the bytes each merge of
    `merges` moves after each: sim.hardware.kernel_model.merge_bytes)."""
    kind, mask = np.asarray(kind, dtype=str), np.asarray(mask, dtype=str)
    q_tokens, kv_tokens = np.asarray(q_tokens), np.asarray(kv_tokens)
    sliced = np.zeros(len(flops), dtype=bool) if sliced is None else np.asarray(sliced, dtype=bool)
    merging = np.ones(len(flops), dtype=bool) if alone is None else ~np.asarray(alone, dtype=bool)
    opens = np.zeros(len(flops), dtype=bool) if opens is None else np.asarray(opens, dtype=bool)
    hd, ratio = head_dim or ASSUMED_HEAD_DIM, kv_heads_per_head or ASSUMED_KV_HEADS_PER_HEAD
    for k in ("fwd", "bwd"):
        for m in ("full", "diagonal"):
            sel = (kind == k) & (mask == m) & merging
            if not sel.any():
                continue
            yield sel, k, sliced[sel], opens[sel], [
                merge_bytes(k, m, flops[sel], q_tokens[sel], kv_tokens[sel], head_dim=hd, kv_heads_per_head=ratio,
                            elem_bytes=DTYPE_BYTES[dtype], merge=merge, sliced=sliced[sel], opens=opens[sel])
                for merge in merges]


@functools.lru_cache(maxsize=32)
def _fabric(pcie: Pcie, gpus_per_node: int, port_gbps: float) -> Fabric:
    return pcie.fabric(gpus_per_node, port_gbps)


@dataclass(frozen=True, kw_only=True)
class Hardware(HardwareModel):
    """GPUs, the links between them, and how they sit in nodes (sim.hardware.topology): the
    datasheet hardware model (sim.hardware.model.HardwareModel).

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
    comm_cost: str = "nccl"
    """How transfers are timed (COMM_COSTS): 'nccl', as NCCL's tuning model costs each
    collective and send/receive, with its CTAs and copies slowing the compute beside it
    (sim.hardware.nccl, docs/nccl.md), on GPUs NCCL runs on (sim.hardware.nccl.GPU_ARCH;
    others by their link); 'link', alpha + bytes / bandwidth of the link."""
    nccl_world: int | None = None
    """Under NCCL, the GPUs of the ring this schedule is a slice of: a ring of 16 GPUs that
    stands for 16 of a ring of 1,024 (the dashboard's sweeps) has each communicator costed
    as one of `nccl_world` GPUs packed `gpus_per_node` to a node, as the larger ring's sends
    are (NCCL gives a send fewer channels in a larger communicator: sim.hardware.nccl
    .send_recv). None: each communicator as the schedule's own ranks make it."""

    def __post_init__(self) -> None:
        positive_ints(self, "gpus_per_node")
        if self.nccl_world is not None:
            positive_ints(self, "nccl_world")
        if self.comm_cost not in COMM_COSTS:
            raise RingsimError(f"comm_cost must be one of {', '.join(COMM_COSTS)}, got {self.comm_cost!r}")
        if self.pcie is not None:
            self.pcie.check_node(self.gpus_per_node)
        if self.nics_per_node is not None:
            positive_ints(self, "nics_per_node")
            if self.gpus_per_node % self.nics_per_node:
                raise refusal("refused.must-divide", field="nics_per_node", value=self.nics_per_node,
                              other_field="gpus_per_node", other_value=self.gpus_per_node)

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
                       isolated: bool = False, opens: bool = False) -> float:
        """Time of one block: overhead + FLOPs / achieved rate (docs/design.md); with a kernel
        table, the rate of its pass, mask and size plus its merge (sim.hardware.kernel_model).
        head_dim and kv_heads_per_head (the engine passes the workload's) default to
        ASSUMED_HEAD_DIM and ASSUMED_KV_HEADS_PER_HEAD; sliced: the block's queries are part of its rank's
        (the engine passes it where `merge_copies_slices`); alone: the only block of its
        pass on its rank, whose result is the output (nothing to merge); isolated: the GPU is idle when
        it is called (the first block of its rank): the call's host-side floor is paid in
        front, not hidden behind queued work; opens: the rank's first forward block, whose
        merge starts the output (sim.hardware.presets.MERGE_OPEN) (the engine passes the three:
        `takes_call_order`)."""
        if self.gpu.uses_kernel_table(dtype):
            return float(self.compute_times_s(
                np.array([flops], dtype=float), dtype=dtype, kind=np.array([kind], dtype=object),
                mask=np.array([mask], dtype=object), q_tokens=np.array([q_tokens]),
                kv_tokens=np.array([kv_tokens]), head_dim=head_dim, kv_heads_per_head=kv_heads_per_head,
                sliced=np.array([sliced]), alone=np.array([alone]), isolated=np.array([isolated]),
                opens=np.array([opens]))[0])
        return float(self._flat_times_s(np.array([flops], dtype=float), dtype=dtype, kind=np.array([kind]),
                                        mask=np.array([mask]), q_tokens=np.array([q_tokens]),
                                        kv_tokens=np.array([kv_tokens]), head_dim=head_dim,
                                        kv_heads_per_head=kv_heads_per_head, sliced=np.array([sliced]),
                                        alone=np.array([alone]), opens=np.array([opens]))[0])

    def _flat_times_s(self, flops: np.ndarray, *, dtype: str, kind: np.ndarray, mask: np.ndarray,
                      q_tokens: np.ndarray, kv_tokens: np.ndarray, head_dim: int | None,
                      kv_heads_per_head: float | None, sliced: np.ndarray | None,
                      alone: np.ndarray | None, opens: np.ndarray | None = None) -> np.ndarray:
        """The flat model: overhead + FLOPs / (peak x efficiency). Its efficiency is an
        attention kernel's merged in one fused pass; with the unfused merge
        (ring-flash-attention's chain of elementwise kernels), each block that merges also
        pays what that chain moves beyond one fused pass (sim.hardware.presets.MERGE_BYTES), at the
        GPU's memory bandwidth, and the gap after each of its extra kernels."""
        g = self.gpu
        t = g.launch_overhead_us * 1e-6 + flops / g.rate_flops(dtype, head_dim)
        if not self._flat_unfused:
            return t
        extra = np.zeros(len(flops))
        for sel, k, sl, op, (unfused, fused) in _merging_blocks(
                flops, dtype=dtype, kind=kind, mask=mask, q_tokens=q_tokens, kv_tokens=kv_tokens, head_dim=head_dim,
                kv_heads_per_head=kv_heads_per_head, sliced=sliced, alone=alone, merges=("unfused", "fused"),
                opens=opens):
            kernels = merge_kernels(k, "unfused", sl, op) - merge_kernels(k, "fused", sl, op)
            extra[sel] = (unfused - fused) / (g.memory_bandwidth_gbps * 1e9) + kernels * KERNEL_GAP_US * 1e-6
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

    def transfer_time_s(self, nbytes: float, src: int, dst: int) -> float:
        return float(self.transfer_times_s(np.array([nbytes], dtype=float), np.array([src]), np.array([dst]))[0])

    # The engine times whole schedules at once through these two, in place of
    # HardwareModel's calls per distinct op; each gives, element for element, the per-op
    # method's float.

    def compute_times_s(self, flops: np.ndarray, *, dtype: str, kind: np.ndarray, mask: np.ndarray,
                        q_tokens: np.ndarray, kv_tokens: np.ndarray, head_dim: int | None = None,
                        kv_heads_per_head: float | None = None, sliced: np.ndarray | None = None,
                        alone: np.ndarray | None = None, isolated: np.ndarray | None = None,
                        opens: np.ndarray | None = None) -> np.ndarray:
        """compute_time_s over arrays of blocks (kind and mask: arrays of names); opens: the
        blocks that open their rank's forward output (sim.hardware.presets.MERGE_OPEN)."""
        g = self.gpu
        if g.uses_kernel_table(dtype):
            return block_times_s(
                kernel_table(g.kernel), flops, kind=kind, mask=mask, q_tokens=q_tokens, kv_tokens=kv_tokens,
                head_dim=head_dim or ASSUMED_HEAD_DIM,
                kv_heads_per_head=kv_heads_per_head or ASSUMED_KV_HEADS_PER_HEAD,
                elem_bytes=DTYPE_BYTES[dtype], merge=g.merge, memory_bandwidth_gbps=g.memory_bandwidth_gbps,
                sms=g.sms, floors=g.floors, rate_scale=g.rate_scale, sliced=sliced, alone=alone, isolated=isolated,
                opens=opens)
        return self._flat_times_s(np.asarray(flops, dtype=float), dtype=dtype, kind=np.asarray(kind, dtype=str),
                                  mask=np.asarray(mask, dtype=str), q_tokens=np.asarray(q_tokens),
                                  kv_tokens=np.asarray(kv_tokens), head_dim=head_dim,
                                  kv_heads_per_head=kv_heads_per_head, sliced=sliced, alone=alone, opens=opens)

    def times_varlen(self, dtype: str) -> bool:
        """Whether blocks of packed documents are timed as varlen calls (the block model);
        the flat model times them by their FLOPs like any block."""
        return self.gpu.uses_kernel_table(dtype)

    def varlen_times_s(self, calls, flops: np.ndarray, *, dtype: str, kind: np.ndarray,
                       head_dim: int | None = None, kv_heads_per_head: float | None = None,
                       sliced: np.ndarray | None = None, alone: np.ndarray | None = None,
                       isolated: np.ndarray | None = None, opens: np.ndarray | None = None) -> np.ndarray:
        """compute_times_s for blocks that are varlen calls (sim.hardware.kernel_model.varlen_times_s)."""
        g = self.gpu
        return varlen_times_s(
            kernel_table(g.kernel), calls, flops, kind=kind, head_dim=head_dim or ASSUMED_HEAD_DIM,
            kv_heads_per_head=kv_heads_per_head or ASSUMED_KV_HEADS_PER_HEAD,
            elem_bytes=DTYPE_BYTES[dtype], merge=g.merge, memory_bandwidth_gbps=g.memory_bandwidth_gbps,
            sms=g.sms, floors=g.floors, rate_scale=g.rate_scale, sliced=sliced, alone=alone, isolated=isolated,
            opens=opens)

    def transfer_times_s(self, nbytes: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """transfer_time_s over arrays of transfers: under NCCL, each a send/receive in a
        communicator of its two ranks (`group_transfer_times_s`); otherwise alpha + bytes /
        bandwidth of the link between the two (inside a PCIe node, of their route:
        sim.hardware.pcie)."""
        if self.nccl_arch is not None:
            src, dst = np.asarray(src), np.asarray(dst)
            pairs = np.unique(np.stack([np.minimum(src, dst), np.maximum(src, dst)]), axis=1)
            members = [pairs[:, i] for i in range(pairs.shape[1])]
            key = np.minimum(src, dst) * (int(max(src.max(initial=0), dst.max(initial=0))) + 1) + np.maximum(src, dst)
            pair_key = pairs[0] * (int(max(src.max(initial=0), dst.max(initial=0))) + 1) + pairs[1]
            group_of = np.searchsorted(pair_key, key)
            return self.group_transfer_times_s(np.full(len(src), "kv", dtype=object), nbytes, src, dst,
                                               members, group_of)[0]
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

    # --- NCCL (sim.hardware.nccl) ----------------------------------------------------------

    @property
    def nccl_arch(self) -> str | None:
        """NCCL's class of this GPU where transfers are NCCL's (`comm_cost`), else None."""
        return nccl.GPU_ARCH.get(self.gpu.name) if self.comm_cost == "nccl" else None

    @property
    def times_groups(self) -> bool:
        """Transfers are timed knowing the communicator they run in (NCCL)."""
        return self.nccl_arch is not None

    @property
    def gpu_pull(self) -> GpuPull | None:
        """Under NCCL, what its CTAs and copies take from the compute beside a transfer
        (sim.hardware.contention.GpuPull); None otherwise, or where the GPU's SMs or memory
        bandwidth are not known."""
        g = self.gpu
        if self.nccl_arch is None or g.sms is None or g.memory_bandwidth_gbps is None:
            return None
        return GpuPull(sms=g.sms, hbm_gbps=g.memory_bandwidth_gbps)

    def memory_bound_s(self, flops: np.ndarray, *, dtype: str, kind: np.ndarray, mask: np.ndarray,
                       q_tokens: np.ndarray, kv_tokens: np.ndarray, head_dim: int | None = None,
                       kv_heads_per_head: float | None = None, sliced: np.ndarray | None = None,
                       alone: np.ndarray | None = None, isolated: np.ndarray | None = None,
                       opens: np.ndarray | None = None) -> np.ndarray:
        """The merge after each block at the GPU's memory bandwidth: what its time spends
        streaming memory (sim.hardware.kernel_model.merge_bytes; in the flat model only what
        an unfused merge moves beyond the fused pass its efficiency includes); 0 for a block
        that is its pass's only one (nothing to merge)."""
        g = self.gpu
        flops = np.asarray(flops, dtype=float)
        out = np.zeros(len(flops))
        table = g.uses_kernel_table(dtype)
        if g.memory_bandwidth_gbps is None or not (table or self._flat_unfused):
            return out
        for sel, _, _, _, (own, fused) in _merging_blocks(
                flops, dtype=dtype, kind=kind, mask=mask, q_tokens=q_tokens, kv_tokens=kv_tokens, head_dim=head_dim,
                kv_heads_per_head=kv_heads_per_head, sliced=sliced, alone=alone, merges=(g.merge, "fused"),
                opens=opens):
            out[sel] = (own if table else own - fused) / (g.memory_bandwidth_gbps * 1e9)
        return out

    def _inside(self) -> str:
        """What joins a node's GPUs as NCCL sees it: 'pci' on a PCIe link, else 'nvlink'."""
        return "pci" if self.pcie is not None or self.link.name.lower().startswith("pcie") else "nvlink"

    def _nccl_link_gbps(self) -> float:
        """The node link's bandwidth as NCCL's topology counts it (sim.hardware.nccl): NVLink
        at NCCL's rate per link, PCIe at its GB/s per lane."""
        arch = self.nccl_arch or "hopper"
        if self._inside() == "pci":
            return self.link.bandwidth_gbps * nccl.PCIE_NCCL_SHARE
        return self.link.bandwidth_gbps * nccl.NVLINK_GBPS[arch] / nccl.NVLINK_DATASHEET_GBPS[arch]

    def nccl_comm(self, members: np.ndarray) -> nccl.Comm:
        """The communicator of ranks `members` as NCCL sees it: its nodes, and the narrowest
        link a ring channel through its GPUs of one node crosses (inside a PCIe node also
        the switch uplinks and the socket link it spans)."""
        g = self.gpus_per_node
        members = np.asarray(members)
        nodes = int(len(np.unique(members // g)))
        channel = port = self._nccl_link_gbps()
        if self.pcie is not None:
            places = np.unique(members % g)
            if self.pcie.gpus_per_switch > 1 and len(np.unique(places // self.pcie.gpus_per_switch)) > 1:
                channel = min(channel, self.pcie.uplink_gbps * nccl.PCIE_NCCL_SHARE)
            if len(np.unique(places // self.pcie.gpus_per_socket)) > 1:
                channel = min(channel, self.pcie.socket_gbps)
        nic = (self.inter_link or self.link).bandwidth_gbps
        inside = self._inside()
        ranks = int(len(members))
        if self.nccl_world is not None and self.nccl_world > ranks:
            ranks, nodes = self.nccl_world, -(-self.nccl_world // g)
        return nccl.Comm(ranks=ranks, nodes=nodes, arch=self.nccl_arch or "hopper", intra=inside,
                         channel_gbps=channel, port_gbps=port, nic_gbps=nic, nics_per_node=self.nics_per_node or g,
                         local_nics=max(1, (self.nics_per_node or g) // g),
                         nvls=inside == "nvlink" and self.pcie is None and g > 2,
                         cpu="amd" if self.pcie is not None and self.pcie.socket_link == "xgmi" else "intel")

    def _paths(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per flow: its path's bandwidth (GB/s: the node link as NCCL counts it, a PCIe route's
        narrowest link, sim.hardware.pcie, or the NIC), whether it is staged through host
        memory, whether it crosses nodes."""
        g = self.gpus_per_node
        between = src // g != dst // g
        rate = np.full(len(src), self._nccl_link_gbps())
        staged = np.zeros(len(src), dtype=bool)
        fabric = self.fabric
        if fabric is not None:
            i, j = src % g, dst % g
            rate = np.where(between, rate, fabric.rate[i, j])
            staged = ~between & fabric.staged[i, j]
        nic = (self.inter_link or self.link).bandwidth_gbps
        return np.where(between, nic, rate), staged, between

    def group_transfer_times_s(self, kind: np.ndarray, nbytes: np.ndarray, src: np.ndarray, dst: np.ndarray,
                               members: list[np.ndarray], group_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(time, CTAs) of each transfer as NCCL runs it in the communicator
        members[group_of] (sim.hardware.nccl): a flow of an all-gather or reduce-scatter
        ('ag', 'rs') its share of the collective's time by its bytes (the collective of
        ranks x block bytes, its block one node's share of what the flow carries inside a
        node), a flow of an all-to-all ('a2a') its round of NCCL's grouped send/receive,
        any other a send/receive; a flow staged through host memory pays two latencies.
        CTAs: what the flow keeps busy on each of its two GPUs (a collective's channels,
        half at each end of a flow: a rank sends and receives one flow at a time)."""
        kind = np.asarray(kind)
        names, kind = unique_values(kind if kind.dtype.kind == "U" else kind.astype(str))
        nbytes = np.asarray(nbytes, dtype=float)
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        group_of = np.asarray(group_of)
        times = np.zeros(len(kind))
        ctas = np.zeros(len(kind))
        path, staged, between = self._paths(src, dst)
        copies = 1 + staged.astype(np.int64)
        # the transfers group by group (a stable sort: ascending within a group), each group's a slice
        groups = distinct_ints(group_of, len(members))
        by_group = np.argsort(group_of, kind="stable") if len(groups) > 1 else np.arange(len(group_of))
        firsts = np.searchsorted(group_of[by_group], groups)
        for gi, a, b in zip(groups.tolist(), firsts.tolist(), [*firsts[1:].tolist(), len(by_group)]):
            comm = self.nccl_comm(members[gi])
            in_group = by_group[a:b]
            kinds = kind[in_group]
            for code in np.flatnonzero(np.bincount(kinds, minlength=len(names))).tolist():
                name = str(names[code])
                sel = in_group if len(names) == 1 else in_group[kinds == code]
                key = np.stack([nbytes[sel], path[sel], copies[sel], between[sel]])
                distinct, back = unique_columns(key)
                t = np.empty(distinct.shape[1])
                c = np.empty(distinct.shape[1])
                for x, (b, rate, k, net) in enumerate(distinct.T.tolist()):
                    t[x], c[x] = self._flow_s(comm, name, b, rate, int(k), bool(net))
                times[sel] = t[back.ravel()]
                ctas[sel] = c[back.ravel()]
        return times, ctas

    def _flow_s(self, comm: nccl.Comm, name: str, nbytes: float, path_gbps: float, copies: int,
                network: bool) -> tuple[float, float]:
        if name in _COLLECTIVE_FUNCTIONS and comm.ranks > 1:
            block = nbytes if network or comm.nodes == 1 else nbytes / comm.nodes
            call = nccl.collective(comm, _COLLECTIVE_FUNCTIONS[name], block * comm.ranks)
            return call.time_s * nbytes / ((comm.ranks - 1) * block), call.channels / 2
        if name == "a2a" and comm.ranks > 1:
            return (nccl.all_to_all_flow_s(comm, nbytes, path_gbps, network=network, copies=copies),
                    nccl.all_to_all_ctas(comm, nbytes, network=network) / 2)
        one = nccl.send_recv(comm, nbytes, network=network)
        return one.time_s(nbytes, path_gbps, copies), float(one.channels)

    def rate_flops(self, dtype: str, head_dim: int | None = None) -> float:
        return self.gpu.rate_flops(dtype, head_dim)

    def describe(self) -> dict[str, Any]:
        out = {"kind": "preset", **asdict(self)}
        if self.nics_per_node is None:
            del out["nics_per_node"]          # one per GPU: as before the field existed
        if self.pcie is None:
            del out["pcie"]                   # NVSwitch: as before the field existed
        if self.nccl_world is None:
            del out["nccl_world"]             # the schedule's own communicators: as before the field existed
        if self.gpu.kernel is not None:
            t = kernel_table(self.gpu.kernel)
            out["kernel_table"] = {"name": t.name, "kernel": t.kernel, "measured_on": t.measured_on}
        return out
