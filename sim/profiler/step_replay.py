"""A profiled tensor-parallel iteration played again through the step model (docs/step.md,
"Replaying a profiled iteration"): the model's shapes read from the GEMMs the run recorded,
the GPU's GEMM rate and the all-reduce's alpha-beta fitted to the run's own kernels, and the
iteration rebuilt rank by rank, measured against simulated.

What is modelled and what is taken as measured:

- **GEMMs** (every `gemm` kernel, the layers' linear layers, the output layer and the
  unfused attention's two batched products): sim.hardware.gemm's tiles and waves at one
  rate fitted to the run (FitGemm), the step model's own products (sim.training.step with
  that rate) for the layers' linears.
- **TP all-reduces** (every `all_reduce` kernel): alpha + bytes / beta fitted to the run
  (FitAllReduce), which the step model's link plays (an all-reduce is its reduce-scatter and
  all-gather, 2 (TP - 1) ring steps).
- **Other kernels** (LayerNorm, the masked softmax, Triton's fused bias/GeLU/residual
  kernels, copies, the embedding, the loss): as measured, per rank. The step model's
  elementwise terms describe RMSNorm, SwiGLU and RoPE under sequence parallelism, not a GPT's
  LayerNorm and GeLU on every token of every TP rank, and it has no unfused softmax.
- **The host**: the GPU's idle time between kernels, as measured per rank and per stretch
  between two all-reduces (the kernels could not start before the host launched them).

The play: each rank runs the stretch before all-reduce j in its modelled kernel time plus its
measured idle; all-reduce j starts when the last rank is ready (NCCL's ring needs every rank)
and takes the fitted time; the stretch after the last all-reduce runs to the rank's end of
the iteration. With the measured kernel times in place of the models, this gives back the
measured iteration (tests check it), so what differs is what the models get wrong.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.hardware.gemm import gemm_time, rate_tflops
from sim.hardware.presets import GPU_PRESETS
from sim.scenario.models import Model

UNFITTED_LINK = {"A100-SXM-80GB": "nvlink3", "A100-SXM-40GB": "nvlink3", "H100-SXM": "nvlink4", "H200": "nvlink4"}
"""The NVLink preset of each GPU's DGX (sim.hardware.presets' clusters), for the unfitted play."""
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul")
"""The CPU ops whose recorded Input Dims give a GEMM kernel's shape (the innermost one around
its launch: aten::mm inside aten::matmul inside a Linear)."""


def _col(events: Any, name: str) -> np.ndarray:
    return np.asarray(getattr(events, name))


@dataclass(frozen=True)
class Gemm:
    """One recorded product: `batch` products of (m x k) times (k x n)."""

    m: int
    n: int
    k: int
    batch: int = 1
    op: str = ""

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def gemm_of(op: str, dims: list) -> Gemm | None:
    """The product a GEMM op computes, from its Input Dims (torch's argument order), or None."""
    try:
        if op == "aten::mm":
            (m, k), (_, n) = dims[0], dims[1]
            return Gemm(m, n, k, 1, op)
        if op == "aten::addmm":                           # bias, mat1, mat2
            (m, k), (_, n) = dims[1], dims[2]
            return Gemm(m, n, k, 1, op)
        if op == "aten::bmm":
            (b, m, k), (_, _, n) = dims[0], dims[1]
            return Gemm(m, n, k, b, op)
        if op == "aten::baddbmm":                         # input, batch1, batch2
            (b, m, k), (_, _, n) = dims[1], dims[2]
            return Gemm(m, n, k, b, op)
        if op == "aten::linear":                          # input (..., k), weight (n, k)
            x, w = dims[0], dims[1]
            return Gemm(int(np.prod(x[:-1])), w[0], w[1], 1, op)
        if op == "aten::matmul":
            x, w = dims[0], dims[1]
            if len(w) == 2:
                return Gemm(int(np.prod(x[:-1])), w[1], w[0], 1, op)
    except (IndexError, TypeError, ValueError):
        return None
    return None


# --- the run, per rank ----------------------------------------------------------------------

@dataclass
class RankKernels:
    """One rank's GPU work inside one iteration, in time order (seconds)."""

    rank: int
    start_s: float
    """The iteration's start and end on this rank (its ProfilerStep)."""
    end_s: float
    kind: np.ndarray
    name: np.ndarray
    k_start: np.ndarray
    k_dur: np.ndarray
    msg_bytes: np.ndarray
    gemm: list[Gemm | None]
    """Each kernel's product (gemm kernels whose launching op recorded its dims), else None."""


def _rank_kernels(run: Any, rank: int, iteration: int | None) -> RankKernels:
    """The kernels one rank's iteration launched (the reader puts a GPU row in the step of its
    launch). The iteration runs from its ProfilerStep's start on the CPU to the later of that
    step's end and the end of the last kernel it launched."""
    ev = run.events
    its = run.iterations.get(rank)
    if not its:
        raise RingsimError(f"rank {rank} has no ProfilerStep iteration: record with torch.profiler's schedule "
                           "(prof.step() each iteration)")
    if iteration is None:
        step, start, end = its[-1]
    else:
        found = [x for x in its if x[0] == iteration]
        if not found:
            raise RingsimError(f"rank {rank} has no iteration {iteration} (it has {', '.join(str(x[0]) for x in its)})")
        step, start, end = found[0]
    rk, on_gpu, it = _col(ev, "rank"), _col(ev, "on_gpu").astype(bool), _col(ev, "iteration")
    start_s, dur_s = _col(ev, "start_s"), _col(ev, "dur_s")
    gpu = np.flatnonzero((rk == rank) & on_gpu & (it == step))
    gpu = gpu[np.argsort(start_s[gpu], kind="stable")]
    if not len(gpu):
        raise RingsimError(f"rank {rank}'s iteration {step} launched no GPU kernels")
    last = float(np.max(start_s[gpu] + dur_s[gpu]))
    kind = _col(ev, "kind")[gpu].astype(str)
    return RankKernels(rank=rank, start_s=float(start), end_s=max(float(end), last), kind=kind,
                       name=_col(ev, "name")[gpu].astype(str), k_start=start_s[gpu].astype(float),
                       k_dur=dur_s[gpu].astype(float), msg_bytes=_message_bytes(ev, gpu),
                       gemm=_gemm_shapes(run, rank, gpu))


def _message_bytes(ev: Any, rows: np.ndarray) -> np.ndarray:
    """Each kernel's message bytes as the reader gives them (record_param_comms), NaN unknown."""
    msg = _col(ev, "msg_bytes")[rows].astype(float)
    msg[msg < 0] = np.nan
    return msg


def _enclosing(op_start: np.ndarray, op_end: np.ndarray, t: float) -> list[int]:
    """Indices of the ops (sorted by start) that hold time t, innermost first."""
    out, i = [], int(np.searchsorted(op_start, t, side="right")) - 1
    while i >= 0 and t - op_start[i] <= 1.0:        # nothing open a second before the launch counts
        if op_end[i] >= t:
            out.append(i)
        i -= 1
    return out


def _gemm_shapes(run: Any, rank: int, gpu_rows: np.ndarray) -> list[Gemm | None]:
    """Each gemm kernel's product: the innermost GEMM op (GEMM_OPS) on the CPU around the
    runtime call that launched it, read from that op's Input Dims."""
    ev = run.events
    rk, on_gpu = _col(ev, "rank"), _col(ev, "on_gpu").astype(bool)
    kind, name = _col(ev, "kind").astype(str), _col(ev, "name").astype(str)
    start, dur, dims, launch = _col(ev, "start_s"), _col(ev, "dur_s"), _col(ev, "input_dims"), _col(ev, "launch_start_s")
    ops = np.flatnonzero((rk == rank) & ~on_gpu & np.isin(name, GEMM_OPS))
    ops = ops[np.argsort(start[ops], kind="stable")]
    op_start, op_end = start[ops], start[ops] + dur[ops]
    out: list[Gemm | None] = []
    for row in gpu_rows:
        found = None
        if kind[row] == "gemm" and np.isfinite(launch[row]):
            for i in _enclosing(op_start, op_end, float(launch[row])):
                raw = dims[ops[i]]
                found = gemm_of(str(name[ops[i]]), json.loads(raw)) if raw else None
                if found is not None:
                    break
        out.append(found)
    return out


# --- the model's shapes ---------------------------------------------------------------------

@dataclass
class Shapes:
    """What the recorded GEMM dims say about the model (None: could not be read)."""

    tp: int
    tokens: int
    """Tokens of one micro-batch on a GPU (the linear layers' M)."""
    hidden: int
    heads: int
    head_dim: int
    kv_heads: int
    ffn: int
    mlp: str
    vocab: int | None
    layers: int
    microbatches: int
    micro_batch: int
    seq: int
    forward_only: bool
    attention: str
    """"unfused" (batched GEMMs and a softmax kernel) or "fused" (attention kernels)."""
    linears: dict[str, tuple[int, int, int]]
    """The layer's products as (m, n, k) on one GPU."""
    unread: list[str] = field(default_factory=list)

    def model(self) -> Model:
        h, f = self.hidden, self.ffn
        per_layer = (h * (self.heads + 2 * self.kv_heads) * self.head_dim + self.heads * self.head_dim * h
                     + (2 if self.mlp == "gelu" else 3) * h * f)
        params = self.layers * per_layer + (self.vocab or 0) * h
        return Model(name="profiled", layers=self.layers, hidden=h, heads=self.heads, kv_heads=self.kv_heads,
                     head_dim=self.head_dim, ffn=f, vocab=self.vocab or self.tp, params=float(params),
                     source="read from a profiled run's recorded GEMM dims (sim.profiler.step_replay)")

    def describe(self) -> dict[str, Any]:
        return {"tp": self.tp, "tokens_per_microbatch": self.tokens, "hidden": self.hidden, "heads": self.heads,
                "kv_heads": self.kv_heads, "head_dim": self.head_dim, "ffn": self.ffn, "mlp": self.mlp,
                "vocab": self.vocab, "layers": self.layers, "microbatches": self.microbatches,
                "micro_batch": self.micro_batch, "seq": self.seq, "forward_only": self.forward_only,
                "attention": self.attention, "linears": {k: list(v) for k, v in self.linears.items()},
                "unread": self.unread}


def read_shapes(kernels: RankKernels, tp: int) -> Shapes:
    """The model's shapes from one rank's GEMMs (module docstring): the layer's four linear
    products are the plain products that recur most often with one M (the tokens), the
    hidden size the dimension two of them reduce over and two of them produce."""
    plain = Counter((g.m, g.n, g.k) for g in kernels.gemm if g is not None and g.batch == 1)
    batched = Counter((g.batch, g.m, g.n, g.k) for g in kernels.gemm if g is not None and g.batch > 1)
    if not plain:
        raise RingsimError("no GEMM kernel with recorded shapes: record with torch.profiler(record_shapes=True)")
    layers_mb = max(plain.values())
    top = [s for s, c in plain.items() if c == layers_mb]
    if len(top) < 4:
        top = [s for s, _ in plain.most_common(4)]
    tokens = Counter(m for m, _, _ in top).most_common(1)[0][0]
    top = [s for s in top if s[0] == tokens]
    ks, ns = Counter(k for _, _, k in top), Counter(n for _, n, _ in top)
    hidden = next((d for d in ks if ks[d] >= 2 and ns.get(d, 0) >= 2), None)
    if hidden is None:
        raise RingsimError(f"the recorded GEMMs {sorted(top)} do not look like a transformer layer's four "
                           "linear products (no dimension two of them reduce over and two produce)")
    into = [s for s in top if s[2] == hidden]            # qkv and up (or gate/up)
    outof = [s for s in top if s[1] == hidden]           # out and down
    if len(into) != 2 or len(outof) != 2:
        raise RingsimError(f"the recorded GEMMs {sorted(top)}: expected two products from the hidden size "
                           f"{hidden} and two back to it")
    out, down = sorted(outof, key=lambda s: s[2])        # attention width per GPU <= FFN per GPU
    width, ffn_tp = out[2], down[2]
    unread: list[str] = []
    up = next((s for s in into if s[1] in (ffn_tp, 2 * ffn_tp)), None)
    if up is None:
        raise RingsimError(f"no product of the hidden size to {ffn_tp} or {2 * ffn_tp} (the MLP's up projection)")
    qkv = next(s for s in into if s is not up)
    mlp = "gelu" if up[1] == ffn_tp else "swiglu"
    # the attention: its batched products (b x heads per GPU of seq x seq over head_dim)
    qk = next(((b, m, n, k) for (b, m, n, k) in batched if m == n and k < m), None)
    if qk is not None:
        attention = "unfused"
        b, seq, _, head_dim = qk
        heads_tp = width // head_dim
        micro_batch = b // heads_tp if heads_tp and b % heads_tp == 0 else None
        if micro_batch is None or micro_batch * seq != tokens:
            raise RingsimError(f"the attention's batched products ({b} of {seq} x {seq} over {head_dim}) do not "
                               f"match {tokens} tokens and an attention width of {width} per GPU")
    else:
        attention = "fused"
        head_dim = 128
        heads_tp = max(width // head_dim, 1)
        seq, micro_batch = tokens, 1
        unread += ["head dim (no unfused attention products): 128 assumed",
                   "sequence length and micro-batch: one sequence of all the tokens assumed"]
    kv_tp = (qkv[1] // head_dim - heads_tp) / 2
    if kv_tp != int(kv_tp) or kv_tp <= 0:
        raise RingsimError(f"the QKV product's {qkv[1]} outputs per GPU are not {heads_tp} query heads and "
                           f"whole K/V heads of {head_dim}")
    # the output layer: hidden -> vocab / TP on the tokens, once per micro-batch
    head = [(s, c) for s, c in plain.items() if s[0] == tokens and s[2] == hidden and s not in (qkv, up)]
    vocab, microbatches = None, 1
    if head:
        (_, n_head, _), microbatches = max(head, key=lambda x: x[0][1])
        vocab = n_head * tp
    else:
        unread.append("vocabulary (no output-layer product): not read")
    # backward: weight-gradient products reduce over the tokens
    forward_only = not any(k == tokens and m != tokens for (m, n, k) in plain)
    if layers_mb % microbatches:
        raise RingsimError(f"{layers_mb} layer products over {microbatches} micro-batches is not a whole number "
                           "of layers")
    unread.append("dropout, biases and the norms' kind: not read from GEMMs (their kernels are taken as measured)")
    return Shapes(tp=tp, tokens=tokens, hidden=hidden, heads=heads_tp * tp, head_dim=head_dim,
                  kv_heads=int(kv_tp * tp), ffn=ffn_tp * tp, mlp=mlp, vocab=vocab,
                  layers=layers_mb // microbatches,
                  microbatches=microbatches, micro_batch=micro_batch, seq=seq, forward_only=forward_only,
                  attention=attention,
                  linears={"qkv": qkv, "out": out, "up" if mlp == "gelu" else "gate_up": up, "down": down},
                  unread=unread)


# --- the fits -------------------------------------------------------------------------------

@dataclass
class FitGemm:
    """One GEMM rate for the GPU: sim.hardware.gemm's tiles, waves and memory bound at this
    rate (its MAMF replaced), the median over the run's math-bound gemm kernels of the rate
    that reproduces each kernel's measured time."""

    gpu: str
    rate_tflops: float
    kernels: int
    """Kernels the rate is the median over (math-bound under the model)."""
    mamf_tflops: float
    by_shape: list[dict[str, Any]]
    """Per recorded product: count, measured median, modelled, error."""

    @property
    def rate(self) -> tuple[float, str]:
        return self.rate_tflops, (f"fitted to the profiled run: median over its {self.kernels} math-bound GEMM "
                                  "kernels of the rate that gives each its measured time")

    def time_s(self, g: Gemm) -> float:
        return gemm_time(g.m, g.n, g.k, self.gpu, alone=False, batch=g.batch, rate=self.rate).time_s


def fit_gemm(ranks: list[RankKernels], gpu: str) -> FitGemm:
    mamf, _ = rate_tflops(gpu)
    implied, rows = [], {}
    for rk in ranks:
        for g, t, kind in zip(rk.gemm, rk.k_dur, rk.kind):
            if kind != "gemm" or g is None:
                continue
            rows.setdefault((g.batch, g.m, g.n, g.k, g.op), []).append(t)
            ref = gemm_time(g.m, g.n, g.k, gpu, alone=False, batch=g.batch, rate=(mamf, ""))
            busy = t - ref.floor_s
            if busy > ref.memory_s and busy > 0:     # math-bound at the measured time: its implied rate
                implied.append(mamf * ref.math_s / busy)
    if not implied:
        raise RingsimError("no GEMM kernel with a recorded shape is math-bound: cannot fit a GEMM rate")
    rate = float(np.median(implied))
    fit = FitGemm(gpu=gpu, rate_tflops=rate, kernels=len(implied), mamf_tflops=mamf, by_shape=[])
    for (b, m, n, k, op), ts in sorted(rows.items(), key=lambda x: -len(x[1]) * np.median(x[1])):
        g = Gemm(m, n, k, b, op)
        model = fit.time_s(g)
        meas = float(np.median(ts))
        fit.by_shape.append({"op": op, "batch": b, "m": m, "n": n, "k": k, "count": len(ts), "measured_s": meas,
                             "modelled_s": model, "error": model / meas - 1.0,
                             "measured_tflops": g.flops / meas / 1e12})
    return fit


@dataclass
class FitAllReduce:
    """An all-reduce's time as alpha + bytes / beta, fitted (least squares) to the run's own
    calls, each call's time the shortest over the ranks (module docstring of fit_all_reduce)."""

    alpha_s: float
    beta_gbps: float
    """Bytes per second of the whole message (NCCL's algorithm bandwidth), GB/s."""
    group: int
    calls: int
    sizes: list[dict[str, Any]]

    def time_s(self, nbytes: float) -> float:
        return self.alpha_s + nbytes / (self.beta_gbps * 1e9)

    @property
    def bus_gbps(self) -> float:
        """NCCL's bus bandwidth: 2 (n - 1) / n of the algorithm's."""
        return self.beta_gbps * 2 * (self.group - 1) / self.group

    def link(self) -> Link:
        """The link on which the step model's all-reduce (a ring reduce-scatter and all-gather,
        2 (TP - 1) steps of a latency and 1/TP of the tensor, sim.training.step.ring_collective_s)
        takes exactly this time."""
        steps = 2 * (self.group - 1)
        return Link(name="fitted to the profiled run's all-reduces", bandwidth_gbps=self.bus_gbps,
                    latency_us=self.alpha_s / steps * 1e6)


def fit_all_reduce(ranks: list[RankKernels], group: int) -> FitAllReduce:
    """Each all-reduce call j (the j-th on every rank) takes min over ranks of its kernels'
    durations: an NCCL kernel starts when its rank arrives and ends when the ring has all
    ranks' data, so a rank that arrived early also times its wait for the last one; the last
    to arrive waits for none, and its kernel (the shortest) is the collective's own time."""
    per = [np.flatnonzero(rk.kind == "all_reduce") for rk in ranks]
    counts = {len(p) for p in per}
    if len(counts) != 1:
        raise RingsimError("the ranks' iterations hold different numbers of all-reduce kernels "
                           f"({', '.join(str(len(p)) for p in per)}): not one run's ranks")
    n = counts.pop()
    if n == 0:
        raise RingsimError("no all-reduce kernels in the iteration: nothing to fit the TP all-reduce to")
    durs = np.array([rk.k_dur[p] for rk, p in zip(ranks, per)])
    sizes = np.array([np.nanmax([rk.msg_bytes[p[j]] for rk, p in zip(ranks, per)]) for j in range(n)])
    if not np.all(np.isfinite(sizes)):
        raise RingsimError("all-reduce kernels without message sizes: record with a torch that writes "
                           "record_param_comms (2.1 or later)")
    own = durs.min(axis=0)
    if len(np.unique(sizes)) >= 2:
        slope, alpha = np.polyfit(sizes, own, 1)
    else:
        slope, alpha = float(np.median(own)) / sizes[0], 0.0
    if slope <= 0:
        raise RingsimError("the all-reduces' times do not grow with their sizes: no bandwidth to fit")
    fit = FitAllReduce(alpha_s=float(max(alpha, 0.0)), beta_gbps=float(1.0 / slope / 1e9), group=group, calls=n,
                       sizes=[])
    for b in np.unique(sizes):
        sel = sizes == b
        fit.sizes.append({"bytes": float(b), "calls": int(sel.sum()), "measured_s": float(np.median(own[sel])),
                          "modelled_s": fit.time_s(float(b)),
                          "error": fit.time_s(float(b)) / float(np.median(own[sel])) - 1.0})
    return fit


# --- the play -------------------------------------------------------------------------------

def _busy(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> float:
    """Time inside [lo, hi] covered by the intervals (their union)."""
    s, e = np.clip(starts, lo, hi), np.clip(ends, lo, hi)
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return 0.0
    order = np.argsort(s)
    total, cur_s, cur_e = 0.0, s[order[0]], e[order[0]]
    for a, b in zip(s[order[1:]], e[order[1:]]):
        if a > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return total + cur_e - cur_s


@dataclass
class Stretch:
    """One rank's work before one all-reduce (or after the last): measured and modelled."""

    busy_measured_s: float
    busy_modelled_s: float
    idle_s: float
    gemm_measured_s: float
    gemm_modelled_s: float
    other_s: float


def _stretches(rk: RankKernels, model_gemm) -> list[Stretch]:
    ar = np.flatnonzero(rk.kind == "all_reduce")
    edges = [rk.start_s] + [float(rk.k_start[j] + rk.k_dur[j]) for j in ar]
    ends = [float(rk.k_start[j]) for j in ar] + [max(rk.end_s, edges[-1])]
    not_ar = rk.kind != "all_reduce"
    ks, ke = rk.k_start, rk.k_start + rk.k_dur
    out = []
    for lo, hi in zip(edges, ends):
        inside = not_ar & (ks >= lo) & (ks < hi)
        busy = _busy(ks[inside], ke[inside], lo, hi)
        gm = gx = 0.0
        for i in np.flatnonzero(inside & (rk.kind == "gemm")):
            g = rk.gemm[i]
            if g is not None:                      # a GEMM without a recorded shape stays measured
                gm += rk.k_dur[i]
                gx += model_gemm(g)
        out.append(Stretch(busy_measured_s=busy, busy_modelled_s=busy - gm + gx, idle_s=max(0.0, hi - lo - busy),
                           gemm_measured_s=gm, gemm_modelled_s=gx, other_s=busy - gm))
    return out


def play(ranks: list[RankKernels], stretches: list[list[Stretch]], all_reduce_s: list[float], *,
         idle: bool = True) -> list[float]:
    """Each rank's iteration (module docstring): stretch j in its (modelled) busy time plus
    its idle, all-reduce j from the last rank ready, for `all_reduce_s[j]`. Without `idle`,
    the GPUs alone: every rank from the earliest start, every kernel as soon as the one before
    it and the all-reduce allow (what is returned is then the time from that start)."""
    n = len(all_reduce_s)
    w = 1.0 if idle else 0.0
    first = min(rk.start_s for rk in ranks)
    starts = [rk.start_s if idle else first for rk in ranks]
    ready = [t + st[0].busy_modelled_s + w * st[0].idle_s for t, st in zip(starts, stretches)]
    for j in range(n):
        end = max(ready) + all_reduce_s[j]
        ready = [end + st[j + 1].busy_modelled_s + w * st[j + 1].idle_s for st in stretches]
    return [r - t for r, t in zip(ready, starts)]


@dataclass
class Replay:
    shapes: Shapes
    gemm: FitGemm
    all_reduce: FitAllReduce
    gpu: str
    ranks: list[int]
    measured_s: list[float]
    simulated_s: list[float]
    identity_s: list[float]
    """The same play with every kernel's measured time (the play's own check)."""
    device_measured_s: float
    """The GPUs alone (no host idle), the kernels at their measured times (all-reduces at
    their own time): the longest rank."""
    device_simulated_s: float
    """The GPUs alone, the kernels modelled: what the models are checked on without the host."""
    unfitted_s: list[float]
    """The same play with the presets' constants in place of the fits: GEMMs at the GPU's
    MAMF, all-reduces on the preset's NVLink (UNFITTED_LINK): what the fitting changes."""
    unfitted_link: str
    unfitted_device_s: float
    """The GPUs alone with the presets' constants."""
    parts: list[dict[str, float]]
    """Per rank: the GEMMs (measured, modelled), all-reduces' own time (measured: shortest over
    ranks, modelled), other kernels and idle (measured)."""
    step_model: dict[str, float]
    taken_as_measured: list[str]

    @property
    def measured_overall_s(self) -> float:
        return max(self.measured_s)

    @property
    def simulated_overall_s(self) -> float:
        return max(self.simulated_s)

    def errors(self) -> list[float]:
        return [s / m - 1.0 for s, m in zip(self.simulated_s, self.measured_s)]

    @property
    def overall_error(self) -> float:
        return self.simulated_overall_s / self.measured_overall_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "shapes": self.shapes.describe(),
                "gemm_fit": {"rate_tflops": self.gemm.rate_tflops, "kernels": self.gemm.kernels,
                             "mamf_tflops": self.gemm.mamf_tflops, "by_shape": self.gemm.by_shape},
                "all_reduce_fit": {"alpha_us": self.all_reduce.alpha_s * 1e6, "beta_gbps": self.all_reduce.beta_gbps,
                                   "bus_gbps": self.all_reduce.bus_gbps, "group": self.all_reduce.group,
                                   "calls": self.all_reduce.calls, "sizes": self.all_reduce.sizes},
                "step_model": self.step_model, "taken_as_measured": self.taken_as_measured,
                "ranks": [{"rank": r, "measured_s": m, "simulated_s": s, "error": s / m - 1.0, "identity_s": i, **p}
                          for r, m, s, i, p in zip(self.ranks, self.measured_s, self.simulated_s, self.identity_s,
                                                   self.parts)],
                "overall": {"measured_s": self.measured_overall_s, "simulated_s": self.simulated_overall_s,
                            "error": self.overall_error},
                "unfitted": {"simulated_s": self.unfitted_s, "overall_s": max(self.unfitted_s),
                             "error": max(self.unfitted_s) / self.measured_overall_s - 1.0,
                             "link": self.unfitted_link, "gpus_alone_s": self.unfitted_device_s,
                             "gpus_alone_error": self.unfitted_device_s / self.device_measured_s - 1.0},
                "gpus_alone": {"measured_s": self.device_measured_s, "simulated_s": self.device_simulated_s,
                               "error": self.device_simulated_s / self.device_measured_s - 1.0}}


def gpu_preset_of(run: Any) -> str:
    """The GPU preset matching the run's deviceProperties name (A100-SXM4-80GB -> A100-SXM-80GB)."""
    names = {str(v.get("name", "")) if isinstance(v, dict) else str(v) for v in run.devices.values()} - {""}
    for raw in names:
        low = raw.lower().replace("nvidia", "").replace("-", " ").replace("sxm4", "sxm").replace("sxm5", "sxm")
        words = set(low.split())
        for preset in GPU_PRESETS:
            if set(preset.lower().replace("-", " ").split()) <= words:
                return preset
    raise RingsimError(f"the run's GPU ({', '.join(sorted(names)) or 'not recorded'}) matches no GPU preset "
                       f"({', '.join(GPU_PRESETS)})")


ATTENTION_KINDS = ("attention_fwd", "attention_bwd", "cpu_attention_fwd", "cpu_attention_bwd")


def is_tensor_parallel_iteration(run: Any) -> bool:
    """Whether `validate --trace` replays the run through the step model rather than as a
    ring: no attention kernels or ops (the unfused attention of a Megatron GPT is GEMMs
    and a softmax), but GEMM kernels and all-reduces on the GPU."""
    kinds = set(np.unique(_col(run.events, "kind")).tolist())
    return not kinds & set(ATTENTION_KINDS) and {"gemm", "all_reduce"} <= kinds


def replay(run: Any, iteration: int | None = None) -> Replay:
    """The profiled iteration (the last one unless `iteration`) of a TP run, played through
    the step model with rates fitted to its own kernels (module docstring)."""
    from sim.training.step import Parallel, StepRequest, ring_collective_s, simulate_step

    ranks = sorted(run.ranks)
    if len(ranks) < 2:
        raise RingsimError("one rank: a tensor-parallel replay needs every rank of the TP group")
    gpu = gpu_preset_of(run)
    kernels = [_rank_kernels(run, r, iteration) for r in ranks]
    group = _group_size(run, len(ranks))
    shapes = read_shapes(kernels[0], group)
    if not shapes.forward_only:
        raise RingsimError("the iteration has a backward: this replay plays forward-only TP iterations "
                           "(evaluation, inference) so far")
    gfit = fit_gemm(kernels, gpu)
    afit = fit_all_reduce(kernels, group)
    # the step model with the fitted rate and link: its per-layer GEMMs and TP all-reduces
    hw = Hardware(gpu=Gpu.preset(gpu), link=afit.link(), gpus_per_node=max(group, 8))
    req = StepRequest(model=shapes.model(), seq=shapes.seq,
                      global_batch=shapes.seq * shapes.micro_batch * shapes.microbatches,
                      parallel=Parallel(tp=group, microbatches=shapes.microbatches), hardware=hw,
                      mlp=shapes.mlp, gemm_rate=gfit.rate)
    step = simulate_step(req)
    layer_gemms = [Gemm(*shapes.linears[k]) for k in shapes.linears]
    step_model = {"layer_gemm_fwd_s": step.per_layer["gemm_fwd_s"], "layer_tp_fwd_s": step.per_layer["tp_fwd_s"],
                  "layer_gemm_fwd_from_shapes_s": sum(gfit.time_s(g) for g in layer_gemms),
                  "layer_all_reduces_fitted_s": 2 * afit.time_s(shapes.tokens * shapes.hidden * 2),
                  "layers": shapes.layers, "microbatches": shapes.microbatches,
                  # the step model on its own (its fused attention and elementwise terms, no host):
                  # the forward of every micro-batch, embedding and output layer included
                  "forward_s": shapes.microbatches * step.stage_s[0][0]}

    def model_gemm(g: Gemm) -> float:
        return gfit.time_s(g)

    modelled = [_stretches(rk, model_gemm) for rk in kernels]
    measured_k = [_stretches(rk, lambda g: 0.0) for rk in kernels]
    for st in measured_k:                      # the identity play: every kernel at its measured time
        for s in st:
            s.busy_modelled_s = s.busy_measured_s
    sizes = _all_reduce_sizes(kernels)
    own = np.array([rk.k_dur[rk.kind == "all_reduce"] for rk in kernels]).min(axis=0)
    simulated = play(kernels, modelled, [afit.time_s(b) for b in sizes])
    identity = play(kernels, measured_k, list(own))
    device_measured = max(play(kernels, measured_k, list(own), idle=False))
    device_simulated = max(play(kernels, modelled, [afit.time_s(b) for b in sizes], idle=False))
    # the presets' constants: the MAMF and the cluster's NVLink, an all-reduce as two ring collectives
    preset_link = Link.preset(UNFITTED_LINK.get(gpu, "nvlink4"))
    preset_stretches = [_stretches(rk, lambda g: gemm_time(g.m, g.n, g.k, gpu, alone=False, batch=g.batch).time_s)
                        for rk in kernels]
    preset_all_reduce = [2 * ring_collective_s(b, group, preset_link.bandwidth_gbps, preset_link.latency_us)
                         for b in sizes]
    unfitted = play(kernels, preset_stretches, preset_all_reduce)
    unfitted_device = max(play(kernels, preset_stretches, preset_all_reduce, idle=False))
    parts = []
    for rk, st in zip(kernels, modelled):
        parts.append({"gemm_measured_s": sum(s.gemm_measured_s for s in st),
                      "gemm_modelled_s": sum(s.gemm_modelled_s for s in st),
                      "all_reduce_own_measured_s": float(own.sum()),
                      "all_reduce_modelled_s": float(sum(afit.time_s(b) for b in sizes)),
                      "all_reduce_kernels_s": float(rk.k_dur[rk.kind == "all_reduce"].sum()),
                      "other_kernels_s": sum(s.other_s for s in st), "idle_s": sum(s.idle_s for s in st)})
    taken = ["other kernels (LayerNorm, masked softmax, Triton's fused bias/GeLU/residual, copies, embedding, "
             "loss): measured, per rank",
             "the host: each rank's GPU idle between its kernels, measured per stretch between two all-reduces"]
    if shapes.attention == "unfused":
        taken.append("the step model's fused attention is not used: the run's attention is unfused (baddbmm, "
                     "softmax, bmm); its two batched GEMMs are modelled at the fitted rate, the softmax measured")
    return Replay(shapes=shapes, gemm=gfit, all_reduce=afit, gpu=gpu, ranks=ranks,
                  measured_s=[rk.end_s - rk.start_s for rk in kernels], simulated_s=simulated, identity_s=identity,
                  device_measured_s=device_measured, device_simulated_s=device_simulated, unfitted_s=unfitted,
                  unfitted_device_s=unfitted_device,
                  unfitted_link=f"{preset_link.name}: {preset_link.bandwidth_gbps:g} GB/s, {preset_link.latency_us:g} µs",
                  parts=parts, step_model=step_model, taken_as_measured=taken)


def _group_size(run: Any, n_ranks: int) -> int:
    ev = run.events
    g = _col(ev, "group_size")[_col(ev, "kind").astype(str) == "all_reduce"]
    if len(g) and int(np.max(g)) > 1:
        return int(np.max(g))
    return int(getattr(run, "world_size", n_ranks) or n_ranks)


def _all_reduce_sizes(kernels: list[RankKernels]) -> list[float]:
    per = [rk.msg_bytes[rk.kind == "all_reduce"] for rk in kernels]
    return [float(np.nanmax([p[j] for p in per])) for j in range(len(per[0]))]
