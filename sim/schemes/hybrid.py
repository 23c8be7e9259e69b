"""Ulysses x ring (USP; TransformerEngine's `a2a+p2p`): all-to-all inside groups of u
GPUs, Ring Attention across rings of r GPUs, u x r = N (docs/design.md, "Beyond the ring").

Ranks sit on a (ring position k, Ulysses index j) grid. `placement` "ulysses-inner"
puts each all-to-all group on consecutive ranks, rank = k*u + j (inside a node, the rings
across nodes, as TransformerEngine does); "ring-inner" the reverse, rank = j*r + k.
Ring position k holds the layout's tokens for rank k of an r-rank ring; each of its u
GPUs holds S/N of them, all heads.

Forward:
1. all-to-all of Q, K, V inside each group (sim.hardware.topology, pairwise rounds): each GPU
   sends each peer that peer's H/u query heads and K/V heads of its S/N tokens. A GPU
   ends with ring position k's S/r tokens on H/u heads.
2. Ring Attention (sim.schemes.ring, its schedule rules and the layout's work) on H/u
   heads in each ring, the u rings side by side; its first hops wait for the all-to-all
   to have delivered at both ends.
3. all-to-all of the output back to the token shards.
Backward mirrors it: all-to-all of dO, the ring's backward (dK/dV one hop behind),
all-to-all of dQ, dK, dV back, in the input dtype (each group's dK/dV are complete after
the ring: nothing is summed across GPUs, unlike the ring's fp32 accumulators).

A GPU takes in what an all-to-all brought as zero-length operations on its compute
stream (sim.engine.schedule.ScheduleBuilder.take_in), so the wait before the ring, and after the
last all-to-all, shows as exposed all-to-all communication; a pass ends on a GPU when its
output (or its gradients) has arrived.

K/V heads: the degree must divide the query heads. With GQA, a degree at most H_kv must
divide H_kv (each GPU gets H_kv/u K/V heads); a larger degree must be a multiple of H_kv,
and then each GPU receives the one K/V head its query heads use: K/V heads are
replicated, their bytes counted every time they are sent (as DeepSpeed-Ulysses and USP
do), and their gradients summed on the way back. Anything else is refused.

Compute: each ring block is one kernel call on H/u heads; the hardware model reads a
block's width (heads x batch x head dim) from its FLOPs and extent (sim.hardware.kernel_model),
so fewer heads enter through the FLOPs. With u = N (sim.schemes.ulysses) the ring has one
GPU: each GPU computes one causal S x S call on H/N heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from sim.engine.schedule import A2A, BWD, DKV, FWD, NO_DEP, Schedule, ScheduleBuilder
from sim.errors import RingsimError
from sim.hardware.topology import Topology
from sim.layouts import chunk_pair_work, chunks_of_rank, packed
from sim.layouts import get as get_layout
from sim.reasons import Clause, clause, refusal
from sim.scenario.quantities import ACCUM_BYTES
from sim.schemes import ring
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
    layouts_for,
    ring_step_grid,
    setting_option,
)
from sim.schemes.ring import build_ring_schedule, count_ring_ops, ring_buffers
from sim.trace.format import Trace
from sim.units import positive_ints

if TYPE_CHECKING:     # annotations only: sim.scenario.config imports the schemes
    from sim.hardware.cluster import Hardware
    from sim.scenario.config import Scenario, Workload

PLACEMENTS = ("ulysses-inner", "ring-inner")


@dataclass(frozen=True, kw_only=True)
class HybridSettings(Settings):
    ulysses_degree: int | None = None
    """GPUs in each all-to-all group (heads split that many ways); None: the largest that
    fits the heads and a node and leaves rings of two or more (or N / ring_degree)."""
    ring_degree: int | None = None
    """GPUs in each ring; ulysses_degree x ring_degree = the scenario's GPUs."""
    placement: str = "ulysses-inner"
    """'ulysses-inner' (each all-to-all group on consecutive ranks, inside a node; the rings
    across nodes, as TransformerEngine's a2a+p2p) or 'ring-inner' (the reverse)."""

    def __post_init__(self) -> None:
        for name in ("ulysses_degree", "ring_degree"):
            if getattr(self, name) is not None:
                positive_ints(self, name)
        if self.placement not in PLACEMENTS:
            raise RingsimError(f"placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}")


ULYSSES_DEGREE = setting_option(
    HybridSettings, "ulysses_degree", flag="--ulysses-degree", kind="int", url_key="ulysses_degree",
    help="ulysses, hybrid: GPUs per all-to-all group (ulysses: all of them; hybrid default: the largest that fits "
         "the heads and a node, leaving rings of two or more)")
"""The option of the all-to-all group's size (sim.schemes.ulysses takes it too)."""
OPTIONS = (
    ULYSSES_DEGREE,
    setting_option(HybridSettings, "ring_degree", flag="--ring-degree", kind="int", url_key="ring_degree",
                   help="hybrid: GPUs per ring (ulysses degree x ring degree = --gpus)"),
    setting_option(HybridSettings, "placement", flag="--placement", kind="str", choices=PLACEMENTS,
                   url_key="placement",
                   help="hybrid: all-to-all groups on consecutive ranks, inside a node (ulysses-inner, default, as "
                        "TransformerEngine's a2a+p2p) or the rings (ring-inner)"),
)


def kv_heads_per_gpu(workload: Workload, u: int) -> int:
    """K/V heads each GPU of a u-way all-to-all holds (1, replicated, when u > H_kv)."""
    return max(workload.kv_heads // u, 1)


def check_degree(workload: Workload, u: int) -> None:
    if workload.heads % u:
        raise refusal("refused.heads", degree=u, heads=workload.heads)
    h_kv = workload.kv_heads
    if (u <= h_kv and h_kv % u) or (u > h_kv and u % h_kv):
        raise refusal("refused.kv-heads", degree=u, kv_heads=h_kv)


def degree_fits(workload: Workload, u: int) -> bool:
    try:
        check_degree(workload, u)
    except RingsimError:
        return False
    return True


def degrees(scenario: Scenario) -> tuple[int, int]:
    """(u, r) of a hybrid scenario: as given, or u the largest degree that fits the
    heads, divides N, stays inside a node and leaves a ring of at least two."""
    n, u, r = scenario.n_gpus, scenario.settings.ulysses_degree, scenario.settings.ring_degree
    if u is not None and r is not None:
        if u * r != n:
            raise refusal("refused.degrees", option="ulysses-degree", other="ring-degree", value=u, other_value=r,
                          product=u * r, gpus=n)
        return u, r
    if u is not None or r is not None:
        given, option, key = (u, "ulysses-degree", "refused.ulysses-gpus") if u is not None else \
            (r, "ring-degree", "refused.ring-gpus")
        if n % given:
            raise refusal(key, option=option, value=given, gpus=n)
        return (u, n // u) if u is not None else (n // r, r)
    cap = min(scenario.hardware.gpus_per_node, n // 2 if n > 1 else 1)
    u = max((d for d in range(1, cap + 1) if n % d == 0 and degree_fits(scenario.workload, d)), default=1)
    return u, n // u


def rank_grid(u: int, r: int, placement: str) -> np.ndarray:
    """(r, u): the rank at ring position k, Ulysses index j."""
    k, j = np.arange(r)[:, None], np.arange(u)[None, :]
    return k * u + j if placement == "ulysses-inner" else j * r + k


def ring_layout(scenario: Scenario, r: int) -> str:
    return "contiguous" if r == 1 else scenario.layout


def ring_scenario(scenario: Scenario, u: int, r: int, pass_: str) -> Scenario:
    """One ring of the hybrid: r GPUs, the whole sequence, H/u heads."""
    w = scenario.workload
    # made as the given ones' types: the schemes import sim.scenario.config for annotations only
    sub = type(w)(batch=w.batch, seq=w.seq, heads=w.heads // u, kv_heads=kv_heads_per_gpu(w, u),
                  head_dim=w.head_dim, dtype=w.dtype, causal=w.causal, pass_=pass_, docs=w.docs, seed=w.seed,
                  window=w.window)
    return type(scenario)(workload=sub, hardware=scenario.hardware, n_gpus=r, scheme=ring.SCHEME.name,
                    layout=ring_layout(scenario, r), overlap=scenario.overlap, sync=scenario.sync,
                    granularity=scenario.granularity, tile=scenario.tile)


def count_hybrid_ops(scenario: Scenario, u: int | None = None, r: int | None = None) -> int:
    """The operations of the schedule, without building it: per pass, u rings of r GPUs
    (sim.schemes.ring.count_ring_ops) and two all-to-alls inside the r groups of u, each
    flow taken in by its receiver (2 x 2 x r x u(u - 1))."""
    if u is None or r is None:
        u, r = degrees(scenario)
    return sum(u * count_ring_ops(ring_scenario(scenario, u, r, phase)) + 4 * r * u * (u - 1)
               for phase in PHASES[scenario.workload.pass_])


def build_hybrid_schedule(scenario: Scenario, u: int, r: int, placement: str) -> Schedule:
    w, n = scenario.workload, scenario.n_gpus
    topo = Topology.of(scenario.hardware, n)
    grid = rank_grid(u, r, placement)                           # (r, u)
    position = np.empty(n, dtype=np.int64)
    position[grid] = np.arange(r)[:, None]                      # each rank's ring position
    b = ScheduleBuilder(n, topo.resource_names())
    held = [b.chunk_set(c) for c in (packed.chunks_of_rank(r) if scenario.packed
                                      else chunks_of_rank(ring_layout(scenario, r), r))]
    chunks = np.array(held, dtype=np.int64)[position]           # each rank's ring-level chunks
    groups = grid                                               # the all-to-all groups: rows
    c = scenario.tokens_per_rank
    per_token = w.batch * w.head_dim * w.elem_bytes
    hq, hkv = w.heads // u, kv_heads_per_gpu(w, u)
    qkv_bytes, o_bytes = c * (hq + 2 * hkv) * per_token, c * hq * per_token
    gate = np.full(n, NO_DEP, dtype=np.int64)                   # the previous pass's end, per rank
    for i, phase in enumerate(PHASES[w.pass_]):
        fwd = phase == "fwd"
        kind = FWD if fwd else BWD
        step0 = i * r
        # in: Q, K, V (forward) or dO (backward), token shards to head shards
        flows, src, dst = _all_to_all(b, topo, groups, qkv_bytes if fwd else o_bytes, step0, chunks, [gate])
        ready = b.take_in(flows, dst, kind=kind, step=step0, q_chunks=chunks, kv_chunks=chunks[src])
        ready = np.where(ready == NO_DEP, gate, ready)
        template = build_ring_schedule(ring_scenario(scenario, u, r, phase))
        last = _splice(b, template, grid, topo, ready, step0)
        # out: the output (forward) or dQ, dK, dV (backward), head shards to token shards
        flows, src, dst = _all_to_all(b, topo, groups, o_bytes if fwd else qkv_bytes, step0 + r - 1, chunks, last)
        done = b.take_in(flows, dst, kind=kind, step=step0 + r - 1, q_chunks=chunks, kv_chunks=chunks[src])
        gate = np.where(done == NO_DEP, np.max(last, axis=0), done)
    return b.build()


def _all_to_all(b: ScheduleBuilder, topo: Topology, groups: np.ndarray, nbytes: int, step: int,
                chunks: np.ndarray, after: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A pairwise all-to-all in every group; each flow waits for `after` (per rank ids)
    at both ends. Returns the flows' ids, senders and receivers."""
    ids, srcs, dsts = [], [], []
    for src, dst in topo.all_to_all(groups):
        deps = [a[src] for a in after] + [a[dst] for a in after]
        ids.append(b.transfers(kind=A2A, src=src, dst=dst, step=step, nbytes=nbytes, resources=topo.route(src, dst),
                               kv_chunks=chunks[src], after=deps))
        srcs.append(src)
        dsts.append(dst)
    if not ids:
        none = np.zeros(0, dtype=np.int64)
        return none, none, none
    return np.concatenate(ids), np.concatenate(srcs), np.concatenate(dsts)


def _splice(b: ScheduleBuilder, template: Schedule, grid: np.ndarray, topo: Topology,
            ready: np.ndarray, step0: int) -> list[np.ndarray]:
    """Add the ring `template` (ranks 0..r-1) once per ring (column j of `grid`), the
    copies of each template op side by side; hops hold the ports of their two GPUs (and
    the PCIe links between them: sim.hardware.topology.Topology.route) and
    wait for `ready` at both ends. Returns, per rank, the id of its last compute and of
    the last dK/dV hop it received (NO_DEP where none)."""
    u = grid.shape[1]
    base = b.n_ops
    j = np.arange(u)

    def ids(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.int64)
        return np.where(x[..., None] == NO_DEP, NO_DEP, base + x[..., None] * u + j).reshape(*x.shape[:-1], -1)

    def ranks(x: np.ndarray) -> np.ndarray:
        return np.where(x[:, None] >= 0, grid[np.maximum(x, 0)[:, None], j], -1).ravel()

    t = template
    transfer = np.repeat(t.is_transfer, u)
    rank, peer = ranks(t.rank), ranks(t.peer)
    sets = np.array([b.chunk_set(s) for s in t.chunk_sets] + [-1], dtype=np.int64)
    values = {name: np.repeat(getattr(t, name), u) for name in ("kind", "pairs", "flops", "mask", "q_tokens",
                                                                 "kv_tokens", "nbytes")}
    values.update(rank=rank, peer=peer, step=np.repeat(t.step, u) + step0, kv_rank=ranks(t.kv_rank),
                  q_chunks=np.repeat(sets[t.q_chunks], u), kv_chunks=np.repeat(sets[t.kv_chunks], u))
    safe_peer = np.maximum(peer, 0)
    route = topo.route(rank, safe_peer)
    gates = [np.where(transfer, ready[rank], NO_DEP), np.where(transfer, ready[safe_peer], NO_DEP)]
    new = b.add(len(rank), values, list(ids(t.after)) + gates,
                [np.where(transfer, route[0], rank)] + [np.where(transfer, x, -1) for x in route[1:]])
    if t.calls is not None:          # packed documents: each block's varlen call, in every ring
        called = np.repeat(t.call >= 0, u)
        b.varlen_calls(new[called], [t.calls[i] for i in np.repeat(t.call, u)[called].tolist()])
    last_compute = np.full(topo.n_gpus, NO_DEP, dtype=np.int64)
    last_dkv = np.full(topo.n_gpus, NO_DEP, dtype=np.int64)
    np.maximum.at(last_compute, rank[~transfer], new[~transfer])
    into_rank = np.repeat(t.kind == DKV, u)
    np.maximum.at(last_dkv, peer[into_rank], new[into_rank])
    return [last_compute, last_dkv]


def peak_memory_bytes(scenario: Scenario, u: int, r: int) -> dict[str, int]:
    """Bytes per GPU, itemized; 'total' is the peak.

    Token shards (S/N tokens, all heads): Q, K, V in and the output. Head shards (S/r
    tokens, H/u heads): Q, K, V, the output and the softmax statistics; with a ring
    (r > 1) also its K/V ring buffers (sim.schemes.ring.ring_buffers: two, one on a ring of
    two) and the fp32 output accumulator. Backward adds dO in both layouts, the fp32 dQ
    accumulator, with a ring as many fp32 dK/dV buffers, and dQ, dK, dV in both layouts.
    """
    w = scenario.workload
    eb, bt, d = w.elem_bytes, w.batch, w.head_dim
    c, s = scenario.tokens_per_rank, w.seq // r
    hq, hkv = w.heads // u, kv_heads_per_gpu(w, u)
    items = {
        "qkv_tokens": bt * c * (w.heads + 2 * w.kv_heads) * d * eb,
        "out_tokens": bt * c * w.heads * d * eb,
        "qkv_heads": bt * s * (hq + 2 * hkv) * d * eb,
        "out_heads": bt * s * hq * d * eb,
        "softmax_stats": 2 * bt * s * hq * ACCUM_BYTES,
    }
    if r > 1:
        items["kv_buffers"] = ring_buffers(r) * bt * s * 2 * hkv * d * eb
        items["out_accum"] = bt * s * hq * d * ACCUM_BYTES
    if w.pass_ in ("bwd", "fwdbwd"):
        items["dout"] = bt * (c * w.heads + s * hq) * d * eb
        items["dq_accum"] = bt * s * hq * d * ACCUM_BYTES
        if r > 1:
            items["dkv_buffers"] = ring_buffers(r) * bt * s * 2 * hkv * d * ACCUM_BYTES
        items["dqkv"] = bt * (s * (hq + 2 * hkv) + c * (w.heads + 2 * w.kv_heads)) * d * eb
    items["total"] = sum(items.values())
    return items


def block_map_of(trace: Trace, u: int, r: int, placement: str) -> BlockMap:
    """Query chunk x key chunk at the ring's level (its layout on r GPUs): the ring step at
    which the pair is computed, by u GPUs at once on H/u heads each."""
    try:
        w = trace.config["workload"]
        layout = "contiguous" if r == 1 else trace.config["layout"]
        seq, causal = int(w["seq"]), bool(w["causal"])
        lay = None if layout in packed.DOC_LAYOUTS else get_layout(layout)
    except (KeyError, TypeError, ValueError, RingsimError):
        raise RingsimError("the trace's header has no layout or workload to draw the block map") from None
    label = clause("blocks.every-pair" if r == 1 else "blocks.rings", ulysses=u)
    p = packed.from_header(trace.config, r, layout)
    if p is not None:
        work, at, size, axis = packed.block_map_parts(p)
        return BlockMap(value=ring_step_grid(trace, work, r), work=work, owner=rank_grid(u, r, placement)[at, 0],
                        chunk_size=size, value_label=label, axis_label=axis)
    work = chunk_pair_work(layout, seq, r, causal)
    grid = ring_step_grid(trace, work, r)
    owner = rank_grid(u, r, placement)[lay.owner_of_chunk(r), 0]
    return BlockMap(value=grid, work=work, owner=owner, chunk_size=seq // lay.n_chunks(r),
                    value_label=label, axis_label=clause(lay.chunk_axis))


def _check(scenario: Scenario) -> None:
    u, r = degrees(scenario)
    check_degree(scenario.workload, u)
    if r > 1:
        scenario.check_layout_chunks(ranks=r, times=u)
    else:
        _check_shards(scenario)


def _check_shards(scenario: Scenario) -> None:
    n = scenario.n_gpus
    if scenario.workload.seq % n:
        raise refusal("refused.shards", seq=scenario.workload.seq, shards=n, multiple=n)


def _resolved(scenario: Scenario) -> HybridSettings:
    u, r = degrees(scenario)
    return HybridSettings(ulysses_degree=u, ring_degree=r, placement=scenario.settings.placement)


def _block_map(trace: Trace) -> BlockMap:
    cfg = trace.config
    try:
        u, r = int(cfg["ulysses_degree"]), int(cfg["ring_degree"])
        placement = cfg.get("placement", "ulysses-inner")
    except (KeyError, TypeError, ValueError):
        raise RingsimError("the trace's header has no ulysses and ring degrees") from None
    return block_map_of(trace, u, r, placement)


def _placements(hardware: Hardware, n_gpus: int) -> tuple[str, ...]:
    """The placements worth trying: both where they decide what the flows cross (across
    nodes, or the switches and sockets of a PCIe node), else the first."""
    return PLACEMENTS if n_gpus > hardware.gpus_per_node or hardware.pcie is not None else PLACEMENTS[:1]


def variants(workload: Workload, hardware: Hardware, n_gpus: int) -> list[Variant]:
    """What a comparison runs: every split u x r with 1 < u < N that the heads allow
    (1 x N is the ring and N x 1 Ulysses, listed as those schemes), largest u first, in
    each placement worth trying."""
    n = n_gpus
    placements = _placements(hardware, n)
    out = []
    for u in (d for d in range(n - 1, 1, -1) if n % d == 0 and degree_fits(workload, d)):
        for placement in placements:
            label = (clause("variant.split-placed", ulysses=u, ring=n // u, placement=placement)
                     if len(placements) > 1 else clause("variant.split", ulysses=u, ring=n // u))
            out.append(Variant(label, {"ulysses-degree": u, "ring-degree": n // u, "placement": placement}))
    return out


def candidates(workload: Workload, hardware: Hardware, n_gpus: int) -> list[Variant]:
    """What a plan tries: every split u x r with 1 < u < N, in each placement worth
    trying and each layout of the rings."""
    n = n_gpus
    return [Variant(clause("variant.hybrid", ulysses=u, ring=n // u, placement=placement, layout=layout),
                    {"ulysses-degree": u, "ring-degree": n // u, "placement": placement, "layout": layout})
            for u in divisors(n)[1:-1] for placement in _placements(hardware, n) for layout in layouts_for(workload)]


def split_of(scenario: Scenario, u: int, r: int, placement: str) -> TokenSplit:
    """Which tokens each ring position holds: the rings' layout over r positions, each
    position's tokens shared by its u GPUs (rank_grid); with one position, token shards
    in order."""
    if r == 1:
        return TokenSplit(layout="contiguous", holders=scenario.n_gpus, pattern="in-order")
    grid = rank_grid(u, r, placement)
    return TokenSplit(layout=scenario.layout, holders=r, pattern="ring-positions",
                      groups=tuple(tuple(int(x) for x in row) for row in grid), numbers={"positions": r, "u": u})


def replicated(u: int | None, kv_heads: int) -> list[Clause]:
    """The plan's note of K/V heads replicated by a degree above them."""
    if u and u > kv_heads:
        return [clause("plan.replicated", times=u // kv_heads, kv_heads=kv_heads)]
    return []


def plan_notes(values: Mapping[str, Any], n_gpus: int, kv_heads: int) -> list[Clause]:
    return replicated(values.get("ulysses-degree"), kv_heads)


def run_words(config: dict) -> str:
    return (f"hybrid, ulysses {config['ulysses_degree']} x ring {config['ring_degree']}, {config['placement']}, "
            f"{config['layout']} ring")


OP_KINDS = {
    **COMPUTE_KINDS,
    "kv": OpKind("K/V", "#2e9e5b", "#1aa3a3"),
    "dkv": OpKind("dK/dV", "#8ab833", "#7fc9c9"),
    "a2a": OpKind("all-to-all", "#e08a1e", "#f2b866"),
}

SCHEME = Scheme(
    name="hybrid",
    summary="Ulysses x ring (USP): all-to-all to head shards inside groups of u GPUs, "
            "Ring Attention across rings of r GPUs, u x r = N",
    build_schedule=lambda scenario: build_hybrid_schedule(scenario, *degrees(scenario), scenario.settings.placement),
    peak_memory=lambda scenario: peak_memory_bytes(scenario, *degrees(scenario)),
    op_kinds=OP_KINDS,
    block_map=_block_map,
    check=_check,
    settings_type=HybridSettings,
    options=OPTIONS,
    resolved_settings=_resolved,
    gpu_shares=("ulysses-degree", "ring-degree"),
    ring_options=("layout", "overlap", "sync"),
    variants=variants,
    candidates=candidates,
    run_words=run_words,
    run_terms=lambda config: ("", {"u": config.get("ulysses_degree", "?"), "r": config.get("ring_degree", "?"),
                                   "placement": config.get("placement", "ulysses-inner")}),
    token_split=lambda scenario: split_of(scenario, *degrees(scenario), scenario.settings.placement),
    plan_notes=plan_notes,
    limited_by_heads=True,
    frameworks={"megatron": ("a2a+p2p",)},          # with hierarchical_context_parallel_sizes [u, r]
    all_to_all_degree=lambda settings, n_gpus: settings.ulysses_degree,
    count_ops=count_hybrid_ops,
)
