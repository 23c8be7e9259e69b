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
    factor = 1.0 if phase == "fwd" else BWD_FLOPS_FACTOR
    comp: dict[tuple[int, int], int] = {}
    kv: dict[tuple[int, int], int] = {}
    dkv: dict[tuple[int, int], int] = {}

    def gated(*ranks: int) -> tuple[int, ...]:
        return tuple(gate[r] for r in ranks) if gate is not None else ()

    def reach(r: int, k: int) -> list[int]:
        """What rank r waits for before it starts step k (step-synchronous kernel)."""
        if k == 0:
            return []
        out = [comp[r, k - 1], kv[r, k - 1], kv[(r - 1) % n, k - 1]]
        if phase == "bwd" and k >= 2:
            out += [dkv[r, k - 2], dkv[(r - 1) % n, k - 2]]
        return out

    def post_dkv(r: int, k: int) -> list[int]:
        """What rank r waits for before it posts the dK/dV hop of step k."""
        return [comp[r, k]] + ([dkv[r, k - 1], dkv[(r - 1) % n, k - 1]] if k >= 1 else [])

    work, masks = work.tolist(), masks.tolist()
    kv_bytes, dkv_bytes = w.kv_bytes(c), w.dkv_bytes(c)
    for k in range(n):
        # computes of step k on every rank
        for r in range(n):
            owner = (r - k) % n
            pairs = work[r][owner]
            after: list[int] = []
            if stepped:
                after = reach(r, k)
            elif k >= 1 and (pairs > 0 or not overlap):
                # an empty block is skipped without waiting for its data, unless the
                # rank is in lock-step with its exchanges (no overlap)
                after.append(kv[(r - 1) % n, k - 1])
                if not overlap:
                    after.append(kv[r, k - 1])
                    if phase == "bwd":
                        after += [dkv[(r - 1) % n, k - 1], dkv[r, k - 1]]
            comp[r, k] = sched.add(
                ComputeOp, rank=r, kind=phase, step=step0 + k, kv_rank=owner, pairs=pairs,
                flops=factor * w.fwd_flops(pairs),
                mask=masks[r][owner],
                q_tokens=c, kv_tokens=c, q_chunks=chunks[r], kv_chunks=chunks[owner],
                after=tuple(after))
        # K/V forwarded at step k (block k+1 of the receiver)
        if k <= n - 2:
            for r in range(n):
                dst = (r + 1) % n
                if stepped:
                    after = reach(r, k) + reach(dst, k)
                elif overlap:
                    after = [kv[(r - 1) % n, k - 1]] if k >= 1 else []
                    if k >= 2:
                        after += [comp[dst, k - 1], kv[dst, k - 1]]
                else:
                    after = [comp[r, k], comp[dst, k]]
                kv[r, k] = sched.add(
                    TransferOp, src=r, dst=dst, kind="kv", step=step0 + k, kv_rank=(r - k) % n,
                    nbytes=kv_bytes, kv_chunks=chunks[(r - k) % n],
                    after=tuple(dict.fromkeys(after)) + gated(r, dst))
        # dK/dV accumulators forwarded after the step's compute (backward only)
        if phase == "bwd" and n > 1:
            for r in range(n):
                dst = (r + 1) % n
                if stepped:
                    after = post_dkv(r, k) + post_dkv(dst, k)
                    dkv[r, k] = sched.add(
                        TransferOp, src=r, dst=dst, kind="dkv", step=step0 + k, kv_rank=(r - k) % n,
                        nbytes=dkv_bytes, kv_chunks=chunks[(r - k) % n],
                        after=tuple(dict.fromkeys(after)) + gated(r, dst))
                    continue
                after = [comp[r, k]]
                if k >= 1:
                    after.append(dkv[(r - 1) % n, k - 1])
                if overlap and k >= 2:
                    after.append(dkv[dst, k - 1])
                if not overlap:
                    after.append(comp[dst, k])
                dkv[r, k] = sched.add(
                    TransferOp, src=r, dst=dst, kind="dkv", step=step0 + k, kv_rank=(r - k) % n,
                    nbytes=dkv_bytes, kv_chunks=chunks[(r - k) % n],
                    after=tuple(after) + gated(r, dst))
    return [comp[r, n - 1] for r in range(n)]
