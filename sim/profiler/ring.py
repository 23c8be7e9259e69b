"""The ring in a profiled run: its attention calls and transfers, step by step, and the
configuration they tell.

A context-parallel attention pass (docs/design.md, facts 2 and 8) is, on every rank, N
steps of attention against a K/V block, the block of the next step travelling while
the current one computes: N - 1 hops of point-to-point transfers (the project's ring,
ring-flash-attention, TransformerEngine's p2p), of a permute all-to-all (torch
`context_parallel` with the "alltoall" rotation) or one all-gather (its "allgather"
rotation). `find_ring` reads these from an imported run (sim.profiler.reader.Run), per
rank and iteration:

- attention calls: GPU attention kernels where the rank has any (their shapes from the
  CPU op that launched them, by external id), else the CPU attention operators; a
  call that encloses another (torch's `scaled_dot_product_attention` around the
  operator, or DTensor's call around the whole ring of `context_parallel`) is not a
  block of the ring;
- transfers: NCCL point-to-point and collective kernels, or gloo's own spans
  (`gloo:send`, `gloo:recv`, `gloo:all_to_all`, `gloo:all_gather`, ...: from post to
  completion), with their bytes (the recorded message size, else the tensor's dims
  times its element size);
- steps: a ring posts the hop of step k before it computes step k, and computes step
  k + 1 once the block of hop k has arrived; so a call begins a new step when a post,
  an arrival (a receive's end, or an explicit wait op) lies between its start and the
  previous call's. After an all-gather every block is there: each later call is a step
  of its own (torch computes one call per step). The pieces of one step (packed
  documents) are told apart only when no arrival falls between them.

The configuration: ranks (the run's world size), tokens per rank (the queries of the
first call, the rank's own block), batch, heads, K/V heads and head dim from the calls'
Input Dims (heads-first for torch's SDPA operators, tokens-first for the flash
operators: `ATTENTION_OPS`), the dtype from the input type, the pass from the kinds of
calls. The mask and layout from the blocks' extents where the trace keeps no mask
argument: half blocks after the first step are the zigzag layout (torch's head-tail
balancing is the same), skipped steps the contiguous one under a causal mask, blocks
one token short the striped one; every block full on every step is a full mask (on
which the layout does no change to the work: `assumed` says so). A rank's attention
phase runs from its first post or call to the end of its last step's work or transfer;
an iteration's measured time is the longest of its ranks' phases: the simulator starts
every rank at once, so the skew with which the ranks entered the attention (from a
barrier, or the work before it) is kept apart (`entry_skew_s`); the ProfilerStep spans
around it are kept for reference.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sim.profiler.reader import Events, Run
from sim.reasons import Clause, clause, english, refusal
from sim.scenario.config import Scenario, Workload
from sim.scenario.quantities import BWD_FLOPS_FACTOR
from sim.schemes import DEFAULT as RING  # the ring scheme is the default one (sim.schemes)

ATTENTION_KINDS = {"attention_fwd": "fwd", "attention_bwd": "bwd",
                   "cpu_attention_fwd": "fwd", "cpu_attention_bwd": "bwd"}
"""The reader's kinds of attention calls (sim.profiler.kernels) and their pass."""

ATTENTION_OPS: dict[str, tuple[int, str]] = {
    # name: (index of q among the inputs, "bhsd" heads-first or "bshd" tokens-first); the
    # signatures of torch 2.13's native_functions.yaml and of flash-attn's custom ops
    "aten::_scaled_dot_product_flash_attention_for_cpu": (0, "bhsd"),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (1, "bhsd"),
    "aten::_scaled_dot_product_flash_attention": (0, "bhsd"),
    "aten::_scaled_dot_product_flash_attention_backward": (1, "bhsd"),
    "aten::_scaled_dot_product_efficient_attention": (0, "bhsd"),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, "bhsd"),
    "aten::_scaled_dot_product_cudnn_attention": (0, "bhsd"),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, "bhsd"),
    "aten::scaled_dot_product_attention": (0, "bhsd"),
    "aten::_flash_attention_forward": (0, "bshd"),
    "aten::_flash_attention_backward": (1, "bshd"),
    "aten::_efficient_attention_forward": (0, "bshd"),
    "aten::_efficient_attention_backward": (1, "bshd"),
    "flash_attn::_flash_attn_forward": (0, "bshd"),
    "flash_attn::_flash_attn_backward": (1, "bshd"),
}

GPU_TRANSFER_KINDS = {"p2p_send": "send", "p2p_recv": "recv", "p2p": "sendrecv", "all_to_all": "all_to_all",
                      "all_gather": "all_gather", "reduce_scatter": "reduce_scatter"}
"""The reader's kinds of communication kernels a ring's blocks travel by."""

GLOO_TRANSFERS = {"gloo:send": "send", "gloo:recv": "recv", "gloo:all_to_all": "all_to_all",
                  "gloo:all_gather": "all_gather", "gloo:reduce_scatter": "reduce_scatter"}
"""gloo's spans of a transfer, from its post to its completion (torch's ProcessGroupGloo
records them as user annotations on the posting or the worker thread)."""

WAIT_OPS = ("_c10d_functional::wait_tensor", "c10d::wait")
"""Ops a rank blocks in until a block has arrived."""

ELEM_BYTES = {"float": 4, "float32": 4, "fp32": 4, "double": 8, "c10::bfloat16": 2, "bfloat16": 2, "bf16": 2,
              "c10::half": 2, "half": 2, "float16": 2, "fp16": 2}
SIM_DTYPE = {"float": "fp32", "float32": "fp32", "fp32": "fp32", "c10::bfloat16": "bf16", "bfloat16": "bf16",
             "bf16": "bf16", "c10::half": "fp16", "half": "fp16", "float16": "fp16", "fp16": "fp16"}


@dataclass(frozen=True)
class AttentionCall:
    """One attention call of a step: who, when, and its extent."""

    rank: int
    iteration: int
    step: int
    kind: str
    """fwd or bwd."""
    start_s: float
    dur_s: float
    batch: int
    heads: int
    kv_heads: int
    q_tokens: int
    kv_tokens: int
    head_dim: int
    dtype: str
    name: str
    causal: bool | None = None
    """Whether the call ran under the causal mask: set by `find_ring` from the layout."""
    busy_s: float = 0.0
    """The call's time with its share of its step's other work on its stream (the merge
    of its result, the ops between its step's calls), shared in proportion to the calls'
    times: a step as ringsim's own traces time it (its compute span holds the merge)."""

    @property
    def pairs(self) -> float:
        """Unmasked (query, key) pairs per head and batch item (top-left causal alignment,
        torch's)."""
        if not self.causal:
            return float(self.q_tokens * self.kv_tokens)
        q, k = self.q_tokens, self.kv_tokens
        if k >= q:
            return q * (q + 1) / 2.0
        return k * (k + 1) / 2.0 + (q - k) * float(k)

    @property
    def flops(self) -> float:
        fwd = 4.0 * self.head_dim * self.pairs * self.heads * self.batch
        return fwd * (BWD_FLOPS_FACTOR if self.kind == "bwd" else 1.0)


@dataclass(frozen=True)
class Transfer:
    """One transfer of a block: posted at `start_s`, complete on this rank at `end_s`."""

    rank: int
    iteration: int
    hop: int
    """Its hop on this rank in this iteration (0, 1, ...); a post of several ops is one hop."""
    op: str
    """send, recv, sendrecv (an NCCL batch of both), all_to_all, all_gather or reduce_scatter."""
    start_s: float
    end_s: float
    bytes: float


@dataclass(frozen=True)
class RingConfig:
    """The configuration a run's ring tells, in the simulator's words."""

    n_gpus: int
    seq: int
    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    causal: bool
    pass_: str
    layout: str
    scheme: str
    transport: str
    """How blocks travelled: p2p, alltoall or allgather."""
    assumed_clauses: tuple[Clause, ...] = ()
    """What the trace could not tell and was assumed, as sim.reasons clauses."""

    @property
    def assumed(self) -> tuple[str, ...]:
        """What was assumed, in English words."""
        return tuple(english(c) for c in self.assumed_clauses)

    @property
    def tokens_per_rank(self) -> int:
        return self.seq // self.n_gpus

    def workload(self) -> Workload:
        return Workload(batch=self.batch, seq=self.seq, heads=self.heads, kv_heads=self.kv_heads,
                        head_dim=self.head_dim, dtype=self.dtype, causal=self.causal, pass_=self.pass_)

    def scenario(self, **hardware: Any) -> Scenario:
        return Scenario(workload=self.workload(), n_gpus=self.n_gpus, scheme=self.scheme, layout=self.layout,
                        overlap=True, granularity="exact", **hardware)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pass"] = d.pop("pass_")
        del d["assumed_clauses"]
        d["assumed"] = list(self.assumed)
        return d


@dataclass
class RingRun:
    """The ring found in a run (module docstring)."""

    config: RingConfig
    calls: list[AttentionCall]
    transfers: list[Transfer]
    phases: dict[tuple[int, int], tuple[float, float]]
    """(rank, iteration) -> (start, end) of the rank's attention phase, seconds."""
    profiler_steps_s: dict[int, float] = field(default_factory=dict)
    """Iteration -> its ProfilerStep span, the longest over ranks (reference only)."""
    unmatched_clauses: list[Clause] = field(default_factory=list)
    """What could not be matched to the ring, as sim.reasons clauses."""

    @property
    def unmatched(self) -> list[str]:
        """What could not be matched to the ring, in English words."""
        return [english(c) for c in self.unmatched_clauses]

    @property
    def iterations(self) -> list[int]:
        return sorted({it for _, it in self.phases})

    def iteration_s(self) -> dict[int, float]:
        """Each iteration's attention phase: the longest of its ranks' (module docstring)."""
        out: dict[int, float] = {}
        for (_, it), (start, end) in self.phases.items():
            out[it] = max(out.get(it, 0.0), end - start)
        return dict(sorted(out.items()))

    def waiting_s(self) -> dict[tuple[int, int], float]:
        """(rank, iteration) -> the time of its phase its stream was not working: its waits
        for blocks still in flight (exposed communication) and for slower ranks (idle), the
        overlap the run really got."""
        busy: dict[tuple[int, int], float] = {}
        for c in self.calls:
            busy[(c.rank, c.iteration)] = busy.get((c.rank, c.iteration), 0.0) + c.busy_s
        return {key: max(0.0, (end - start) - busy.get(key, 0.0)) for key, (start, end) in sorted(self.phases.items())}

    def entry_skew_s(self) -> dict[int, float]:
        """Each iteration's spread of its ranks' phase starts: how far apart they entered
        the attention, for reasons before it (kept apart from the phase)."""
        starts: dict[int, list[float]] = {}
        for (_, it), (start, _) in self.phases.items():
            starts.setdefault(it, []).append(start)
        return {it: max(v) - min(v) for it, v in sorted(starts.items())}

    def measured(self) -> dict[str, Any]:
        """The iterations' attention-phase times: median, range, each; the median rank's
        phase over every rank and iteration (what a rank takes when it waits on no slower
        one); the median rank's time waiting (`waiting_s`); and the ranks' entry skew."""
        per = self.iteration_s()
        times = list(per.values())
        return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                "iterations": list(per), "iterations_s": times, "n": len(times),
                "rank_median_s": statistics.median(e - s for s, e in self.phases.values()),
                "waiting_median_s": statistics.median(self.waiting_s().values()),
                "entry_skew_median_s": statistics.median(self.entry_skew_s().values())}

    def steps(self) -> list[dict[str, Any]]:
        """Per rank, iteration and step: its calls' time and extents, and the bytes
        posted at that step."""
        rows: dict[tuple[int, int, int, str], dict[str, Any]] = {}
        for c in self.calls:
            row = rows.setdefault((c.rank, c.iteration, c.step, c.kind),
                                  {"rank": c.rank, "iteration": c.iteration, "step": c.step, "kind": c.kind,
                                   "calls": 0, "compute_s": 0.0, "flops": 0.0, "blocks": []})
            row["calls"] += 1
            row["compute_s"] += c.dur_s
            row["flops"] += c.flops
            row["blocks"].append([c.q_tokens, c.kv_tokens, bool(c.causal)])
        return [rows[k] for k in sorted(rows)]

    def describe(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "measured": self.measured(),
                "profiler_steps_s": self.profiler_steps_s, "calls": len(self.calls),
                "transfers": len(self.transfers),
                "transfer_bytes": sorted({t.bytes for t in self.transfers}),
                "steps": self.steps(), "unmatched": self.unmatched}


# ---------------------------------------------------------------- reading the events

def _dims(text: Any) -> list:
    if not isinstance(text, str) or not text:
        return []
    try:
        dims = json.loads(text)
    except ValueError:
        return []
    return dims if isinstance(dims, list) else []


def _dtype_name(text: Any) -> str:
    """The element type's name as the reader keeps it (`dtype`: 'float', 'c10::BFloat16',
    or a list of Input types as JSON), lower case; '' where unknown."""
    if not isinstance(text, str):
        return ""
    t = text.strip()
    if t.startswith("["):
        try:
            types = json.loads(t)
        except ValueError:
            return ""
        t = next((x for x in types if isinstance(x, str) and x.lower() in ELEM_BYTES), "")
    return t.lower()


def _kernel_dtype(name: str) -> str:
    """The element type a GPU attention kernel's templated name spells (FlashAttention's
    `cutlass::bfloat16_t` / `cutlass::half_t`), '' where it spells none."""
    low = name.lower()
    if "bfloat16" in low or "bf16" in low:
        return "bf16"
    if "half" in low or "fp16" in low or "f16" in low:
        return "fp16"
    return ""


def _tensor_elems(dims: list) -> int:
    """Elements of the first tensor among Input Dims (a TensorList's first tensor)."""
    for d in dims:
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            return int(np.prod(d))
        if isinstance(d, list) and d and isinstance(d[0], list):
            return _tensor_elems(d)
    return 0


def _shape(name: str, dims: list) -> tuple[int, int, int, int, int, int] | None:
    """(batch, heads, kv_heads, q_tokens, kv_tokens, head_dim) of an attention op's inputs."""
    where = ATTENTION_OPS.get(name)
    if where is None or len(dims) < where[0] + 3:
        return None
    q, k = dims[where[0]], dims[where[0] + 1]
    if not (isinstance(q, list) and isinstance(k, list) and len(q) == 4 and len(k) == 4):
        return None
    if where[1] == "bhsd":
        (b, h, lq, d), (_, hk, lk, _) = q, k
    else:
        (b, lq, h, d), (_, lk, hk, _) = q, k
    return int(b), int(h), int(hk), int(lq), int(lk), int(d)


def _nested_wrappers(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which spans enclose another of the spans (they are wrappers, not blocks)."""
    order = np.lexsort((-end, start))
    wrapper = np.zeros(len(start), dtype=bool)
    open_: list[int] = []
    for i in order.tolist():
        while open_ and end[open_[-1]] <= start[i]:
            open_.pop()
        if open_ and end[i] <= end[open_[-1]]:
            for j in open_:
                wrapper[j] = True
        open_.append(i)
    return wrapper


def _calls(ev: Events, rows: np.ndarray, gpu: bool, launchers: "_Launchers | None") -> tuple[list[dict], int]:
    """The attention calls among `rows` (one rank's events of one iteration); (calls,
    how many had no shape)."""
    kinds = np.array([ATTENTION_KINDS.get(str(k), "") for k in ev.kind[rows]])
    pick = rows[(kinds != "") & (ev.on_gpu[rows].astype(bool) == gpu)]
    if not len(pick):
        return [], 0
    if not gpu:
        pick = pick[~_nested_wrappers(ev.start_s[pick], ev.end_s[pick])]
    out, missing = [], 0
    for i in pick.tolist():
        if gpu:
            shape = launchers.shape(i) if launchers is not None else None
            dtype = (shape[6] if shape else "") or _kernel_dtype(str(ev.name[i]))
            shape = shape[:6] if shape else None
        else:
            shape = _shape(str(ev.name[i]), _dims(ev.input_dims[i]))
            dtype = _dtype_name(ev.dtype[i])
        if shape is None:
            missing += 1
            continue
        out.append({"i": i, "kind": ATTENTION_KINDS[str(ev.kind[i])], "shape": shape, "dtype": dtype})
    return out, missing


class _Launchers:
    """The shape and dtype of the CPU attention op that launched each kernel of a rank: by
    the kernel's External id where the trace gives it one, else through its launch (the
    runtime call of the same correlation) and the innermost attention op with a shape
    around that call on its thread."""

    def __init__(self, ev: Events, rank_rows: np.ndarray):
        self.ev = ev
        cpu = rank_rows[~ev.on_gpu[rank_rows].astype(bool)]
        self.by_ext: dict[int, tuple] = {}
        ops: dict[int, list[tuple[float, float, tuple]]] = {}
        for i in cpu[np.isin(ev.name[cpu], list(ATTENTION_OPS))].tolist():
            shape = _shape(str(ev.name[i]), _dims(ev.input_dims[i]))
            if shape is None:
                continue
            got = (*shape, _dtype_name(ev.dtype[i]))
            if int(ev.external_id[i]) >= 0:
                self.by_ext[int(ev.external_id[i])] = got
            ops.setdefault(int(ev.stream[i]), []).append((float(ev.start_s[i]), float(ev.end_s[i]), got))
        self.ops = {k: sorted(v, key=lambda x: x[0]) for k, v in ops.items()}
        launches = cpu[(ev.kind[cpu] == "runtime") & (ev.correlation[cpu] >= 0)]
        self.launch = {int(ev.correlation[i]): (int(ev.stream[i]), float(ev.start_s[i])) for i in launches.tolist()}

    def shape(self, i: int) -> tuple | None:
        got = self.by_ext.get(int(self.ev.external_id[i]))
        if got is not None:
            return got
        at = self.launch.get(int(self.ev.correlation[i]))
        if at is None:
            return None
        around = [op for op in self.ops.get(at[0], []) if op[0] <= at[1] <= op[1]]
        return max(around, key=lambda op: op[0])[2] if around else None


def _transfers(ev: Events, rows: np.ndarray, gpu: bool, stream: int) -> list[dict]:
    """The transfers among `rows`, each with the moment it was posted: on the calls'
    stream (`stream`), the start of the last communication op that began at or before
    it (gloo runs a collective on a worker thread, which picks it up later; a GPU kernel
    starts when its stream reaches it), else its own start."""
    own = rows[(ev.stream[rows] == stream) & (ev.kind[rows] == "cpu_comm")] if not gpu else rows[:0]
    own_starts = np.sort(ev.start_s[own])
    out = []
    if gpu:
        rows = rows[ev.on_gpu[rows].astype(bool) & np.isin(ev.kind[rows], list(GPU_TRANSFER_KINDS))]
    else:
        rows = rows[np.isin(ev.name[rows], list(GLOO_TRANSFERS))]
    for i in rows.tolist():
        if gpu:
            if not ev.on_gpu[i]:
                continue
            op = GPU_TRANSFER_KINDS.get(str(ev.kind[i]))
        else:
            op = GLOO_TRANSFERS.get(str(ev.name[i]))
        if op is None:
            continue
        # the recorded message size, else the elements of its tensor (sized once the dtype is known)
        nbytes = float(ev.msg_bytes[i]) if ev.msg_bytes[i] > 0 else 0.0
        elems = 0 if nbytes else _tensor_elems(_dims(ev.input_dims[i]))
        start = float(ev.start_s[i])
        k = int(np.searchsorted(own_starts, start, side="right"))
        posted = float(own_starts[k - 1]) if k else start
        out.append({"i": i, "op": op, "start": start, "posted": posted, "end": float(ev.end_s[i]), "bytes": nbytes,
                    "elems": elems, "dtype": _dtype_name(ev.dtype[i])})
    return out


def _assign_hops(transfers: list[dict], call_starts: list[float]) -> None:
    """Number one rank's hops in place: transfers posted with no attention call between
    them are one hop (a ring posts a hop's sends and receives together, and the next hop
    after a step's compute)."""
    calls = np.sort(np.asarray(call_starts, dtype=float))
    hop, seen = -1, -1
    for t in sorted(transfers, key=lambda t: t["posted"]):
        before = int(np.searchsorted(calls, t["posted"]))
        if before != seen:
            hop += 1
            seen = before
        t["hop"] = hop


def _assign_steps(calls: list[dict], transfers: list[dict], waits: list[float], ev: Events) -> None:
    """Number the steps of one rank's calls of one pass, in place (module docstring)."""
    hops = sorted({t["hop"] for t in transfers})
    posts = [min(t["posted"] for t in transfers if t["hop"] == h) for h in hops[1:]]
    starts = np.sort(np.array([float(ev.start_s[c["i"]]) for c in calls]))
    arrivals = []
    gathered_at = math.inf
    for h in hops:
        mine = [t for t in transfers if t["hop"] == h]
        incoming = [t for t in mine if t["op"] in ("recv", "sendrecv", "all_to_all", "all_gather")] or mine
        # the block of a hop posted at step k is for step k + 1: its arrival ends step k, never
        # before step k's first call (a fast hop may be in before that call starts)
        k = int(np.searchsorted(starts, min(t["posted"] for t in mine)))
        first = float(starts[k]) if k < len(starts) else math.inf
        arrivals.append(max(max(t["end"] for t in incoming), float(np.nextafter(first, math.inf))))
        if any(t["op"] == "all_gather" for t in mine):
            gathered_at = min(gathered_at, arrivals[-1])
    markers = np.array(sorted(posts + arrivals + list(waits)))
    step, prev = 0, None
    for c in sorted(calls, key=lambda c: ev.start_s[c["i"]]):
        s = float(ev.start_s[c["i"]])
        if prev is not None:
            between = np.any((markers > prev) & (markers <= s))
            # after an all-gather every block is in: one call per step
            if between or (prev >= gathered_at):
                step += 1
        c["step"] = step
        prev = s


WORK_KINDS = ("cpu_op", "cpu_attention_fwd", "cpu_attention_bwd", "cpu_gemm", "attention_fwd", "attention_bwd",
              "gemm", "memcpy", "memset", "other")
"""Kinds of rows that are a step's work on its stream (not communication, launches,
annotations or the ProfilerStep)."""


def _add_step_work(ev: Events, rows: np.ndarray, calls: list[dict], transfers: list[dict],
                   waits: list[float]) -> None:
    """Each call's `busy_s` and its step's `step_end`, in place: a step's work is the time
    its calls' stream is busy (the union of its ops, so that a wait between them, which
    no op records on gloo, is not counted) from its first call's start up to the next
    bound (the next step's first call, a post, a wait)."""
    if not calls:
        return
    stream = ev.stream[calls[0]["i"]]
    work = rows[(ev.stream[rows] == stream) & np.isin(ev.kind[rows], WORK_KINDS)]
    order = np.argsort(ev.start_s[work], kind="stable")
    w_start, w_end = ev.start_s[work][order], ev.end_s[work][order]
    marks = np.array(sorted([t["posted"] for t in transfers] + list(waits)))
    # a wait inside an op (an async collective's tensor waited on where it is first read) is not work
    held = rows[(ev.stream[rows] == stream) & np.isin(ev.name[rows], WAIT_OPS)]
    held_s = [(float(a), float(b)) for a, b in zip(ev.start_s[held], ev.end_s[held])]
    by_step: dict[tuple[str, int], list[dict]] = {}
    for c in calls:
        by_step.setdefault((c["kind"], c["step"]), []).append(c)
    firsts = sorted(min(float(ev.start_s[c["i"]]) for c in cs) for cs in by_step.values())
    for cs in by_step.values():
        start = min(float(ev.start_s[c["i"]]) for c in cs)
        last = max(float(ev.start_s[c["i"]]) for c in cs)
        bound = min([f for f in firsts if f > last] + [m for m in marks.tolist() if m > last] + [math.inf])
        inside = (w_start >= start) & (w_start < bound)
        busy, end, reach = 0.0, start, start
        for a, b in zip(w_start[inside].tolist(), w_end[inside].tolist()):   # the union of the ops
            if b > reach:
                busy += b - max(a, reach)
                reach = b
            end = max(end, b)
        busy -= sum(max(0.0, min(b, bound) - max(a, start)) for a, b in held_s)
        durs = [float(ev.dur_s[c["i"]]) for c in cs]
        end = max(end, max(float(ev.end_s[c["i"]]) for c in cs))
        extra = max(0.0, busy - sum(durs))
        for c, d in zip(cs, durs):
            c["busy_s"] = d + extra * (d / sum(durs) if sum(durs) > 0 else 1.0 / len(cs))
            c["step_end"] = end


# ---------------------------------------------------------------- the configuration

def _infer_config(run: Run, calls: list[AttentionCall], transfers: list[dict], on_gpu: bool,
                  unmatched: list[Clause]) -> RingConfig:
    n = int(run.world_size)
    first = [c for c in calls if c.step == 0]
    shapes = {(c.batch, c.heads, c.kv_heads, c.head_dim) for c in calls}
    if len(shapes) > 1:
        unmatched.append(clause("profiler.head-shapes", count=len(shapes), shapes=str(sorted(shapes))))
    batch, heads, kv_heads, head_dim = statistics.mode([(c.batch, c.heads, c.kv_heads, c.head_dim) for c in calls])
    c_tokens = statistics.mode([c.q_tokens for c in first]) if first else statistics.mode(
        [c.q_tokens for c in calls])
    dtypes = [c.dtype for c in calls if c.dtype in SIM_DTYPE]
    assumed: list[Clause] = []
    if dtypes:
        dtype = SIM_DTYPE[statistics.mode(dtypes)]
    else:
        # CPU attention runs in fp32 unless asked otherwise; GPU attention in 16-bit
        dtype = "bf16" if on_gpu else "fp32"
        assumed.append(clause("profiler.assumed-dtype", dtype=dtype))
    kinds = {c.kind for c in calls}
    pass_ = "fwdbwd" if kinds == {"fwd", "bwd"} else kinds.pop()
    ops = {t["op"] for t in transfers}
    transport = "allgather" if "all_gather" in ops else "alltoall" if "all_to_all" in ops else "p2p"
    # the mask and layout from the blocks' extents (module docstring)
    later = [c for c in calls if c.step > 0 and c.kind == "fwd"] or [c for c in calls if c.step > 0]
    steps_with_calls: dict[tuple[int, int, str], set[int]] = {}
    for c in calls:
        steps_with_calls.setdefault((c.rank, c.iteration, c.kind), set()).add(c.step)
    skipped = any(len(s) < n for s in steps_with_calls.values())
    if any(c.q_tokens < c_tokens - 1 or c.kv_tokens < c_tokens - 1 for c in later):
        causal, layout = True, "zigzag"
    elif any(c.q_tokens == c_tokens - 1 for c in later):
        causal, layout = True, "striped"
    elif skipped:
        causal, layout = True, "contiguous"
    else:
        causal, layout = False, "contiguous"
        assumed.append(clause("profiler.assumed-full-mask", layout=layout))
    if transport == "allgather":
        assumed.append(clause("profiler.assumed-allgather"))
    cfg = RingConfig(n_gpus=n, seq=c_tokens * n, batch=batch, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     dtype=dtype, causal=causal, pass_=pass_, layout=layout, scheme=RING, transport=transport,
                     assumed_clauses=tuple(assumed))
    return cfg


def _check_bytes(cfg: RingConfig, transfers: list[dict], unmatched: list[Clause]) -> None:
    """Say where point-to-point messages are not the K/V block (or its K or V half)."""
    kv_bytes = cfg.workload().kv_bytes(cfg.tokens_per_rank)
    sizes = {t["bytes"] for t in transfers if t["op"] in ("send", "recv", "sendrecv")}
    if sizes and not any(abs(s - kv_bytes) < 1 or abs(2 * s - kv_bytes) < 1 for s in sizes):
        unmatched.append(clause("profiler.odd-messages", sizes=str(sorted(sizes)), block=kv_bytes))


def find_ring(run: Run) -> RingRun:
    """The ring of an imported run (sim.profiler.reader.Run); RingsimError where the run
    holds no attention calls or no transfers between ranks."""
    ev = run.events
    unmatched: list[Clause] = []
    calls: list[AttentionCall] = []
    moved_all: list[dict] = []
    phases: dict[tuple[int, int], tuple[float, float]] = {}
    profiler_steps: dict[int, float] = {}
    no_shape = 0
    whole: list[int] = []
    for rank in sorted(set(ev.rank.tolist())):
        rank_rows = np.flatnonzero(ev.rank == rank)
        gpu = bool(np.any(ev.on_gpu[rank_rows].astype(bool)
                          & np.isin(ev.kind[rank_rows], ["attention_fwd", "attention_bwd"])))
        launchers = _Launchers(ev, rank_rows) if gpu else None
        stepped = sorted({it for it in ev.iteration[rank_rows].tolist() if it >= 0})
        if not stepped:     # no ProfilerStep: the whole trace is one iteration
            whole.append(int(rank))
        for it in stepped or [-1]:
            rows = rank_rows[ev.iteration[rank_rows] == it] if it >= 0 else rank_rows
            steps = rows[ev.kind[rows] == "step"]
            if len(steps):
                profiler_steps[int(it)] = max(profiler_steps.get(int(it), 0.0), float(ev.dur_s[steps].max()))
            found, missing = _calls(ev, rows, gpu, launchers)
            no_shape += missing
            if not found:
                continue
            moved = _transfers(ev, rows, gpu, int(ev.stream[found[0]["i"]]))
            waits = [float(ev.end_s[i]) for i in rows.tolist() if str(ev.name[i]) in WAIT_OPS]
            _assign_hops(moved, [float(ev.start_s[c["i"]]) for c in found])
            for kind in ("fwd", "bwd"):       # each pass numbers its steps from 0
                _assign_steps([c for c in found if c["kind"] == kind], moved, waits, ev)
            _add_step_work(ev, rows, found, moved, waits)
            for c in found:
                b, h, hk, lq, lk, d = c["shape"]
                calls.append(AttentionCall(int(rank), int(it), c["step"], c["kind"], float(ev.start_s[c["i"]]),
                                           float(ev.dur_s[c["i"]]), b, h, hk, lq, lk, d, c["dtype"],
                                           str(ev.name[c["i"]]), busy_s=c["busy_s"]))
            moved_all += [{**t, "rank": int(rank), "iteration": int(it)} for t in moved]
            starts = [float(ev.start_s[c["i"]]) for c in found] + [t["posted"] for t in moved]
            ends = [c["step_end"] for c in found] + [t["end"] for t in moved]
            phases[(int(rank), int(it))] = (min(starts), max(ends))
    if not calls:
        raise refusal("profiler.no-attention", code="torch.profiler(record_shapes=True)",
                      shapeless=clause("profiler.shapeless", calls=no_shape) if no_shape else None)
    if no_shape:
        unmatched.append(clause("profiler.shapeless-left-out", calls=no_shape))
    if whole:
        unmatched.append(clause("profiler.no-steps" if len(whole) > 1 else "profiler.no-step",
                                rank_list=", ".join(map(str, whole))))
    if int(run.world_size) < 2 or not moved_all:
        raise refusal("profiler.no-transfers", world=run.world_size)
    on_gpu = any(c.name not in ATTENTION_OPS for c in calls)
    cfg = _infer_config(run, calls, moved_all, on_gpu, unmatched)
    for t in moved_all:      # sized by their own dtype, else the attention's (the block's)
        if not t["bytes"]:
            t["bytes"] = float(t["elems"] * ELEM_BYTES.get(t["dtype"] or cfg.dtype, 0))
    _check_bytes(cfg, moved_all, unmatched)
    transfers = [Transfer(t["rank"], t["iteration"], t["hop"], t["op"], t["start"], t["end"], t["bytes"])
                 for t in moved_all]
    calls = [_with_mask(c, cfg) for c in calls]
    _check_steps(calls, cfg, unmatched)
    return RingRun(cfg, calls, transfers, phases, profiler_steps, unmatched)


def _with_mask(c: AttentionCall, cfg: RingConfig) -> AttentionCall:
    """The call with its mask: under a causal mask the own block (step 0 of its pass) is
    causal, and on the striped layout every block is (its diagonal shifted one token on
    the blocks of later ranks)."""
    causal = cfg.causal and (c.step == 0 or cfg.layout == "striped")
    return AttentionCall(**{**asdict(c), "causal": causal})


def _check_steps(calls: list[AttentionCall], cfg: RingConfig, unmatched: list[Clause]) -> None:
    """Say where a rank's steps are more than the ring has."""
    per: dict[tuple[int, int, str], int] = {}
    for c in calls:
        key = (c.rank, c.iteration, c.kind)
        per[key] = max(per.get(key, 0), c.step + 1)
    over = sorted(k for k, v in per.items() if v > cfg.n_gpus)
    if over:
        r, it, kind = over[0]
        unmatched.append(clause("profiler.extra-steps", count=len(over), n=cfg.n_gpus, rank=r, iteration=it,
                                phase=kind))
