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
"""

from __future__ import annotations

from sim.config import BWD_FLOPS_FACTOR, Scenario
from sim.layouts import block_masks, block_work, chunks_of_rank
from sim.schedule import ComputeOp, Schedule, TransferOp


def build_ring_schedule(scenario: Scenario) -> Schedule:
    w = scenario.workload
    n = scenario.n_gpus
    c = scenario.tokens_per_rank
    work = block_work(scenario.layout, w.seq, n, w.causal, scenario.granularity, scenario.tile)
    masks = block_masks(scenario.layout, w.seq, n, w.causal)
    chunks = chunks_of_rank(scenario.layout, n)
    sched = Schedule(n_ranks=n)
    phases = {"fwd": ["fwd"], "bwd": ["bwd"], "fwdbwd": ["fwd", "bwd"]}[w.pass_]
    gate: list[int] | None = None          # last compute of the previous phase, per rank
    step0 = 0
    for phase in phases:
        gate = _add_phase(sched, scenario, phase, work, masks, chunks, c, step0, gate)
        step0 += n
    return sched


def _add_phase(sched: Schedule, scenario: Scenario, phase: str, work, masks, chunks, c: int,
               step0: int, gate: list[int] | None) -> list[int]:
    w = scenario.workload
    n = scenario.n_gpus
    overlap = scenario.overlap
    stepped = overlap and scenario.sync == "step"
    bwd = phase == "bwd"
    flops_per_pair = (1.0 if phase == "fwd" else BWD_FLOPS_FACTOR) * w.fwd_flops(1)
    ops, order = sched.ops, sched.compute_order
    # op ids by [step][rank]; kv[k][r] is the K/V hop r -> r+1 of step k, dkv likewise
    comp: list[list[int]] = []
    kv: list[list[int]] = []
    dkv: list[list[int]] = []
    prev = [(r - 1) % n for r in range(n)]
    nxt = [(r + 1) % n for r in range(n)]

    def gated(*ranks: int) -> tuple[int, ...]:
        return tuple(gate[r] for r in ranks) if gate is not None else ()

    def reach(r: int, k: int) -> list[int]:
        """What rank r waits for before it starts step k (step-synchronous kernel)."""
        if k == 0:
            return []
        out = [comp[k - 1][r], kv[k - 1][r], kv[k - 1][prev[r]]]
        if bwd and k >= 2:
            out += [dkv[k - 2][r], dkv[k - 2][prev[r]]]
        return out

    def post_dkv(r: int, k: int) -> list[int]:
        """What rank r waits for before it posts the dK/dV hop of step k."""
        return [comp[k][r]] + ([dkv[k - 1][r], dkv[k - 1][prev[r]]] if k >= 1 else [])

    work, masks = work.tolist(), masks.tolist()
    kv_bytes, dkv_bytes = w.kv_bytes(c), w.dkv_bytes(c)
    for k in range(n):
        # computes of step k on every rank
        row = []
        for r in range(n):
            owner = (r - k) % n
            pairs = work[r][owner]
            if stepped:
                after = reach(r, k)
            elif k == 0:
                after = []
            elif not overlap:
                # lock-step: the step's exchanges, both ways, are done
                after = [kv[k - 1][prev[r]], kv[k - 1][r]]
                if bwd:
                    after += [dkv[k - 1][prev[r]], dkv[k - 1][r]]
            elif pairs > 0:
                after = [kv[k - 1][prev[r]]]
            else:
                after = []   # an empty block is skipped without waiting for its data
            op_id = len(ops)
            ops.append(ComputeOp(op_id, r, phase, step0 + k, owner, pairs, flops_per_pair * pairs,
                                 masks[r][owner], c, c, chunks[r], chunks[owner], tuple(after)))
            order[r].append(op_id)
            row.append(op_id)
        comp.append(row)
        # K/V forwarded at step k (block k+1 of the receiver)
        row = []
        if k <= n - 2:
            for r in range(n):
                dst = nxt[r]
                if stepped:
                    after = list(dict.fromkeys(reach(r, k) + reach(dst, k)))
                elif not overlap:
                    after = [comp[k][r], comp[k][dst]]
                else:
                    after = [kv[k - 1][prev[r]]] if k >= 1 else []
                    if k >= 2:
                        after += [comp[k - 1][dst], kv[k - 1][dst]]
                owner = (r - k) % n
                op_id = len(ops)
                ops.append(TransferOp(op_id, r, dst, "kv", step0 + k, owner, kv_bytes, chunks[owner],
                                      tuple(after) + gated(r, dst)))
                row.append(op_id)
        kv.append(row)
        # dK/dV accumulators forwarded after the step's compute (backward only)
        row = []
        if bwd and n > 1:
            for r in range(n):
                dst = nxt[r]
                if stepped:
                    after = list(dict.fromkeys(post_dkv(r, k) + post_dkv(dst, k)))
                else:
                    after = [comp[k][r]]
                    if k >= 1:
                        after.append(dkv[k - 1][prev[r]])
                    if overlap and k >= 2:
                        after.append(dkv[k - 1][dst])
                    if not overlap:
                        after.append(comp[k][dst])
                owner = (r - k) % n
                op_id = len(ops)
                ops.append(TransferOp(op_id, r, dst, "dkv", step0 + k, owner, dkv_bytes, chunks[owner],
                                      tuple(after) + gated(r, dst)))
                row.append(op_id)
        dkv.append(row)
    return comp[n - 1]
