"""All-gather context parallelism (Llama 3; torch `context_parallel`'s "allgather"
rotation): docs/design.md, "Beyond the ring".

Tokens are cut into 2N chunks of c = S/(2N); rank i holds chunks i and 2N-1-i (the
zigzag layout, as Llama 3 does), so the causal work is the same on every rank. K and V
are all-gathered (sim.hardware.topology: a ring inside the node, with a ring across nodes first
when the GPUs span several), then each rank attends its queries against the gathered
K/V under the mask: per query chunk a, causal, one dense call against chunks 0..a-1
(c x a*c keys) and one diagonal call against chunk a (c x c), the two parts a fused
kernel runs at different rates (sim.hardware.kernel_model); without the mask, one dense call of
its 2c queries against all S keys.

The all-gather is exposed: nothing overlaps it, unless the work is pipelined over
`head_groups` G (G divides H_kv): K/V are gathered and attended group by group
(H_kv/G K/V heads and their H/G query heads at a time), the gather of group h+1 running
behind the compute of group h (double-buffered: it also waits until group h-1's
compute has freed its buffer, at both ends). Only the first group's gather is exposed
when the compute of a group outlasts the gather of the next.

Backward: K/V are gathered again (the forward keeps nothing S-sized), each group's dQ,
dK, dV computed (2.5x the forward FLOPs), and the dK/dV partial sums reduce-scattered
back to the ranks that hold those tokens (fp32, the accumulation dtype, as the ring's
dK/dV), the reduce-scatter of group h behind the compute of group h+1. A pass ends on a
rank when its reduced dK/dV have arrived.

A rank takes in what it receives as zero-length operations on its compute stream
(sim.engine.schedule.ScheduleBuilder.take_in): the wait for the gather is exposed all-gather
communication. Every rank sends (N-1) blocks of K/V: the ring's volume, received at
once instead of behind the compute; every rank holds the whole K/V (two groups of it
when pipelined), so its memory grows with S, not S/N.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from sim.engine.schedule import AG, BWD, DIAGONAL, EMPTY, FULL, FWD, NO_DEP, RS, Schedule, ScheduleBuilder
from sim.errors import RingsimError
from sim.hardware.topology import Topology
from sim.layouts import get as get_layout
from sim.layouts import packed
from sim.reasons import Clause, clause, refusal
from sim.scenario.quantities import ACCUM_BYTES, BWD_FLOPS_FACTOR
from sim.schemes.base import (
    COMPUTE_KINDS,
    PHASES,
    BlockMap,
    OpKind,
    Scheme,
    Settings,
    TokenSplit,
    Variant,
    divisors,
    setting_option,
)
from sim.trace.format import COMPUTE, Trace
from sim.units import positive_ints

if TYPE_CHECKING:     # annotations only: sim.scenario.config imports the schemes
    from sim.hardware.cluster import Hardware
    from sim.scenario.config import Scenario, Workload


PACKED_LAYOUTS = ("contiguous", "zigzag")
"""The layouts the all-gather scheme runs packed documents on."""


@dataclass(frozen=True, kw_only=True)
class AllgatherSettings(Settings):
    head_groups: int = 1
    """K/V gathered and attended head group by head group, the next group's gather behind
    the current group's compute (1: one gather, exposed)."""

    def __post_init__(self) -> None:
        positive_ints(self, "head_groups")


OPTIONS = (
    setting_option(AllgatherSettings, "head_groups", flag="--head-groups", kind="int", url_key="head_groups",
                   help="allgather: gather and attend K/V head group by head group, each gather behind the "
                        "previous group's compute (default 1: one gather, exposed)"),
)


def triangle_pairs(c: int, granularity: str, tile: int) -> int:
    """Pairs a causal c x c diagonal block computes: exact, or in whole tiles (a tile on
    the diagonal costs its whole area)."""
    if granularity != "tile":
        return c * (c + 1) // 2
    sizes = np.full(c // tile, tile, dtype=np.int64)
    if c % tile:
        sizes = np.append(sizes, c % tile)
    return int((sizes.sum() ** 2 + (sizes ** 2).sum()) // 2)


def _pieces(scenario: Scenario) -> dict[str, np.ndarray]:
    """The kernel calls of every rank (rows: the call's place on its rank, columns: rank),
    per head group: pairs, mask, extent, query and key chunks."""
    w, n = scenario.workload, scenario.n_gpus
    c = w.seq // (2 * n)
    r = np.arange(n)
    if not w.causal:
        return {"pairs": np.full((1, n), (2 * c) * w.seq, dtype=np.int64), "mask": np.full((1, n), FULL),
                "q_tokens": np.full((1, n), 2 * c), "kv_tokens": np.full((1, n), w.seq),
                "q": [[(int(i), 2 * n - 1 - int(i)) for i in r]], "kv": [[tuple(range(2 * n))] * n]}
    tri = triangle_pairs(c, scenario.granularity, scenario.tile)
    every = tuple(range(2 * n))         # the chunks before a are its first a (slices share the ints)
    rows = {k: [] for k in ("pairs", "mask", "q_tokens", "kv_tokens", "q", "kv")}
    for a in (r, 2 * n - 1 - r):
        # dense against the chunks before a (none for chunk 0: an empty call, skipped)
        rows["pairs"].append(a * c * c)
        rows["mask"].append(np.where(a > 0, FULL, EMPTY))
        rows["q_tokens"].append(np.where(a > 0, c, 0))
        rows["kv_tokens"].append(a * c)
        rows["q"].append([(int(x),) for x in a])
        rows["kv"].append([every[:x] for x in a.tolist()])
        # the diagonal block of chunk a
        rows["pairs"].append(np.full(n, tri))
        rows["mask"].append(np.full(n, DIAGONAL))
        rows["q_tokens"].append(np.full(n, c))
        rows["kv_tokens"].append(np.full(n, c))
        rows["q"].append([(int(x),) for x in a])
        rows["kv"].append([(int(x),) for x in a])
    return {k: (v if k in ("q", "kv") else np.array(v)) for k, v in rows.items()}


def count_allgather_ops(scenario: Scenario) -> int:
    """The operations of the scenario's schedule, without building it: per pass and head
    group, the gather's flows and as many take-ins (sim.engine.schedule.ScheduleBuilder.take_in),
    each rank's kernel calls (_pieces: two per query chunk under the mask, one without),
    and in backward the reduce-scatter's flows and their take-ins."""
    w, n, groups = scenario.workload, scenario.n_gpus, scenario.settings.head_groups
    flows = Topology.of(scenario.hardware, n).collective_flows()
    calls = n * (1 if scenario.packed else 4 if w.causal else 1)
    return sum(groups * (2 * flows + calls + (2 * flows if phase == "bwd" else 0)) for phase in PHASES[w.pass_])


def build_allgather_schedule(scenario: Scenario) -> Schedule:
    w, n, groups = scenario.workload, scenario.n_gpus, scenario.settings.head_groups
    topo = Topology.of(scenario.hardware, n)
    b = ScheduleBuilder(n, topo.resource_names())
    ranks = np.arange(n)
    held = _held(scenario)
    own = np.array([b.chunk_set(held(i)) for i in range(n)], dtype=np.int64)
    pieces, varlen = _packed_pieces(scenario) if scenario.packed else (_pieces(scenario), None)
    q_sets = np.array([[b.chunk_set(x) for x in row] for row in pieces["q"]], dtype=np.int64)
    kv_sets = np.array([[b.chunk_set(x) for x in row] for row in pieces["kv"]], dtype=np.int64)
    c = scenario.tokens_per_rank
    kv_block, dkv_block = w.kv_bytes(c) // groups, w.dkv_bytes(c) // groups
    gather, scatter = (_flows(b, topo, topo.all_gather(), own, held),
                       _flows(b, topo, topo.reduce_scatter(), own, held))
    gate = np.full(n, NO_DEP, dtype=np.int64)          # the previous pass's end, per rank
    for i, phase in enumerate(PHASES[w.pass_]):
        fwd = phase == "fwd"
        kind = FWD if fwd else BWD
        flops_per_pair = (1.0 if fwd else BWD_FLOPS_FACTOR) * w.fwd_flops(1) / groups
        step0 = i * groups
        last = [gate]                  # last[h + 1]: each rank's last compute of group h
        gathers = [_collective(b, gather, AG, kv_block, step0, [gate])]
        scatters = []
        for h in range(groups):
            if h + 1 < groups:       # the next group's gather, once group h-1 has freed its buffer
                gathers.append(_collective(b, gather, AG, kv_block, step0 + h + 1, [last[h]]))
            flows, _, dst, carried = gathers[h]
            b.take_in(flows, dst, kind=kind, step=step0 + h, q_chunks=own, kv_chunks=carried)
            ids = [b.computes(kind=kind, rank=ranks, step=step0 + h, pairs=pieces["pairs"][p],
                              flops=flops_per_pair * pieces["pairs"][p], mask=pieces["mask"][p],
                              q_tokens=pieces["q_tokens"][p], kv_tokens=pieces["kv_tokens"][p],
                              q_chunks=q_sets[p], kv_chunks=kv_sets[p])
                   for p in range(len(pieces["pairs"]))]
            if varlen is not None:
                b.varlen_calls(ids[0], [varlen.calls[i] for i in varlen.call[:, 0]])
            last.append(ids[-1])
            if not fwd:
                scatters.append(_collective(b, scatter, RS, dkv_block, step0 + h, [ids[-1]]))
        gate = last[-1]
        for h, (flows, _, dst, carried) in enumerate(scatters):
            got = b.take_in(flows, dst, kind=kind, step=step0 + h, q_chunks=own, kv_chunks=carried)
            gate = np.where(got == NO_DEP, gate, got)
    return b.build()


def _held(scenario: Scenario):
    """The chunks rank i holds: 2N zigzag chunks, i and 2N-1-i; packed documents: its
    shard (sim.layouts.packed)."""
    n = scenario.n_gpus
    return (lambda i: (i,)) if scenario.packed else (lambda i: (i, 2 * n - 1 - i))


def _packed_pieces(scenario: Scenario):
    """Packed documents: one varlen call per rank and head group, its queries against the
    whole gathered K/V, a piece per document (sim.layouts.packed.gathered_tables), as
    ring-flash-attention's llama3_flash_attn_varlen_func calls it."""
    t = packed.gathered_tables(packed.packed_of(scenario), scenario.granularity, scenario.tile)
    n = scenario.n_gpus
    every = tuple(range(n))
    return {"pairs": t.work.T, "mask": t.masks.T, "q_tokens": t.q_tokens.T, "kv_tokens": t.kv_tokens.T,
            "q": [[(i,) for i in range(n)]], "kv": [[every] * n]}, t


def _flows(b: ScheduleBuilder, topo: Topology, steps, own: np.ndarray, held) -> list[tuple]:
    """The steps of a two-level ring collective (sim.hardware.topology: all_gather or
    reduce_scatter) as (src, dst, the resources each flow holds (sim.hardware.topology.Topology
    .route), chunk sets carried, blocks per flow); a flow inside a node carries a block
    from every node."""
    out = []
    for level, src, dst, blocks in steps:
        route = topo.route(src, dst)
        if level == 0:
            carried, count = own[blocks], 1
        else:
            # a row of blocks is the same place in every node: its first block names it
            firsts, which = np.unique(blocks[:, 0], return_inverse=True)
            rows = blocks[_first_rows(blocks[:, 0], firsts)]
            each = [b.chunk_set(tuple(sorted(x for r in row for x in held(r)))) for row in rows.tolist()]
            carried, count = np.array(each, dtype=np.int64)[which.reshape(-1)], blocks.shape[1]
        out.append((src, dst, route, carried, count))
    return out


def _first_rows(keys: np.ndarray, distinct: np.ndarray) -> np.ndarray:
    """The index of the first row with each of the distinct keys."""
    first = np.full(len(distinct), len(keys), dtype=np.int64)
    np.minimum.at(first, np.searchsorted(distinct, keys), np.arange(len(keys)))
    return first


def _collective(b: ScheduleBuilder, steps: list[tuple], kind: int, block_bytes: int, step: int,
                after: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Add the flows of a collective (`_flows`). A flow waits for `after` (per rank) at
    both ends and for the flow its sender received at the step before (at the first step
    of the second level, the last of the first level). Returns the flows' ids, senders,
    receivers and the chunk sets they carry."""
    ids, srcs, dsts, sets = [], [], [], []
    into = None                                        # the last flow each rank received
    for src, dst, route, carried, count in steps:
        deps = ([] if into is None else [into[src]]) + [a[src] for a in after] + [a[dst] for a in after]
        f = b.transfers(kind=kind, src=src, dst=dst, step=step, nbytes=block_bytes * count,
                        resources=route, kv_chunks=carried, after=deps)
        into = np.full(b.n_ranks, NO_DEP, dtype=np.int64)
        into[dst] = f
        ids.append(f)
        srcs.append(src)
        dsts.append(dst)
        sets.append(carried)
    if not ids:
        none = np.zeros(0, dtype=np.int64)
        return none, none, none, none
    return np.concatenate(ids), np.concatenate(srcs), np.concatenate(dsts), np.concatenate(sets)


def peak_memory_bytes(scenario: Scenario) -> dict[str, int]:
    """Bytes per rank, itemized; 'total' is the peak.

    Its own Q and K/V (S/N tokens), the gathered K/V (all S tokens: one buffer, or two
    head groups' worth when pipelined), its output, the fp32 output accumulator (the
    dense and diagonal calls of a chunk merge) and softmax statistics. Backward adds dO,
    the fp32 dQ accumulator and the fp32 dK/dV partial sums of the whole sequence (one
    buffer, or two groups' worth) that the reduce-scatter consumes.
    """
    w, g = scenario.workload, scenario.settings.head_groups
    c, eb, bt, d = scenario.tokens_per_rank, w.elem_bytes, w.batch, w.head_dim
    held = min(g, 2) / g                     # the share of the heads whose K/V are held at once
    q = bt * w.heads * c * d
    items = {
        "q": q * eb,
        "kv_own": w.kv_bytes(c),
        "kv_gathered": int(w.kv_bytes(w.seq) * held),
        "out": q * eb,
        "out_accum": q * ACCUM_BYTES,
        "softmax_stats": 2 * bt * w.heads * c * ACCUM_BYTES,
    }
    if w.pass_ in ("bwd", "fwdbwd"):
        items["dout"] = q * eb
        items["dq_accum"] = q * ACCUM_BYTES
        items["dkv_partial"] = int(w.dkv_bytes(w.seq) * held)
    items["total"] = sum(items.values())
    return items


def block_map(trace: Trace) -> BlockMap:
    """Query chunk x key chunk (2N chunks, zigzag): the kernel call of its rank (in
    order, within a head group) that computes the pair; NaN where masked."""
    try:
        w = trace.config["workload"]
        seq, causal = int(w["seq"]), bool(w["causal"])
    except (KeyError, TypeError, ValueError):
        raise RingsimError("the trace's header has no workload to draw the block map") from None
    n = trace.n_gpus
    p = packed.from_header(trace.config, n)
    if p is not None:
        # one varlen call per rank and head group: every pair of a rank's queries at once
        work, owner, size, axis = packed.block_map_parts(p)
        return BlockMap(value=np.where(work > 0, 0.0, np.nan), work=work, owner=owner, chunk_size=size,
                        value_label=clause("blocks.kernel-call"), axis_label=axis)
    lay = get_layout("zigzag")
    chunks, size = 2 * n, seq // (2 * n)
    q_chunk = np.arange(chunks)[:, None]
    k_chunk = np.arange(chunks)[None, :]
    if causal:
        work = np.where(k_chunk < q_chunk, size * size, np.where(k_chunk == q_chunk, size * (size + 1) // 2, 0))
    else:
        work = np.full((chunks, chunks), size * size)
    grid = np.full(work.shape, np.nan)
    col = trace.columns
    comp = np.flatnonzero(col.stream == COMPUTE)
    if len(comp):
        first = comp[(col.kind[comp] == col.kind[comp].min()) & (col.step[comp] == col.step[comp].min())]
        rank = col.rank[first]
        order = np.lexsort((first, rank))
        first, rank = first[order], rank[order]
        place = np.arange(len(first)) - np.searchsorted(rank, rank)
        q, k = col.chunk_matrix("q_chunks", first), col.chunk_matrix("kv_chunks", first)
        for a in range(q.shape[1]):
            for c in range(k.shape[1]):
                ok = (q[:, a] >= 0) & (k[:, c] >= 0) & (q[:, a] < chunks) & (k[:, c] < chunks)
                grid[q[ok, a], k[ok, c]] = place[ok]
    grid[work == 0] = np.nan
    return BlockMap(value=grid, work=work.astype(np.int64), owner=lay.owner_of_chunk(n), chunk_size=size,
                    value_label=clause("blocks.kernel-call"), axis_label=clause(lay.chunk_axis))


def _check(scenario: Scenario) -> None:
    w, n, g = scenario.workload, scenario.n_gpus, scenario.settings.head_groups
    if scenario.packed:
        if scenario.layout not in PACKED_LAYOUTS:
            raise RingsimError(f"allgather on packed documents runs on the {' or '.join(PACKED_LAYOUTS)} layout "
                               f"(the llama3 varlen variant: contiguous), got {scenario.layout!r}")
        scenario.check_layout_chunks()
    elif w.seq % (2 * n):
        raise refusal("refused.gather-chunks", seq=w.seq, chunks=2 * n, gpus=n, multiple=2 * n)
    if w.kv_heads % g:
        raise refusal("refused.head-groups", option="head-groups", other="kv-heads", value=g, other_value=w.kv_heads)
    Topology.of(scenario.hardware, n)._levels(n)


def _gathered_on(workload: Workload) -> dict[str, Any]:
    """The layout it runs on: packed documents on contiguous shards, as the llama3 varlen
    variant runs them; else its own zigzag chunks (the default layout)."""
    packed_docs = workload.docs is not None or workload.window is not None
    return {"layout": "contiguous"} if packed_docs else {}


def variants(workload: Workload, hardware: Hardware, n_gpus: int) -> list[Variant]:
    """What a comparison runs: one gather, and pipelined per K/V head."""
    on = _gathered_on(workload)
    out = [Variant(clause("variant.one-gather"), dict(on))]
    if workload.kv_heads > 1:
        out.append(Variant(clause("variant.head-groups", groups=workload.kv_heads),
                           on | {"head-groups": workload.kv_heads}))
    return out


def candidates(workload: Workload, hardware: Hardware, n_gpus: int) -> list[Variant]:
    """What a plan tries: every head-group count that divides the K/V heads."""
    on = _gathered_on(workload)
    return [Variant(clause("variant.one-gather") if g == 1 else clause("variant.head-groups", groups=g),
                    on | {"head-groups": g})
            for g in divisors(workload.kv_heads)]


def _groups(config: dict) -> int:
    return config.get("head_groups", 1)


def token_split(scenario: Scenario) -> TokenSplit:
    if scenario.packed:          # on the packed layout it runs (contiguous or zigzag per document)
        return TokenSplit(layout=scenario.layout, holders=scenario.n_gpus)
    n = scenario.n_gpus
    return TokenSplit(layout="zigzag", holders=n, pattern="chunk-pairs", numbers={"chunks": 2 * n, "last": 2 * n - 1})


def plan_notes(values: Mapping[str, Any], n_gpus: int, kv_heads: int) -> list[Clause]:
    return [clause("plan.holds-all" if values.get("head-groups", 1) == 1 else "plan.holds-group")]


SCHEME = Scheme(
    name="allgather",
    summary="All-gather context parallelism (Llama 3): K/V gathered on every GPU, then local attention "
            "of its two query chunks; pipelined by head groups or exposed",
    build_schedule=build_allgather_schedule,
    peak_memory=peak_memory_bytes,
    op_kinds={
        **COMPUTE_KINDS,
        "ag": OpKind("all-gather", "#c0392b", "#e6837a"),
        "rs": OpKind("reduce-scatter", "#d35400", "#f0a875"),
    },
    block_map=block_map,
    check=_check,
    settings_type=AllgatherSettings,
    options=OPTIONS,
    variants=variants,
    candidates=candidates,
    training_cp=True,
    # TransformerEngine's all_gather (Megatron-LM's help also writes allgather); torchtitan 0.3.0's
    # context parallelism (flex_cp_allgather, torch's default rotate method)
    frameworks={"megatron": ("all_gather", "allgather"), "torchtitan": ("allgather",)},
    run_words=lambda config: "allgather, " + (
        "one gather" if _groups(config) == 1 else f"pipelined over {_groups(config)} head groups"),
    run_terms=lambda config: ("one", {}) if _groups(config) == 1 else ("groups", {"groups": _groups(config)}),
    token_split=token_split,
    plan_notes=plan_notes,
    count_ops=count_allgather_ops,
)
