"""What a scheme module supplies (docs/design.md, "Beyond the ring: the schemes").

A scheme is one module of this package that defines `SCHEME`, a `Scheme`: the schedule
builder (configuration -> sim.engine.schedule.Schedule, the only thing the engine plays), the
memory model (bytes per rank, itemized), checks of a configuration beyond the common
ones, the names and colours of its operation kinds (for figures and legends), and what
the dashboard's block map shows. It owns its settings (a `Settings` dataclass, which
`Scenario.settings` holds when it is the scheme chosen) and the options that set them,
the variants a comparison runs and the candidates a plan tries, and the words that name
a run of it. The engine looks a scheme up by name (`sim.schemes.get`) and knows nothing
else of it; nothing outside its module names it.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from sim.layouts import NAMES as ONE_DOCUMENT_LAYOUTS
from sim.layouts.packed import LAYOUTS as PACKED_LAYOUTS
from sim.reasons import Clause, english
from sim.scenario.option import ScenarioOption
from sim.trace.format import COMPUTE

if TYPE_CHECKING:
    from sim.engine.schedule import Schedule
    from sim.hardware.cluster import Hardware
    from sim.scenario.config import Scenario, Workload
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


@dataclass(frozen=True, kw_only=True)
class Settings:
    """A scheme's own settings: none (the ring's). A scheme with settings of its own
    subclasses it: a frozen, keyword-only dataclass, one docstring per field, each value
    checked in `__post_init__` (RingsimError naming the field)."""


def setting_option(settings: type[Settings], name: str, **record: Any) -> ScenarioOption:
    """The option (sim.scenario.option) that sets the field `name` of `settings`: its
    destination is the field, its default the field's, its heading the schedule's."""
    default = next(f.default for f in fields(settings) if f.name == name)
    if default is MISSING:
        raise TypeError(f"{settings.__name__}.{name} has no default for its option")
    return ScenarioOption(dest=name, default=default, group="schedule", **record)


@dataclass(frozen=True)
class Variant:
    """One way to run a scheme, as a comparison or a plan tries it: what it is called (a
    sim.reasons clause, None where the scheme runs one way), and the option values beside
    `--scheme` that make it (its own settings, the layout or overlap it runs with), by
    option name, in the order its command line gives them."""

    label: Clause | None
    values: dict[str, Any]

    @property
    def name(self) -> str:
        """What it is called in English, as a row names it ("" for none)."""
        return "" if self.label is None else english(self.label)


@dataclass(frozen=True)
class TokenSplit:
    """Which tokens each holder of a shard keeps, as the dashboard's layout strip draws
    them before the scheme moves anything."""

    layout: str
    """The layout (sim.layouts, sim.layouts.packed) the shards follow."""
    holders: int
    """How many shards: one per GPU, or one per ring position of GPUs that share it."""
    pattern: str = "layout"
    """What the strip's title says: 'layout' (the layout on the GPUs), 'chunk-pairs'
    (2N chunks, GPU i holds i and 2N-1-i), 'in-order' (token shards in order, before
    an all-to-all to head shards) or 'ring-positions' (the layout over ring positions,
    each shared by a group of GPUs)."""
    groups: tuple[tuple[int, ...], ...] | None = None
    """The GPUs of each holder; None: holder i is GPU i."""
    numbers: dict[str, int] = field(default_factory=dict)
    """The numbers the title gives besides the tokens and GPUs (`chunks`, `u`, ...)."""


def layouts_for(workload: "Workload") -> tuple[str, ...]:
    """The layouts worth comparing for a workload: the closed-form ones for one document
    (sim.layouts); with packed documents or a window also the documents' own
    (sim.layouts.packed)."""
    packed = workload.docs is not None or workload.window is not None
    return PACKED_LAYOUTS if packed else ONE_DOCUMENT_LAYOUTS


def _one_variant(workload: "Workload", hardware: "Hardware", n_gpus: int) -> list[Variant]:
    return [Variant(None, {})]


def _no_notes(values: Mapping[str, Any], n_gpus: int, kv_heads: int) -> list[Clause]:
    return []


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
    settings_type: type[Settings] = Settings
    """Its own settings, which Scenario.settings holds when it is the scheme chosen."""
    options: tuple[ScenarioOption, ...] = ()
    """The options its settings bring, one per field of `settings_type` that it offers as
    a choice (the option's destination is the field); sim.scenario.schema lists them with
    the common ones. A field another scheme's option already sets is set by that option
    (resolve.settings_of) and need not be offered again."""
    resolved_settings: Callable[["Scenario"], Settings] = field(default=lambda scenario: scenario.settings)
    """Its settings as a run takes them, what it chooses itself filled in (a degree): the
    trace header's (Scenario.describe)."""
    gpu_shares: tuple[str, ...] = ()
    """Its options whose values split the GPUs (degrees): at another GPU count they are
    left to its own choice."""
    ring_options: tuple[str, ...] = ()
    """The ring's options it reads ('layout', 'overlap', 'sync') where it passes K/V
    around a ring: the dashboard shows their controls for it."""
    variants: Callable[["Workload", "Hardware", int], list[Variant]] = _one_variant
    """What `ringsim compare --schemes` runs of it for a workload on the hardware's
    GPUs: a few that show what its settings change."""
    candidates: Callable[["Workload", "Hardware", int], list[Variant]] = _one_variant
    """What `ringsim plan` tries of it: every setting worth trying on that many GPUs for
    the workload's model (one the configuration refuses is listed as not possible)."""
    training_cp: bool = False
    """Whether the plan of a whole training step (sim.training.plan) tries it, with its
    default settings, as the context-parallel scheme."""
    run_words: Callable[[dict[str, Any]], str] = field(default=lambda config: "")
    """A run of it in a few words, from its trace header (Scenario.describe): the
    command line's and a sweep row's `variant` (sim.schemes.run_words)."""
    run_terms: Callable[[dict[str, Any]], tuple[str, dict[str, Any]]] = field(default=lambda config: ("", {}))
    """The same as data for the dashboard's languages: the form of its words ('' or one
    of its own, such as 'groups') and the values they give, by name (an option's value
    under its option's name); the dashboard's catalog holds the words under
    run.<scheme>[.<form>]."""
    token_split: Callable[["Scenario"], TokenSplit] = field(
        default=lambda scenario: TokenSplit(layout=scenario.layout, holders=scenario.n_gpus))
    """Which tokens each GPU (or group of GPUs) holds before anything moves."""
    plan_notes: Callable[[Mapping[str, Any], int, int], list[Clause]] = _no_notes
    """What a plan says of a candidate besides its time and memory, from its option
    values, the GPUs and the model's K/V heads: sim.reasons clauses (`plan.replicated`,
    K/V heads sent to more GPUs than there are; `plan.holds-all`, every GPU holds the
    whole K/V; `plan.holds-group`, a head group of it)."""
    limited_by_heads: bool = False
    """Whether its degree is bounded by the heads (a refusal that names them says so)."""
    batches_in_order: Callable[["Scenario"], bool] = field(default=lambda scenario: False)
    """True where the schedule already makes every point-to-point hop wait for the batch
    each of its ranks posted before (sim.engine.queues): a device that queues its batches, as
    NCCL does, then changes nothing, and the engine skips adding the same dependencies."""
    frameworks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """What the training frameworks call it, by framework (sim.frameworks): the name written
    first, then others they accept. "megatron": Megatron-LM's and Megatron-Bridge's
    cp_comm_type (TransformerEngine's names); "torchtitan": where torchtitan runs it. A
    framework it lacks does not run it."""
    all_to_all_degree: Callable[[Settings, int], int | None] = field(default=lambda settings, n_gpus: None)
    """The GPUs of its all-to-all group with these settings on n GPUs (None: it has no
    all-to-all, or the degree is left to its own choice): the degree a framework's heads must
    divide by."""
    count_ops: Callable[["Scenario"], int] | None = None
    """How many operations the schedule will hold, without building it: the engine
    refuses a run that cannot fit in the machine's memory before it starts (None: not
    known, no such check)."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary}


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
        q, k = c.chunk_matrix("q_chunks", sel), c.chunk_matrix("kv_chunks", sel)
        step = (c.step[sel] % ring).astype(np.float64)
        # each compute's chunks on each side, those inside the map (a padded -1 is none)
        q_in = [(q[:, i] >= 0) & (q[:, i] < work.shape[0]) for i in range(q.shape[1])]
        k_in = [(k[:, j] >= 0) & (k[:, j] < work.shape[1]) for j in range(k.shape[1])]
        for i in range(q.shape[1]):
            for j in range(k.shape[1]):
                ok = q_in[i] & k_in[j]
                if ok.all():
                    grid[q[:, i], k[:, j]] = step
                else:
                    grid[q[ok, i], k[ok, j]] = step[ok]
    grid[work == 0] = np.nan
    return grid


def divisors(n: int) -> list[int]:
    """Every whole number that divides n, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]
