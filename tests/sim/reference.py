"""References for the simulator's tests, written apart from the code under test: the
ring schedule built one operation at a time, the per-op max-plus recurrence that times
it, and the spans recorded from those times one at a time (the implementation the
columnar schedule, the wave player and sim.engine.record replaced), plus small hardware and
scenario makers. Tests hold the simulator to these bit for bit."""

from hypothesis import strategies as st

from sim.engine.schedule import ComputeOp, TransferOp
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.hardware.model import HardwareModel
from sim.scenario.config import Scenario, Workload
from sim.scenario.quantities import BWD_FLOPS_FACTOR
from sim.schemes import get as get_scheme
from sim.trace.format import STREAMS, Span
from tests.reference import token_owner

LAYOUTS = ["contiguous", "striped", "zigzag"]


def held_chunks(layout, n):
    """Chunk ids of each rank (docs/design.md, fact 8): zigzag rank r holds r and 2N-1-r."""
    return [(r, 2 * n - 1 - r) if layout == "zigzag" else (r,) for r in range(n)]


def _token_blocks(layout, seq, n):
    """Per rank, its tokens ascending and the chunk each belongs to, from token_owner."""
    import numpy as np

    owner = np.array([token_owner(layout, seq, n, t) for t in range(seq)])
    size = seq // (2 * n if layout == "zigzag" else n)
    toks = [np.flatnonzero(owner == r) for r in range(n)]
    chunk = [(t % n) if layout == "striped" else t // size for t in toks]
    return toks, chunk


def block_work(layout, seq, n, causal, granularity="exact", tile=128):
    """Unmasked pairs of every (query rank, K/V rank) block by enumerating tokens; with
    tile granularity, whole tiles of the local matrix holding any unmasked pair."""
    import numpy as np

    toks, _ = _token_blocks(layout, seq, n)
    c = seq // n
    out = np.zeros((n, n), dtype=np.int64)
    for r in range(n):
        for s in range(n):
            mask = toks[s][None, :] <= toks[r][:, None] if causal else np.ones((c, c), dtype=bool)
            if granularity == "tile":
                for i in range(0, c, tile):
                    for j in range(0, c, tile):
                        sub = mask[i:i + tile, j:j + tile]
                        out[r, s] += sub.size if sub.any() else 0
            else:
                out[r, s] = int(mask.sum())
    return out


def block_extents(layout, seq, n, causal):
    """(query tokens that see some key, key tokens some query sees) of every block."""
    import numpy as np

    toks, _ = _token_blocks(layout, seq, n)
    out = []
    for r in range(n):
        row = []
        for s in range(n):
            seen = (toks[s][None, :] <= toks[r][:, None]) if causal else np.ones((toks[r].size, toks[s].size), bool)
            row.append((int(seen.any(axis=1).sum()), int(seen.any(axis=0).sum())))
        out.append(row)
    return out


def block_masks(layout, seq, n, causal):
    """'empty' when every pair is masked; 'full' when every (query chunk, key chunk)
    part of the block is all unmasked or all masked; 'diagonal' otherwise."""
    import numpy as np

    toks, chunk = _token_blocks(layout, seq, n)
    out = np.full((n, n), "full", dtype=object)
    if not causal:
        return out
    for r in range(n):
        for s in range(n):
            mask = toks[s][None, :] <= toks[r][:, None]
            if not mask.any():
                out[r, s] = "empty"
                continue
            for a in set(chunk[r].tolist()):
                for b in set(chunk[s].tolist()):
                    part = mask[np.ix_(chunk[r] == a, chunk[s] == b)]
                    if part.any() and not part.all():
                        out[r, s] = "diagonal"
    return out


def run_by(scheme, **settings):
    """Scenario keywords for `scheme` with its own settings (its Settings' fields)."""
    return {"scheme": scheme, "settings": get_scheme(scheme).settings_type(**settings)}


def hardware(tflops=100.0, gbps=100.0, latency_us=2.0, overhead_us=0.0):
    return Hardware(gpu=Gpu(name="test", achieved_tflops=tflops, launch_overhead_us=overhead_us),
                    link=Link(bandwidth_gbps=gbps, latency_us=latency_us))


def scenario(n=4, seq=4096, layout="contiguous", overlap=True, causal=False, pass_="fwd",
             hw=None, heads=8, kv_heads=2, head_dim=64, dtype="bf16", batch=1, sync="step"):
    w = Workload(batch=batch, seq=seq, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                 dtype=dtype, causal=causal, pass_=pass_)
    return Scenario(workload=w, hardware=hw or hardware(), n_gpus=n, layout=layout,
                    overlap=overlap, sync=sync)


def block_times(n, seq, heads, kv_heads, head_dim, elem_bytes, tflops, gbps, latency_us,
                overhead_us, batch=1):
    c = seq // n
    t_c = overhead_us * 1e-6 + 4 * c * c * head_dim * heads * batch / (tflops * 1e12)
    t_x = latency_us * 1e-6 + 2 * batch * kv_heads * c * head_dim * elem_bytes / (gbps * 1e9)
    return t_c, t_x


def reference_ring_ops(scenario):
    """The ring schedule's operations, built one by one (sim/ring.py's rules)."""
    w, n, c = scenario.workload, scenario.n_gpus, scenario.tokens_per_rank
    work = block_work(scenario.layout, w.seq, n, w.causal, scenario.granularity, scenario.tile).tolist()
    masks = block_masks(scenario.layout, w.seq, n, w.causal).tolist()
    chunks = held_chunks(scenario.layout, n)
    extents = block_extents(scenario.layout, w.seq, n, w.causal)
    ops = []
    gate = None
    phases = {"fwd": ["fwd"], "bwd": ["bwd"], "fwdbwd": ["fwd", "bwd"]}[w.pass_]
    for i, phase in enumerate(phases):
        gate = _reference_phase(ops, scenario, phase, work, masks, chunks, c, extents, i * n, gate)
    return ops


def _reference_phase(ops, scenario, phase, work, masks, chunks, c, extents, step0, gate):
    w, n, overlap = scenario.workload, scenario.n_gpus, scenario.overlap
    stepped = overlap and scenario.sync == "step"
    bwd = phase == "bwd"
    flops_per_pair = (1.0 if phase == "fwd" else BWD_FLOPS_FACTOR) * w.fwd_flops(1)
    comp, kv, dkv = [], [], []
    prev = [(r - 1) % n for r in range(n)]
    nxt = [(r + 1) % n for r in range(n)]

    def gated(*ranks):
        return tuple(gate[r] for r in ranks) if gate is not None else ()

    def reach(r, k):
        if k == 0:
            return []
        out = [comp[k - 1][r], kv[k - 1][r], kv[k - 1][prev[r]]]
        if bwd and k >= 2:
            out += [dkv[k - 2][r], dkv[k - 2][prev[r]]]
        return out

    def post_dkv(r, k):
        return [comp[k][r]] + ([dkv[k - 1][r], dkv[k - 1][prev[r]]] if k >= 1 else [])

    for k in range(n):
        row = []
        for r in range(n):
            owner = (r - k) % n
            pairs = work[r][owner]
            if stepped:
                after = reach(r, k)
            elif k == 0:
                after = []
            elif not overlap:
                after = [kv[k - 1][prev[r]], kv[k - 1][r]]
                if bwd:
                    after += [dkv[k - 1][prev[r]], dkv[k - 1][r]]
            elif pairs > 0:
                after = [kv[k - 1][prev[r]]]
            else:
                after = []
            row.append(len(ops))
            ops.append(ComputeOp(len(ops), r, phase, step0 + k, owner, pairs, flops_per_pair * pairs,
                                 masks[r][owner], extents[r][owner][0], extents[r][owner][1], chunks[r],
                                 chunks[owner], tuple(after)))
        comp.append(row)
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
                row.append(len(ops))
                ops.append(TransferOp(len(ops), r, dst, "kv", step0 + k, owner, w.kv_bytes(c),
                                      chunks[owner], tuple(after) + gated(r, dst)))
        kv.append(row)
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
                row.append(len(ops))
                ops.append(TransferOp(len(ops), r, dst, "dkv", step0 + k, owner, w.dkv_bytes(c),
                                      chunks[owner], tuple(after) + gated(r, dst)))
        dkv.append(row)
    return comp[n - 1]


def reference_durations(ops, hardware, workload):
    """Each op's time on `hardware`; a ring block on fewer query tokens than its rank
    holds (seq / ranks) is sliced, where the hardware's merge tells them apart."""
    ranks = 1 + max((op.rank for op in ops if isinstance(op, ComputeOp)), default=0)
    slices = hardware.merge_copies_slices
    order = hardware.takes_call_order
    seen_ranks, opened = set(), set()
    per_pass = {}
    for op in ops:
        if isinstance(op, ComputeOp) and op.mask != "empty":
            per_pass[op.rank, op.kind] = per_pass.get((op.rank, op.kind), 0) + 1
    out = []
    for op in ops:
        if isinstance(op, TransferOp):
            out.append(hardware.transfer_time_s(op.nbytes, op.src, op.dst))
        elif op.mask == "empty":
            out.append(0.0)
        else:
            more = {"sliced": op.q_tokens < workload.seq // ranks} if slices else {}
            if order:     # a rank's first block finds its GPU idle; a pass's only block is its output;
                # its first forward block opens its output
                more |= {"alone": per_pass[op.rank, op.kind] == 1, "isolated": op.rank not in seen_ranks,
                         "opens": op.kind == "fwd" and op.rank not in opened}
                seen_ranks.add(op.rank)
                if op.kind == "fwd":
                    opened.add(op.rank)
            out.append(hardware.compute_time_s(op.flops, dtype=workload.dtype, kind=op.kind, mask=op.mask,
                                               q_tokens=op.q_tokens, kv_tokens=op.kv_tokens, head_dim=workload.head_dim,
                                               kv_heads_per_head=workload.kv_heads / workload.heads, **more))
    return out


def reference_times(ops, dur, resources=None):
    """Per op in schedule order: start at the latest of its streams' free times and the
    dependencies' ends; each of its streams is free again at the op's end. A stream is
    the op's rank or link (src, dst), or the resource `resources` names for it (a
    tuple of names: every one the op holds)."""
    start, end, free = [0.0] * len(ops), [0.0] * len(ops), {}
    for op in ops:
        key = op.rank if isinstance(op, ComputeOp) else (op.src, op.dst)
        if resources is not None:
            key = resources[op.id]
        keys = key if isinstance(key, tuple) and resources is not None else (key,)
        t = 0.0
        for k in keys:
            t = max(t, free.get(k, 0.0))
        for d in op.after:
            if end[d] > t:
                t = end[d]
        start[op.id] = t
        end[op.id] = t + dur[op.id] if dur[op.id] > 0 else t
        for k in keys:
            free[k] = end[op.id]
    return start, end


def reference_spans(ops, n, start, end):
    spans, last, last_step = [], [0.0] * n, [0] * n
    for rank in range(n):
        free = 0.0
        for op in (op for op in ops if isinstance(op, ComputeOp) and op.rank == rank):
            t0 = start[op.id]
            if t0 > free:
                _reference_wait_spans(spans, op, ops, free, t0, start, end)
            if op.mask != "empty":
                free = end[op.id]
                spans.append(Span(rank, "compute", op.kind, op.step, t0, free, op.flops, 0.0,
                                  op.q_chunks, op.kv_chunks))
            else:
                free = t0
            last_step[rank] = op.step
        last[rank] = free
    for op in ops:
        if isinstance(op, TransferOp):
            t0, t1, b = start[op.id], end[op.id], float(op.nbytes)
            spans.append(Span(op.src, "send", op.kind, op.step, t0, t1, 0.0, b, (), op.kv_chunks, op.dst))
            spans.append(Span(op.dst, "recv", op.kind, op.step, t0, t1, 0.0, b, (), op.kv_chunks, op.src))
            for r in (op.src, op.dst):
                last[r] = max(last[r], t1)
                last_step[r] = max(last_step[r], op.step)
    makespan = max(last, default=0.0)
    for r in range(n):
        if last[r] < makespan:
            spans.append(Span(r, "wait", "idle", last_step[r], last[r], makespan))
    # the record's order: by rank, then stream, each in the order it ran
    spans.sort(key=lambda s: (s.rank, STREAMS.index(s.stream)))
    return spans


def _reference_wait_spans(spans, op, ops, t0, t1, start, end):
    def add(a, b, kind):
        if b > a:
            spans.append(Span(op.rank, "wait", kind, op.step, a, b, 0.0, 0.0, op.q_chunks, op.kv_chunks))

    flights = sorted((max(start[d], t0), min(end[d], t1), ops[d].kind)
                     for d in op.after if isinstance(ops[d], TransferOp))
    t = t0
    for s, e, kind in flights:
        if e <= t:
            continue
        s = max(s, t)
        add(t, s, "idle")
        add(s, e, kind)
        t = e
    add(t, t1, "idle")


def reference_queue(ops):
    """NCCL's one queue per device (sim.engine.queues), op by op: a rank's batch is its K/V or
    dK/dV hops (sent or received) of one step, posted by step and, at one step, K/V
    first; a hop also waits for the batch before its own on its sender and its receiver."""
    batches = {}
    for op in ops:
        if isinstance(op, TransferOp) and op.kind in ("kv", "dkv"):
            for r in (op.src, op.dst):
                batches.setdefault(r, {}).setdefault((op.step, op.kind == "dkv"), []).append(op.id)
    out = []
    for op in ops:
        if isinstance(op, TransferOp) and op.kind in ("kv", "dkv"):
            extra = []
            for r in (op.src, op.dst):
                keys = sorted(batches[r])
                i = keys.index((op.step, op.kind == "dkv"))
                if i:
                    extra += [d for d in batches[r][keys[i - 1]] if d < op.id]
            op = op._replace(after=op.after + tuple(extra))
        out.append(op)
    return out


def reference_trace_spans(ops, n, hardware, workload, resources=None, *, queue=False):
    """The spans of `ops` played op by op; `queue`: as `simulate` plays them on hardware
    with one queue of batches per device (`sim.engine.play.play` alone does not queue)."""
    if queue:
        ops = reference_queue(ops)
    start, end = reference_times(ops, reference_durations(ops, hardware, workload), resources)
    return reference_spans(ops, n, start, end)


class PerOpHardware(HardwareModel):
    """A hardware model with only the per-op methods (as a calibrated profile or a user's
    model may be: the batch forms are sim.hardware.model's), with the abilities of `hw`,
    counting the calls."""

    def __init__(self, hw: HardwareModel):
        self.hw, self.calls = hw, 0
        self.p2p_queue = hw.p2p_queue
        self.merge_copies_slices = hw.merge_copies_slices
        self.takes_call_order = hw.takes_call_order

    def compute_time_s(self, flops, *, dtype, kind, mask, q_tokens, kv_tokens, head_dim=None, kv_heads_per_head=None,
                       **flags):
        self.calls += 1
        assert type(flops) is float and type(q_tokens) is int and type(kind) is str
        assert set(flags) <= {"sliced", "alone", "isolated", "opens"}
        assert all(type(x) is bool for x in flags.values())
        return self.hw.compute_time_s(flops, dtype=dtype, kind=kind, mask=mask, q_tokens=q_tokens,
                                      kv_tokens=kv_tokens, head_dim=head_dim, kv_heads_per_head=kv_heads_per_head,
                                      **flags)

    def transfer_time_s(self, nbytes, src, dst):
        self.calls += 1
        assert type(nbytes) is int and type(src) is int
        return self.hw.transfer_time_s(nbytes, src, dst)

    def rate_flops(self, dtype, head_dim=None):
        return self.hw.rate_flops(dtype, head_dim)

    def describe(self):
        return {"kind": "per-op test model"}


ring_cases = dict(
    layout=st.sampled_from(LAYOUTS), n=st.integers(1, 7), causal=st.booleans(),
    overlap=st.booleans(), pass_=st.sampled_from(["fwd", "bwd", "fwdbwd"]),
    sync=st.sampled_from(["step", "buffered"]), tile=st.sampled_from([None, 1, 3]))


def ring_scenario(layout, n, causal, overlap, pass_, sync, tile, hw=None):
    sc = scenario(n=n, seq=12 * n, layout=layout, causal=causal, overlap=overlap, pass_=pass_,
                  hw=hw, heads=2, kv_heads=1, head_dim=4, sync=sync)
    return sc if tile is None else sc.with_(granularity="tile", tile=tile)


@st.composite
def any_schedule(draw):
    """Operations on a few ranks in any pattern: several links per rank, zero-duration
    ops, transfers waiting on transfers, dependencies anywhere earlier."""
    n = draw(st.integers(1, 4))
    ops = []
    for i in range(draw(st.integers(0, 40))):
        after = tuple(sorted(set(draw(st.lists(st.integers(0, i - 1), max_size=4))))) if i else ()
        step, kind = draw(st.integers(0, 5)), draw(st.sampled_from(["fwd", "bwd", "kv", "dkv", "ag", "rs", "a2a"]))
        if kind not in ("fwd", "bwd") and n > 1:
            src, dst = draw(st.permutations(range(n)))[:2]
            ops.append(TransferOp(i, src, dst, kind, step, src, draw(st.sampled_from([0, 8, 64])),
                                  (src,), after))
        else:
            r = draw(st.integers(0, n - 1))
            flops = float(draw(st.sampled_from([0, 1000, 5000])))
            mask = "empty" if flops == 0 else draw(st.sampled_from(["full", "diagonal"]))
            ops.append(ComputeOp(i, r, "fwd" if kind == "fwd" else "bwd", step, (r + 1) % n,
                                 int(flops), flops, mask, 4, 4, (r,), ((r + 1) % n,), after))
    return n, ops


# --- the schemes beyond the ring ------------------------------------------------------------

def cluster(gpus_per_node=4, nics_per_node=None, tflops=1.0, nvlink_gbps=100.0, nic_gbps=10.0,
            latency_us=2.0, nic_latency_us=5.0, overhead_us=0.0):
    """Flat-rate GPUs in nodes: a fast link inside, slower NICs between."""
    return Hardware(gpu=Gpu(name="test", achieved_tflops=tflops, launch_overhead_us=overhead_us),
                    link=Link(bandwidth_gbps=nvlink_gbps, latency_us=latency_us),
                    inter_link=Link(bandwidth_gbps=nic_gbps, latency_us=nic_latency_us),
                    gpus_per_node=gpus_per_node, nics_per_node=nics_per_node)


def resources_of(schedule):
    """Each op's resources by name (the one it plays on first), as Schedule.from_ops takes them."""
    names = schedule.resource_names
    return [tuple(names[r] for r in col if r >= 0) for col in schedule.resource_rows().T.tolist()]


def chunk_tokens(scheme, seq, n, ring=None, layout="zigzag"):
    """The tokens of a compute's chunk set, written from docs/design.md: allgather's 2N chunks
    in token order; ulysses' one chunk (the whole sequence); a hybrid's chunks are its
    ring's layout on `ring` ranks, a set being the chunks a ring rank holds."""
    import numpy as np

    if scheme == "allgather":
        size = seq // (2 * n)
        return lambda chunks: np.concatenate([np.arange(a * size, (a + 1) * size) for a in chunks])
    if scheme == "ulysses" or ring == 1:
        return lambda chunks: np.arange(seq)
    toks, _ = _token_blocks(layout, seq, ring)
    held = held_chunks(layout, ring)
    return lambda chunks: toks[held.index(tuple(chunks))]


def head_coverage(trace, tokens_of, seq, causal, head_dim, batch=1):
    """Per compute kind, how many heads computed each (query, key) token pair: each compute
    span covers its query tokens x key tokens under the mask, on as many heads as its FLOPs
    pay for (4 d per pair and head, 2.5x backward), which must be a whole number."""
    import numpy as np

    cover = {}
    for s in trace.spans:
        if s.stream != "compute":
            continue
        q, k = tokens_of(s.q_chunks), tokens_of(s.kv_chunks)
        mask = (k[None, :] <= q[:, None]) if causal else np.ones((q.size, k.size), dtype=bool)
        per_head = (2.5 if s.kind == "bwd" else 1.0) * 4 * head_dim * batch * int(mask.sum())
        heads = s.flops / per_head
        assert heads == round(heads) and heads >= 1, (s, heads)
        grid = cover.setdefault(s.kind, np.zeros((seq, seq), dtype=np.int64))
        grid[np.ix_(q, k)] += int(round(heads)) * mask
    return cover
