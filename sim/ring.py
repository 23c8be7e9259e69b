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

Operations are numbered step by step: the N computes of step k (rank 0 first), then
its N K/V hops (none at the last step), then in backward its N dK/dV hops. Each group
waits only on earlier steps or groups and uses each rank and each link once: a wave of
the schedule (sim.schedule); with overlap, a step's K/V hops wait on nothing of its
computes, and the two groups make one wave. The rules are written once, as numpy
arrays over a (step, rank) grid, instead of once per operation.
"""

from __future__ import annotations

import numpy as np

from sim.config import BWD_FLOPS_FACTOR, Scenario
from sim.extents import block_extents
from sim.layouts import block_masks, block_work, chunks_of_rank
from sim.schedule import BWD, DIAGONAL, DKV, EMPTY, FULL, FWD, KV, NO_DEP, Schedule

# the rows of the builder's table: the integer columns of a schedule, then `after`
_INT_COLUMNS = ("kind", "rank", "peer", "step", "kv_rank", "pairs", "mask", "q_tokens",
                "kv_tokens", "nbytes", "q_chunks", "kv_chunks")


def build_ring_schedule(scenario: Scenario) -> Schedule:
    w = scenario.workload
    n = scenario.n_gpus
    work = block_work(scenario.layout, w.seq, n, w.causal, scenario.granularity, scenario.tile)
    masks = block_masks(scenario.layout, w.seq, n, w.causal)
    extents = block_extents(scenario.layout, w.seq, n, w.causal)
    mask_codes = np.where(masks == "empty", EMPTY, np.where(masks == "diagonal", DIAGONAL, FULL))
    phases = {"fwd": ["fwd"], "bwd": ["bwd"], "fwdbwd": ["fwd", "bwd"]}[w.pass_]
    tables, flops, waves = [], [], []
    gate = None          # last compute of the previous phase, per rank
    base = 0
    for i, phase in enumerate(phases):
        table, phase_flops, phase_waves, gate = _phase(scenario, phase, work, mask_codes, extents,
                                                       base, i * n, gate)
        tables.append(table)
        flops.append(phase_flops)
        waves.append(phase_waves)
        base += table.shape[1]
    if len(tables) == 1:
        table, flops = tables[0], flops[0]
    else:
        # phases may wait on different numbers of ops: pad the narrower `after` with NO_DEP
        height = max(t.shape[0] for t in tables)
        table = np.concatenate([np.pad(t, ((0, height - t.shape[0]), (0, 0)), constant_values=NO_DEP)
                                for t in tables], axis=1)
        flops = np.concatenate(flops)
    columns = dict(zip(_INT_COLUMNS, table))
    # rank r computes on stream r and sends on one link, to r + 1: stream n + r
    resource = np.where(columns["kind"] >= KV, n + columns["rank"], columns["rank"])
    return Schedule(n_ranks=n, **columns, flops=flops, chunk_sets=chunks_of_rank(scenario.layout, n),
                    after=table[len(_INT_COLUMNS):], wave_starts=np.append(np.concatenate(waves), base),
                    resource=resource)


def _phase(scenario: Scenario, phase: str, work: np.ndarray, mask_codes: np.ndarray,
           extents: tuple[np.ndarray, np.ndarray], base: int, step0: int, gate: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One phase's operations (ids from `base`): a table whose rows are _INT_COLUMNS then
    the dependencies, a column per operation; their FLOPs; where its waves start; and
    its last computes."""
    w = scenario.workload
    n = scenario.n_gpus
    c = scenario.tokens_per_rank
    overlap = scenario.overlap
    stepped = overlap and scenario.sync == "step"
    bwd = phase == "bwd"
    has_dkv = bwd and n > 1

    # op ids on the (step k, rank r) grid, NO_DEP where a step has no such op; numbered
    # step by step: the computes, then the K/V hops, then the dK/dV hops, rank by rank
    k = np.arange(n)[:, None]
    r = np.arange(n)[None, :]
    prev, nxt = (np.arange(n) - 1) % n, (np.arange(n) + 1) % n
    has_kv = k <= n - 2
    per_step = n * (1 + has_kv[:, 0] + has_dkv)
    first = base + np.concatenate(([0], np.cumsum(per_step)[:-1]))[:, None]
    comp = first + r
    kv = np.where(has_kv, first + n + r, NO_DEP)
    dkv = first + n + n * has_kv + r if has_dkv else np.full((n, n), NO_DEP)

    def back(grid: np.ndarray, by: int) -> np.ndarray:
        """grid[k - by][r] on the grid; NO_DEP where k < by."""
        out = np.full_like(grid, NO_DEP)
        out[by:] = grid[:n - by]
        return out

    def when(cond: np.ndarray, grid: np.ndarray) -> np.ndarray:
        return np.where(cond, grid, NO_DEP)

    comp1, kv1, dkv1, dkv2 = back(comp, 1), back(kv, 1), back(dkv, 1), back(dkv, 2)

    def reach(x: np.ndarray) -> list[np.ndarray]:
        """What rank x waits for before it starts step k (step-synchronous kernel)."""
        out = [comp1[:, x], kv1[:, x], kv1[:, prev[x]]]
        if bwd:
            out += [dkv2[:, x], dkv2[:, prev[x]]]     # NO_DEP at k = 1 by construction
        return out

    def post_dkv(x: np.ndarray) -> list[np.ndarray]:
        """What rank x waits for before it posts the dK/dV hop of step k."""
        return [comp[:, x], dkv1[:, x], dkv1[:, prev[x]]]

    gated = [] if gate is None else [np.broadcast_to(gate, (n, n)), np.broadcast_to(gate[nxt], (n, n))]
    owner = (r - k) % n
    pairs = work[r, owner]
    everyone = np.arange(n)

    # computes of step k on every rank
    if stepped:
        after = reach(everyone)
    elif not overlap:
        # lock-step: the step's exchanges, both ways, are done (nothing at k = 0)
        after = [kv1[:, prev], kv1] + ([dkv1[:, prev], dkv1] if bwd else [])
    else:
        after = [when(pairs > 0, kv1[:, prev])]   # an empty block is skipped without its data
    flops_per_pair = (1.0 if phase == "fwd" else BWD_FLOPS_FACTOR) * w.fwd_flops(1)
    steps = step0 + k
    groups = [(comp, after, dict(
        kind=BWD if bwd else FWD, rank=r, peer=-1, step=steps, kv_rank=owner, pairs=pairs,
        mask=mask_codes[r, owner], q_tokens=extents[0][r, owner], kv_tokens=extents[1][r, owner], nbytes=0,
        q_chunks=r, kv_chunks=owner))]

    # K/V forwarded at step k (block k+1 of the receiver)
    if stepped:
        after = reach(everyone) + reach(nxt)
    elif not overlap:
        after = [comp, comp[:, nxt]]
    else:
        after = [kv1[:, prev], when(k >= 2, comp1[:, nxt]), when(k >= 2, kv1[:, nxt])]
    hop = dict(rank=r, peer=nxt[r], step=steps, kv_rank=owner, pairs=0, mask=FULL, q_tokens=0,
               kv_tokens=0, q_chunks=-1, kv_chunks=owner)
    groups.append((kv, after + gated, dict(hop, kind=KV, nbytes=w.kv_bytes(c))))

    # dK/dV accumulators forwarded after the step's compute (backward only)
    if has_dkv:
        if stepped:
            after = post_dkv(everyone) + post_dkv(nxt)
        else:
            after = [comp, dkv1[:, prev]] + ([when(k >= 2, dkv1[:, nxt])] if overlap else [comp[:, nxt]])
        groups.append((dkv, after + gated, dict(hop, kind=DKV, nbytes=w.dkv_bytes(c))))

    # the phase's ops in id order: step by step, each group's ops rank by rank, leaving
    # out the K/V hops of the last step; an op may list an id twice (a rank and its
    # successor both wait on it): Schedule.ops lists it once
    width = max(len(after) for _, after, _ in groups)
    table = np.empty((len(_INT_COLUMNS) + width, n, len(groups), n), dtype=np.int64)
    for g, (_, after, values) in enumerate(groups):
        rows = [values[name] for name in _INT_COLUMNS] + after + [NO_DEP] * (width - len(after))
        for row, value in zip(table, rows):
            row[:, g] = value        # a number, a value per rank or a (step, rank) grid
    table = table.reshape(len(table), -1, n)                   # (row, (step, group), rank)
    present = np.stack([ids[:, 0] != NO_DEP for ids, _, _ in groups], axis=1).ravel()
    kept = int(present.sum())
    if present[:kept].all():
        table = table[:, :kept]        # the missing blocks are the last ones: a view will do
    else:
        # np.compress: indexing a middle axis with [:, present] is many times slower
        table = np.compress(present, table, axis=1)
    table = table.reshape(len(table), -1)
    flops = np.zeros((n, len(groups), n))
    flops[:, 0] = flops_per_pair * pairs
    # waves: a step's computes, its K/V hops, its dK/dV hops. With overlap a K/V hop waits
    # only on earlier steps, so it joins the computes of its step in one wave.
    starts = [comp[:, 0]] if overlap else [comp[:, 0], kv[:-1, 0]]
    if has_dkv:
        starts.append(dkv[:, 0])
    waves = np.sort(np.concatenate(starts))
    return table, np.compress(present, flops.reshape(-1, n), axis=0).ravel(), waves, comp[n - 1]
