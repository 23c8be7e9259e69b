"""What the views show, computed through the simulator's public functions and cached.

A simulation is the expensive part of a view drawn for the first time, so finished
traces are kept in a small LRU keyed on the scenario's JSON (a `Scenario` holds dicts and
is not hashable) and bounded by the number of spans they hold. Concurrent sessions
asking for the same scenario wait for one simulation rather than each running their own.
Behind it, where the app set one up (`use_disk`), a folder every server process shares
(dashboard/disk_cache.py): traces, metrics and comparison rows made by one worker, or by
a background callback's job, are read by the others instead of simulated again. The
comparisons keep only the metrics of the runs they make, not their traces.

The tables built here (comparison, overlap sweep, memory, per-step error) are plain
data read from the traces' columns; dashboard/figures/ draws them.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from dashboard import side_by_side
from dashboard.disk_cache import DiskCache
from dashboard.figures.documents import gpu_work, imbalance
from dashboard.figures.timeline import rank_starts
from dashboard.i18n import Translator, layout_label
from dashboard.state import scenario_key
from sim.engine.play import simulate
from sim.engine.players import head_geometry
from sim.errors import RingsimError
from sim.hardware.cluster import Hardware
from sim.invariants import check_rows, check_run
from sim.layouts import get as get_layout
from sim.layouts import packed
from sim.planning.compare import compare_impl_rows, layout_variants, scheme_variants
from sim.reasons import english
from sim.scenario import documents
from sim.scenario.config import LAYOUTS, Scenario
from sim.scenario.memory import full_kv_bytes, peak_memory
from sim.scenario.resolve import vary
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.schemes.ring import peak_memory_bytes
from sim.trace.format import COMPUTE, Trace
from sim.trace.metrics import Metrics, comparison_row, compute_metrics


class Result:
    """A simulated trace and, made on first use (a race only makes one twice), its metrics
    and where each rank's spans begin in its columns."""

    _UNSET = object()

    def __init__(self, trace: Trace, metrics: Metrics | None = None):
        self.trace = trace
        self._metrics = metrics
        self._starts: Any = self._UNSET

    @property
    def metrics(self) -> Metrics:
        """sim.trace.metrics.compute_metrics of the trace (a view that draws spans needs none)."""
        if self._metrics is None:
            self._metrics = compute_metrics(self.trace)
        return self._metrics

    @property
    def rank_starts(self) -> np.ndarray | None:
        """figures.timeline.rank_starts of the trace: a window of ranks is then a slice of its columns."""
        if self._starts is self._UNSET:
            self._starts = rank_starts(self.trace.columns, self.trace.n_gpus)
        return self._starts


class BoundedCache:
    """An LRU bounded by the total `size_of` its values, safe under threads; a value being
    made is made once, the other threads asking for it wait.

    A process forked from this one (a Dash background job) has none of the threads that were
    making values: it starts with its own lock and makes such a value itself, where it would
    wait for ever on the event of a thread it does not have (or on a lock such a thread held)."""

    def __init__(self, budget: int, size_of: Callable[[Any], int]):
        self.budget = budget
        self.size_of = size_of
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self._inflight: dict[str, threading.Event] = {}
        self.hits = 0
        self.misses = 0
        _CACHES.add(self)

    def _forget_threads(self) -> None:
        self._lock = threading.Lock()
        self._inflight = {}

    def peek(self, key: str) -> Any | None:
        """The value under `key` if it is made, else None (nothing is made)."""
        with self._lock:
            return self._items.get(key)

    def get(self, key: str, make: Callable[[], Any]) -> Any:
        while True:
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    self.hits += 1
                    return self._items[key]
                pending = self._inflight.get(key)
                if pending is None:
                    pending = self._inflight[key] = threading.Event()
                    self.misses += 1
                    break
            pending.wait()   # another thread is making it; then look again
        try:
            value = make()
            with self._lock:
                self._put(key, value)
            return value
        finally:
            with self._lock:
                self._inflight.pop(key, None)
            pending.set()

    def _put(self, key: str, value: Any) -> None:
        size = self.size_of(value)
        if size > self.budget:
            return
        self._items[key] = value
        self._used += size
        while self._used > self.budget:
            _, old = self._items.popitem(last=False)
            self._used -= self.size_of(old)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._used = 0
            self.hits = self.misses = 0


_CACHES: "weakref.WeakSet[BoundedCache]" = weakref.WeakSet()


def _forget_threads_in_child() -> None:
    for cache in list(_CACHES):
        cache._forget_threads()


os.register_at_fork(after_in_child=_forget_threads_in_child)


CACHE = BoundedCache(10_000_000, lambda r: len(r.trace))
"""Simulation results, bounded by the spans they hold: about 54 bytes each in columns, so
about 540 MB at most, and room for one forward+backward ring of 1024 GPUs (9.4M spans)."""
FIGURES = BoundedCache(48, lambda f: 1)
"""Finished figures, keyed by what they are a pure function of: a view revisited, or
the same scenario asked for by another session, costs only its serialization."""


DISK: DiskCache | None = None
"""The folder the server's processes share (set by `use_disk`; None: memory only)."""


def use_disk(disk: DiskCache | None) -> None:
    global DISK
    DISK = disk


def clear_caches(disk: bool = False) -> None:
    """Empty the memory caches, and with `disk` the shared folder too."""
    CACHE.clear()
    FIGURES.clear()
    if disk and DISK is not None:
        DISK.clear()


Progress = Callable[[int, int], None]
"""Told (runs done, runs in all) as a comparison makes its runs."""


def figure(kind: str, scenario: Scenario, profile_key: str | None, extra: Any,
           make: Callable[[], Any]) -> Any:
    """`make()` (a figure of `scenario`), cached under its kind and `extra` parameters. A
    figure with words has the page's language among its `extra` parameters, so that one
    drawn in a language is never served in another; a table without words does not, and
    serves every language's figure."""
    key = json.dumps([kind, scenario_key(scenario, profile_key), extra], default=str)
    return FIGURES.get(key, make)


def rows(kind: str, scenario: Scenario, profile_key: str | None, make: Callable[[], Any]) -> Any:
    """A comparison's rows (`make()`, words aside: every language draws from them), kept in
    memory and in the shared folder: a background job's rows are read by the server's
    processes, which then draw a revisited comparison in the request (`rows_ready`)."""
    key = _rows_key(kind, scenario, profile_key)
    return FIGURES.get(key, make if DISK is None else lambda: DISK.get(kind, key, make))


def rows_ready(kind: str, scenario: Scenario, profile_key: str | None) -> bool:
    """Whether `rows(kind, scenario, profile_key, ...)` is made: in memory or in the shared folder."""
    key = _rows_key(kind, scenario, profile_key)
    return FIGURES.peek(key) is not None or (DISK is not None and DISK.has(kind, key))


def _rows_key(kind: str, scenario: Scenario, profile_key: str | None) -> str:
    return json.dumps([kind, scenario_key(scenario, profile_key)], default=str)


def run(scenario: Scenario, profile: Any | None = None, profile_key: str | None = None) -> Result:
    """Simulate `scenario` (on `profile` when given) and compute its metrics, cached."""
    key = _key(scenario, profile, profile_key)

    def simulated() -> Result:
        # an impossible result (sim.invariants) is a RingsimError: the view shows its sentence, not the figure
        result = Result(simulate(scenario, profile, player="recurrence"))
        check_run(result.metrics.to_dict(), scenario.describe())
        return result

    def make() -> Result:
        if DISK is None:
            return simulated()
        result: Result | None = None

        def simulated_trace() -> Trace:
            nonlocal result
            result = simulated()
            return result.trace

        # another process's trace comes with the metrics it kept, if any
        trace, made = DISK.trace(key, simulated_trace)
        return result if made else Result(trace, DISK.read("metrics", key))

    return CACHE.get(key, make)


def _key(scenario: Scenario, profile: Any | None, profile_key: str | None) -> str:
    return scenario_key(scenario, profile_key if profile is not None else None)


def metrics(scenario: Scenario, profile: Any | None = None, profile_key: str | None = None) -> Metrics:
    """The metrics of `scenario`'s run: from the run in memory, the shared folder, or a run
    made (and kept) for them."""
    key = _key(scenario, profile, profile_key)
    held = CACHE.peek(key)
    if held is not None or DISK is None:
        return (held or run(scenario, profile, profile_key)).metrics
    return DISK.get("metrics", key, lambda: run(scenario, profile, profile_key).metrics)


def _summaries(runs: list[tuple[str, Scenario, tuple]], profile: Any | None, profile_key: str | None,
               progress: Progress | None = None, partial: Callable[[list[Any]], None] | None = None) -> list[Any]:
    """What a comparison keeps of each of `runs` ((kind, scenario, what): see
    dashboard.side_by_side.Summary), kept in the shared folder under its kind. A run in
    memory or in the folder is read, one that another process is making is waited for
    (`_awaited`); the others are simulated for their summary alone and
    let go (a comparison of 1,024 GPUs would otherwise push the run on screen out of
    memory), the large ones side by side in processes of their own
    (dashboard/side_by_side.py). As runs end, `progress` hears how many are done and
    `partial` the summaries so far (None for a run not done)."""
    out: list[Any] = [None] * len(runs)
    keys = [_key(sc, profile, profile_key) for _, sc, _ in runs]

    def keep(i: int, summary: Any) -> None:
        out[i] = summary
        if DISK is not None:
            DISK.write(runs[i][0], keys[i], summary)

    def report() -> None:
        if progress is not None:
            progress(sum(x is not None for x in out), len(runs))
        if partial is not None:
            partial(list(out))

    for i, ((kind, _, what), key) in enumerate(zip(runs, keys)):
        held = CACHE.peek(key)
        if held is not None:
            keep(i, side_by_side.summarize(held.trace, held.metrics, what))      # the other processes read it
        elif DISK is not None:
            out[i] = DISK.read(kind, key)
    todo = [i for i, x in enumerate(out) if x is None]
    if len(todo) < len(runs):
        report()
    # a run another process is making now (the page's own run, simulated for the view beside
    # this comparison) is waited for in a thread, not made again on the cores it shares
    elsewhere = [i for i in todo if DISK is not None and (DISK.making("metrics", keys[i]) or DISK.making("trace", keys[i]))]
    todo = [i for i in todo if i not in elsewhere]
    lock = threading.Lock()

    def done(i: int, summary: Any) -> None:
        with lock:
            keep(i, summary)
            report()

    far = [todo[j] for j in side_by_side.apart([runs[i][1] for i in todo])]
    with ThreadPoolExecutor(max_workers=1) as waiter, ThreadPoolExecutor(max_workers=1) as starter:
        waited = [waiter.submit(lambda i=i: done(i, _awaited(runs[i][1], runs[i][2], keys[i], profile)))
                  for i in elsewhere]
        # the large runs start in processes of their own while the small ones run here,
        # those first in line for the cores (side_by_side.WORKER_NICE): a comparison's first
        # rows show in a second, not after its largest, and no core waits for the other
        apart = None if not far else starter.submit(
            side_by_side.run_apart, [(runs[i][1], profile, runs[i][2]) for i in far], lambda j, v: done(far[j], v))
        for i in todo:
            if i not in far:
                done(i, side_by_side.simulated(runs[i][1], profile, runs[i][2]))
        for w in ([] if apart is None else [apart]) + waited:
            w.result()
    return out


def _awaited(scenario: Scenario, what: tuple, key: str, profile: Any | None) -> Any:
    """What a comparison keeps of a run another process is making now (see _summaries),
    once that process has made it; made here after all where that process failed. Its
    metrics are written before its trace (compute.metrics): a comparison that keeps only
    the metrics waits for them alone."""
    assert DISK is not None
    if what == ("metrics",) and DISK.making("metrics", key):
        return DISK.get("metrics", key, lambda: side_by_side.simulated(scenario, profile, what))
    trace, _ = DISK.trace(key, lambda: simulate(scenario, profile, player="recurrence"))
    metrics = DISK.read("metrics", key)
    return side_by_side.summarize(trace, metrics if metrics is not None else compute_metrics(trace), what)


def compare_table(scenario: Scenario, profile: Any | None = None, profile_key: str | None = None,
                  progress: Progress | None = None,
                  partial: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Every layout with overlap on and off: the rows of `ringsim compare`
    (sim.planning.compare.layout_variants, each a sim.trace.metrics.comparison_row), each
    run's metrics kept. `partial` hears the rows done so far, in order, as runs end."""
    variants = layout_variants(scenario)

    def rows(metrics: list[Any]) -> list[dict[str, Any]]:
        return [comparison_row(sc.layout, sc.overlap, m) for sc, m in zip(variants, metrics) if m is not None]

    metrics = _summaries([("metrics", sc, ("metrics",)) for sc in variants], profile, profile_key, progress,
                         None if partial is None else lambda done: partial(rows(done)))
    return rows(metrics)


# --- the schemes side by side -------------------------------------------------------

def as_ring(scenario: Scenario) -> Scenario:
    """The scenario with the default scheme, the ring (its layout, overlap and forwarding
    kept): the views about the ring's own transfers and layouts show the ring whatever
    scheme is on screen."""
    return scenario.with_(scheme=DEFAULT_SCHEME)


def scheme_base(scenario: Scenario) -> Scenario:
    """The scenario every scheme's variants are made from, as `ringsim compare --schemes`
    makes it: the ring, zigzag, overlap on, no scheme settings (the workload, hardware,
    GPUs and work counting of `scenario`). When the sequence does not cut into zigzag's
    chunks, the first layout it cuts into (a hybrid's rings use it)."""
    first = None
    for layout in ("zigzag", *[x for x in LAYOUTS if x != "zigzag"]):
        try:
            return scenario.with_(scheme=DEFAULT_SCHEME, settings=None, layout=layout, overlap=True)
        except RingsimError as e:
            first = first or e
    raise first


def scheme_rows(scenario: Scenario, profile: Any | None = None, profile_key: str | None = None,
                progress: Progress | None = None,
                partial: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """The rows of sim.planning.compare.compare_scheme_rows for the scenario's base: every
    scheme and ring layout (a refused one with its reason), each run's row kept. `partial`
    hears the rows done so far (the refused ones among them), in order, as runs end."""
    base = scheme_base(scenario)
    out: list[dict[str, Any] | None] = []
    runs, places = [], []
    for scheme, variant in scheme_variants(base):
        try:
            sc = vary(base, scheme, variant.values)
        except RingsimError as e:
            out.append({"scheme": scheme, "variant": variant.name, "refused": str(e),
                        "variant_clause": variant.label, "refused_clause": e.reason})
        else:
            places.append(len(out))
            out.append(None)
            runs.append((f"scheme-row-{scheme}-{variant.name}", sc, ("scheme-row", scheme, variant.name, variant.label)))
    refused = len(out) - len(runs)

    def runs_done(done: int, total: int) -> None:
        if progress is not None:
            progress(refused + done, refused + total)

    def rows_so_far(done: list[Any]) -> None:
        so_far = list(out)
        for place, row in zip(places, done):
            so_far[place] = row
        partial([r for r in so_far if r is not None])

    for place, row in zip(places, _summaries(runs, profile, profile_key, runs_done,
                                             None if partial is None else rows_so_far)):
        out[place] = row
    check_rows([r for r in out if "refused" not in r], base.describe())
    return out


def impl_rows(scenario: Scenario, profile: Any | None = None) -> list[dict[str, Any]]:
    """sim.planning.compare.compare_impl_rows of the scenario: its scheme as each library
    runs it (sim.implementations), on its own layout and settings."""
    rows = compare_impl_rows(scenario, profile)
    check_rows(rows, scenario.describe())
    return rows


def current_impl(scenario: Scenario) -> tuple[str, str]:
    """The (scheme, variant) of the implementations' comparison that is the scenario itself."""
    return scenario.scheme, scenario.implementation.title


def current_variant(scenario: Scenario) -> tuple[str, str] | None:
    """The (scheme, variant) of the comparison that is the scenario itself, if one is."""
    try:
        base = scheme_base(scenario)
    except RingsimError:
        return None
    want = scenario.describe()
    for scheme, variant in scheme_variants(base):
        if scheme != scenario.scheme:
            continue
        try:
            if vary(base, scheme, variant.values).describe() == want:
                return scheme, variant.name
        except RingsimError:
            continue
    return None


def one_document_layout(layout: str) -> str:
    """The closed-form layout (sim.layouts) a layout is on one document: the documents'
    own layouts are contiguous and zigzag there (sim.layouts.packed.DOC_LAYOUTS)."""
    return {"doc-contiguous": "contiguous", "balanced": "zigzag"}.get(layout, layout)


# --- which tokens each GPU holds ----------------------------------------------------

def _gpu_list(ranks: list[int]) -> str:
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"GPUs {ranks[0]}–{ranks[-1]}"
    shown = ", ".join(map(str, ranks[:8]))
    return f"GPU{'s' if len(ranks) > 1 else ''} {shown}" + (", …" if len(ranks) > 8 else "")


STRIP_TITLES = {"layout": "strip.title", "chunk-pairs": "strip.allgather", "in-order": "strip.ulysses",
                "ring-positions": "strip.hybrid"}
"""The layout strip's title for each pattern of shards (sim.schemes.base.TokenSplit.pattern)."""


def token_split(scenario: Scenario, t: Any = None) -> dict[str, Any]:
    """What the layout strip draws for the scenario's scheme (its TokenSplit,
    sim.schemes.base.Scheme.token_split): the layout its token shards follow, on how many
    holders, their names (a group of GPUs holding one shard: a hybrid's ring position) and
    the title, in the language of `t` (a dashboard.i18n.Translator; English without one).
    Packed documents: the documents in the title, and `packed` what the holders depend on
    besides the layout (else None)."""
    t = t or Translator("en")
    w = scenario.workload
    split = get_scheme(scenario.scheme).token_split(scenario)
    words = {"tokens": t.int(w.seq), "gpus": t.int(scenario.n_gpus), "layout": layout_label(t, split.layout),
             **{k: t.int(v) for k, v in split.numbers.items()}}
    out: dict[str, Any] = {"layout": split.layout, "n": split.holders, "holders": None,
                           "title": t(STRIP_TITLES[split.pattern], **words)}
    if split.groups is not None:
        out["holders"] = [t("strip.position", k=t.int(k), gpus=_gpu_list(list(g))) for k, g in enumerate(split.groups)]
    out["packed"] = [w.docs, w.seed, w.window, w.causal] if scenario.packed else None
    if w.docs is not None:
        d = length_summary(w)
        out["title"] = t("strip.docs", title=out["title"], count=t.int(d["count"]), median=t.int(d["median"]),
                         longest=t.int(d["longest"]))
    return out


def token_holders(scenario: Scenario, split: dict[str, Any]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The holder of every token the layout strip draws (`token_split`'s layout on its
    holders: sim.layouts.packed.rank_tokens) and the documents' bounds, for packed documents;
    (None, None) for one document, whose layouts the strip reads from sim.layouts."""
    if split.get("packed") is None:
        return None, None
    p = replace(packed.packed_of(scenario), n=split["n"], layout=split["layout"])
    owner = np.empty(p.seq, dtype=np.int64)
    owner[packed.rank_tokens(p)] = np.arange(p.n)[:, None]
    return owner, np.asarray(p.bounds)


# --- which layout balances the documents --------------------------------------------

BALANCE_SEEDS = 16
"""Drawn documents: the layouts' imbalance over this many seeds (0, 1, ...)."""
BALANCE_TOKENS = 1 << 22
"""...while the seeds' sequences hold at most this many tokens in all (about half a second
for the five layouts); fewer seeds past it, none below two."""


def document_balance(scenario: Scenario) -> dict[str, Any]:
    """Each GPU's work on every packed layout for the scenario's documents (its ring's
    GPUs; figures.documents.gpu_work), the max/mean of each and, for drawn documents,
    the mean and worst max/mean over seeds. English words for the documents."""
    w = scenario.workload
    p = packed.packed_of(scenario)
    work = {lay: gpu_work(replace(p, layout=lay)) for lay in packed.LAYOUTS}
    out: dict[str, Any] = {
        "n": p.n, "chosen": scenario.layout, "work": {lay: v.tolist() for lay, v in work.items()},
        "imbalance": {lay: imbalance(v) for lay, v in work.items()}, "seeds": 0, "spread": {},
        "docs": documents.describe(w.docs, w.seq, w.seed)}
    seeds = min(BALANCE_SEEDS, BALANCE_TOKENS // w.seq)
    drawn = w.docs is not None and w.docs.partition(":")[0].strip() in documents.DISTRIBUTIONS
    if drawn and seeds >= 2:
        ratios = np.array([[imbalance(gpu_work(replace(p, bounds=_bounds(w, seed), layout=lay)))
                            for lay in packed.LAYOUTS] for seed in range(seeds)])
        out.update(seeds=seeds, spread={lay: {"mean": float(ratios[:, i].mean()), "worst": float(ratios[:, i].max())}
                                        for i, lay in enumerate(packed.LAYOUTS)})
    return out


def _bounds(w: Any, seed: int) -> tuple[int, ...]:
    return tuple(int(x) for x in documents.bounds(w.docs, w.seq, seed))


def length_summary(w: Any) -> dict[str, int]:
    """How many documents, their median and longest length (one document: the sequence)."""
    d = np.diff(documents.bounds(w.docs, w.seq, w.seed))
    return {"count": int(d.size), "median": int(np.median(d)), "longest": int(d.max())}


# --- view 5: when transfers hide ---------------------------------------------------

SWEEP_MAX_GPUS = 16
"""The sweep simulates a ring of at most this many GPUs, each point a full simulation:
per-step overlap depends on a GPU's block, its link and what each send costs, and a
larger ring's sends are costed as that ring's (`as_slice_of`)."""


CROSSOVER_TOKENS = (16, 2 ** 20)
"""Block sizes (tokens per GPU) the crossover is looked for between."""
CROSSOVER_GBPS = (0.1, 1e5)
"""Link bandwidths (GB/s) the crossover bandwidth is looked for between."""
CROSSOVER_GBPS_POINTS = 421
"""Points of the bandwidth grid (60 a decade, 3.9% apart): NCCL's channels for a send step
with the link's bandwidth (the NVLinks it stands for, powers of two), so that a send's time
is not monotonic in it and a coarser grid missed a slower stretch past the crossover."""
_CROSSOVERS: dict[str, float | None] = {}
"""Crossover bandwidths made, by scenario, hardware and block (the grid is a second of work)."""


def with_link_gbps(hw: Any, gbps: float) -> Any:
    """`hw` with every link at `gbps` GB/s, its latency and all else kept (the sweep's and
    question 5's bandwidth); `hw` itself where that is what it has."""
    if hw.link.bandwidth_gbps == gbps and hw.inter_link is None:
        return hw
    return replace(hw, link=replace(hw.link, name=f"{gbps:.4g} GB/s", bandwidth_gbps=gbps), inter_link=None)


def as_slice_of(hw: Any, n_gpus: int, world: int) -> Any:
    """The hardware on which a ring of `n_gpus` stands for `n_gpus` of a ring of `world`: under
    NCCL, each send costed in the larger ring's communicator (sim.hardware.cluster.Hardware
    .nccl_world), where NCCL gives a send fewer channels; `hw` itself otherwise."""
    if world > n_gpus and getattr(hw, "times_groups", False):
        return replace(hw, nccl_world=world)
    return hw


def ring_hops(scenario: Scenario) -> list[tuple[int, int]]:
    """The ring's kinds of hop, (sender, receiver): one inside a node, and one between
    nodes where the ring spans several."""
    n = scenario.n_gpus
    g = getattr(scenario.hardware, "gpus_per_node", n)
    return [(0, min(1, n - 1))] + ([(g - 1, g)] if n > g else [])


def block_times(hw: Any, scenario: Scenario, tokens: float) -> tuple[float, float]:
    """(compute, transfer) of one full (unmasked) forward block of `tokens` x `tokens` as the
    scenario's ring runs it: the block called behind others (the GPU busy, its merge
    paid), and its K/V sent over the ring's slowest hop (`ring_hops`) in the ring's
    communicator of all its GPUs, as the simulation costs every K/V send (under NCCL, a
    larger ring's send gets fewer channels)."""
    return block_compute_s(hw, scenario, tokens), block_transfer_s(hw, scenario, tokens)


def block_compute_s(hw: Any, scenario: Scenario, tokens: float) -> float:
    """`block_times`' compute: it does not depend on the link."""
    w = scenario.workload
    order = {"alone": False, "isolated": False} if hw.takes_call_order else {}
    return hw.compute_time_s(w.fwd_flops(tokens * tokens), dtype=w.dtype, kind="fwd", mask="full",
                             q_tokens=int(tokens), kv_tokens=int(tokens), **head_geometry(w), **order)


def block_transfer_s(hw: Any, scenario: Scenario, tokens: float) -> float:
    """`block_times`' transfer, alone: what a sweep over the link's bandwidth varies."""
    w = scenario.workload
    src, dst = (np.array(x) for x in zip(*ring_hops(scenario)))
    nbytes = np.full(len(src), w.kv_bytes(1) * tokens, dtype=float)
    if getattr(hw, "times_groups", False):
        times, _ = hw.group_transfer_times_s(np.full(len(src), "kv"), nbytes, src, dst,
                                             [np.arange(scenario.n_gpus)], np.zeros(len(src), dtype=np.int64))
    else:
        times = hw.transfer_times_s(nbytes, src, dst)
    return float(np.max(times))


def _last_crossing(f: Callable[[float], float], lo: float, hi: float, points: int = 97) -> float | None:
    """The x in [lo, hi] (a log scale) from which f(x) >= 0 holds to hi, found between the
    points of a grid and then halved to a millionth; None where f(hi) < 0 or f >= 0 at
    every point."""
    xs = np.geomspace(lo, hi, points)
    ok = np.array([f(float(x)) >= 0 for x in xs])
    if not ok[-1] or ok.all():
        return None
    i = int(np.flatnonzero(~ok)[-1])          # the last point where f < 0: it crosses after it
    a, b = float(xs[i]), float(xs[i + 1])
    while b / a > 1 + 1e-6:
        m = (a * b) ** 0.5
        a, b = (m, b) if f(m) < 0 else (a, m)
    return b


def crossover_tokens(hw: Any, scenario: Scenario) -> float | None:
    """Tokens per GPU from which a full block's compute covers its transfer (`block_times`),
    between CROSSOVER_TOKENS; None where no block size there changes the verdict (every
    one hides, or none does: `block_times` at the ends say which).

    docs/design.md fact 5: compute grows as c^2 and transfer as c, so past this c the
    transfer hides behind compute; with no fixed costs on either side (no launch overhead,
    no link latency) it is the closed form c* of the paper's condition.
    """
    def margin(c: float) -> float:
        comp, xfer = block_times(hw, scenario, c)
        return comp - xfer
    return _last_crossing(margin, *CROSSOVER_TOKENS)


def crossover_bandwidth_gbps(hw: Any, scenario: Scenario, tokens: int) -> float | None:
    """Link GB/s (every link, `with_link_gbps`) from which a full block of `tokens` transfers
    in no more time than it computes, between CROSSOVER_GBPS; None where none there does
    (the send's fixed costs alone exceed the compute), where it hides at every bandwidth,
    or where `hw` has no link to vary (a calibrated profile). Where a faster link can be slower
    (NCCL's channels: CROSSOVER_GBPS_POINTS), the bandwidth from which every faster one on the
    grid hides the block."""
    if not isinstance(hw, Hardware):
        return None
    key = json.dumps([scenario_key(scenario, None), hw.describe(), int(tokens)], sort_keys=True, default=str)
    if key not in _CROSSOVERS:
        if len(_CROSSOVERS) >= 256:
            _CROSSOVERS.clear()
        comp = block_compute_s(hw, scenario, tokens)
        _CROSSOVERS[key] = _last_crossing(lambda b: comp - block_transfer_s(with_link_gbps(hw, b), scenario, tokens),
                                          *CROSSOVER_GBPS, points=CROSSOVER_GBPS_POINTS)
    return _CROSSOVERS[key]


def _point(sc: Scenario, profile: Any, profile_key: str | None) -> dict[str, float]:
    m = run(sc, profile, profile_key).metrics
    exposed = max(r.exposed_comm_s for r in m.ranks)
    return {"efficiency": m.efficiency if m.efficiency is not None else float("nan"),
            "exposed_frac": exposed / m.makespan_s if m.makespan_s > 0 else 0.0,
            "makespan_s": m.makespan_s, "exposed_comm_s": exposed}


def overlap_sweep(scenario: Scenario, profile: Any | None = None,
                  profile_key: str | None = None) -> dict[str, Any]:
    """Efficiency and exposed communication against tokens per device and link bandwidth."""
    n = min(scenario.n_gpus, SWEEP_MAX_GPUS)
    hw = profile if profile is not None else scenario.hardware
    ring_hw = as_slice_of(scenario.hardware, n, scenario.n_gpus)       # the smaller ring's sends as the scenario's
    chunks_per_rank = 1 if scenario.packed else get_layout(scenario.layout).chunks_per_rank
    c_now = scenario.tokens_per_rank
    tokens = sorted({2 ** k for k in range(7, 18)} | {c_now})
    tokens = [c for c in tokens if c % chunks_per_rank == 0]
    by_tokens = []
    for c in tokens:
        try:
            sc = scenario.with_(n_gpus=n, workload=_with_seq(scenario, c * n), hardware=ring_hw)
        except RingsimError:
            continue            # a list of documents that does not fill this sequence
        comp, xfer = block_times(hw, scenario, c)
        by_tokens.append({"tokens": c, "block_compute_s": comp, "block_transfer_s": xfer,
                          **_point(sc, profile, profile_key)})
    by_bw: list[dict[str, float]] = []
    bw_now = None
    if profile is None:
        link = scenario.hardware.link
        bw_now = link.bandwidth_gbps
        bws = sorted({float(round(x, 3)) for x in np.geomspace(5, 2000, 9)} | {bw_now})
        sc0 = scenario.with_(n_gpus=n, workload=_with_seq(scenario, c_now * n))
        for bw in bws:
            hw_bw = with_link_gbps(ring_hw, bw)
            by_bw.append({"bandwidth_gbps": bw, **_point(sc0.with_(hardware=hw_bw), None, None)})
    return {
        "n_gpus": n, "world": scenario.n_gpus if ring_hw is not scenario.hardware else n,
        "layout": scenario.layout, "overlap": scenario.overlap,
        "tokens_now": c_now, "bandwidth_now_gbps": bw_now,
        "crossover_tokens": crossover_tokens(hw, scenario),
        "crossover_bandwidth_gbps": crossover_bandwidth_gbps(hw, scenario, c_now),
        "by_tokens": by_tokens, "by_bandwidth": by_bw,
    }


def _with_seq(scenario: Scenario, seq: int):
    return replace(scenario.workload, seq=seq)


# --- view 6: memory -------------------------------------------------------------------

def memory_table(scenario: Scenario) -> dict[str, Any]:
    """Peak bytes per device against sequence length and against device count."""
    w = scenario.workload
    n = scenario.n_gpus
    chunks = scenario.n_chunks
    seqs = sorted({chunks * 2 ** k for k in range(4, 26) if chunks * 2 ** k <= 1 << 24} | {w.seq})
    by_seq = []
    for s in seqs:
        ws = _with_seq(scenario, s)
        ring = peak_memory_bytes(ws, s // n, n)
        by_seq.append({"seq": s, "ring_bytes": ring["total"], "ring_kv_bytes": kv_held(ring),
                       "one_gpu_bytes": peak_memory_bytes(ws, s, 1)["total"],
                       "full_kv_bytes": full_kv_bytes(ws)})
    c = scenario.tokens_per_rank
    counts = [g for g in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if w.seq % g == 0]
    by_gpus = []
    for g in counts:
        ring = peak_memory_bytes(w, w.seq // g, g)
        by_gpus.append({"gpus": g, "ring_bytes": ring["total"], "ring_kv_bytes": kv_held(ring),
                        "fixed_shard_bytes": peak_memory_bytes(_with_seq(scenario, c * g), c, g)["total"],
                        "full_kv_bytes": full_kv_bytes(w)})
    return {"seq_now": w.seq, "gpus_now": n, "tokens_per_rank": c,
            "capacity_bytes": scenario.hardware.gpu.memory_gb * 1e9,
            "items": peak_memory_bytes(w, c, n), "by_seq": by_seq, "by_gpus": by_gpus,
            "scheme": scenario.scheme, "scheme_items": peak_memory(scenario),
            "full_kv_now_bytes": full_kv_bytes(w),
            "schemes": scheme_memory(scenario, seqs, counts), "refused": memory_refused(scenario)}


def memory_refused(scenario: Scenario) -> list[dict[str, Any]]:
    """The schemes of the comparison none of whose variants runs on the scenario (Ulysses on
    more GPUs than heads), each with its first variant's refusal: the memory view says why
    they are missing."""
    try:
        base = scheme_base(scenario)
    except RingsimError:
        return []
    first: dict[str, RingsimError | None] = {}
    for scheme, variant in scheme_variants(base):
        try:
            vary(base, scheme, variant.values)
        except RingsimError as e:
            first.setdefault(scheme, e)
        else:
            first[scheme] = None
    return [{"scheme": s, "refused": str(e), "refused_clause": e.reason} for s, e in first.items() if e is not None]


def _memory_variants(scenario: Scenario) -> list[tuple[str, str, dict[str, Any] | None, dict[str, Any]]]:
    """The comparison's variants (sim.planning.compare.scheme_variants) with a memory model of
    their own at the scenario: the ring's layouts and the hybrid's placements hold the
    same bytes, one of each is kept. (label, scheme, the variant's clause where the label
    names it, the variant's option values)."""
    try:
        base = scheme_base(scenario)
    except RingsimError:
        return []
    kept: list[tuple[dict[str, Any] | None, str, dict[str, Any], dict[str, int]]] = []
    for scheme, variant in scheme_variants(base):
        try:
            items = peak_memory(vary(base, scheme, variant.values))
        except RingsimError:
            continue
        if not any(s == scheme and i == items for _, s, _, i in kept):
            kept.append((variant.label, scheme, variant.values, items))
    out = []
    for label, scheme, values, _ in kept:
        alone = sum(1 for k in kept if k[1] == scheme) == 1
        named = None if alone else label
        out.append((scheme if named is None else f"{scheme} ({english(named)})", scheme, named, values))
    return out


def scheme_memory(scenario: Scenario, seqs: list[int], counts: list[int]) -> list[dict[str, Any]]:
    """Each scheme's peak memory per GPU (its own `peak_memory`, itemized now) against
    sequence length and GPU count; a point the scheme refuses is None. Against GPU count
    a hybrid's degrees are its own choice at each count (as a fresh `compare` would make)."""
    out = []
    variants = _memory_variants(scenario)
    base = scheme_base(scenario) if variants else None
    for label, scheme, variant, values in variants:
        # at another GPU count the degrees are the scheme's own choice
        at_n = {k: v for k, v in values.items() if k not in get_scheme(scheme).gpu_shares}

        def total(values: dict[str, Any], **over: Any) -> int | None:
            try:
                return peak_memory(vary(base, scheme, values, **over))["total"]
            except RingsimError:
                return None

        out.append({
            "label": label, "scheme": scheme, "variant_clause": variant,
            "items": peak_memory(vary(base, scheme, values)),
            "by_seq": [total(values, workload=_with_seq(scenario, s)) for s in seqs],
            "by_gpus": [total(at_n, n_gpus=g) for g in counts],
        })
    return out


def kv_held(items: dict[str, int]) -> int:
    """The K/V part of a rank's memory: its own shard and the blocks in flight."""
    return items["kv_own"] + items["kv_buffers"]


# --- view 8: model against measurement ----------------------------------------------

def step_durations(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each rank's step durations, as sim.validate.step_durations defines them (from the
    end of the rank's previous compute, or the trace's first event, to the end of this
    step's compute; the last compute of a (rank, step) counts), from the columns: arrays
    rank, step, duration, sorted by rank then step."""
    c = trace.columns
    t0 = float(c.start_s.min()) if len(c) else 0.0
    comp = np.flatnonzero(c.stream == COMPUTE)
    rank, step, end = c.rank[comp].astype(np.int64), c.step[comp].astype(np.int64), c.end_s[comp]
    order = np.lexsort((np.arange(len(comp)), step, rank))
    rank, step, end = rank[order], step[order], end[order]
    last = np.ones(len(rank), dtype=bool)      # the last of each (rank, step)
    last[:-1] = (rank[1:] != rank[:-1]) | (step[1:] != step[:-1])
    rank, step, end = rank[last], step[last], end[last]
    prev = np.empty_like(end)
    prev[1:] = end[:-1]
    first = np.ones(len(rank), dtype=bool)
    first[1:] = rank[1:] != rank[:-1]
    prev[first] = t0
    return rank, step, end - prev


def step_errors(simulated: Trace, measured: Trace) -> list[dict[str, float]]:
    """Per ring step: each rank's step duration in both traces (sim.validate's definition:
    from the end of its previous step's compute to the end of this one's), the medians
    over ranks, and the median, smallest and largest signed relative error over ranks."""
    sim_r, sim_k, sim_d = step_durations(simulated)
    meas_r, meas_k, meas_d = step_durations(measured)
    width = int(max(sim_k.max(initial=0), meas_k.max(initial=0))) + 1
    _, i_sim, i_meas = np.intersect1d(sim_r * width + sim_k, meas_r * width + meas_k,
                                      assume_unique=True, return_indices=True)
    steps, s, m = meas_k[i_meas], sim_d[i_sim], meas_d[i_meas]
    order = np.argsort(steps, kind="stable")
    steps, s, m = steps[order], s[order], m[order]
    bounds = np.flatnonzero(np.diff(steps)) + 1
    rows = []
    for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(steps)].tolist()):
        if lo == hi:
            continue
        ss, ms = s[lo:hi], m[lo:hi]
        ok = ms > 0
        errs = (ss[ok] - ms[ok]) / ms[ok]
        nan = float("nan")
        rows.append({"step": int(steps[lo]), "ranks": hi - lo,
                     "simulated_s": float(np.median(ss)), "measured_s": float(np.median(ms)),
                     "error": float(np.median(errs)) if errs.size else nan,
                     "error_min": float(errs.min()) if errs.size else nan,
                     "error_max": float(errs.max()) if errs.size else nan})
    return rows
