"""What a scheme module supplies (docs/design.md, "Beyond the ring: the schemes").

A scheme is one module of this package that defines `SCHEME`, a `Scheme`: the schedule
builder (configuration -> sim.engine.schedule.Schedule, the only thing the engine plays), the
memory model (bytes per rank, itemized), checks of a configuration beyond the common
ones, the names and colours of its operation kinds (for figures and legends), and what
the dashboard's block map shows. The engine looks a scheme up by name
(`sim.schemes.get`) and knows nothing else of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from sim.errors import RingsimError
from sim.reasons import Clause
from sim.trace.format import COMPUTE

if TYPE_CHECKING:
    from sim.engine.schedule import Schedule
    from sim.scenario.config import Scenario
    from sim.trace.format import Trace


@dataclass(frozen=True)
class OpKind:
    """How figures name and colour an operation kind of a scheme."""

    label: str
    color: str
    recv_color: str | None = None
    """Transfers: the colour of the receiving end (None for a compute)."""


PHASES = {"fwd": ["fwd"], "bwd": ["bwd"], "fwdbwd": ["fwd", "bwd"]}
"""The phases each pass runs, in order (a schedule's backward follows its forward)."""

COMPUTE_KINDS = {
    "fwd": OpKind("compute (forward)", "#3a6fd8"),
    "bwd": OpKind("compute (backward)", "#8e44ad"),
}
"""The compute kinds every scheme shares, named and coloured alike."""


@dataclass(frozen=True)
class BlockMap:
    """The block map of a run: query chunk x key chunk, what each cell shows."""

    value: np.ndarray
    """(chunks, chunks) the quantity shown, NaN where nothing is computed."""
    work: np.ndarray
    """(chunks, chunks) unmasked (query, key) pairs of each chunk pair."""
    owner: np.ndarray
    """(chunks,) the rank that holds each chunk."""
    chunk_size: int
    value_label: Clause
    """What a cell's value is, as a sim.reasons clause ("ring step", ...)."""
    axis_label: Clause
    """What a chunk is, as a sim.reasons clause ("chunk (token order)", ...)."""


@dataclass(frozen=True)
class Scheme:
    name: str
    summary: str
    build_schedule: Callable[["Scenario"], "Schedule"]
    peak_memory: Callable[["Scenario"], dict[str, int]]
    """Bytes per rank, itemized; 'total' is the peak."""
    op_kinds: dict[str, OpKind]
    block_map: Callable[["Trace"], BlockMap]
    check: Callable[["Scenario"], None] = field(default=lambda scenario: None)
    """Raise RingsimError, one line, for a configuration this scheme cannot run."""
    settings: Callable[["Scenario"], dict[str, Any]] = field(default=lambda scenario: {})
    """The scheme's own Scenario fields, resolved (for Scenario.describe and tables)."""
    batches_in_order: Callable[["Scenario"], bool] = field(default=lambda scenario: False)
    """True where the schedule already makes every point-to-point hop wait for the batch
    each of its ranks posted before (sim.engine.queues): a device that queues its batches, as
    NCCL does, then changes nothing, and the engine skips adding the same dependencies."""
    count_ops: Callable[["Scenario"], int] | None = None
    """How many operations the schedule will hold, without building it: the engine
    refuses a run that cannot fit in the machine's memory before it starts (None: not
    known, no such check)."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary}


_SETTING_DEFAULTS = {"ulysses_degree": None, "ring_degree": None, "placement": "ulysses-inner",
                     "head_groups": 1}
_SETTING_FLAGS = {"ulysses_degree": "--ulysses-degree", "ring_degree": "--ring-degree",
                  "placement": "--placement", "head_groups": "--head-groups"}


def ring_step_grid(trace: "Trace", work: np.ndarray, ring: int) -> np.ndarray:
    """Query chunk x key chunk: the ring step (step mod `ring`) at which the trace's first
    pass (fwd before bwd) computed each pair; NaN where no compute covered it or the pair
    has no work (the block map of the ring and of the hybrid's rings)."""
    grid = np.full(work.shape, np.nan)
    c = trace.columns
    comp = np.flatnonzero(c.stream == COMPUTE)
    if len(comp):
        kinds = c.kind[comp]
        sel = comp[kinds == kinds.min()]
        q, k = c.chunk_matrix("q_chunks")[sel], c.chunk_matrix("kv_chunks")[sel]
        step = (c.step[sel] % ring).astype(np.float64)
        for i in range(q.shape[1]):
            for j in range(k.shape[1]):
                ok = (q[:, i] >= 0) & (k[:, j] >= 0) & (q[:, i] < work.shape[0]) & (k[:, j] < work.shape[1])
                grid[q[ok, i], k[ok, j]] = step[ok]
    grid[work == 0] = np.nan
    return grid


def only_settings(scenario: "Scenario", scheme: str, *own: str) -> None:
    """RingsimError if the scenario sets a scheme setting other than `own`."""
    for name, default in _SETTING_DEFAULTS.items():
        if name not in own and getattr(scenario, name) != default:
            raise RingsimError(f"{_SETTING_FLAGS[name]} ({name}) does not apply to the {scheme} scheme")
