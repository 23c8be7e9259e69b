"""Time of one attention block on a GPU: the block model (docs/gpu-model.md).

docs/design.md's compute time (overhead + FLOPs / rate), built from what the GPU does:

    isolated call: host + GPU      queued behind other work: max(host, GPU)
    GPU = main kernel + other kernels + merge + (kernels) x gap
    main kernel = pipeline fill + busiest SM's steps x step time(pass, mask, head dim, inner-loop length)

- **CTAs** (`cta_work`): the kernel's tiles (sim.hardware.presets.KERNEL_SHAPES, from its source)
  cut the call into thread blocks, each a run of inner-loop steps: forward over query
  tiles x heads x batch, backward over key tiles; a causal mask shortens each to its
  diagonal. FlashAttention-2's forward splits the keys when its query tiles are too few
  (`_split_count`, its own heuristic), and adds a combine kernel.
- **Waves** (`_load`): CTAs go in launch order to the SM with the least work so far; the
  main kernel takes as long as the busiest SM. A CTA alone on an SM runs at the SM's rate.
  FlashAttention-3's causal tiles go out longest first across sections of heads
  (`lpt_section`, its schedulers').
- **Pipeline fill** (`fill_s`): the first wave's first tiles, loaded by every SM at once
  at the streaming bandwidth before the first step; paid once per call.
- **Step time** (`step_s`): read back from the published table (sim.hardware.presets.KERNEL_TABLES):
  the time FlashAttention's benchmark ran a call in at that length (batch x length 16k
  tokens, hidden 2048), less its other kernels and its fill, over the steps its busiest SM ran; so at
  the published setting a call takes the published time. The length is the kernel's
  inner loop (`loop_tokens`): the keys of a dense forward, the queries of a dense backward,
  the side of a causal block; piecewise linear in log2(length), held beyond the table.
- **Head dims** (`template_head_dim`): a kernel is compiled for a fixed set of head dims
  (FlashAttention-2: 32, 64, 96, 128, 192, 256; FlashAttention-3: 64 to 256); a head dim
  between two runs as the larger one, padded: its tiles and step time are the template's,
  the FLOPs it does the template's, the useful ones (and the ideal's, `best_rate_flops`)
  its own. A template without a published series reads its neighbours' (`template_series`).
- **Other kernels**: a backward's preprocess and dQ conversion, GQA's dK/dV reductions
  (or FlashAttention-3's fp32 accumulators cleared and converted), a split forward's
  combine: memory-bound at the GPU's streaming bandwidth.
- **Merge**: after each block the running (out, lse) takes in its result: per output
  element the bytes of sim.hardware.presets.MERGE_BYTES (one fused pass, or the unfused chain of
  elementwise kernels ring-flash-attention runs), per (query row, head) those of the
  statistics; a block on part of its rank's queries (`sliced`) adds
  MERGE_SLICE_BYTES. Backward: dQ, dK, dV each one in-place fp32 add. Its kernels
  (MERGE_KERNELS) each cost a gap on the GPU and an elementwise operation on the host.
  A block alone in its pass on its rank (`alone`) is the output: no merge.
- **Floor** (`Floors`): the host time of an eager call, paid in front by an isolated call
  (`isolated`: the GPU idle, a rank's first block) and hidden behind queued work
  otherwise, unless the host is the slower.

The engine gives each block's FLOPs, pass, mask and the extent of its kernel call (the
query and key tokens that take part, sim.layouts.block_extents), not the workload's head
count: the call's heads (times batch) are recovered from the FLOPs, taking the block's
pairs as q x kv for a full block and q x kv / 2 for a diagonal one. The head dim and the
K/V-to-query head ratio come from the workload (sim.engine.players.head_geometry), or
sim.hardware.cluster.ASSUMED_HEAD_DIM and ASSUMED_KV_HEADS_PER_HEAD (the default workload's)
where a caller gives none.
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass

import numpy as np

from sim.errors import RingsimError
from sim.hardware.presets import (
    CALL_HOST_US,
    KERNEL_GAP_US,
    KERNEL_SHAPES,
    KERNEL_TABLES,
    MERGE_BYTES,
    MERGE_KERNELS,
    MERGE_OPEN,
    MERGE_SLICE_BYTES,
    MERGE_SLICE_KERNELS,
    OP_HOST_US,
    KernelTable,
)
from sim.scenario.quantities import ACCUM_BYTES, PASS_FLOPS_FACTOR


def kernel_table(name: str) -> KernelTable:
    if name not in KERNEL_TABLES:
        raise RingsimError(f"unknown kernel table {name!r}; choose from {', '.join(KERNEL_TABLES)}")
    return KERNEL_TABLES[name]


def template_head_dim(table: KernelTable, head_dim: int) -> int:
    """The head dim the kernel runs `head_dim` as: the smallest template it is compiled for
    that holds it (sim.hardware.presets.KERNEL_SHAPES, `head_dims`); a head dim between two
    templates is padded to the larger one. Beyond the largest the kernel refuses the call."""
    dims = KERNEL_SHAPES[table.shape].head_dims
    for d in dims:
        if head_dim <= d:
            return d
    raise RingsimError(f"head dim {head_dim}: {table.kernel} is compiled for head dims up to {dims[-1]} "
                       f"({', '.join(map(str, dims))}); choose a head dim of at most {dims[-1]} or the flat model")


@functools.lru_cache(maxsize=512)
def template_series(table_name: str, kind: str, mask: str, template: int) -> tuple[float | None, ...]:
    """TFLOP/s of the kernel's `template` (FLOPs counted at the template's head dim) at the
    table's lengths: the published series where there is one; between two published head
    dims, linear in the head dim at each length; beyond them, the nearest one's."""
    table = kernel_table(table_name)
    have = sorted(d for k, m, d in table.series if (k, m) == (kind, mask))
    if not have:
        raise RingsimError(f"kernel table {table.name} has no {kind} {mask} series")
    if template in have:
        return table.series[kind, mask, template].tflops
    below = [d for d in have if d < template]
    above = [d for d in have if d > template]
    if not below or not above:
        return table.series[kind, mask, (above or below)[0] if not below else below[-1]].tflops
    a, b = below[-1], above[0]
    w = (template - a) / (b - a)
    return tuple(None if x is None or y is None else x + (y - x) * w
                 for x, y in zip(table.series[kind, mask, a].tflops, table.series[kind, mask, b].tflops))


def rate_tflops(table: KernelTable, kind: str, mask: str, head_dim: int, length) -> np.ndarray:
    """The TFLOP/s of `head_dim`'s template at inner-loop `length` (tokens; scalar or array),
    FLOPs counted at the template's head dim: piecewise linear in log2(length) through the
    series' points, held constant beyond them."""
    series = template_series(table.name, kind, mask, template_head_dim(table, head_dim))
    pts = [(np.log2(s), v) for s, v in zip(table.seqlens, series) if v is not None]
    xs, ys = np.array([p[0] for p in pts]), np.array([p[1] for p in pts], dtype=float)
    x = np.log2(np.maximum(np.asarray(length, dtype=float), 1.0))
    return np.interp(x, xs, ys)


def loop_tokens(kind: str, mask: str, q_tokens, kv_tokens):
    """The length that sets a block's rate (module docstring)."""
    if mask == "diagonal" or kind == "bwd":
        return q_tokens
    return kv_tokens


def output_width(kind: str, mask: str, flops, q_tokens, kv_tokens):
    """heads x batch x head dim: elements of output per query token, from the FLOPs and
    the pairs a kernel call of this extent computes (q x kv, or half for a diagonal)."""
    pairs = np.asarray(q_tokens, dtype=float) * np.asarray(kv_tokens, dtype=float)
    if mask == "diagonal":
        pairs = pairs / 2.0
    return np.asarray(flops, dtype=float) / (4.0 * PASS_FLOPS_FACTOR[kind] * np.maximum(pairs, 1.0))


def whole_heads(kind: str, mask: str, flops: float, q_tokens: int, kv_tokens: int, head_dim: int) -> int:
    """A kernel call's heads (times batch), whole ones: its output width in heads of
    `head_dim`, rounded (a causal block's exact pairs are a little more than q x kv / 2)."""
    return round(float(output_width(kind, mask, flops, q_tokens, kv_tokens)) / head_dim)


def merge_bytes(kind: str, mask: str, flops, q_tokens, kv_tokens, *, head_dim: int,
                kv_heads_per_head: float, elem_bytes: int, merge: str, sliced=False, opens=False) -> np.ndarray:
    """Bytes the merge after one block moves (module docstring); `sliced`: the block's
    queries are part of its rank's; `opens`: the block opens its rank's forward output
    (sim.hardware.presets.MERGE_OPEN) (scalars or arrays)."""
    width = output_width(kind, mask, flops, q_tokens, kv_tokens)
    q = np.asarray(q_tokens, dtype=float)
    if kind == "fwd":
        per_elem, per_row = MERGE_BYTES[merge](elem_bytes)
        slice_elem, slice_row = MERGE_SLICE_BYTES[merge]
        on_slice = np.asarray(sliced, dtype=bool)
        per_elem = np.where(on_slice, per_elem + slice_elem, per_elem)
        per_row = np.where(on_slice, per_row + slice_row, per_row)
        if merge in MERGE_OPEN:
            open_elem, open_row, _ = MERGE_OPEN[merge](elem_bytes)
            on_open = np.asarray(opens, dtype=bool)
            per_elem = np.where(on_open, open_elem, per_elem)
            per_row = np.where(on_open, open_row, per_row)
        return q * width * (per_elem + per_row / head_dim)
    kv = np.asarray(kv_tokens, dtype=float)
    per_elem = 2 * ACCUM_BYTES + elem_bytes
    return per_elem * width * (q + 2.0 * kv_heads_per_head * kv)


def merge_kernels(kind: str, merge: str, sliced, opens=False) -> np.ndarray:
    """Kernels one merge launches (sim.hardware.presets.MERGE_KERNELS), with the slice's
    copies; the conversions of MERGE_OPEN where the block opens its rank's forward output."""
    kernels = MERGE_KERNELS[merge][kind] + np.where(np.asarray(sliced, dtype=bool), MERGE_SLICE_KERNELS[merge], 0)
    if kind == "fwd" and merge in MERGE_OPEN:
        kernels = np.where(np.asarray(opens, dtype=bool), MERGE_OPEN[merge](0)[2], kernels)
    return kernels


@dataclass(frozen=True)
class Floors:
    """The per-call floor of the block model (sim.hardware.presets): host-side time of an eager
    attention call by pass, GPU time between queued kernels, host time of an eager
    elementwise operation (the merge's); µs."""

    fwd_host_us: float = CALL_HOST_US["fwd"]
    bwd_host_us: float = CALL_HOST_US["bwd"]
    kernel_gap_us: float = KERNEL_GAP_US
    op_host_us: float = OP_HOST_US

    def host_us(self, kind: str) -> float:
        return self.fwd_host_us if kind == "fwd" else self.bwd_host_us


def _flags(x, shape) -> np.ndarray:
    """A per-block flag as an array of `shape` (False everywhere when not given)."""
    return np.zeros(shape, dtype=bool) if x is None else np.broadcast_to(np.asarray(x, dtype=bool), shape)


def block_times_s(table: KernelTable, flops, *, kind, mask, q_tokens, kv_tokens, head_dim: int,
                  kv_heads_per_head: float, elem_bytes: int, merge: str,
                  memory_bandwidth_gbps: float, sms: int | None = None, floors: Floors = Floors(),
                  rate_scale: dict[str, float] | None = None, sliced=None, alone=None,
                  isolated=None, opens=None) -> np.ndarray:
    """Time of each block (arrays of equal length; kind and mask: arrays of names;
    sliced: whether each block's queries are part of its rank's; alone: whether it is the
    only block of its pass on its rank, whose result is the output (no merge); isolated:
    whether the GPU is idle when it is called (its host-side floor is paid in front rather
    than hidden)). Module docstring: the block model.

    An "empty" block is skipped: 0 s, no launch.
    """
    if merge not in MERGE_BYTES:
        raise RingsimError(f"merge must be one of {', '.join(MERGE_BYTES)}, got {merge!r}")
    flops = np.asarray(flops, dtype=float)
    kind, mask = np.asarray(kind, dtype=str), np.asarray(mask, dtype=str)
    q_tokens, kv_tokens = np.asarray(q_tokens), np.asarray(kv_tokens)
    n = flops.shape

    sliced, alone, isolated, opens = (_flags(x, n) for x in (sliced, alone, isolated, opens))
    unknown = ~((mask == "full") | (mask == "diagonal") | (mask == "empty")) | ~((kind == "fwd") | (kind == "bwd"))
    if unknown.any():
        i = int(np.flatnonzero(unknown)[0])
        raise RingsimError(f"no kernel rate for a {kind[i]!r} block with mask {mask[i]!r}")
    bw = memory_bandwidth_gbps * 1e9
    scale = rate_scale or {}
    out = np.zeros(n)
    for k in ("fwd", "bwd"):
        for m in ("full", "diagonal"):
            sel = (kind == k) & (mask == m)
            if not sel.any():
                continue
            f, q, kv = flops[sel], q_tokens[sel], kv_tokens[sel]
            heads = np.maximum(np.rint(output_width(k, m, f, q, kv) / head_dim), 1).astype(np.int64)
            call = np.array([call_gpu_s(table.name, k, m, int(a), int(b), int(h), head_dim, kv_heads_per_head,
                                        elem_bytes, bw, sms or table.sms, floors.kernel_gap_us,
                                        scale.get(f"{k}-{m}", 1.0))
                             for a, b, h in zip(q, kv, heads)])
            moved = merge_bytes(k, m, f, q, kv, head_dim=head_dim, kv_heads_per_head=kv_heads_per_head,
                                elem_bytes=elem_bytes, merge=merge, sliced=sliced[sel], opens=opens[sel])
            merges = np.where(alone[sel], 0, merge_kernels(k, merge, sliced[sel], opens[sel]))
            gpu = call + np.where(alone[sel], 0.0, moved / bw) + merges * floors.kernel_gap_us * 1e-6
            host = (floors.host_us(k) + merges * floors.op_host_us) * 1e-6
            out[sel] = np.where(isolated[sel], host + gpu, np.maximum(host, gpu))
    return out


def _load(work: np.ndarray, copies: int, sms: int, section: int = 0) -> float:
    """The most work any SM does when `copies` runs of CTAs of `work` each are handed, one
    at a time in launch order, to the SM with the least work so far: the block scheduler
    gives each CTA the first slot to free. Launch order: head by head (each head's CTAs in
    `work`'s order), or, with `section` > 0, in groups of `section` heads, tile by tile
    across the group's heads (FlashAttention-3's causal schedulers, `lpt_section`). Equal
    CTAs: ceil(N / SMs) of them on the busiest SM. Beyond EXACT_CTAS, the last CTA is taken
    to start when the rest are spread evenly."""
    total_ctas = work.size * copies
    if work.min() == work.max():
        return float(-(-total_ctas // sms) * work[0])
    if total_ctas > EXACT_CTAS:
        # in either launch order the last CTA is work's last; the order itself is not built
        # (a batch of a billion sequences would make it terabytes)
        last = float(work[-1])
        return (float(work.sum()) * copies - last) / sms + last
    if section > 0:
        groups = [min(section, copies - g) for g in range(0, copies, section)]
        order = np.concatenate([np.repeat(work, n) for n in groups])
    else:
        order = np.tile(work, copies)
    loads = [0.0] * sms
    heapq.heapify(loads)
    for w in order.tolist():
        heapq.heapreplace(loads, loads[0] + w)
    return max(loads)


def lpt_section(table: KernelTable, kind: str, mask: str, q: int, kv: int, template: int,
                kv_heads_per_head: float, elem_bytes: int) -> int:
    """Heads per section of FlashAttention-3's causal schedulers (0: none, head by head).
    Its causal forward (DynamicPersistentTileScheduler) and backward (SingleTileBwdLPTScheduler)
    hand out tiles longest first, tile by tile across a section of heads whose K and V (forward:
    32 MiB; backward Q, dO and the fp32 dQ accumulator: 40 MiB) fit in L2: the largest power
    of two of heads that fit, times the query heads per K/V head in the forward
    (hopper/tile_scheduler.hpp)."""
    if mask != "diagonal" or table.shape == "FlashAttention-2":
        return 0
    if kind == "fwd":
        one_head = kv * 2 * template * elem_bytes
        fit = 32 * 2**20 // one_head
        group = max(1, round(1 / kv_heads_per_head))
    else:
        one_head = q * 2 * template * elem_bytes + q * template * ACCUM_BYTES
        fit = 40 * 2**20 // one_head
        group = 1
    return (1 << (fit.bit_length() - 1) if fit >= 1 else 1) * group


EXACT_CTAS = 4096


def _tile(table: KernelTable, kind: str, causal: bool, template: int) -> tuple[int, int]:
    """The kernel's tile for this pass, mask and head dim template (its causal tiles where
    they differ)."""
    shape = KERNEL_SHAPES[table.shape]
    causal_tiles = shape.causal_fwd_tile if kind == "fwd" else shape.causal_bwd_tile
    if causal and template in causal_tiles:
        return causal_tiles[template]
    return (shape.fwd_tile if kind == "fwd" else shape.bwd_tile)[template]


def _split_count(ctas: int, slots: int, n_blocks: int) -> int:
    """FlashAttention-2's num_splits_heuristic (flash_api.cpp): the fewest splits of the
    keys that reach 85% of the best wave efficiency, one when the CTAs nearly fill the GPU."""
    if ctas >= 0.8 * slots:
        return 1
    top = min(128, slots, n_blocks)
    if top < 2:
        return 1
    eff = []
    for s in range(1, top + 1):
        eligible = s == 1 or -(-n_blocks // s) != -(-n_blocks // (s - 1))
        waves = ctas * s / slots
        eff.append(waves / math.ceil(waves) if eligible else 0.0)
    best = max(eff)
    for s in range(1, top + 1):
        if eff[s - 1] and eff[s - 1] >= 0.85 * best:
            return s
    return 1


SPLIT_ROWS = 64
"""FlashAttention-2's split-key forward kernel: 64 query rows per CTA."""


def _split_keys(head_dim: int) -> int:
    """Keys per step of FlashAttention-2's split-key kernel (run_mha_fwd_splitkv_dispatch)."""
    return 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64


def cta_work(table: KernelTable, kind: str, mask: str, q: int, kv: int, heads: int, head_dim: int,
             sms: int, split: bool = True) -> tuple[np.ndarray, int, float]:
    """How a call of `heads` (times batch) heads cuts into CTAs: the work of one head's
    CTAs in launch order (in inner-loop steps of the kernel's main tile), the number of
    key splits (FlashAttention-2's forward; 1 otherwise, and where `split` is False: its
    varlen forward does not split), and the main tile's area. `head_dim`: the head dim
    template the call runs as (`template_head_dim`)."""
    shape = KERNEL_SHAPES[table.shape]
    causal = mask == "diagonal"
    tm, tn = _tile(table, kind, causal, head_dim)
    if kind == "fwd":
        if shape.split_kv and split:
            bn = _split_keys(head_dim)
            n_blocks = -(-kv // bn)
            splits = _split_count(heads * -(-q // SPLIT_ROWS), sms * shape.fwd_ctas_per_sm, n_blocks)
            if splits > 1:
                per = -(-n_blocks // splits)
                rows = np.arange(-(-q // SPLIT_ROWS))
                allowed = (np.minimum((rows + 1) * SPLIT_ROWS + (kv - q), kv) + bn - 1) // bn if causal \
                    else np.full(rows.size, n_blocks)
                starts = np.arange(splits) * per
                steps = np.clip(np.minimum(allowed[:, None], starts[None, :] + per) - starts[None, :], 0, None)
                return steps.ravel().astype(float) * (SPLIT_ROWS * bn) / (tm * tn), splits, float(tm * tn)
        m_tiles, n_steps = -(-q // tm), -(-kv // tn)
        if causal:
            rows_end = np.minimum((np.arange(m_tiles) + 1) * tm + (kv - q), kv)
            work = np.maximum(-(-rows_end // tn), 0).astype(float)
        else:
            work = np.full(m_tiles, float(n_steps))
    else:
        n_tiles, m_steps = -(-kv // tn), -(-q // tm)
        if causal:
            first = np.maximum(np.arange(n_tiles) * tn - (kv - q), 0) // tm
            work = (m_steps - first).astype(float)
        else:
            work = np.full(n_tiles, float(m_steps))
    if causal and kind == "fwd" and table.shape != "FlashAttention-2":
        # FlashAttention-3's causal forward hands out its query tiles longest first; its
        # causal backward's key tiles already come longest first (lpt_section)
        work = work[::-1].copy()
    return work, 1, float(tm * tn)


@functools.lru_cache(maxsize=4096)
def step_s(table_name: str, kind: str, mask: str, head_dim: int, length: float) -> float:
    """SM time of one inner-loop step of the main tile of the kernel's `head_dim` template
    at inner-loop `length`: the published time at the table's setting (batch x length = 16k
    tokens, hidden 2048) over the most steps any SM ran there (`template_series`: a
    template without a published series reads its neighbours'); piecewise linear in
    log2(length) between the published lengths, held beyond them."""
    table = kernel_table(table_name)
    d = head_dim
    xs, ys = [], []
    for seq, heads, work, busiest, published_s in _published_calls(table, kind, mask, d):
        # the published call also ran its other kernels (a backward's preprocess, dQ conversion)
        others_s = sum(_other_kernels_bytes(table, kind, seq, seq, heads, d, 1.0, 2, 1)) / (table.stream_gbps * 1e9)
        fill = fill_s(table, kind, mask, work.size, heads, d, d, 1.0, 2, table.stream_gbps * 1e9, table.sms,
                      section=lpt_section(table, kind, mask, seq, seq, d, 1.0, 2))
        xs.append(math.log2(seq))
        ys.append((published_s - others_s - fill) / busiest)
    return float(np.interp(math.log2(max(length, 1.0)), xs, ys))


def _published_calls(table: KernelTable, kind: str, mask: str, d: int):
    """Each call FlashAttention's benchmark timed for a series: (length, heads x batch,
    one head's CTA work, the busiest SM's steps, its time at the published rate). The benchmark holds batch x
    length at 16k tokens and the hidden size at 2048, and counts a causal call as half the
    dense pairs."""
    for seq, tflops in zip(table.seqlens, template_series(table.name, kind, mask, d)):
        if tflops is None:
            continue
        heads = (16384 // seq) * (2048 // d)
        pairs = seq * seq / 2 if mask == "diagonal" else seq * seq
        work, _, _ = cta_work(table, kind, mask, seq, seq, heads, d, table.sms)
        busiest = _load(work, heads, table.sms, lpt_section(table, kind, mask, seq, seq, d, 1.0, 2))
        yield seq, heads, work, busiest, 4.0 * PASS_FLOPS_FACTOR[kind] * d * pairs * heads / (tflops * 1e12)


def _other_kernels_bytes(table: KernelTable, kind: str, q: int, kv: int, heads: int, head_dim: int,
                        kv_heads_per_head: float, elem_bytes: int, splits: int) -> list[float]:
    """Bytes each memory-bound kernel of a call moves beside its main kernel."""
    shape = KERNEL_SHAPES[table.shape]
    rows = float(q) * heads
    out: list[float] = []
    if kind == "fwd" and splits > 1:
        # the combine kernel reads every split's fp32 output and statistics, writes the output
        out.append(rows * (splits * (head_dim + 1) * ACCUM_BYTES + head_dim * elem_bytes))
    if kind == "bwd":
        for name in shape.bwd_kernels:
            if name == "preprocess":      # reads dO and O, writes rowsum, clears the fp32 dQ
                out.append(rows * (2 * head_dim * elem_bytes + ACCUM_BYTES + head_dim * ACCUM_BYTES))
            elif name == "convert_dq":
                out.append(rows * head_dim * (ACCUM_BYTES + elem_bytes))
        if shape.gqa_sum and kv_heads_per_head < 1:
            per = float(kv) * heads * head_dim * elem_bytes
            out += [per * (1 + kv_heads_per_head)] * 2     # dK, dV summed over each group
        if shape.gqa_accum and kv_heads_per_head < 1:
            accum = float(kv) * heads * kv_heads_per_head * head_dim * ACCUM_BYTES
            out += [accum] * 2                                          # dK, dV accumulators cleared
            out += [accum + accum / ACCUM_BYTES * elem_bytes] * 2       # and converted after
    return out


def fill_s(table: KernelTable, kind: str, mask: str, ctas_per_head: int, heads: int, template: int,
           head_dim: int, kv_heads_per_head: float, elem_bytes: int, bandwidth_bytes_s: float, sms: int,
           split: bool = False, section: int = 0) -> float:
    """The kernel's pipeline fill: before its first step each CTA of the first wave loads
    its first tiles, every SM at once, so the wave waits for those bytes from memory at the
    streaming bandwidth. A forward CTA's query tile is its own; its first key and value
    tiles are its head's (its K/V head's, under GQA), read from memory once and from L2 by
    the wave's other CTAs of that head. A backward CTA's key and value tiles are its own;
    its first query and dO tiles are its head's. Later CTAs load while others compute (two
    CTAs per SM, or a producer warp prefetching), so a call pays the fill once, however
    many waves it runs; the published calls paid it too (`step_s` takes it out of their
    time). `section`: FlashAttention-3's causal order, tile by tile across that many
    heads (`lpt_section`); otherwise head by head."""
    shape = KERNEL_SHAPES[table.shape]
    if kind == "fwd" and split:
        tm, tn = SPLIT_ROWS, _split_keys(template)
    else:
        tm, tn = _tile(table, kind, mask == "diagonal", template)
    per_sm = shape.fwd_ctas_per_sm if kind == "fwd" else shape.bwd_ctas_per_sm
    resident = min(ctas_per_head * heads, sms * per_sm)
    wave_heads = min(heads, section, resident) if section > 0 else min(heads, -(-resident // ctas_per_head))
    if kind == "fwd":
        rows = resident * tm + math.ceil(wave_heads * min(kv_heads_per_head, 1.0)) * 2 * tn
    else:
        rows = resident * 2 * tn + wave_heads * 2 * tm
    return rows * head_dim * elem_bytes / bandwidth_bytes_s


@functools.lru_cache(maxsize=65536)
def call_gpu_s(table_name: str, kind: str, mask: str, q: int, kv: int, heads: int, head_dim: int,
               kv_heads_per_head: float, elem_bytes: int, bandwidth_bytes_s: float, sms: int,
               kernel_gap_us: float, rate_scale: float = 1.0) -> float:
    """GPU time of one attention call of `heads` (times batch) heads, q x kv tokens: its
    main kernel (the busiest SM's steps at the step time of its inner-loop length) and
    the other kernels of the call (memory-bound, at `bandwidth_bytes_s`), each with the
    gap between queued kernels."""
    table = kernel_table(table_name)
    q, kv = max(q, 1), max(kv, 1)        # an extent the schedule did not give: one token
    # the kernel computes at its template's head dim; the tensors it reads and writes
    # (and so its other kernels' bytes) are the call's own
    template = template_head_dim(table, head_dim)
    work, splits, _ = cta_work(table, kind, mask, q, kv, heads, template, sms)
    section = lpt_section(table, kind, mask, q, kv, template, kv_heads_per_head, elem_bytes)
    main = _load(work, heads, sms, section) * step_s(table_name, kind, mask, template,
                                                     loop_tokens(kind, mask, q, kv)) / rate_scale
    main += fill_s(table, kind, mask, work.size, heads, template, head_dim, kv_heads_per_head, elem_bytes,
                   bandwidth_bytes_s, sms, split=splits > 1, section=section)
    aux_bytes = _other_kernels_bytes(table, kind, q, kv, heads, head_dim, kv_heads_per_head, elem_bytes, splits)
    kernels = 1 + len(aux_bytes)
    return main + sum(aux_bytes) / bandwidth_bytes_s + kernels * kernel_gap_us * 1e-6


@functools.lru_cache(maxsize=16384)
def varlen_call_gpu_s(table_name: str, kind: str, pieces: tuple[tuple[str, int, int], ...], heads: int,
                      head_dim: int, kv_heads_per_head: float, elem_bytes: int, bandwidth_bytes_s: float,
                      sms: int, kernel_gap_us: float, rate_scale: tuple[float, float] = (1.0, 1.0)) -> float:
    """GPU time of one varlen attention call (packed documents, sim.layouts.packed.BlockCall): one
    launch whose CTAs are every piece's, a piece's CTAs in launch order and then the next
    piece's, all of it once per head (FlashAttention's varlen grid: query tiles, then
    sequences, then heads); each CTA runs its steps at the step time of its own piece's
    inner-loop length, and the CTAs go to the SMs as in `call_gpu_s`. No key split (the
    varlen forward has none). The other kernels move the bytes of all the pieces' rows.
    rate_scale: the calibrated factor of (full, diagonal) blocks of this pass."""
    table = kernel_table(table_name)
    template = template_head_dim(table, head_dim)
    works = []
    for mask, q, kv in pieces:
        steps, _, _ = cta_work(table, kind, mask, max(q, 1), max(kv, 1), heads, template, sms, split=False)
        scale = rate_scale[mask == "diagonal"]
        # the inner loop runs over the keys (forward) or the queries (backward); a causal
        # piece of a varlen call need not be square (its queries see keys before them)
        length = kv if kind == "fwd" else q
        works.append(steps * step_s(table_name, kind, mask, template, length) / scale)
    main = _load(np.concatenate(works), heads, sms) if works else 0.0
    main += fill_s(table, kind, "full", sum(w.size for w in works), heads, template, head_dim, kv_heads_per_head,
                   elem_bytes, bandwidth_bytes_s, sms)
    q_all = sum(p[1] for p in pieces)
    kv_all = sum(p[2] for p in pieces)
    aux_bytes = _other_kernels_bytes(table, kind, q_all, kv_all, heads, head_dim, kv_heads_per_head, elem_bytes, 1)
    return main + sum(aux_bytes) / bandwidth_bytes_s + (1 + len(aux_bytes)) * kernel_gap_us * 1e-6


def piece_span(mask: str, q: int, kv: int) -> float:
    """The pairs a varlen piece's kernel computes: all q x kv of a full one; a causal one's
    queries aligned with its last keys (FlashAttention's bottom-right causal mask), the
    first of them seeing kv - q + 1 keys."""
    if mask != "diagonal":
        return float(q) * kv
    m = min(q, kv)
    return float(m) * kv - m * (m - 1) / 2.0


def varlen_times_s(table: KernelTable, calls, flops, *, kind, head_dim: int, kv_heads_per_head: float,
                   elem_bytes: int, merge: str, memory_bandwidth_gbps: float, sms: int | None = None,
                   floors: Floors = Floors(), rate_scale: dict[str, float] | None = None, sliced=None,
                   alone=None, isolated=None, opens=None) -> np.ndarray:
    """`block_times_s` for blocks that are varlen calls (`calls`: a sim.layouts.packed.BlockCall
    per block): the call's GPU time from `varlen_call_gpu_s`, then the merge and the floor
    as for any block. The heads come from the FLOPs over the pairs the call's pieces span
    (a diagonal piece counted as half its rectangle)."""
    flops = np.asarray(flops, dtype=float)
    kind = np.asarray(kind, dtype=str)
    n = flops.shape

    sliced, alone, isolated, opens = (_flags(x, n) for x in (sliced, alone, isolated, opens))
    bw = memory_bandwidth_gbps * 1e9
    scale = rate_scale or {}
    out = np.zeros(n)
    for i, (call, f, k) in enumerate(zip(calls, flops.tolist(), kind.tolist())):
        if not call.pieces:
            continue
        span = sum(piece_span(*piece) for piece in call.pieces)
        width = f / (4.0 * PASS_FLOPS_FACTOR[k] * max(span, 1.0))
        heads = max(int(round(width / head_dim)), 1)
        gpu = varlen_call_gpu_s(table.name, k, call.pieces, heads, head_dim, kv_heads_per_head, elem_bytes, bw,
                                sms or table.sms, floors.kernel_gap_us,
                                (scale.get(f"{k}-full", 1.0), scale.get(f"{k}-diagonal", 1.0)))
        q_all = sum(p[1] for p in call.pieces)
        kv_all = sum(p[2] for p in call.pieces)
        if not alone[i]:
            # the merge over the call's rows: its width as a dense block of q_all x kv_all
            dense = width * 4.0 * PASS_FLOPS_FACTOR[k] * q_all * kv_all
            moved = float(merge_bytes(k, "full", dense, q_all, kv_all, head_dim=head_dim,
                                      kv_heads_per_head=kv_heads_per_head, elem_bytes=elem_bytes, merge=merge,
                                      sliced=sliced[i], opens=opens[i]))
            merges = int(merge_kernels(k, merge, sliced[i], opens[i]))
            gpu += moved / bw + merges * floors.kernel_gap_us * 1e-6
        else:
            merges = 0
        host = (floors.host_us(k) + merges * floors.op_host_us) * 1e-6
        out[i] = host + gpu if isolated[i] else max(host, gpu)
    return out


def best_rate_flops(table: KernelTable, head_dim: int) -> float:
    """The rate of the ideal time (docs/design.md), in FLOPs of `head_dim`: the fastest any
    block of its template (`template_head_dim`) can run, times head_dim / template (a
    padded head dim computes the template's FLOPs, of which only head_dim / template are
    the workload's). Fastest: the dense forward at its fastest length with its work spread
    evenly over the SMs (the published rate lost the last partial wave: 2,048 CTAs on 132
    SMs, 16 on the busiest, 15.5 on average), or, where faster, any pass and mask's whole
    tiles at their fastest step time on every SM at once (a block whose tokens fill its
    tiles, where the published call's last tile was partial). A block's busiest SM runs at
    least the average of its steps, each at least that step time, so no block of the block
    model beats this rate and efficiency stays at most 1."""
    d = template_head_dim(table, head_dim)
    best = 0.0
    for seq, heads, work, busiest, published_s in _published_calls(table, "fwd", "full", d):
        flops = 4.0 * d * seq * seq * heads
        even_s = published_s * float(work.sum()) * heads / table.sms / busiest
        best = max(best, flops / even_s)
    for kind in ("fwd", "bwd"):
        for mask in ("full", "diagonal"):
            if not any((k, m) == (kind, mask) for k, m, _ in table.series):
                continue
            tm, tn = _tile(table, kind, mask == "diagonal", d)
            step_flops = 4.0 * PASS_FLOPS_FACTOR[kind] * tm * tn * d
            fastest_s = min(step_s(table.name, kind, mask, d, seq) for seq in table.seqlens)
            best = max(best, step_flops * table.sms / fastest_s)
    return best * head_dim / d
