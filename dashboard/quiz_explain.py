"""The live half of each answer: numbers from the simulator for the scenario on screen,
the sentence that quotes them, and the figure that shows them.

Every number comes through the simulator's public functions: the layouts' token maps
and closed-form work (sim.layouts), the memory model (sim.scenario.memory), the ring merge on
small inputs (sim.scenario.online_softmax) and simulated runs with their metrics (through
dashboard.compute's cache of sim.engine.play.simulate + sim.trace.metrics.compute_metrics).
Definitions are docs/design.md's; question n illustrates its fact n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import plotly.graph_objects as go

from dashboard import compute, quiz_figures
from dashboard.i18n import Translator, layout_label
from sim.errors import RingsimError
from sim.layouts import exact_work, n_chunks, rank_of_token
from sim.scenario.config import Scenario
from sim.scenario.memory import full_kv_bytes
from sim.scenario.online_softmax import example as merge_example
from sim.schemes.ring import peak_memory_bytes, ring_buffers

MERGE_MAX_GPUS = 8
"""The merge of questions 3 and 7 runs on at most this many GPUs (small random inputs)."""
MERGE_TOKENS_PER_CHUNK = 4
CROSSOVER_MAX_GPUS = 64
"""Question 5 simulates at most this many GPUs at the scenario's tokens per GPU, each send
costed as the scenario's whole ring costs it (dashboard.compute.as_slice_of): whether a
transfer hides depends on a GPU's block, its link and what a send costs in that ring."""
BANDWIDTH_SPAN = 10.0
"""Question 5's bandwidth control reaches this factor either side of the crossover."""


@dataclass(frozen=True)
class Explained:
    live: str
    """The explanation's sentence with the numbers of the scenario on screen."""
    figure: go.Figure
    numbers: dict[str, Any]
    """The numbers quoted, also in `figure.layout.meta`."""


def merge_size(scenario: Scenario) -> tuple[int, int]:
    """GPUs and tokens of the small merge example for `scenario`'s layout."""
    n = min(scenario.n_gpus, MERGE_MAX_GPUS)
    chunks = n_chunks(scenario.layout, n)
    return n, chunks * MERGE_TOKENS_PER_CHUNK


def bandwidth_range(scenario: Scenario) -> tuple[float, float]:
    """Question 5's control, in GB/s: across the crossover (where there is one) and the link
    on screen."""
    b_star = compute.crossover_bandwidth_gbps(scenario.hardware, scenario, scenario.tokens_per_rank)
    now = scenario.hardware.link.bandwidth_gbps
    if b_star is None:
        return now / BANDWIDTH_SPAN, now * BANDWIDTH_SPAN
    return min(b_star / BANDWIDTH_SPAN, now / 3), max(b_star * BANDWIDTH_SPAN, now * 3)


def _mask(t: Translator, causal: bool) -> str:
    return t("fig.causal") if causal else t("fig.nomask")


# --- 1: the token dimension is split ------------------------------------------------------

def _q1(sc: Scenario, t: Translator, **_: Any) -> Explained:
    w = sc.workload
    owner = rank_of_token(sc.layout, w.seq, sc.n_gpus)
    per_gpu = np.bincount(owner, minlength=sc.n_gpus)
    tokens = int(per_gpu.max())

    def qkv_bytes(n_tokens: int) -> int:
        return w.batch * n_tokens * (w.heads + 2 * w.kv_heads) * w.head_dim * w.elem_bytes

    nums = {"q": 1, "seq": w.seq, "gpus": sc.n_gpus, "tokens_per_gpu": tokens,
            "tokens_per_gpu_min": int(per_gpu.min()), "shard_bytes": qkv_bytes(tokens),
            "full_bytes": qkv_bytes(w.seq)}
    live = t("q1.live", seq=t.int(w.seq), gpus=sc.n_gpus, layout=layout_label(t, sc.layout), tokens=t.int(tokens),
             heads=w.heads, head_dim=w.head_dim, shard=t.bytes(nums["shard_bytes"]),
             full=t.bytes(nums["full_bytes"]))
    return Explained(live, quiz_figures.token_split(owner, w.heads, w.head_dim, t, nums), nums)


# --- 2: K/V blocks travel the ring ----------------------------------------------------------

def ring_figure(n: int, t: Translator, nums: dict[str, Any] | None = None, **kw: Any) -> go.Figure:
    drawn = min(n, quiz_figures.MAX_RING_DRAWN)
    meta = dict(nums or {}, drawn=drawn, frames=drawn)
    note = t("q2.live_drawn", drawn=t.int(drawn), gpus=t.int(n)) if drawn < n else None
    return quiz_figures.ring_steps(drawn, t, meta, note=note, **kw)


def _q2(sc: Scenario, t: Translator, **_: Any) -> Explained:
    w, n = sc.workload, sc.n_gpus
    m = compute.run(sc).metrics
    block = w.kv_bytes(sc.tokens_per_rank)
    nums = {"q": 2, "gpus": n, "hops": n - 1, "kv_block_bytes": block,
            "total_bytes": m.total_bytes, "tokens_per_gpu": sc.tokens_per_rank}
    live = t("q2.live", tokens=t.int(sc.tokens_per_rank), kv_heads=w.kv_heads, head_dim=w.head_dim,
             dtype=w.dtype, bytes=t.bytes(block), hops=n - 1, total=t.bytes(m.total_bytes))
    if n > quiz_figures.MAX_RING_DRAWN:
        live += " " + t("q2.live_drawn", drawn=t.int(quiz_figures.MAX_RING_DRAWN), gpus=t.int(n))
    return Explained(live, ring_figure(n, t, nums), nums)


# --- 3 and 7: the merge of one query row ------------------------------------------------------

def _merge(sc: Scenario, query_row: int | None):
    n, seq = merge_size(sc)
    row = seq - 1 if query_row is None or not 0 <= int(query_row) < seq else int(query_row)
    return n, seq, merge_example(n_ranks=n, layout=sc.layout, causal=sc.workload.causal,
                                 tokens_per_chunk=MERGE_TOKENS_PER_CHUNK, query_row=row)


def _merge_sub(t: Translator, sc: Scenario, n: int, seq: int) -> str:
    return t("merge.fig.sub", tokens=seq, gpus=n, layout=layout_label(t, sc.layout), mask=_mask(t, sc.workload.causal))


def _q3(sc: Scenario, t: Translator, query_row: int | None = None, **_: Any) -> Explained:
    n, seq, merge = _merge(sc, query_row)
    err = merge.max_abs_error
    nums = {"q": 3, "query_row": merge.query_row, "query_gpu": merge.query_rank, "gpus": n,
            "tokens": seq, "max_abs_error": err, "steps": len(merge.steps)}
    live = t("q3.live", row=merge.query_row, gpu=merge.query_rank, gpus=n, tokens=seq,
             layout=layout_label(t, sc.layout), steps=len(merge.steps), err=t.sci(err))
    nums["title"] = t("q3.fig.title", row=merge.query_row, err=t.sci(err))
    nums["subtitle"] = _merge_sub(t, sc, n, seq)
    return Explained(live, quiz_figures.merge_trace(merge.steps, t, nums), nums)


def first_rescale(steps) -> int | None:
    """The first step after the first that raised the running maximum (factor in (0, 1))."""
    for i, s in enumerate(steps):
        if i > 0 and s.unmasked_keys > 0 and 0 < s.rescale < 1:
            return i
    return None


def _q7(sc: Scenario, t: Translator, query_row: int | None = None, **_: Any) -> Explained:
    n, seq, merge = _merge(sc, query_row)
    steps = merge.steps
    i = first_rescale(steps)
    nums: dict[str, Any] = {"q": 7, "query_row": merge.query_row, "gpus": n, "tokens": seq,
                            "step": i}
    if i is None:
        live = t("q7.live_none", row=merge.query_row)
        nums["title"] = t("q7.fig.title_none", row=merge.query_row)
    else:
        m_old, s = steps[i - 1].m, steps[i]
        nums.update(m_old=m_old, m_new=s.m, block_max=s.block_max, factor=s.rescale,
                    kv_gpu=s.kv_rank)
        live = t("q7.live", row=merge.query_row, step=i, gpu=s.kv_rank, block_max=t.num(s.block_max, 4),
                 m_old=t.num(m_old, 4), m_new=t.num(s.m, 4), factor=t.num(s.rescale, 4))
        nums["title"] = t("q7.fig.title", row=merge.query_row, step=i, factor=t.num(s.rescale, 4))
    nums["subtitle"] = _merge_sub(t, sc, n, seq)
    return Explained(live, quiz_figures.merge_trace(steps, t, nums, highlight=i), nums)


# --- 4: no GPU holds the full K/V ---------------------------------------------------------------

IN_FLIGHT = {2: "q4.in-flight.2", 1: "q4.in-flight.1", 0: "q4.in-flight.0"}
"""What a GPU holds besides its own shard, by its ring buffers (sim.schemes.ring.ring_buffers)."""


def _kv_held(workload, tokens: int, ranks: int) -> int:
    return compute.kv_held(peak_memory_bytes(workload, tokens, ranks))


def _q4(sc: Scenario, t: Translator, **_: Any) -> Explained:
    w, n, c = sc.workload, sc.n_gpus, sc.tokens_per_rank
    held, full = _kv_held(w, c, n), full_kv_bytes(w)
    m = compute.run(sc).metrics
    peak = max((r.peak_mem_bytes or 0) for r in m.ranks) or peak_memory_bytes(w, c, n)["total"]
    counts = sorted({g for g in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if w.seq % g == 0} | {n})
    rows = [{"gpus": g, "kv_held_bytes": _kv_held(w, w.seq // g, g), "full_kv_bytes": full}
            for g in counts]
    nums = {"q": 4, "gpus": n, "kv_held_bytes": held, "full_kv_bytes": full, "share": held / full,
            "peak_bytes": peak}
    live = t("q4.live", gpus=n, seq=t.int(w.seq), held=t.bytes(held), full=t.bytes(full),
             in_flight=t(IN_FLIGHT[ring_buffers(n)]),
             share=t.pct(held / full), peak=t.bytes(peak))
    nums["title"] = t("q4.fig.title", held=t.bytes(held), full=t.bytes(full))
    nums["subtitle"] = t("q4.fig.sub", seq=t.int(w.seq))
    return Explained(live, quiz_figures.kv_memory(rows, n, t, nums), nums)


# --- 5: when transfers hide ----------------------------------------------------------------------

def _q5(sc: Scenario, t: Translator, bandwidth_gbps: float | None = None, **_: Any) -> Explained:
    bw = float(bandwidth_gbps) if bandwidth_gbps else sc.hardware.link.bandwidth_gbps
    if not (math.isfinite(bw) and bw > 0):
        raise RingsimError(f"link bandwidth must be positive, got {bandwidth_gbps!r}")
    # the scenario's own hardware, its links at the bandwidth chosen: at the link on screen
    # the header's run itself (on at most CROSSOVER_MAX_GPUS of its GPUs, each send costed
    # as the whole ring's)
    hw = compute.with_link_gbps(sc.hardware, bw)
    c = sc.tokens_per_rank
    comp, xfer = compute.block_times(hw, sc, c)
    c_star = compute.crossover_tokens(hw, sc)
    b_star = compute.crossover_bandwidth_gbps(sc.hardware, sc, c)
    n_sim = min(sc.n_gpus, CROSSOVER_MAX_GPUS)
    sim_sc = sc.with_(hardware=compute.as_slice_of(hw, n_sim, sc.n_gpus), n_gpus=n_sim,
                      workload=replace(sc.workload, seq=c * n_sim))
    m = compute.run(sim_sc).metrics
    exposed = max(r.exposed_comm_s for r in m.ranks)
    tokens = sorted({2 ** k for k in range(6, 19)} | {c})
    by_tokens: dict[str, list[float]] = {"tokens": tokens, "compute_s": [], "transfer_s": []}
    for x in tokens:
        a, b = compute.block_times(hw, sc, x)
        by_tokens["compute_s"].append(a)
        by_tokens["transfer_s"].append(b)
    lo, hi = bandwidth_range(sc)
    bws = list(np.geomspace(min(lo, bw), max(hi, bw), 40))
    by_bw = {"gbps": bws, "compute_s": [comp] * len(bws),
             "transfer_s": [compute.block_transfer_s(compute.with_link_gbps(sc.hardware, b), sc, c) for b in bws]}
    hides = comp >= xfer
    nums = {"q": 5, "tokens": c, "bandwidth_gbps": bw, "compute_s": comp, "transfer_s": xfer,
            "hides": hides, "crossover_tokens": c_star, "crossover_bandwidth_gbps": b_star,
            "simulated_gpus": n_sim, "exposed_comm_s": exposed, "makespan_s": m.makespan_s,
            "exposed_frac": exposed / m.makespan_s if m.makespan_s > 0 else 0.0}
    verdict = t("q5.hides") if hides else t("q5.exposed")
    live = t("q5.live", bw=t.gbps(bw), tokens=t.int(c), compute=t.time(comp), transfer=t.time(xfer),
             verdict=verdict)
    if b_star is not None:
        live += " " + t("q5.live_bw", bw_star=t.gbps(b_star))
    else:
        fastest = compute.block_transfer_s(compute.with_link_gbps(sc.hardware, compute.CROSSOVER_GBPS[1]), sc, c)
        live += " " + t("q5.live_no_bw" if fastest > comp else "q5.live_any_bw", floor=t.time(fastest))
    if c_star is not None:
        live += " " + t("q5.live_tokens", c_star=t.int(math.ceil(c_star)))
    else:
        lo_c, hi_c = compute.CROSSOVER_TOKENS
        smallest = compute.block_times(hw, sc, lo_c)
        hides_all = smallest[0] >= smallest[1]
        live += " " + t("q5.live_all_tokens" if hides_all else "q5.live_no_tokens", most=t.int(hi_c))
    if b_star is not None:
        live += " " + t("q5.live_move")
    sim_key = "q5.live_sim" if n_sim == sc.n_gpus else "q5.live_sim_slice"
    live += " " + t(sim_key, gpus=t.int(n_sim), world=t.int(sc.n_gpus), layout=layout_label(t, sc.layout),
                    mask=_mask(t, sc.workload.causal), exposed=t.time(exposed), pct=t.pct(nums["exposed_frac"]),
                    makespan=t.time(m.makespan_s))
    if not sc.overlap:
        live += " " + t("q5.live_no_overlap")
    elif hides and nums["exposed_frac"] > 0.01 and sc.workload.causal:
        live += " " + t("q5.live_causal")
    nums["title"] = t("q5.fig.title", verdict=verdict)
    nums["subtitle"] = t("q5.fig.sub", gpu=sc.hardware.gpu.name, dtype=sc.workload.dtype)
    return Explained(live, quiz_figures.crossover(by_tokens, by_bw, t, nums), nums)


# --- 6 and 8: causal work is uneven ------------------------------------------------------------

def balanced_layout(sc: Scenario) -> str:
    """Zigzag where the sequence cuts into 2N chunks, striped otherwise."""
    return "zigzag" if sc.workload.seq % (2 * sc.n_gpus) == 0 else "striped"


def _causal(sc: Scenario, t: Translator) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    w, n = sc.workload, sc.n_gpus
    causal = sc.with_(workload=replace(w, causal=True))
    balanced = balanced_layout(sc)
    shares = {}
    for layout in ("contiguous", balanced):
        work = exact_work(layout, w.seq, n, True).sum(axis=1).astype(np.float64)
        shares[layout] = work / work.sum()
    mc = compute.run(causal.with_(layout="contiguous")).metrics
    mb = compute.run(causal.with_(layout=balanced)).metrics
    nums = {"gpus": n, "seq": w.seq, "balanced": balanced,
            "ratio": float(shares["contiguous"].max() / shares["contiguous"].min()),
            "imbalance_contiguous": mc.load_imbalance, "imbalance_balanced": mb.load_imbalance,
            "makespan_contiguous_s": mc.makespan_s, "makespan_balanced_s": mb.makespan_s,
            "compute_first_s": mc.ranks[0].compute_s, "compute_last_s": mc.ranks[-1].compute_s,
            "forced_causal": not w.causal}
    return nums, shares


def _q6(sc: Scenario, t: Translator, **_: Any) -> Explained:
    nums, shares = _causal(sc, t)
    nums["q"] = 6
    live = t("q6.live", seq=t.int(nums["seq"]), gpus=nums["gpus"], ratio=t.num(nums["ratio"]),
             imb_c=t.num(nums["imbalance_contiguous"], 4), imb_b=t.num(nums["imbalance_balanced"], 4),
             balanced=layout_label(t, nums["balanced"]), mk_c=t.time(nums["makespan_contiguous_s"]),
             mk_b=t.time(nums["makespan_balanced_s"]))
    if nums["forced_causal"]:
        live += " " + t("q6.live_forced")
    nums["title"] = t("q6.fig.title", ratio=t.num(nums["ratio"]))
    nums["subtitle"] = t("q6.fig.sub", seq=t.int(nums["seq"]), gpus=nums["gpus"])
    return Explained(live, quiz_figures.causal_work(shares, sc.workload.seq, sc.n_gpus, t, nums), nums)


def _q8(sc: Scenario, t: Translator, **_: Any) -> Explained:
    nums, shares = _causal(sc, t)
    n, seq = sc.n_gpus, sc.workload.seq
    nums.update(q=8, last_keys=seq, first_keys=1, last_share=float(shares["contiguous"][-1]),
                first_share=float(shares["contiguous"][0]), even_share=1 / n)
    live = t("q8.live", last=t.int(seq - 1), keys=t.int(seq), gpu=n - 1,
             share=t.pct(nums["last_share"]), even=t.pct(1 / n), first=t.pct(nums["first_share"]),
             t_last=t.time(nums["compute_last_s"]), t_first=t.time(nums["compute_first_s"]))
    if nums["forced_causal"]:
        live += " " + t("q6.live_forced")
    nums["title"] = t("q8.fig.title", gpu=n - 1, share=t.pct(nums["last_share"]))
    nums["subtitle"] = t("q6.fig.sub", seq=t.int(seq), gpus=n)
    return Explained(live, quiz_figures.causal_work(shares, seq, n, t, nums, mark_last=True), nums)


EXPLAIN: dict[int, Callable[..., Explained]] = {1: _q1, 2: _q2, 3: _q3, 4: _q4, 5: _q5, 6: _q6,
                                                  7: _q7, 8: _q8}


def explain(q: int, scenario: Scenario, t: Translator, *, bandwidth_gbps: float | None = None,
            query_row: int | None = None) -> Explained:
    """Question `q`'s live explanation for `scenario`, in `t`'s language. The questions
    are about the ring on one sequence: a packed scenario is explained as one document
    in the layout that matches its own (compute.one_document_layout)."""
    if scenario.packed:
        scenario = scenario.with_(workload=replace(scenario.workload, docs=None, seed=0, window=None),
                                  layout=compute.one_document_layout(scenario.layout))
    return EXPLAIN[q](scenario, t, bandwidth_gbps=bandwidth_gbps, query_row=query_row)
