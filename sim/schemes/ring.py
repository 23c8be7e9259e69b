"""The Ring Attention schedule (DESIGN.md, facts 2 and 5; the issue's dependencies).

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

Each hop holds its directed link (r -> r+1). Across nodes (sim.topology) that is exact
too: every rank sends to one rank and receives from one, and with ranks packed into
nodes in order only one hop leaves each node and one enters it, so no two hops ever
meet on a port or a NIC, shared or not; a hop between nodes runs at the NIC's speed
(sim.config.Hardware.transfer_times_s).

Operations are numbered step by step: the N computes of step k (rank 0 first), then
its N K/V hops (none at the last step), then in backward its N dK/dV hops. Each group
waits only on earlier steps or groups and uses each rank and each link once: a wave of
the schedule (sim.schedule); with overlap, a step's K/V hops wait on nothing of its
computes, and the two groups make one wave. The rules are written once, as numpy
arrays over a (step, rank) grid, instead of once per operation.
"""

from __future__ import annotations

import numpy as np

from sim.errors import RingsimError
from sim.config import ACCUM_BYTES, BWD_FLOPS_FACTOR, Scenario, Workload
from sim.layouts import (block_extents, block_work_and_masks, chunk_pair_work, chunks_of_rank,
                         get as get_layout)
from sim.schedule import BWD, DKV, FULL, FWD, KV, NO_DEP, Schedule
from sim.schemes.base import COMPUTE_KINDS, BlockMap, OpKind, Scheme, only_settings
from sim.trace import COMPUTE, Trace

# the rows of the builder's table: the small integer columns of a schedule, then `after`
# (int32: half the memory of a million-op schedule); the counts that may pass 2^31 apart
_INT_COLUMNS = ("kind", "rank", "peer", "step", "kv_rank", "mask", "q_tokens", "kv_tokens",
                "q_chunks", "kv_chunks")
_WIDE_COLUMNS = ("pairs", "nbytes")


def build_ring_schedule(scenario: Scenario) -> Schedule:
    w = scenario.workload
    n = scenario.n_gpus
    work, masks = block_work_and_masks(scenario.layout, w.seq, n, w.causal, scenario.granularity,
                                       scenario.tile)
    mask_codes = masks.astype(np.int8)      # codes in the order of MASKS: full, diagonal, empty
    extents = block_extents(scenario.layout, w.seq, n, w.causal)   # each block's kernel call
    phases = {"fwd": ["fwd"], "bwd": ["bwd"], "fwdbwd": ["fwd", "bwd"]}[w.pass_]
    tables, wides, flops, waves = [], [], [], []
    gate = None          # last compute of the previous phase, per rank
    base = 0
    small = np.int32 if max(w.seq, 4 * n * n * len(phases)) < 2 ** 31 else np.int64
    for i, phase in enumerate(phases):
        table, wide, phase_flops, phase_waves, gate = _phase(scenario, phase, work, mask_codes, extents,
                                                             base, i * n, gate, small)
        tables.append(table)
        wides.append(wide)
        flops.append(phase_flops)
        waves.append(phase_waves)
        base += table.shape[1]
    if len(tables) == 1:
        table, wide, flops = tables[0], wides[0], flops[0]
    else:
        # phases may wait on different numbers of ops: pad the narrower `after` with NO_DEP
        height = max(t.shape[0] for t in tables)
        table = np.concatenate([np.pad(t, ((0, height - t.shape[0]), (0, 0)), constant_values=NO_DEP)
                                for t in tables], axis=1)
        wide = np.concatenate(wides, axis=1)
        flops = np.concatenate(flops)
    columns = dict(zip(_INT_COLUMNS, table)) | dict(zip(_WIDE_COLUMNS, wide))
    # rank r computes on stream r and sends on one link, to r + 1: stream n + r
    resource = np.where(columns["kind"] >= KV, n + columns["rank"], columns["rank"])
    names = [f"GPU {r} compute" for r in range(n)] + [f"link {r}->{(r + 1) % n}" for r in range(n)]
    return Schedule(n_ranks=n, **columns, flops=flops, chunk_sets=chunks_of_rank(scenario.layout, n),
                    after=table[len(_INT_COLUMNS):], wave_starts=np.append(np.concatenate(waves), base),
                    resource=resource, resource_names=names)


def _phase(scenario: Scenario, phase: str, work: np.ndarray, mask_codes: np.ndarray,
           extents: tuple[np.ndarray, np.ndarray], base: int, step0: int, gate: np.ndarray | None,
           small: type
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One phase's operations (ids from `base`): a table (of type `small`) whose rows are
    _INT_COLUMNS then the dependencies, a column per operation; the int64 _WIDE_COLUMNS;
    their FLOPs; where its waves start; and its last computes."""
    w = scenario.workload
    n = scenario.n_gpus
    c = scenario.tokens_per_rank
    overlap = scenario.overlap
    stepped = overlap and scenario.sync == "step"
    bwd = phase == "bwd"
    has_dkv = bwd and n > 1

    # op ids on the (step k, rank r) grid, NO_DEP where a step has no such op; numbered
    # step by step: the computes, then the K/V hops, then the dK/dV hops, rank by rank
    k = np.arange(n, dtype=small)[:, None]
    r = np.arange(n, dtype=small)[None, :]
    nxt = (np.arange(n, dtype=small) + 1) % n
    has_kv = k <= n - 2
    per_step = n * (1 + has_kv[:, 0] + has_dkv)
    first = (base + np.concatenate(([0], np.cumsum(per_step)[:-1]))[:, None]).astype(small)
    comp = first + r
    kv = np.where(has_kv, first + n + r, NO_DEP)
    dkv = first + n + n * has_kv.astype(small) + r if has_dkv else np.full((n, n), NO_DEP, dtype=small)

    def back(grid: np.ndarray, by: int) -> np.ndarray:
        """grid[k - by][r] on the grid; NO_DEP where k < by."""
        out = np.full_like(grid, NO_DEP)
        out[by:] = grid[:n - by]
        return out

    def when(cond: np.ndarray, grid: np.ndarray) -> np.ndarray:
        return np.where(cond, grid, NO_DEP)

    comp1, kv1, dkv1, dkv2 = back(comp, 1), back(kv, 1), back(dkv, 1), back(dkv, 2)

    def of(grid: np.ndarray, x: int) -> np.ndarray:
        """grid[:, r + x] on the grid (x = 0: each rank's own, 1: its successor's, -1: its
        predecessor's): a roll of whole rows, not a gather."""
        return grid if x == 0 else np.roll(grid, -x, axis=1)

    def reach(x: int) -> list[np.ndarray]:
        """What rank r + x waits for before it starts step k (step-synchronous kernel)."""
        out = [of(comp1, x), of(kv1, x), of(kv1, x - 1)]
        if bwd:
            out += [of(dkv2, x), of(dkv2, x - 1)]     # NO_DEP at k = 1 by construction
        return out

    def post_dkv(x: int) -> list[np.ndarray]:
        """What rank r + x waits for before it posts the dK/dV hop of step k."""
        return [of(comp, x), of(dkv1, x), of(dkv1, x - 1)]

    gated = [] if gate is None else [np.broadcast_to(gate, (n, n)), np.broadcast_to(gate[nxt], (n, n))]
    owner = (r - k) % n
    pairs = work[r, owner]

    # computes of step k on every rank
    if stepped:
        after = reach(0)
    elif not overlap:
        # lock-step: the step's exchanges, both ways, are done (nothing at k = 0)
        after = [of(kv1, -1), kv1] + ([of(dkv1, -1), dkv1] if bwd else [])
    else:
        after = [when(pairs > 0, of(kv1, -1))]   # an empty block is skipped without its data
    flops_per_pair = (1.0 if phase == "fwd" else BWD_FLOPS_FACTOR) * w.fwd_flops(1)
    steps = step0 + k
    groups = [(comp, after, dict(
        kind=BWD if bwd else FWD, rank=r, peer=-1, step=steps, kv_rank=owner, pairs=pairs,
        mask=mask_codes[r, owner], q_tokens=extents[0][r, owner], kv_tokens=extents[1][r, owner],
        nbytes=0, q_chunks=r, kv_chunks=owner))]

    # K/V forwarded at step k (block k+1 of the receiver)
    if stepped:
        after = reach(0) + reach(1)
    elif not overlap:
        after = [comp, of(comp, 1)]
    else:
        after = [of(kv1, -1), when(k >= 2, of(comp1, 1)), when(k >= 2, of(kv1, 1))]
    hop = dict(rank=r, peer=nxt[r], step=steps, kv_rank=owner, pairs=0, mask=FULL, q_tokens=0,
               kv_tokens=0, q_chunks=-1, kv_chunks=owner)
    groups.append((kv, after + gated, dict(hop, kind=KV, nbytes=w.kv_bytes(c))))

    # dK/dV accumulators forwarded after the step's compute (backward only)
    if has_dkv:
        if stepped:
            after = post_dkv(0) + post_dkv(1)
        else:
            after = [comp, of(dkv1, -1)] + ([when(k >= 2, of(dkv1, 1))] if overlap else [of(comp, 1)])
        groups.append((dkv, after + gated, dict(hop, kind=DKV, nbytes=w.dkv_bytes(c))))

    # the phase's ops in id order: step by step, each group's ops rank by rank, leaving
    # out the K/V hops of the last step; an op may list an id twice (a rank and its
    # successor both wait on it): Schedule.ops lists it once
    width = max(len(after) for _, after, _ in groups)
    table = np.empty((len(_INT_COLUMNS) + width, n, len(groups), n), dtype=small)
    wide = np.empty((len(_WIDE_COLUMNS), n, len(groups), n), dtype=np.int64)
    for g, (_, after, values) in enumerate(groups):
        rows = [values[name] for name in _INT_COLUMNS] + after + [NO_DEP] * (width - len(after))
        for row, value in zip(table, rows):
            row[:, g] = value        # a number, a value per rank or a (step, rank) grid
        for row, name in zip(wide, _WIDE_COLUMNS):
            row[:, g] = values[name]
    present = np.stack([ids[:, 0] != NO_DEP for ids, _, _ in groups], axis=1).ravel()
    kept = int(present.sum())

    def ops_of(x: np.ndarray) -> np.ndarray:
        x = x.reshape(len(x), -1, n)                          # (row, (step, group), rank)
        if present[:kept].all():
            x = x[:, :kept]        # the missing blocks are the last ones: a view will do
        else:
            # np.compress: indexing a middle axis with [:, present] is many times slower
            x = np.compress(present, x, axis=1)
        return x.reshape(len(x), -1)

    table, wide = ops_of(table), ops_of(wide)
    flops = np.zeros((n, len(groups), n))
    flops[:, 0] = flops_per_pair * pairs
    # waves: a step's computes, its K/V hops, its dK/dV hops. With overlap a K/V hop waits
    # only on earlier steps, so it joins the computes of its step in one wave.
    starts = [comp[:, 0]] if overlap else [comp[:, 0], kv[:-1, 0]]
    if has_dkv:
        starts.append(dkv[:, 0])
    waves = np.sort(np.concatenate(starts))
    return table, wide, np.compress(present, flops.reshape(-1, n), axis=0).ravel(), waves, comp[n - 1]


def peak_memory_bytes(workload: Workload, tokens_per_rank: int) -> dict[str, int]:
    """Bytes per rank, itemized; 'total' is the peak (DESIGN.md, fact 4 and "Peak memory").

    A rank holds its own Q/K/V shard, two ring buffers of K/V (the block computed on and
    the block arriving), its output, an fp32 output accumulator and fp32 softmax
    statistics (running max and normalizer; the log-sum-exp is kept for backward).
    Backward adds dO, the fp32 dQ accumulator and two ring buffers of fp32 dK/dV.
    Nothing grows with the number of ranks at a fixed number of tokens per rank.
    """
    w = workload
    c, eb = tokens_per_rank, w.elem_bytes
    q = w.batch * w.heads * c * w.head_dim
    kv = 2 * w.batch * w.kv_heads * c * w.head_dim
    items = {
        "q": q * eb,
        "kv_own": kv * eb,
        "kv_buffers": 2 * kv * eb,
        "out": q * eb,
        "out_accum": q * ACCUM_BYTES,
        "softmax_stats": 2 * w.batch * w.heads * c * ACCUM_BYTES,
    }
    if w.pass_ in ("bwd", "fwdbwd"):
        items["dout"] = q * eb
        items["dq_accum"] = q * ACCUM_BYTES
        items["dkv_buffers"] = 2 * kv * ACCUM_BYTES
    items["total"] = sum(items.values())
    return items


def block_map(trace: Trace) -> BlockMap:
    """Query chunk x key chunk: the ring step (within its pass) at which the chunk pair is
    computed, read from the trace's compute spans; NaN where fully masked or never
    computed."""
    try:
        w = trace.config["workload"]
        layout, seq, causal = trace.config["layout"], int(w["seq"]), bool(w["causal"])
        lay = get_layout(layout)
    except (KeyError, TypeError, ValueError, RingsimError):
        raise RingsimError("the trace's header has no layout or workload to draw the block map") from None
    n = trace.world_size
    work = chunk_pair_work(layout, seq, n, causal)
    grid = np.full(work.shape, np.nan)
    c = trace.columns
    comp = c.stream == COMPUTE
    if comp.any():
        kinds = c.kind[comp]
        first = kinds.min()      # fwd before bwd: the first pass the trace has
        sel = np.flatnonzero(comp)[kinds == first]
        q, k = c.chunk_matrix("q_chunks")[sel], c.chunk_matrix("kv_chunks")[sel]
        step = (c.step[sel] % n).astype(np.float64)
        for i in range(q.shape[1]):
            for j in range(k.shape[1]):
                ok = (q[:, i] >= 0) & (k[:, j] >= 0) & (q[:, i] < work.shape[0]) & (k[:, j] < work.shape[1])
                grid[q[ok, i], k[ok, j]] = step[ok]
    grid[work == 0] = np.nan
    return BlockMap(value=grid, work=work, owner=lay.owner_of_chunk(n), chunk_size=seq // lay.n_chunks(n),
                    value_label="ring step", axis_label=lay.chunk_axis)


def _check(scenario: Scenario) -> None:
    scenario.check_layout_chunks()
    only_settings(scenario, "ring")


SCHEME = Scheme(
    name="ring",
    summary="Ring Attention: queries stay, K/V blocks pass around a ring of N GPUs (N-1 hops)",
    build_schedule=build_ring_schedule,
    peak_memory=lambda scenario: peak_memory_bytes(scenario.workload, scenario.tokens_per_rank),
    op_kinds={
        **COMPUTE_KINDS,
        "kv": OpKind("K/V", "#2e9e5b", "#1aa3a3"),
        "dkv": OpKind("dK/dV", "#8ab833", "#7fc9c9"),
    },
    block_map=block_map,
    check=_check,
)
