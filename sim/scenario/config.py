"""Validated, immutable configuration: the workload, the hardware and the schedule.

Every field is keyword-only and checked where the object is made, so a bad value fails
with a sentence naming the field (`RingsimError`). Definitions of work, FLOPs, bytes,
compute and link time are those of docs/design.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from sim import implementations
from sim.errors import RingsimError
from sim.hardware.cluster import Hardware
from sim.layouts import NAMES as LAYOUT_NAMES
from sim.layouts import get as get_layout
from sim.layouts.packed import DOC_LAYOUTS, uses_documents
from sim.reasons import clause, refusal
from sim.scenario.documents import bounds as doc_bounds
from sim.scenario.documents import check_spec as check_docs
from sim.scenario.documents import check_window
from sim.scenario.quantities import ACCUM_BYTES, DTYPE_BYTES
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.schemes.base import Settings
from sim.units import positive_ints

PASSES = ("fwd", "bwd", "fwdbwd")
LAYOUTS = LAYOUT_NAMES + DOC_LAYOUTS
GRANULARITIES = ("exact", "tile")
SYNCS = ("step", "buffered")
MAX_SEQ_TOKENS = 2 ** 31
"""The longest sequence: a block's (query, key) pairs, up to seq^2 on one GPU, are counted
exactly in 64-bit integers (2^62 at this length; sim.layouts). It is 200 times the longest
context any published model trains on (10M tokens)."""


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
        if self.seq > MAX_SEQ_TOKENS:
            raise refusal("refused.seq-max", option="seq", seq_tokens=self.seq, most_tokens=MAX_SEQ_TOKENS)
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
            raise refusal("refused.must-divide", field="kv_heads", value=self.kv_heads, other_field="heads",
                          other_value=self.heads)
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
    impl: str = implementations.DEFAULT
    """Whose implementation of the scheme runs (sim.implementations: 'ideal', the fused
    kernel the schemes assume, or a library's: 'te', 'rfa', 'torch', 'usp')."""

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
        self.implementation.check(self)

    @property
    def implementation(self) -> implementations.Implementation:
        """What one step launches as the chosen library runs the scheme (sim.implementations)."""
        return implementations.get(self.scheme, self.impl)

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
                raise refusal("refused.seq-gpus", option="seq", value=self.workload.seq, gpus=n * times)
            doc_bounds(self.workload.docs, self.workload.seq, self.workload.seed)
            return
        chunks = get_layout(self.layout).n_chunks(n) * times
        if self.workload.seq % chunks:
            raise refusal("refused.layout-chunks", option="seq", value=self.workload.seq, chunks=chunks,
                          layout=self.layout, gpus=n,
                          each=clause("refused.each-chunk", times=times) if times > 1 else None, multiple=chunks)

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
                "tile": self.tile, **asdict(get_scheme(self.scheme).resolved_settings(self)),
                # the ideal implementation: the header as it was before implementations were named
                **({} if self.impl == implementations.DEFAULT else {"impl": self.impl})}


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
                        granularity=config.get("granularity", "exact"), tile=config.get("tile", 128),
                        impl=config.get("impl", implementations.DEFAULT), **extra)
    except RingsimError as e:
        raise RingsimError(f"the trace's configuration is not a valid scenario: {e}") from None
    except (KeyError, TypeError, AttributeError) as e:
        raise RingsimError(f"the trace's header has no usable configuration (missing or bad {e})") from None
