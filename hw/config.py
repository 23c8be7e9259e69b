"""Configuration of one measured ring run: the workload of `sim.scenario.config.Workload` plus
what only a real run has (processes, backend, device, repeats, seed, timeout).

Frozen, keyword-only and validated where it is made, like the simulator's own
configuration, so that a bad value fails with a sentence naming it (`RingsimError`).
The simulator's `Scenario` is the header of every measured trace (`scenario()`), so a
measured and a simulated run of the same workload describe themselves the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hw.kernels import SCHEMES
from sim.errors import RingsimError
from sim.layouts.packed import Packed, packed_of, uses_documents
from sim.scenario.config import LAYOUTS, Scenario, Workload
from sim.schemes.allgather import PACKED_LAYOUTS as PACKED_ALLGATHER_LAYOUTS

BACKENDS = ("gloo", "nccl")
DEVICES = ("cpu", "cuda")
BLOCK_IMPLS = ("auto", "fused", "matmul")
CPU_DTYPES = ("fp32", "bf16", "fp16")
CUDA_DTYPES = ("fp32", "bf16", "fp16")


def default_threads(ranks_on_host: int) -> int:
    """CPU threads per rank: the host's cores shared evenly, at least one."""
    return max(1, (os.cpu_count() or 1) // max(1, ranks_on_host))


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """One measured run of the ring kernel."""

    workload: Workload = field(default_factory=lambda: Workload(
        seq=4096, heads=8, kv_heads=8, head_dim=64, dtype="fp32", causal=True))
    """Shape, dtype, mask, pass (fwd, bwd or fwdbwd) and packed documents, as in the simulator."""
    n_gpus: int = 2
    """Ranks in the ring."""
    layout: str = "zigzag"
    """contiguous, striped, zigzag, or with packed documents also doc-contiguous and
    balanced (allgather: zigzag; with packed documents contiguous or zigzag)."""
    scheme: str = "ring"
    """ring, allgather or ulysses (hw.kernels)."""
    device: str = "cpu"
    """cpu or cuda."""
    backend: str | None = None
    """gloo or nccl; None picks gloo on CPU and nccl on CUDA."""
    warmup: int = 1
    """Untimed iterations before the measured ones."""
    repeats: int = 1
    """Measured iterations; each yields one trace."""
    seed: int = 0
    """Seed of the random inputs (the same seed gives the same tensors)."""
    timeout_s: float = 60.0
    """Process-group timeout: a rank blocked this long on a peer gives up."""
    threads_per_rank: int | None = None
    """torch CPU threads per rank; None shares the host's cores among the local ranks."""
    block_impl: str = "auto"
    """Per-block compute: fused (torch's attention operator with log-sum-exp), matmul, or auto."""
    measure_rate: bool = False
    """Also time the whole attention on one rank, to put its achieved FLOP/s in the header."""
    fail_rank: int | None = None
    """Testing aid: this rank raises at `fail_step` of the first iteration."""
    fail_step: int = 0
    """Testing aid: the step at which `fail_rank` fails."""
    fail_mode: str = "raise"
    """Testing aid: 'raise' an exception or 'exit' the process without a word."""

    def __post_init__(self) -> None:
        if not isinstance(self.workload, Workload):
            raise RingsimError("workload must be a sim.scenario.config.Workload")
        for name in ("n_gpus", "repeats"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise RingsimError(f"{name} must be a positive integer, got {v!r}")
        for name in ("warmup", "seed", "fail_step"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise RingsimError(f"{name} must be a non-negative integer, got {v!r}")
        if self.layout not in LAYOUTS:
            raise RingsimError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.scheme not in SCHEMES:
            raise RingsimError(f"scheme must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        packed = uses_documents(self.workload, self.layout)
        if self.scheme == "allgather" and packed and self.layout not in PACKED_ALLGATHER_LAYOUTS:
            raise RingsimError(f"the allgather scheme runs packed documents on the contiguous or zigzag layout, "
                               f"got {self.layout!r}")
        if self.scheme == "allgather" and not packed and self.layout != "zigzag":
            raise RingsimError(f"the allgather scheme runs on the zigzag layout, got {self.layout!r}")
        if self.scheme == "ulysses" and packed:
            raise RingsimError("the ulysses kernel runs one document per sequence: it takes no documents, "
                               "window or documents-only layout")
        if self.device not in DEVICES:
            raise RingsimError(f"device must be cpu or cuda, got {self.device!r}")
        backend = self.resolved_backend
        if backend not in BACKENDS:
            raise RingsimError(f"backend must be gloo or nccl, got {backend!r}")
        if (backend == "nccl") != (self.device == "cuda"):
            raise RingsimError(f"backend {backend} does not run on {self.device}: use gloo on cpu, nccl on cuda")
        if self.block_impl not in BLOCK_IMPLS:
            raise RingsimError(f"block_impl must be one of {', '.join(BLOCK_IMPLS)}, got {self.block_impl!r}")
        if not isinstance(self.timeout_s, (int, float)) or not 0 < self.timeout_s < 1e6:
            raise RingsimError(f"timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        if self.threads_per_rank is not None and (
                not isinstance(self.threads_per_rank, int) or self.threads_per_rank <= 0):
            raise RingsimError(f"threads_per_rank must be a positive integer, got {self.threads_per_rank!r}")
        if self.fail_rank is not None and not 0 <= self.fail_rank < self.n_gpus:
            raise RingsimError(f"fail_rank must be a rank below {self.n_gpus}, got {self.fail_rank!r}")
        if self.fail_mode not in ("raise", "exit"):
            raise RingsimError(f"fail_mode must be raise or exit, got {self.fail_mode!r}")
        self.scenario()  # the simulator's checks: sizes that divide into the layout's chunks

    @property
    def resolved_backend(self) -> str:
        if self.backend is not None:
            return self.backend
        return "nccl" if self.device == "cuda" else "gloo"

    @property
    def tokens_per_rank(self) -> int:
        return self.workload.seq // self.n_gpus

    @property
    def packed(self) -> Packed | None:
        """The packed sequence the kernels shard by and mask with (`sim.layouts.packed`); None for
        one document without a window."""
        scenario = self.scenario()
        return packed_of(scenario) if scenario.packed else None

    @property
    def sharding(self) -> str | Packed:
        """What `hw.layouts.shard` cuts the inputs by: the packed sequence, or the layout."""
        return self.packed or self.layout

    def threads(self, ranks_on_host: int) -> int:
        return self.threads_per_rank or default_threads(ranks_on_host)

    def scenario(self) -> Scenario:
        """The simulator's view of this run (its `describe()` is the trace's config)."""
        return Scenario(workload=self.workload, n_gpus=self.n_gpus, scheme=self.scheme, layout=self.layout,
                        overlap=True, granularity="exact")

    def describe(self) -> dict[str, Any]:
        return self.scenario().describe()
