"""One rank's measured run, and the traces assembled from every rank's spans.

`run_rank` is what each process of a run does, however it was started (`hw.spawn`
spawns them locally, `torchrun -m hw.main` anywhere): take its shard (made for this
rank alone, never the whole sequence, unless the caller hands it over), pick the block
implementation, then for each warm-up and measured iteration align its clock with the
other ranks at a barrier and run the ring (forward, backward, or both with backward
steps numbered N..2N-1), recording spans. `build_traces` turns the ranks' spans into one
`sim.trace.format.Trace` per measured iteration (source "measured"), with the simulator's
configuration header, the device in `hardware` and per-rank peak memory in `meta`.
With packed documents a rank's shard holds the packed sequence's tokens of that rank
(`RunConfig.sharding`) and the kernels take the documents (`packed`).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import torch

from hw.blocks import TORCH_DTYPES, select_block_ops
from hw.comm import PeerFailure, Ring, peer_failure, raise_if_peer_failed
from hw.config import RunConfig
from hw.devices import describe_device, sync
from hw.kernels import kernels
from hw.layouts import shard, token_index
from hw.ring import heads_first_memory, ring_backward, ring_forward
from hw.timing import CpuClock, CudaClock, Recorder, TransferStalled
from sim.engine.record import wait_pieces
from sim.layouts.packed import block_tables
from sim.scenario.quantities import BWD_FLOPS_FACTOR
from sim.schemes.ring import peak_memory_bytes
from sim.trace.format import KIND_NAMES, STREAMS, Span, SpanTable, Trace


@dataclass
class Inputs:
    """q, dout (b, s, h, d); k, v (b, s, kv_h, d): the whole sequence or one rank's shard."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    dout: torch.Tensor | None = None


_M64 = 1 << 64
_GOLDEN = 0x9E3779B97F4A7C15 - _M64      # splitmix64's increment, as a signed int64
_C1, _C2 = 0xBF58476D1CE4E5B9 - _M64, 0x94D049BB133111EB - _M64


def _shr(x, bits: int):
    """Logical right shift of int64 values (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix(x):
    """splitmix64's finalizer over int64 (products wrap modulo 2^64)."""
    x = (x ^ _shr(x, 30)) * _C1
    x = (x ^ _shr(x, 27)) * _C2
    return x ^ _shr(x, 31)


def _mix_int(x: int) -> int:
    x %= _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % _M64
    x ^= x >> 31
    return x - _M64 if x >= 1 << 63 else x


def normal_rows(seed: int, stream: int, rows: torch.Tensor, width: int,
                device: torch.device | str = "cpu") -> torch.Tensor:
    """Standard normal fp32 values, (len(rows), width): value (row, j) depends only on
    (seed, stream, row, j), so any subset of rows is made without the others.

    A splitmix64 hash of the element's index gives two 24-bit uniforms, Box-Muller one
    normal; integer steps are exact on every device.
    """
    base = _mix_int(seed * 1_000_003 + stream)
    rows = rows.to(device=device, dtype=torch.int64)
    cols = torch.arange(width, dtype=torch.int64, device=device)
    out = torch.empty(len(rows), width, dtype=torch.float32, device=device)
    step = max(1, (1 << 20) // max(1, width))          # rows per pass: bounded temporaries
    for i in range(0, len(rows), step):
        idx = rows[i:i + step, None] * width + cols + 1
        h = _mix(idx * _GOLDEN + base)
        u1 = (_shr(h, 40).double() + 0.5) / (1 << 24)
        u2 = ((_shr(h, 16) & 0xFFFFFF).double() + 0.5) / (1 << 24)
        out[i:i + step] = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2.0 * math.pi) * u2)
    return out


def _tensors(cfg: RunConfig, tokens: torch.Tensor, device: torch.device | str) -> Inputs:
    w = cfg.workload
    dt = TORCH_DTYPES[w.dtype]
    rows = (torch.arange(w.batch)[:, None] * w.seq + tokens[None, :]).reshape(-1)

    def rnd(stream: int, heads: int) -> torch.Tensor:
        x = normal_rows(cfg.seed, stream, rows, heads * w.head_dim, device)
        return x.reshape(w.batch, len(tokens), heads, w.head_dim).to(dt)

    dout = rnd(3, w.heads) if w.pass_ != "fwd" else None
    return Inputs(rnd(0, w.heads), rnd(1, w.kv_heads), rnd(2, w.kv_heads), dout)


def make_inputs(cfg: RunConfig) -> Inputs:
    """Random inputs of the whole sequence, reproducible from `cfg.seed`."""
    return _tensors(cfg, torch.arange(cfg.workload.seq), "cpu")


def make_rank_inputs(cfg: RunConfig, rank: int, device: torch.device | str = "cpu") -> Inputs:
    """Rank `rank`'s shard of `make_inputs(cfg)` (the same values), made on `device`
    without making the rest of the sequence."""
    tokens = token_index(cfg.sharding, cfg.workload.seq, cfg.n_gpus)[rank]
    return _tensors(cfg, tokens, device)


@dataclass
class RankResult:
    """What one rank hands back: spans per measured iteration, facts, and its outputs."""

    rank: int
    spans: list[list[Span]]
    info: dict[str, Any]
    needs: list[dict[int, list[int]]] = field(default_factory=list)
    """Per measured iteration: each wait's index in `spans` -> the transfers it waited on."""
    out: torch.Tensor | None = None
    dq: torch.Tensor | None = None
    dk: torch.Tensor | None = None
    dv: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _fault(cfg: RunConfig, rank: int) -> Callable[[int], None] | None:
    """The testing aid of `RunConfig.fail_rank`: fail on reaching `fail_step`."""
    if cfg.fail_rank != rank:
        return None

    def hook(step: int) -> None:
        if step == cfg.fail_step:
            if cfg.fail_mode == "exit":
                os._exit(17)
            raise RuntimeError(f"injected failure at step {step}")
    return hook


def _measure_rate(cfg: RunConfig, inputs: Inputs, ops, device: torch.device) -> float:
    """Achieved FLOP/s of the whole attention on this rank alone (one block: no ring)."""
    w = cfg.workload
    one = Ring(rank=0, n_gpus=1, group=None, clock=CpuClock(cfg.timeout_s))
    args = dict(ring=one, layout=cfg.layout, causal=w.causal, ops=ops)
    packed = cfg.packed
    if packed is not None:   # the whole packed sequence on one rank
        packed = replace(packed, n=1)
        args["packed"] = packed
    # laid out as the ring's shards are (`rank_shard`), so that the rate is the ring's
    q, k, v = (heads_first_memory(x.to(device)) for x in (inputs.q, inputs.k, inputs.v))
    dout = heads_first_memory(inputs.dout.to(device)) if inputs.dout is not None else None
    out, lse = ring_forward(q, k, v, **args)
    times = []
    for _ in range(2):
        sync(device)
        t0 = time.perf_counter()
        if w.pass_ in ("fwd", "fwdbwd"):
            out, lse = ring_forward(q, k, v, **args)
        if w.pass_ in ("bwd", "fwdbwd"):
            ring_backward(dout, q, k, v, out, lse, **args)
        sync(device)
        times.append(time.perf_counter() - t0)
    if packed is not None:
        pairs = int(block_tables(packed).work.sum())
    else:
        pairs = w.seq * (w.seq + 1) // 2 if w.causal else w.seq * w.seq
    factor = {"fwd": 1.0, "bwd": BWD_FLOPS_FACTOR, "fwdbwd": 1.0 + BWD_FLOPS_FACTOR}[w.pass_]
    return factor * w.fwd_flops(pairs) / min(times)


def rank_shard(cfg: RunConfig, rank: int, inputs: Inputs | None, device: torch.device) -> Inputs:
    """This rank's tensors on `device`, heads-first in memory (the kernel's fast case):
    sharded from `inputs` when given, else made for this rank alone (`make_rank_inputs`)."""
    if inputs is None:
        mine = make_rank_inputs(cfg, rank, device)
    else:
        mine = Inputs(*(shard(x, cfg.sharding, cfg.n_gpus, rank).to(device) if x is not None else None
                        for x in (inputs.q, inputs.k, inputs.v, inputs.dout)))
    return Inputs(*(heads_first_memory(x) if x is not None else None
                    for x in (mine.q, mine.k, mine.v, mine.dout)))


def run_rank(cfg: RunConfig, *, rank: int, group: Any, inputs: Inputs | None, device: torch.device,
             barrier: Callable[[], None], store: Any = None, ranks_on_host: int = 1,
             keep_outputs: bool = False) -> RankResult:
    """Run `cfg` as rank `rank` of the ring on `group` (None when n_gpus is 1).

    `inputs`: the whole sequence, to shard; None makes this rank's shard alone from the
    seed. A transfer or barrier that fails because of another rank raises PeerFailure,
    on either backend (see `hw.timing` for how CUDA runs notice).
    """
    run = RankRun(cfg, rank=rank, group=group, inputs=inputs, device=device, barrier=barrier, store=store,
                  ranks_on_host=ranks_on_host)
    try:
        for it in range(cfg.warmup + cfg.repeats):
            run.iteration(it)
    finally:
        run.close()
    return run.result(keep_outputs)


class RankRun:
    """One rank's run of a configuration, an iteration at a time (`run_rank` runs them
    all in turn; hw.launch can interleave the iterations of several configurations)."""

    def __init__(self, cfg: RunConfig, *, rank: int, group: Any, inputs: Inputs | None, device: torch.device,
                 barrier: Callable[[], None], store: Any = None, ranks_on_host: int = 1):
        w, n = cfg.workload, cfg.n_gpus
        self.cfg, self.rank, self.group, self.device = cfg, rank, group, device
        self.barrier, self.store = barrier, store
        self.threads = cfg.threads(ranks_on_host)
        if device.type == "cpu":
            torch.set_num_threads(self.threads)
        self.ops = select_block_ops(device.type, w.dtype, w.head_dim, cfg.block_impl)
        self.rate = None
        if cfg.measure_rate and rank == 0:
            self.rate = _measure_rate(cfg, inputs if inputs is not None else make_inputs(cfg), self.ops, device)
        self.inputs = rank_shard(cfg, rank, inputs, device)
        self.clock = CudaClock(device, cfg.timeout_s) if device.type == "cuda" else CpuClock(cfg.timeout_s)
        self.untimed = Ring(rank, n, group, self.clock, None, store)
        if device.type == "cuda":
            self.clock.on_poll = lambda: raise_if_peer_failed(self.untimed)
        self.args = dict(layout=cfg.layout, causal=w.causal, ops=self.ops)
        if cfg.packed is not None:   # the kernels' packed path; one document keeps the plain one
            self.args["packed"] = cfg.packed
        self.forward, self.backward = kernels(cfg.scheme)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        self.out = self.lse = self.grads = None
        self.measured: list[list[Span]] = []
        self.needs: list[dict[int, list[int]]] = []
        if w.pass_ == "bwd":  # backward alone needs the forward's output and lse, untimed
            mine = self.inputs
            try:
                self.out, self.lse = self.forward(mine.q, mine.k, mine.v, ring=self.untimed, **self.args)
            except BaseException:
                self.clock.close()
                raise

    def _settled(self, step: Callable[[], None], what: str) -> None:
        try:
            step()
        except PeerFailure:
            raise
        except TransferStalled as e:
            raise peer_failure(self.untimed, "a transfer", e) from e
        except Exception as e:
            if what == "a barrier":   # a barrier fails only for want of a peer
                raise peer_failure(self.untimed, what, e) from e
            raise

    def iteration(self, it: int) -> None:
        """Iteration `it` (the first `cfg.warmup` are not recorded)."""
        cfg, w, n, rank = self.cfg, self.cfg.workload, self.cfg.n_gpus, self.rank
        q, k, v, dout = self.inputs.q, self.inputs.k, self.inputs.v, self.inputs.dout
        if self.device.type == "cpu":      # another configuration's run may have set others
            torch.set_num_threads(self.threads)
        rec = Recorder(self.clock, rank)
        ring = Ring(rank, n, self.group, self.clock, rec, self.store)
        hook = _fault(cfg, rank) if it == 0 else None
        self._settled(lambda: self.clock.align(self.barrier), "a barrier")
        if w.pass_ in ("fwd", "fwdbwd"):
            self.out, self.lse = self.forward(q, k, v, ring=ring, on_step=hook, **self.args)
        if w.pass_ in ("bwd", "fwdbwd"):
            step0 = n if w.pass_ == "fwdbwd" else 0
            self.grads = self.backward(dout, q, k, v, self.out, self.lse, ring=ring, step0=step0,
                                       on_step=hook, **self.args)
        self._settled(self.clock.synchronize, "a transfer")
        if it >= cfg.warmup:
            self.measured.append(rec.spans())
            self.needs.append(rec.needs)

    def close(self) -> None:
        self.clock.close()

    def result(self, keep_outputs: bool = False) -> RankResult:
        device, w = self.device, self.cfg.workload
        if device.type == "cuda":
            peak = int(torch.cuda.max_memory_allocated(device))
        else:
            peak = int(peak_memory_bytes(w, self.cfg.tokens_per_rank, self.cfg.n_gpus)["total"])
        info = {"device": describe_device(device),
                "threads_per_rank": self.threads if device.type == "cpu" else None,
                "block_impl": self.ops.describe(), "peak_mem_bytes": peak, "clock": self.clock.kind}
        if self.rate is not None:
            info["rate_flops"] = self.rate
        res = RankResult(self.rank, self.measured, info, needs=self.needs)
        if keep_outputs:
            res.out = self.out.contiguous().cpu() if self.out is not None else None
            if self.grads is not None:
                res.dq, res.dk, res.dv = (g.contiguous().cpu() for g in self.grads)
        return res


def build_traces(cfg: RunConfig, results: list[RankResult]) -> list[Trace]:
    """One measured trace per measured iteration, from every rank's spans, as columns."""
    results = sorted(results, key=lambda r: r.rank)
    info = results[0].info
    hardware: dict[str, Any] = {
        "kind": "measured", "device": info["device"], "backend": cfg.resolved_backend,
        "torch": torch.__version__, "threads_per_rank": info["threads_per_rank"],
        "n_gpus": cfg.n_gpus, "block_impl": info["block_impl"],
    }
    if "rate_flops" in info:
        hardware["rate_flops"] = info["rate_flops"]
    traces = []
    for i in range(cfg.repeats):
        spans = _split_waits([res.spans[i] for res in results],
                             [res.needs[i] if i < len(res.needs) else {} for res in results])
        _add_trailing_idle(spans, cfg.n_gpus)
        meta = {"peak_mem_bytes": [res.info["peak_mem_bytes"] for res in results],
                "repeat": i, "repeats": cfg.repeats, "warmup": cfg.warmup, "seed": cfg.seed,
                "clock": info["clock"], "schedule": cfg.scheme}
        table = SpanTable.from_spans(sorted(spans, key=lambda s: (s.rank, STREAMS.index(s.stream), s.start_s)))
        traces.append(Trace("measured", cfg.n_gpus, table, cfg.describe(), dict(hardware), meta))
    return traces


def _split_waits(per_rank: list[list[Span]], needs: list[dict[int, list[int]]]) -> list[Span]:
    """Every rank's spans, each wait split as the simulator splits it (sim.engine.record.wait_pieces):
    exposed communication while a transfer it waited on was in flight, idle otherwise. A
    transfer is in flight from when both ends had posted it (the later of the send's and
    the receive's post, matched by ranks, kind and step) until it completed on this rank."""
    posted: dict[tuple, float] = {}
    for spans in per_rank:
        for s in spans:
            if s.stream in ("send", "recv"):
                src, dst = (s.rank, s.peer) if s.stream == "send" else (s.peer, s.rank)
                key = (src, dst, s.kind, s.step)
                posted[key] = max(posted.get(key, s.start_s), s.start_s)
    out: list[Span] = []
    for spans, waited in zip(per_rank, needs):
        for j, s in enumerate(spans):
            if s.stream != "wait":
                out.append(s)
                continue
            flights = [spans[x] for x in waited.get(j, [])]
            if not flights:
                out.append(Span(s.rank, "wait", "idle", s.step, s.start_s, s.end_s, 0.0, 0.0,
                                s.q_chunks, s.kv_chunks))
                continue
            starts = np.array([[posted[((f.rank, f.peer) if f.stream == "send" else (f.peer, f.rank))
                                       + (f.kind, f.step)] for f in flights]])
            ends = np.array([[f.end_s for f in flights]])
            kinds = np.array([[KIND_NAMES.index(f.kind) for f in flights]])
            pieces = wait_pieces(np.array([s.start_s]), np.array([s.end_s]), starts, ends, kinds,
                                 np.ones_like(kinds, dtype=bool), KIND_NAMES.index("idle"),
                                 KIND_NAMES.index("dkv"))
            got = sorted((float(a), float(b), int(k)) for a_, b_, k_, _ in pieces
                         for a, b, k in zip(a_, b_, k_))
            out.extend(Span(s.rank, "wait", KIND_NAMES[k], s.step, a, b, 0.0, 0.0, s.q_chunks, s.kv_chunks)
                       for a, b, k in got)
    return out


def _add_trailing_idle(spans: list[Span], n_gpus: int) -> None:
    """Idle from each rank's last event to the end of the run, as the simulator records it."""
    if not spans:
        return
    end = max(s.end_s for s in spans)
    last = [None] * n_gpus
    for s in spans:
        if last[s.rank] is None or s.end_s > last[s.rank].end_s:
            last[s.rank] = s
    for r, s in enumerate(last):
        if s is not None and s.end_s < end:
            step = max(x.step for x in spans if x.rank == r)
            spans.append(Span(r, "wait", "idle", step, s.end_s, end))
