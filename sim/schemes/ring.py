"""The Ring Attention schedule (docs/design.md, facts 2 and 5; the issue's dependencies).

Forward, N steps: at step k rank r computes its queries against the K/V block of rank
(r - k) mod N and forwards that block to r + 1 (N - 1 transfers per rank).

Backward: K/V travel as in the forward; the dK/dV accumulators of each block travel
behind them, one hop per step after the step's compute adds its contribution, and the
N-th hop returns them to their owner. dQ stays local. Backward FLOPs are 2.5x forward.

With overlap, K/V are double-buffered, in one of two ways (`Scenario.sync`):
- "step", as ring kernels are written (and hw/ is): at the start of step k a rank posts
  the send of its block and the receive of the next, computes, then waits for both; in
  backward it also waits for the dK/dV hop of step k-1 after its compute, adds, and
  posts the hop of step k. A transfer starts when both ends have posted it.
- "buffered", the most a double buffer allows: a block is forwarded as soon as it is
  present and the receiver has a free buffer (two ring buffers besides the rank's own
  shard, so block j reuses the buffer of block j - 2 once that was computed on and
  forwarded); fast ranks run ahead of slow ones.
Without overlap, each rank alternates: compute the block, then exchange (send and
receive both posted after the compute, on both ends), then the next compute.
In fwdbwd, backward steps are numbered N..2N-1 and start on a rank once its forward
is done.

Each hop holds its directed link (r -> r+1). Across nodes (sim.hardware.topology) that is exact
too: every rank sends to one rank and receives from one, and with ranks packed into
nodes in order only one hop leaves each node and one enters it, so no two hops ever
meet on a port or a NIC, shared or not; a hop between nodes runs at the NIC's speed
(sim.hardware.cluster.Hardware.transfer_times_s).

Operations are numbered step by step: the N computes of step k (rank 0 first), then
its N K/V hops (none at the last step), then in backward its N dK/dV hops. Each group
waits only on earlier steps or groups and uses each rank and each link once: a wave of
the schedule (sim.engine.schedule); with overlap, a step's K/V hops wait on nothing of its
computes, and the two groups make one wave. The rules are written once, over the
(step, rank) grid, instead of once per operation: an op's id is affine in its step and
rank, so each dependency is a rule (which group, how many steps back, which neighbour)
written in place into the schedule's columns, which take the smallest integer types
that hold them (a ring of 4096 GPUs has 33M operations).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.engine.schedule import BWD, DKV, FULL, FWD, KV, NO_DEP, Posts, Schedule, cut_waves
from sim.engine.threads import each
from sim.errors import RingsimError
from sim.hardware.topology import Topology
from sim.layouts import block_extents, block_work_and_masks, chunk_pair_work, chunks_of_rank, packed
from sim.layouts import get as get_layout
from sim.reasons import clause
from sim.scenario.quantities import ACCUM_BYTES, BWD_FLOPS_FACTOR
from sim.schemes.base import COMPUTE_KINDS, PHASES, BlockMap, OpKind, Scheme, Variant, layouts_for, ring_step_grid
from sim.trace.format import Trace

if TYPE_CHECKING:     # annotations only: sim.scenario.config imports the schemes
    from sim.hardware.cluster import Hardware
    from sim.scenario.config import Scenario, Workload

_ROWS = 1 << 18
"""Grid entries gathered per pass (a few MB of temporaries, reused by the allocator)."""


def build_ring_schedule(scenario: Scenario) -> Schedule:
    w = scenario.workload
    n = scenario.n_gpus
    c = scenario.tokens_per_rank
    varlen = None
    if scenario.packed:
        # packed documents: the tables counted token by token, each block a varlen call
        t = packed.block_tables(packed.packed_of(scenario), scenario.granularity, scenario.tile)
        work, masks, extents, varlen = t.work, t.masks, (t.q_tokens, t.kv_tokens), t
        chunk_sets = packed.chunks_of_rank(n)
    else:
        # the block tables (extents: each block's kernel call), side by side
        (work, masks), extents = each(lambda f: f(), [
            lambda: block_work_and_masks(scenario.layout, w.seq, n, w.causal, scenario.granularity, scenario.tile),
            lambda: block_extents(scenario.layout, w.seq, n, w.causal)], size=n * n)
        chunk_sets = chunks_of_rank(scenario.layout, n)
    phases = PHASES[w.pass_]
    grids = [_Grid(n, phase, base) for phase, base in zip(phases, _phase_bases(n, phases))]
    n_ops = grids[-1].base + grids[-1].n_ops
    width = max(g.width(scenario, gated=i > 0) for i, g in enumerate(grids))
    # the columns in the smallest types that hold them: a ring of 4096 GPUs has 33M ops,
    # and every byte per op is 33 MB written and read again
    ids = np.int32 if n_ops < 2 ** 31 else np.int64
    small = np.int16 if 4 * n < 2 ** 15 else np.int32       # ranks, steps (2N in fwdbwd), chunk sets
    wide_bytes = max(w.kv_bytes(c), w.dkv_bytes(c))
    cols = {
        "kind": np.empty(n_ops, np.int8), "rank": np.empty(n_ops, small), "peer": np.empty(n_ops, small),
        "step": np.empty(n_ops, small), "kv_rank": np.empty(n_ops, small), "mask": np.empty(n_ops, np.int8),
        "q_tokens": np.empty(n_ops, np.int32 if c < 2 ** 31 else np.int64),
        "kv_tokens": np.empty(n_ops, np.int32 if c < 2 ** 31 else np.int64),
        "q_chunks": np.empty(n_ops, small), "kv_chunks": np.empty(n_ops, small),
        "pairs": np.empty(n_ops, np.int32 if int(work.max(initial=0)) < 2 ** 31 else np.int64),
        "nbytes": np.empty(n_ops, np.int32 if wide_bytes < 2 ** 31 else np.int64),
        "flops": np.empty(n_ops), "resource": np.empty(n_ops, small),
    }
    after = np.empty((width, n_ops), ids)
    tables = {"pairs": work, "mask": masks, "q_tokens": extents[0], "kv_tokens": extents[1]}
    if varlen is not None:
        cols["call"] = np.full(n_ops, -1, dtype=np.int32)
        tables["call"] = varlen.call
    gate = None          # last compute of the previous phase, per rank
    waves = []
    for i, (phase, grid) in enumerate(zip(phases, grids)):
        waves.append(grid.wave_starts(scenario.overlap))
        gate = _fill(scenario, phase, grid, tables, cols, after, i * n, gate)
    names = [f"GPU {r} compute" for r in range(n)] + [f"link {r}->{(r + 1) % n}" for r in range(n)]
    stepped = n > 1 and scenario.overlap and scenario.sync == "step"
    wave_starts = np.append(np.concatenate(waves), n_ops)
    extra = None
    topo = Topology.of(scenario.hardware, n)
    if topo.fabric is not None and n > 1:
        # inside a PCIe node a hop also holds the links of its route (sim.hardware.pcie), which
        # hops of one step may share: the waves are cut again over all the resources
        is_hop = cols["kind"] != FWD
        is_hop &= cols["kind"] != BWD
        route = topo.route(np.arange(n), (np.arange(n) + 1) % n)[1:]
        rank = cols["rank"].astype(np.int64)
        extra = np.stack([np.where(is_hop, x[rank], -1) for x in route])
        names = names + topo.resource_names()[2 * n:]
        wave_starts = cut_waves(np.vstack([cols["resource"][None, :].astype(np.int64), extra]), after)
    if varlen is not None:
        cols["calls"] = varlen.calls
    return Schedule(n_ranks=n, **cols, chunk_sets=chunk_sets, after=after,
                    wave_starts=wave_starts, resource_names=names, extra_resources=extra,
                    posts=(lambda: _posts(grids, n, n_ops, ids)) if stepped else None)


def _posts(grids: list["_Grid"], n: int, n_ops: int, ids: type) -> Posts:
    """Schedule.posts of a step-synchronous ring (hw.ring). Rank r posts the K/V hop of
    step k to r + 1 right before its compute of step k, in one batch with the receive of
    the K/V hop from r - 1. In backward it posts the dK/dV hop of step k on its own,
    once its compute of step k is done and the dK/dV hops of step k - 1 it sends and
    receives are in, before its compute of step k + 1; again with the receive from r - 1."""
    held = np.full(n_ops, NO_DEP, dtype=ids)
    partner = np.full(n_ops, NO_DEP, dtype=ids)
    after = np.full((3, n_ops), NO_DEP, dtype=ids)
    r = np.arange(n)
    for g in grids:
        comp, kv = g.ids("comp")[:, None], g.ids("kv")[:-1, None]
        held[kv + r] = comp[:-1] + r
        partner[kv + r] = kv + (r + 1) % n
        if "dkv" in g.groups:
            dkv = g.ids("dkv")[:, None]
            held[dkv[:-1] + r] = comp[1:] + r
            partner[dkv + r] = dkv + (r + 1) % n
            after[0, dkv + r] = comp + r
            after[1, dkv[1:] + r] = dkv[:-1] + r
            after[2, dkv[1:] + r] = dkv[:-1] + (r - 1) % n
    return Posts(held, partner, after)


def count_ring_ops(scenario: Scenario) -> int:
    """The operations of the scenario's ring schedule (its phases' grids), without building it."""
    n = scenario.n_gpus
    return sum(_Grid(n, phase, 0).n_ops for phase in PHASES[scenario.workload.pass_])


def _phase_bases(n: int, phases: list[str]) -> list[int]:
    bases, base = [], 0
    for phase in phases:
        bases.append(base)
        base += _Grid(n, phase, base).n_ops
    return bases


class _Grid:
    """Where a phase's operations sit in the schedule's columns.

    Operations are numbered step by step: the N computes of step k (rank 0 first), then
    its N K/V hops (none at the last step), then in backward its N dK/dV hops. So group
    g ("comp", "kv", "dkv") of steps 0..N-2 is a strided (step, rank) view of a column,
    and the last step's are a slice after them."""

    def __init__(self, n: int, phase: str, base: int):
        self.n, self.base = n, base
        self.bwd = phase == "bwd"
        self.groups = ["comp", "kv"] + (["dkv"] if self.bwd and n > 1 else [])
        k = np.arange(n)
        self.has_kv = k <= n - 2
        per_step = n * (1 + self.has_kv + (len(self.groups) == 3))
        self.n_ops = int(per_step.sum())
        self.first = base + np.concatenate(([0], np.cumsum(per_step)[:-1]))   # (steps,) id of each step's first op
        self.offset = {"comp": np.zeros(n, dtype=np.int64), "kv": np.full(n, n),
                       "dkv": n + n * self.has_kv.astype(np.int64)}

    def ids(self, group: str) -> np.ndarray:
        """(steps,) the id of rank 0's op of `group` at each step, NO_DEP where the step has none."""
        out = self.first + self.offset[group]
        return np.where(self.has_kv, out, NO_DEP) if group == "kv" else out

    def width(self, scenario: Scenario, gated: bool) -> int:
        """The most dependencies an op of this phase has (see _after); `gated`: it
        follows another phase."""
        return max(len(rows) for rows in _after(scenario, self, np.zeros(self.n) if gated else None).values())

    def views(self, column: np.ndarray, group: str) -> tuple[np.ndarray, np.ndarray | None]:
        """(steps 0..N-2, rank) view of `column` for `group`, and the last step's (rank,)
        slice (None for the K/V hops, which have none)."""
        n, g = self.n, len(self.groups)
        regular = column[self.base:self.base + (n - 1) * g * n].reshape(n - 1, g, n)[:, self.groups.index(group)]
        if group == "kv":
            return regular, None
        at = int(self.first[-1] + self.offset[group][-1])
        return regular, column[at:at + n]

    def put(self, column: np.ndarray, group: str, value, k0: int = 0, k1: int | None = None) -> None:
        """Write `value` on steps k0..k1-1 of the group: a number, a value per rank (n,),
        per step (steps, 1), or per (step, rank) (steps, n), the steps k0..k1-1 only."""
        n = self.n
        k1 = n if k1 is None else k1
        regular, last = self.views(column, group)
        value = np.asarray(value)
        rows = value.ndim == 2
        stop = min(k1, n - 1)
        if k0 < stop:
            regular[k0:stop] = value[:stop - k0] if rows else value
        if last is not None and k1 == n:
            last[:] = value[n - 1 - k0] if rows else value

    def wave_starts(self, overlap: bool) -> np.ndarray:
        """A step's computes, its K/V hops, its dK/dV hops. With overlap a K/V hop waits
        only on earlier steps, so it joins the computes of its step in one wave."""
        starts = [self.ids("comp")] if overlap else [self.ids("comp"), self.ids("kv")[:-1]]
        if "dkv" in self.groups:
            starts.append(self.ids("dkv"))
        return np.sort(np.concatenate(starts))


def _after(scenario: Scenario, grid: _Grid, gate: np.ndarray | None) -> dict[str, list[tuple]]:
    """What each group's ops wait on, per group a list of rows, each a rule:
    (group, by, x, when): the op of `group` at step k - by on rank r + x (NO_DEP where
    k < by), kept where `when` holds (None, "k>=2": from step 2, "pairs": a non-empty
    block); or ("gate", x): the previous phase's last compute on rank r + x."""
    overlap, stepped = scenario.overlap, scenario.overlap and scenario.sync == "step"
    bwd = grid.bwd

    def reach(x: int) -> list[tuple]:
        """What rank r + x waits for before it starts step k (step-synchronous kernel)."""
        out = [("comp", 1, x, None), ("kv", 1, x, None), ("kv", 1, x - 1, None)]
        if bwd:
            out += [("dkv", 2, x, None), ("dkv", 2, x - 1, None)]     # NO_DEP at k = 1 by construction
        return out

    def post_dkv(x: int) -> list[tuple]:
        """What rank r + x waits for before it posts the dK/dV hop of step k."""
        return [("comp", 0, x, None), ("dkv", 1, x, None), ("dkv", 1, x - 1, None)]

    gated = [] if gate is None else [("gate", 0), ("gate", 1)]
    rules = {}
    # computes of step k on every rank
    if stepped:
        rules["comp"] = reach(0)
    elif not overlap:
        # lock-step: the step's exchanges, both ways, are done (nothing at k = 0)
        rules["comp"] = [("kv", 1, -1, None), ("kv", 1, 0, None)] + (
            [("dkv", 1, -1, None), ("dkv", 1, 0, None)] if bwd else [])
    else:
        rules["comp"] = [("kv", 1, -1, "pairs")]   # an empty block is skipped without its data
    # K/V forwarded at step k (block k+1 of the receiver)
    if stepped:
        rules["kv"] = reach(0) + reach(1)
    elif not overlap:
        rules["kv"] = [("comp", 0, 0, None), ("comp", 0, 1, None)]
    else:
        rules["kv"] = [("kv", 1, -1, None), ("comp", 1, 1, "k>=2"), ("kv", 1, 1, "k>=2")]
    rules["kv"] = rules["kv"] + gated
    # dK/dV accumulators forwarded after the step's compute (backward only)
    if "dkv" in grid.groups:
        if stepped:
            rules["dkv"] = post_dkv(0) + post_dkv(1)
        else:
            rules["dkv"] = [("comp", 0, 0, None), ("dkv", 1, -1, None)] + (
                [("dkv", 1, 1, "k>=2")] if overlap else [("comp", 0, 1, None)])
        rules["dkv"] = rules["dkv"] + gated
    # a rule named twice (both ends wait for the hop between them) is one dependency: a
    # row of `after` less for every op (4 bytes an op, 134 MB at 4096 GPUs)
    return {group: list(dict.fromkeys(rows)) for group, rows in rules.items()}


def _fill(scenario: Scenario, phase: str, grid: _Grid, tables: dict[str, np.ndarray],
          cols: dict[str, np.ndarray], after: np.ndarray, step0: int, gate: np.ndarray | None) -> np.ndarray:
    """Write one phase's operations into the columns; returns its last computes (per rank)."""
    w = scenario.workload
    n = scenario.n_gpus
    c = scenario.tokens_per_rank
    r = np.arange(n)
    nxt = (r + 1) % n
    steps = (step0 + np.arange(n))[:, None]
    hop = dict(rank=r, peer=nxt, step=steps, pairs=0, mask=FULL, q_tokens=0, kv_tokens=0, q_chunks=-1,
               flops=0.0, resource=n + r)
    values = {
        "comp": dict(kind=BWD if grid.bwd else FWD, rank=r, peer=-1, step=steps, nbytes=0, q_chunks=r, resource=r),
        "kv": dict(hop, kind=KV, nbytes=w.kv_bytes(c)),
        "dkv": dict(hop, kind=DKV, nbytes=w.dkv_bytes(c)),
    }
    # what varies with the block: rank r at step k computes on (and forwards) the block
    # of rank (r - k) mod N; gathered a few steps at a time
    flops_per_pair = (1.0 if phase == "fwd" else BWD_FLOPS_FACTOR) * w.fwd_flops(1)
    twice = np.tile(r.astype(cols["kv_rank"].dtype), 2)      # (r - k) mod N, read off as a window
    per_pass = max(1, _ROWS // n)
    passes = [(k0, min(n, k0 + per_pass)) for k0 in range(0, n, per_pass)]

    def shared() -> None:
        """What a group's ops share, or what varies only by step or by rank."""
        for group in grid.groups:
            for name, value in values[group].items():
                grid.put(cols[name], group, value)

    def owners() -> None:
        for k0, k1 in passes:
            owner = _rolled(twice, k0, k1)
            for group in grid.groups:
                stop = min(k1, n - 1) if group == "kv" else k1
                if k0 < stop:
                    grid.put(cols["kv_rank"], group, owner[:stop - k0], k0, stop)
                    grid.put(cols["kv_chunks"], group, owner[:stop - k0], k0, stop)

    def from_table(name: str) -> None:
        flat = tables[name].ravel()
        for k0, k1 in passes:
            v = flat[r * n + _rolled(twice, k0, k1)]
            grid.put(cols[name], "comp", v, k0, k1)
            if name == "pairs":
                grid.put(cols["flops"], "comp", flops_per_pair * v, k0, k1)

    # the dependencies, row by row: an op's id is affine in (step, rank), so each row is
    # written in place from a vector per step and one per rank (a rule may read the
    # blocks' work: after the tables)
    rules = _after(scenario, grid, gate)

    def dependencies(at: tuple[str, int]) -> None:
        group, row = at
        regular, last = grid.views(after[row], group)
        rule = rules[group][row] if row < len(rules[group]) else None
        _put_rule(grid, regular, last, rule, gate, cols["pairs"])

    # each piece writes its own columns, or its own ops of a shared one: side by side
    each(lambda f: f(), [shared, owners] + [lambda name=name: from_table(name) for name in tables],
         size=n * n)
    each(dependencies, [(group, row) for group in rules for row in range(after.shape[0])], size=n * n)
    return grid.ids("comp")[-1] + r


def _rolled(twice: np.ndarray, k0: int, k1: int) -> np.ndarray:
    """(k1 - k0, N) view: row k is (r - k) mod N over the ranks r (`twice`: 0..N-1 twice)."""
    n = len(twice) // 2
    step = twice.strides[0]
    return np.lib.stride_tricks.as_strided(twice[n - k0:], (k1 - k0, n), (-step, step), writeable=False)


def _put_rule(grid: _Grid, regular: np.ndarray, last: np.ndarray | None, rule: tuple | None,
              gate: np.ndarray | None, pairs: np.ndarray) -> None:
    """Write one dependency row of a group (see _after): `regular` (steps 0..N-2, rank)
    and `last` (the last step's ranks, or None)."""
    n = grid.n
    parts = [(regular, 0, n - 1)] + ([(last, n - 1, n)] if last is not None else [])
    if rule is None:
        for view, _, _ in parts:
            view[...] = NO_DEP
        return
    if rule[0] == "gate":
        for view, _, _ in parts:
            view[...] = np.roll(gate, -rule[1])
        return
    group, by, x, when = rule
    dtype = regular.dtype
    shifted = ((np.arange(n) + x) % n).astype(dtype)
    ids = grid.ids(group)
    base = np.full(n, NO_DEP, dtype=dtype)        # per step k: the id of rank 0's op at k - by
    base[by:] = ids[:n - by]
    for view, k0, k1 in parts:
        rows = base[k0:k1]
        if view.ndim == 1:
            view[:] = rows[0] + shifted if rows[0] != NO_DEP else NO_DEP
        else:
            np.add(rows[:, None], shifted[None, :], out=view)
            view[rows == NO_DEP] = NO_DEP
        if when == "k>=2":
            if view.ndim == 1:
                if k0 < 2:
                    view[:] = NO_DEP
            else:
                view[:max(0, 2 - k0)] = NO_DEP
        elif when == "pairs":
            own = grid.views(pairs, "comp")[0 if view.ndim == 2 else 1]
            np.copyto(view, NO_DEP, where=own == 0)


def ring_buffers(ranks: int) -> int:
    """Blocks a rank of a ring of `ranks` holds besides its own: the block computed on and
    the block arriving (two), from three ranks; on two the one block arriving (its own is
    computed on), on one none (nothing moves)."""
    return max(0, min(2, ranks - 1))


def peak_memory_bytes(workload: Workload, tokens_per_rank: int, ranks: int) -> dict[str, int]:
    """Bytes per rank of a ring of `ranks`, itemized; 'total' is the peak (docs/design.md,
    fact 4 and "Peak memory").

    A rank holds its own Q/K/V shard, ring buffers of K/V (`ring_buffers`: the block computed
    on and the block arriving), its output, an fp32 output accumulator and fp32 softmax
    statistics (running max and normalizer; the log-sum-exp is kept for backward).
    Backward adds dO, the fp32 dQ accumulator and as many ring buffers of fp32 dK/dV.
    From three ranks on, nothing grows with the number of ranks at a fixed number of tokens
    per rank.
    """
    w = workload
    c, eb = tokens_per_rank, w.elem_bytes
    q = w.batch * w.heads * c * w.head_dim
    kv = 2 * w.batch * w.kv_heads * c * w.head_dim
    buffers = ring_buffers(ranks)
    items = {
        "q": q * eb,
        "kv_own": kv * eb,
        "kv_buffers": buffers * kv * eb,
        "out": q * eb,
        "out_accum": q * ACCUM_BYTES,
        "softmax_stats": 2 * w.batch * w.heads * c * ACCUM_BYTES,
    }
    if w.pass_ in ("bwd", "fwdbwd"):
        items["dout"] = q * eb
        items["dq_accum"] = q * ACCUM_BYTES
        items["dkv_buffers"] = buffers * kv * ACCUM_BYTES
    items["total"] = sum(items.values())
    return items


def block_map(trace: Trace) -> BlockMap:
    """Query chunk x key chunk: the ring step (within its pass) at which the chunk pair is
    computed, read from the trace's compute spans; NaN where fully masked or never
    computed."""
    try:
        w = trace.config["workload"]
        layout, seq, causal = trace.config["layout"], int(w["seq"]), bool(w["causal"])
        lay = None if layout in packed.DOC_LAYOUTS else get_layout(layout)
    except (KeyError, TypeError, ValueError, RingsimError):
        raise RingsimError("the trace's header has no layout or workload to draw the block map") from None
    n = trace.n_gpus
    p = packed.from_header(trace.config, n)
    if p is not None:
        work, owner, size, axis = packed.block_map_parts(p)
        return BlockMap(value=ring_step_grid(trace, work, n), work=work, owner=owner, chunk_size=size,
                        value_label=clause("blocks.ring-step"), axis_label=axis)
    work = chunk_pair_work(layout, seq, n, causal)
    grid = ring_step_grid(trace, work, n)
    return BlockMap(value=grid, work=work, owner=lay.owner_of_chunk(n), chunk_size=seq // lay.n_chunks(n),
                    value_label=clause("blocks.ring-step"), axis_label=clause(lay.chunk_axis))


def variants(workload: Workload, hardware: Hardware, n_gpus: int) -> list[Variant]:
    """What a comparison runs: every layout worth trying, overlap on."""
    return [Variant(clause("variant.ring", layout=layout), {"layout": layout, "overlap": True})
            for layout in layouts_for(workload)]


def candidates(workload: Workload, hardware: Hardware, n_gpus: int) -> list[Variant]:
    """What a plan tries: every layout worth trying."""
    return [Variant(clause("variant.layout", layout=layout), {"layout": layout}) for layout in layouts_for(workload)]


def run_words(config: dict) -> str:
    return f"ring, {config['layout']} layout, overlap {'on' if config['overlap'] else 'off'}"


SCHEME = Scheme(
    name="ring",
    summary="Ring Attention: queries stay, K/V blocks pass around a ring of N GPUs (N-1 hops)",
    build_schedule=build_ring_schedule,
    peak_memory=lambda scenario: peak_memory_bytes(scenario.workload, scenario.tokens_per_rank, scenario.n_gpus),
    op_kinds={
        **COMPUTE_KINDS,
        "kv": OpKind("K/V", "#2e9e5b", "#1aa3a3"),
        "dkv": OpKind("dK/dV", "#8ab833", "#7fc9c9"),
    },
    block_map=block_map,
    check=lambda scenario: scenario.check_layout_chunks(),
    ring_options=("layout", "overlap", "sync"),
    variants=variants,
    candidates=candidates,
    training_cp=True,
    # TransformerEngine's ring (Megatron's default cp_comm_type); torch's "alltoall" rotation,
    # which torchtitan 0.3.0 has no setting for
    frameworks={"megatron": ("p2p",)},
    run_words=run_words,
    # forward, step-synchronous or lock-step: a rank posts K/V hop k after hop k-1 was done
    # on both its ranks, and hop k waits for that on both ends (see _after), so the queue of
    # batches adds nothing; backward posts K/V hop k before dK/dV hop k-1 is done
    batches_in_order=lambda scenario: scenario.workload.pass_ == "fwd" and (
        scenario.sync == "step" or not scenario.overlap),
    count_ops=count_ring_ops,
)
