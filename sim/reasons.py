"""Reasons as data: what bounds a run, why a plan's candidate wins, loses or does not fit, what
a candidate's variant or a whole step's split is, why the configuration refuses a candidate,
what a block map's cells and chunks are, and why a profiled run is refused, what was assumed of
its ring and what a person should know about reading it, as clauses that rows (and refusals)
carry and any language renders.

A clause is a plain dict, JSON as it is: `{"clause": key, **fields}`. The key names what the
clause says (ENGLISH has every key's sentence); a field is a number (written as NUMBERS and the
`_s` and `_bytes` suffixes say), a word of a closed set (WORDS: a kind of transfer, a part of a
step), a name as the command line spells it (NAMES: a scheme, a layout, a placement; QUOTED: a
path, code, a library's own words, written as they are in any language), a clause, a
list of clauses (joined as JOINERS says) or None (an optional part left out: nothing is written).
A reason is a list of clauses said one after another, REASON_SEPARATOR between them.

`render` writes clauses in a Language (a clause's message, a word, a name, a joiner, and how a
number reads); `english` writes them in English: the simulator's own sentences (the CLI's
output, a sweep's `explanation` column, a plan's --json texts). The dashboard renders the same
clauses from its catalogs (dashboard/explain.py), so nothing reads a sentence back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Union

from sim.errors import RingsimError
from sim.units import fmt_bytes, fmt_s

Clause = dict[str, Any]
"""{"clause": key, **fields}: see the module's docstring."""
Clauses = Union[Clause, list[Clause]]

REASON_SEPARATOR = "; "
"""Between the clauses of a reason."""
LABEL_SEPARATOR = ", "
"""Between the clauses of a label (a whole step's split)."""


def clause(key: str, **fields: Any) -> Clause:
    """A clause saying `key` (a key of ENGLISH) with its fields."""
    return {"clause": key, **fields}


ENGLISH: dict[str, str] = {
    # what bounds a run (sim.trace.metrics.explain_clauses)
    "bound.idle": "nothing to run",
    "bound.exposed": "{kind} exposed {exposed_s}{of_all} ({share} of the makespan)",
    "bound.exposed-across-nodes": "{kind} exposed {exposed_s}{of_all} ({share} of the makespan), NIC-limited: "
                                  "most of its time is on flows between nodes",
    "bound.of-all": " of the {exposed_s} exposed in all",
    "bound.nic": "NIC-limited: the busiest NIC carries flows {share} of the makespan, transfers queue for it",
    "bound.nic-also": "the busiest NIC carries flows {share} of the makespan, transfers queue for it",
    "bound.pcie": "bound by the PCIe {link_kind} ({link}), carrying flows {share} of the makespan",
    "bound.imbalance": "causal imbalance {ratio}x",
    "bound.imbalance-alone": "causal imbalance: the busiest GPU computes {ratio}x the mean",
    "bound.compute-bound": "compute-bound: {computing} of the makespan computing",
    "bound.compute-bound-rate": "compute-bound: {computing} of the makespan computing, at {rate} of the kernel's "
                                "best rate",
    "bound.call-overhead": "bound by per-call costs: {computing} of the makespan computing, but at only {rate} "
                           "of the kernel's best rate (each call's fixed cost and partial wave outweigh its "
                           "small block)",
    "bound.waits": "waits on peers: the busiest GPU computes only {computing} of the makespan",
    "bound.no-fit": "does not fit ({peak_bytes} per GPU, {capacity_gb} GB)",
    # a link of a PCIe node's fabric (sim.hardware.pcie.Fabric.links)
    "link.in-node": "node {node} {resource}{on_lane}",
    "link.lane": " lane {lane}",
    "link.uplink": "switch {switch} uplink {direction}",
    "link.root": "socket {socket} root complex {direction}",
    "link.socket": "socket link {a}->{b}",
    "link.memory": "socket {socket} host memory",
    # why a plan's candidate wins, loses or does not fit (sim.planning.plan)
    "plan.no-fit": "does not fit: {peak_bytes} per GPU over the {limit_bytes} limit ({items})",
    "plan.kept-for-backward": "{kept_bytes} kept for backward by {layers} other layers",
    "plan.kv-cache": "{kept_bytes} K/V cache by {layers} other layers",
    "plan.working": "{working_bytes} working",
    "plan.params": "{params_bytes} parameters",
    "plan.tie": "tied with the next ({scheme}, {variant}): {apart} apart, within the model's own error; this one "
                "has {diffs}; a calibrated profile of your GPUs (ringsim calibrate) or both runs measured would "
                "separate them",
    "plan.same": "the same memory and exposed communication",
    "plan.less-memory": "{memory_bytes} less memory per GPU",
    "plan.more-memory": "{memory_bytes} more memory per GPU",
    "plan.less-exposed": "{exposed_s} less exposed communication (the part a slower network would stretch)",
    "plan.more-exposed": "{exposed_s} more exposed communication (the part a slower network would stretch)",
    "plan.fastest": "fastest that fits, {ahead} ahead of the next ({scheme}, {variant})",
    "plan.only": "the only candidate that fits",
    "plan.slower": "{slower} slower than the fastest",
    "plan.times": "{ratio}x the fastest",
    "plan.replicated": "K/V heads replicated {times}x by a Ulysses degree above the {kv_heads} K/V heads",
    "plan.holds-all": "holds the whole K/V of the sequence",
    "plan.holds-group": "holds a head group of the K/V of the sequence",
    # a candidate's variant (sim.planning.plan, sim.planning.compare)
    "variant.layout": "{layout} layout",
    "variant.ring": "{layout}",
    "variant.one-gather": "one gather",
    "variant.head-groups": "{groups} head groups",
    "variant.degree": "degree {degree}",
    "variant.hybrid": "{ulysses} x {ring}, {placement}, {layout}",
    "variant.split": "{ulysses} x {ring}",
    "variant.split-placed": "{ulysses} x {ring} {placement}",
    "variant.impl": "{impl}",
    # why the configuration refuses a candidate (RingsimError.reason)
    "refused.heads": "ulysses degree {degree} does not divide the {heads} query heads",
    "refused.kv-heads": "ulysses degree {degree} and {kv_heads} K/V heads: one must divide the other (K/V heads "
                        "are replicated when the degree is larger)",
    "refused.chunks": "sequence length {seq} does not divide into {chunks} chunks for {layout} on {ranks} ranks",
    "refused.gather-chunks": "sequence length {seq} does not divide into {chunks} equal chunks (allgather on {gpus} "
                             "GPUs); use a multiple of {multiple}",
    "refused.shards": "sequence length {seq} does not divide into {shards} equal shards; use a multiple of "
                      "{multiple}",
    "refused.head-count": "{reason} (the head count limits Ulysses)",
    "refused.impl-scheme": "{impl} has no {scheme} scheme; the {scheme} scheme is implemented by {libraries}",
    "refused.impl-layout": "{impl} has no {layout} layout; it runs {layouts}",
    "refused.impl-causal": "{impl} runs the {layout} layout only under a causal mask",
    "refused.impl-full": "{impl} runs the {layout} layout only without a causal mask",
    # why the scenario refuses an option's value (RingsimError.reason): `option`, and `other` where
    # it names a second, is the scenario option (sim.scenario.schema) it is about, for a page to say
    # it under that control; `field` and `other_field` a setting as the sentence spells it, a
    # dataclass's field (kv_heads) or its flag once sim.scenario.resolve names the option (--kv-heads)
    "refused.must-divide": "{field} ({value}) must divide {other_field} ({other_value})",
    "refused.head-groups": "head groups ({value}) must divide the {other_value} K/V heads",
    "refused.layout-chunks": "sequence length {value} does not divide into {chunks} equal chunks ({layout} layout "
                             "on {gpus} GPUs{each}); use a multiple of {multiple}",
    "refused.each-chunk": ", each chunk {times} ways",
    "refused.seq-gpus": "sequence length {value} does not divide over {gpus} GPUs",
    "refused.seq-max": "sequence length {seq_tokens} is longer than the {most_tokens} tokens ringsim counts exactly",
    "refused.degrees": "ulysses degree {value} x ring degree {other_value} = {product}, not the {gpus} GPUs",
    "refused.ulysses-gpus": "ulysses degree {value} does not divide the {gpus} GPUs",
    "refused.ring-gpus": "ring degree {value} does not divide the {gpus} GPUs",
    "refused.custom-gpu": "a custom GPU needs its achieved {unit}",
    "refused.custom-link": "a custom link needs its bandwidth in {unit}",
    "refused.fraction": "{field} must be in (0, 1], got {value}",
    "refused.positive": "{field} must be a positive finite number, got {value}",
    "refused.not-negative": "{field} must be a non-negative finite number, got {value}",
    "refused.docs-exceed": "the documents ({total_tokens} tokens) exceed the sequence of {seq_tokens} tokens",
    "refused.docs-fill": "the documents ({total_tokens} tokens) do not fill the sequence of {seq_tokens} tokens: "
                         "the list repeats whole, so its sum must divide the sequence",
    "refused.docs-length": "document {doc} of {what} is not a length: {typed}",
    "refused.docs-zero": "document {doc} of {what} has length zero",
    "refused.docs-negative": "document {doc} of {what} has a negative length ({typed})",
    "refused.docs-takes": "{distribution} takes {allowed}; got {typed}",
    "refused.docs-needs": "{distribution} needs {allowed}",
    "refused.docs-unknown": "unknown document distribution {typed}; give a list of lengths, {lognormal} or {file}",
    "refused.docs-sigma": "{parameter} must be a number, got {typed}",
    "refused.docs-sigma-range": "{parameter} must be between 0 and 10, got {typed}",
    "docs.list": "the document list",
    "docs.sample": "the sample",
    "docs.file": "{path}",
    # why a whole-step candidate wins or loses, and its split (sim.training.plan)
    "step.unfit": "does not fit: {memory_gb} GB per GPU of {limit_gb} GB",
    "step.fastest": "fastest",
    "step.tie": "within {within} of the fastest, a tie for the model",
    "step.slower": "{ratio}x the fastest's time",
    "step.share": "{part} {share} of the step",
    "split.degrees": "TP {tp} CP {cp} PP {pp} DP {dp}",
    "split.zero": "ZeRO-{zero}",
    "split.recompute": "recompute {recompute}",
    "split.scheme": "CP {scheme}",
    "split.overlapped": "TP overlapped",
    "split.virtual": "{stages} virtual stages",
    # what a block map's cells and chunks are (sim.schemes.base.BlockMap)
    "blocks.ring-step": "ring step",
    "blocks.kernel-call": "kernel call on its rank (in order)",
    "blocks.every-pair": "step (every pair at once, {ulysses} GPUs on 1/{ulysses} of the heads each)",
    "blocks.rings": "ring step ({ulysses} rings side by side, 1/{ulysses} of the heads each)",
    "blocks.chunk": "chunk (token order)",
    "blocks.stripe": "stripe (tokens ≡ r mod N)",
    "blocks.shard": "GPU shard (packed documents)",
    # a profiled run the importer refuses, what it assumed of its ring, what it did not match and
    # what a person should know about the reading (sim.profiler, sim.calibration.from_profiler)
    "profiler.unreadable": "cannot read trace {path}: {detail}",
    "profiler.gzip-cut": "{path}: the gzip stream ends early (a truncated or partly copied file)",
    "profiler.gzip-bad": "{path}: not a readable gzip file ({detail})",
    "profiler.header-over": "{path}: over {limit} bytes after traceEvents: not a Kineto trace",
    "profiler.no-events-early": "{path}: no traceEvents in its first {size} bytes: not a Kineto trace",
    "profiler.event-over": "{path}: an event over {limit} bytes: not a trace torch.profiler wrote",
    "profiler.not-event": "{path}: traceEvents holds something that is not an event",
    "profiler.no-events": "{path}: no traceEvents: not a Kineto (torch.profiler) trace",
    "profiler.ends-inside": "{path}: the file ends inside traceEvents (truncated?)",
    "profiler.json-after": "{path}: not valid JSON after traceEvents (truncated?): {detail}",
    "profiler.not-object": "{path}: not a Kineto trace (its JSON is not an object)",
    "profiler.events-not-list": "{path}: traceEvents is not a list: not a Kineto trace",
    "profiler.event-json": "{path}: an event is not valid JSON: {detail}",
    "profiler.event-type": "{path}: traceEvents holds a {detail}, not an event",
    "profiler.negative-duration": "{path}: an event lasts {duration_us} microseconds",
    "profiler.bad-time": "{path}: an event's {entry} is {detail}, not a time in microseconds",
    "profiler.no-activities": "{path}: no kernels, operators or runtime calls: not a torch.profiler trace (or "
                              "recorded with no activities)",
    "profiler.empty-folder": "{path}: no .json or .json.gz trace files in this folder",
    "profiler.no-such-path": "{path}: no such file or folder",
    "profiler.no-files": "no trace files given",
    "profiler.world-size": "{path}: distributedInfo gives world size {world}",
    "profiler.rank-of-world": "{path}: distributedInfo gives rank {rank} of a world of {world}",
    "profiler.no-rank": "{path}: no distributedInfo rank and none in the file's name: cannot tell the ranks apart",
    "profiler.mixed-worlds": "ranks of different runs mixed: world sizes {worlds}",
    "profiler.world-of": "{world} ({path})",
    "profiler.rank-twice": "two files of rank {rank}: {path} and {other_path}",
    "profiler.mixed-groups": "ranks of different runs mixed: their process groups differ ({code})",
    "profiler.rank-missing": "rank {rank_list} of {world} missing (given {given_list}); pass {code} to read only "
                             "these",
    "profiler.ranks-missing": "ranks {rank_list} of {world} missing (given {given_list}); pass {code} to read "
                              "only these",
    "profiler.rank-read": "rank {rank_list} of {world} read, {missing} not given",
    "profiler.ranks-read": "ranks {rank_list} of {world} read, {missing} not given",
    "profiler.mixed-start": "ranks of different runs mixed: rank {rank}'s trace starts {lead} s from rank {ref}'s",
    "profiler.mixed-clock": "ranks of different runs mixed: rank {rank}'s clock is {lead} s from rank {ref}'s by "
                            "their {how}",
    "profiler.clock-aligned": "rank {rank}'s clock aligned to rank {ref}'s by {shift} ms ({how}){drift}",
    "profiler.clock-drift": ": more than synchronized hosts drift; check these files are of one run",
    "profiler.by-collectives": "collective kernels' ends",
    "profiler.by-step": "ProfilerStep#{step}'s start",
    "profiler.needs-pyarrow": "Parquet tables need pyarrow: {code}",
    "profiler.not-parquet": "cannot read {path} as a Parquet table: {detail}",
    "profiler.not-our-table": "{path}: not a table written by {code}",
    "profiler.bad-metadata": "{path}: its run's metadata is unreadable ({detail})",
    "profiler.no-columns": "{path}: columns {columns} missing",
    "profiler.no-attention": "no attention calls with recorded shapes in the trace: record it with {code} around "
                             "the attention{shapeless}",
    "profiler.shapeless": " ({calls} attention calls had no Input Dims)",
    "profiler.shapeless-left-out": "{calls} attention calls without Input Dims were left out",
    "profiler.no-transfers": "no transfers between ranks in the trace: not a context-parallel ring (world size "
                             "{world})",
    "profiler.head-shapes": "attention calls of {count} head shapes (batch, heads, kv heads, head dim): {shapes}; "
                            "the most common is played",
    "profiler.no-step": "no ProfilerStep on rank {rank_list}: the whole trace taken as one iteration (-1)",
    "profiler.no-steps": "no ProfilerStep on ranks {rank_list}: the whole trace taken as one iteration (-1)",
    "profiler.odd-messages": "point-to-point messages of {sizes} bytes, not the K/V block's {block} (or its K or V "
                             "half)",
    "profiler.extra-steps": "{count} rank-iterations hold more steps than a ring of {n} ranks (first: rank {rank}, "
                            "iteration {iteration}, {phase}); their extra calls are played as they fall",
    "profiler.assumed-dtype": "dtype: the attention calls' input type is not in the table; {dtype} assumed",
    "profiler.assumed-full-mask": "mask: every block full on every step, a full mask; layout {layout} assumed "
                                  "(under a full mask every layout does the same work)",
    "profiler.assumed-allgather": "torch's allgather rotation played as the ring (its one all-gather behind the "
                                  "first step; the same bytes; exact at 2 ranks)",
    "profiler.note": "{detail}",
    "profiler.the-trace": "the trace",
    "profiler.no-compute-points": "{source}: no attention call with a positive time to fit compute to",
    "profiler.no-hop-points": "{source}: no transfer with a known size to fit the link to (record with {code}, or "
                              "NCCL's message sizes)",
    "profiler.no-hop-time": "{source}: every hop took no time; the link cannot be fitted",
}
"""Every clause's sentence in English, by key; a placeholder is one of the clause's fields."""

WORDS: dict[str, dict[str, str]] = {
    "kind": {"kv": "K/V ring", "dkv": "dK/dV ring", "ag": "all-gather", "rs": "reduce-scatter",
             "a2a": "all-to-all", "pp": "pipeline send"},
    "link_kind": {"switch-uplink": "switch uplink", "root-complex": "root complex", "socket-link": "socket link",
                  "host-memory": "host memory"},
    "direction": {"up": "up", "down": "down", "in": "in", "out": "out"},
    "part": {"gemm_s": "GEMMs", "attention_s": "attention", "elementwise_s": "elementwise work",
             "tp_comm_s": "TP communication", "recompute_s": "recomputation", "pp_bubble_s": "the pipeline bubble",
             "pp_comm_s": "pipeline sends", "dp_comm_s": "DP communication", "optimizer_s": "the optimizer"},
    "recompute": {"none": "none", "selective": "selective", "full": "full"},
    "phase": {"fwd": "fwd", "bwd": "bwd"},
}
"""The fields whose value is one of a closed set of words: each value's English. A kind of
transfer (sim.trace.format), a kind and a direction of PCIe link (sim.hardware.pcie), a part
of a step and a recomputation (sim.training), a pass of a profiled run's attention (sim.profiler)."""

QUOTED = ("path", "other_path", "source", "detail", "entry", "code", "columns", "dtype", "rank_list", "given_list")
"""The fields written as they are in every language: a file's path as it was given, a library's
or the file's own words (an exception's text, an entry of the file), code to type, a list of
names or ranks (sim.profiler)."""

NAMES = ("scheme", "layout", "placement", "impl", "field", "other_field", "unit", "typed", "distribution",
         "allowed", "lognormal", "file", "parameter", *QUOTED)
"""The fields whose value is a name as the command line spells it, written as it is in English
(an implementation: its library's name for `--impl`, sim.implementations); a setting as a
refusal spells it, a unit, and what the user typed (a document's length, a distribution and its
parameters, a file's path), as typed; and the QUOTED ones."""

OPTIONAL = ("of_all",)
"""Fields a clause may leave out (one written before the field was added, as a saved row keeps
it): written as nothing, as a None is."""

JOINERS: dict[str, str] = {"items": ", ", "diffs": " and ", "layouts": ", ", "libraries": ", ", "worlds": ", "}
"""What joins the clauses of a list field, by the field's name, in English."""

NUMBERS: dict[str, Callable[[Any], str]] = {
    **dict.fromkeys(("share", "computing", "rate", "within"), lambda v: f"{v:.0%}"),
    **dict.fromkeys(("ahead", "apart", "slower"), lambda v: f"{v:.1%}"),
    "ratio": lambda v: f"{v:.2f}",
    **dict.fromkeys(("capacity_gb", "limit_gb"), lambda v: f"{v:g}"),
    "memory_gb": lambda v: f"{v:.1f}",
    **dict.fromkeys(("total_tokens", "seq_tokens", "most_tokens"), lambda v: f"{v:,}"),
    "lead": lambda v: f"{v:+.0f}",
    "shift": lambda v: f"{v:+.3f}",
}
"""How a number field is written, by name; seconds (`_s`) and bytes (`_bytes`) with their unit
(sim.units), any other number (a count, a degree, an index) as a whole number."""


def number_text(name: str, value: Any) -> str:
    """A number field as the simulator writes it (digits and a decimal point)."""
    if name in NUMBERS:
        return NUMBERS[name](value)
    if name.endswith("_s"):
        return fmt_s(value)
    if name.endswith("_bytes"):
        return fmt_bytes(value)
    return str(value)


@dataclass(frozen=True)
class Language:
    """What renders clauses in one language."""

    message: Callable[[str], str]
    """A clause's key -> its sentence, with a {placeholder} for each field."""
    word: Callable[[str, str], str]
    """(field, value) of a WORDS field -> the word."""
    joiner: Callable[[str], str]
    """A list field's name -> what joins its clauses."""
    name: Callable[[str, str], str] = lambda field, value: value
    """(field, value) of a NAMES field -> how the language writes the name."""
    number: Callable[[str], str] = lambda text: text
    """A number as the simulator writes it (number_text) -> as the language writes it."""
    seconds: Callable[[float], str] | None = None
    """A time field (`_s`) in seconds -> the time as the language writes it; None: as the
    simulator writes it (sim.units.fmt_s), then `number`."""


def render(clauses: Clauses, language: Language, separator: str = REASON_SEPARATOR) -> str:
    """`clauses` (one, or a list said one after another) in `language`."""
    if isinstance(clauses, dict):
        return _render(clauses, language)
    return separator.join(_render(c, language) for c in clauses)


def _render(c: Clause, language: Language) -> str:
    fields = dict.fromkeys(OPTIONAL, "")
    for field, value in c.items():
        if field == "clause":
            continue
        if value is None:
            fields[field] = ""
        elif isinstance(value, dict):
            fields[field] = _render(value, language)
        elif isinstance(value, list):
            fields[field] = language.joiner(field).join(_render(x, language) for x in value)
        elif field in WORDS:
            fields[field] = language.word(field, value)
        elif field in NAMES:
            fields[field] = language.name(field, str(value))
        elif language.seconds is not None and field.endswith("_s") and field not in NUMBERS:
            fields[field] = language.seconds(value)
        else:
            fields[field] = language.number(number_text(field, value))
    return language.message(c["clause"]).format(**fields)


ENGLISH_LANGUAGE = Language(message=ENGLISH.__getitem__, word=lambda field, value: WORDS[field][value],
                            joiner=JOINERS.__getitem__)


def english(clauses: Clauses, separator: str = REASON_SEPARATOR) -> str:
    """`clauses` in English: the simulator's own sentence."""
    return render(clauses, ENGLISH_LANGUAGE, separator)


def refusal(key: str, **fields: Any) -> RingsimError:
    """The RingsimError of a configuration refused for the reason `key` (a `refused.` clause):
    its message the English, its `reason` the clause."""
    c = clause(key, **fields)
    return RingsimError(english(c), reason=c)
