"""What an implementation of a scheme launches in one step (docs/design.md, "A scheme as a
library runs it"; docs/implementations.md).

A scheme (sim.schemes) fixes who holds what and who sends what to whom; an implementation
fixes what one step of it launches as a library runs it: its attention calls, the kernels
that merge or correct the partial outputs (sim.hardware.presets.MERGE_BYTES,
MERGE_KERNELS: the bytes they move and how many they are), the host-side operations
around them (each pays the host's time for an eager operation, Floors.op_host_us, unless
the GPU is still busy with queued work), and how the sends wait on the compute (the ring's
`sync`: "step", where a step's send is queued behind the step before's compute on the
compute stream, as NCCL's stream waits on the stream that posts it; "buffered", where the
next block is forwarded once it has arrived and a buffer is free). An `Implementation` is
that record, read from the library's code (its `source`: repository, file, commit). The
engine plays it (sim.engine.play.simulate): the GPU's merge and host floor become the
implementation's and the ring forwards as it does; `ideal`, the fused kernel the schemes
assume, changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sim.errors import RingsimError
from sim.hardware.cluster import Hardware
from sim.hardware.presets import MERGE_BYTES, MERGE_KERNELS, MERGE_SLICE_KERNELS
from sim.reasons import clause, refusal
from sim.scenario.documents import bounds as doc_bounds

if TYPE_CHECKING:
    from sim.scenario.config import Scenario

SYNCS = ("step", "buffered")
PASS_KINDS = ("fwd", "bwd")


@dataclass(frozen=True)
class StepLaunches:
    """What one rank launches at one step of one pass, counted as its library's code does."""

    attention_calls: int
    """Attention kernel calls (0 where the block is fully masked and skipped)."""
    merge_kernels: int
    """Kernels that merge or correct the partial results (sim.hardware.presets.MERGE_KERNELS)."""
    host_ops: int
    """Eager host-side operations besides the attention call and the merge's kernels: buffer
    allocations, posts of sends and receives, waits on the communication stream."""


@dataclass(frozen=True, kw_only=True)
class Implementation:
    """One library's version of one scheme: what a step launches (module docstring)."""

    library: str
    """Its name on the command line (`--impl`): 'ideal', 'te', 'rfa', 'torch' or 'usp'."""
    title: str
    """The library and its entry point, for a person ("ring-flash-attention zigzag_ring_flash_attn_func")."""
    source: str
    """Where its step is read from: repository, file (functions) and commit."""
    layouts: tuple[str, ...] | None = None
    """The layouts it runs (its load balancing), by sim.layouts name; None: any."""
    causal_layouts: tuple[str, ...] = ()
    """Layouts it runs only under a causal mask (ring-flash-attention's zigzag and stripe assert it)."""
    full_layouts: tuple[str, ...] = ()
    """Layouts it runs only without a causal mask (TransformerEngine's causal p2p expects its
    load-balanced halves)."""
    merge: str | None = None
    """How it merges each block's partial result: a key of sim.hardware.presets.MERGE_BYTES
    ('fused', 'unfused', 'te', 'torch'); None: the GPU's (`--merge`)."""
    host_ops: dict[str, int] = field(default_factory=lambda: {"fwd": 0, "bwd": 0})
    """Eager host-side operations per step and pass besides the attention call and the merge
    (StepLaunches.host_ops)."""
    host_wait_layouts: tuple[str, ...] = ()
    """Layouts on which, with packed documents (more than one), each step makes the host wait
    for the GPU before its call: ring-flash-attention's varlen zigzag indexes its halves
    with a boolean mask made on the CPU (k[half_index0], out[half_index1]), whose indices
    are copied to the GPU from pageable memory, a copy that waits for the stream."""
    sync: str | None = None
    """How the next block's send waits on the compute (module docstring): 'step', 'buffered';
    None: the scenario's `--sync`."""
    steps: tuple[str, ...] = ()
    """What one step launches, in words, in order (docs/implementations.md)."""
    not_modelled: tuple[str, ...] = ()
    """What its step does that the engine does not play, in words."""
    scheme: str = ""
    """The scheme it implements: the package it sits in (set by sim.implementations)."""

    def __post_init__(self) -> None:
        if self.merge is not None and self.merge not in MERGE_BYTES:
            raise RingsimError(f"merge must be one of {', '.join(MERGE_BYTES)}, got {self.merge!r}")
        if self.sync is not None and self.sync not in SYNCS:
            raise RingsimError(f"sync must be one of {', '.join(SYNCS)}, got {self.sync!r}")
        if set(self.host_ops) != set(PASS_KINDS) or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in self.host_ops.values()):
            raise RingsimError(f"host_ops must give a whole number, 0 or more, for fwd and bwd, got {self.host_ops!r}")

    @property
    def is_ideal(self) -> bool:
        """Whether it is the fused kernel the schemes assume (it changes nothing)."""
        return self.merge is None and not any(self.host_ops.values()) and self.sync is None

    def check(self, scenario: "Scenario") -> None:
        """RingsimError, one line, where it cannot run the scenario (a layout it lacks)."""
        layout = scenario.layout
        if self.layouts is not None and layout not in self.layouts:
            raise refusal("refused.impl-layout", impl=self.library, layout=layout,
                          layouts=[clause("variant.ring", layout=x) for x in self.layouts])
        if layout in self.causal_layouts and not scenario.workload.causal:
            raise refusal("refused.impl-causal", impl=self.library, layout=layout)
        if layout in self.full_layouts and scenario.workload.causal:
            raise refusal("refused.impl-full", impl=self.library, layout=layout)

    def played(self, scenario: "Scenario") -> "Scenario":
        """The scenario as it plays: the ring forwards as the implementation does."""
        if self.sync is None or not scenario.overlap or scenario.sync == self.sync:
            return scenario
        return replace(scenario, sync=self.sync)

    def host_waits(self, scenario: "Scenario") -> bool:
        """Whether each step's call is made on an idle GPU (host_wait_layouts): the engine then
        has every block pay its host-side time in front (sim.engine.players.durations_s)."""
        w = scenario.workload
        return (scenario.layout in self.host_wait_layouts and w.docs is not None
                and len(doc_bounds(w.docs, w.seq, w.seed)) > 2)

    def played_on(self, hardware: Any) -> Any:
        """The hardware as it plays: the datasheet model's GPU (sim.hardware.cluster.Hardware)
        merges as the implementation does, and each block's host-side time holds the step's
        host operations. A calibrated profile keeps its own measured blocks."""
        if self.is_ideal or not isinstance(hardware, Hardware):
            return hardware
        gpu = hardware.gpu
        floors = gpu.floors
        floors = replace(floors, fwd_host_us=floors.fwd_host_us + self.host_ops["fwd"] * floors.op_host_us,
                         bwd_host_us=floors.bwd_host_us + self.host_ops["bwd"] * floors.op_host_us)
        return replace(hardware, gpu=replace(gpu, merge=self.merge or gpu.merge, floors=floors))

    def launches(self, kind: str, *, pairs: int, sliced: bool = False) -> StepLaunches:
        """What a rank launches at a step of pass `kind` whose block has `pairs` unmasked pairs
        (0: skipped; the host operations of the step's communication stay) and merges into
        its rank's output; `sliced`: the block is on part of its rank's queries."""
        if kind not in PASS_KINDS:
            raise RingsimError(f"kind must be fwd or bwd, got {kind!r}")
        merge = self.merge or "fused"
        calls = 1 if pairs > 0 else 0
        merges = calls * (MERGE_KERNELS[merge][kind] + (MERGE_SLICE_KERNELS[merge] if sliced else 0))
        return StepLaunches(calls, merges, self.host_ops[kind])

    def describe(self) -> dict[str, Any]:
        return {"library": self.library, "scheme": self.scheme, "title": self.title, "source": self.source,
                "merge": self.merge, "host_ops": dict(self.host_ops), "sync": self.sync,
                "layouts": None if self.layouts is None else list(self.layouts), "steps": list(self.steps),
                "not_modelled": list(self.not_modelled)}


IDEAL = Implementation(
    library="ideal", title="the fused kernel (ideal)",
    source="docs/design.md: one attention call per block, its (out, lse) merged in one fused pass (or as --merge "
           "says), nothing else launched",
    steps=("one attention call on the block", "one fused merge of (out, lse) into the fp32 accumulator"))
"""The kernel the schemes assume: one call per block, the GPU's merge, nothing else."""
