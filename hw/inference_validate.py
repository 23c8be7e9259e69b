"""`ringsim validate --infer`: the inference kernels measured on this host against the
inference model (sim.inference) played on a calibrated profile.

A case is one attention layer (hw.inference_run.InferRun): a prefill over a cached prefix
by pass-KV or pass-Q, or a decode step merged by all-gather or all-to-all. Its measured
traces (the repeats, interleaved with the other cases of its rank count) are set against
the model's trace of the same shape, scored as `ringsim validate` scores a ring case
(sim.calibration.validation.compare_case: the makespan's error against the median of the
repeats, the measured range, per-step errors, the breakdown by part).

The model is played as the ring's validation plays the ring on a CPU profile: the
schedule the model builds (sim.inference.prefill.build_prefill_schedule; for decode,
sim.inference.decode.simulate_decode_attention's) timed by the profile, its blocks by
the profile's compute groups, its hops by its link, its all-to-all and all-gather flows
by its collective fits, and, for prefill, played by the engine with the profile's host
model (sim.engine.play: ranks that share the host's cores slow each other, gloo's posts).
Two terms the model prices by a streaming rate (a GPU's `memory_bandwidth_gbps`) take
this host's: pass-Q's merge of the partial results (sim.inference.prefill.merge_s) and a
decode step's attention and merge (sim.inference.decode.attention_s, merge_kernel_s),
memory-bound by the model's account. The profile has no streaming rate, so it is read
here before the cases run (`host_stream_gbps`: a copy of a tensor larger than the
caches, bytes read and written over the time): a property of the host, like the compute
speed `ringsim validate` reads, not a fit to any case. Decode plays on the model's own
wave player (sim.inference.decode builds and plays its schedule in one call), without
the host's sharing of cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from hw.inference_run import InferRun, measure_many
from sim.calibration.validation import compare_case
from sim.errors import RingsimError
from sim.files import kept_file, write_json
from sim.hardware.model import HardwareModel
from sim.trace.format import Trace


@dataclass(frozen=True)
class InferCase:
    """A validation case: one InferRun's layer, by the fields a report row keeps."""

    phase: str
    scheme: str
    n_gpus: int
    cached: int
    new: int
    prompts: tuple[int, ...]
    layout: str

    @property
    def key(self) -> str:
        if self.phase == "prefill":
            return f"prefill/{self.scheme}/{self.layout}/gpus{self.n_gpus}/cached{self.cached}/new{self.new}"
        return f"decode/{self.scheme}/{self.layout}/gpus{self.n_gpus}/context{sum(self.prompts)}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["prompts"] = list(self.prompts)
        d["key"] = self.key
        return d

    @classmethod
    def of(cls, run: InferRun) -> "InferCase":
        scheme = run.scheme if run.phase == "prefill" else run.merge_by
        return cls(run.phase, scheme, run.n_gpus, run.cached, run.new,
                   tuple(run.prompts) if run.phase == "decode" else (), run.layout)


def cases(*, gpu_counts: list[int], contexts: list[int], phases: list[str], heads: int, kv_heads: int,
          head_dim: int, dtype: str, warmup: int, repeats: int, seed: int, threads: int) -> list[InferRun]:
    """The inference matrix: for each rank count and context C (cached + new), prefill
    by pass-KV and pass-Q at two shares of new tokens, a whole prompt (P = 0, T = C) and
    a continuation (T = C/4 over P = 3C/4), the new tokens in the zigzag layout over a
    zigzag cache; and a decode step of four requests (C, C/2, 3C/4, C/4 tokens: lengths
    no rank count divides alike) round-robin over the ranks, merged by all-gather and by
    all-to-all. T is rounded down to whole chunks of the zigzag layout (2N) where the
    context does not give them (the default 4608 does on 2 and 3 ranks)."""
    out = []
    common = dict(heads=heads, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, warmup=warmup,
                  repeats=repeats, seed=seed, threads_per_rank=threads)
    for n in gpu_counts:
        grain = 2 * n
        for c in contexts:
            if "prefill" in phases:
                for new in (c, c // 4):
                    new = new // grain * grain
                    if new <= 0:
                        raise RingsimError(f"a context of {c} tokens is too short for {n} ranks")
                    for scheme in ("pass-kv", "pass-q"):
                        out.append(InferRun(phase="prefill", n_gpus=n, scheme=scheme, cached=c - new, new=new,
                                            layout="zigzag", cache_layout="zigzag", **common))
            if "decode" in phases:
                prompts = (c, c // 2, 3 * c // 4, c // 4)
                for merge in ("all-gather", "all-to-all"):
                    out.append(InferRun(phase="decode", n_gpus=n, merge_by=merge, prompts=prompts, layout="round-robin",
                                        **common))
    return out


def host_stream_gbps(seconds: float = 1.0, threads: int = 1, megabytes: int = 64) -> float:
    """This host's streaming rate: a copy of `megabytes` (larger than any cache here) into
    another tensor, bytes read and written over the median time, in GB/s."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        src = torch.ones(megabytes * 2 ** 20 // 4)
        dst = torch.empty_like(src)
        dst.copy_(src)
        times = []
        deadline = time.perf_counter() + seconds
        while len(times) < 5 or time.perf_counter() < deadline:
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(saved)
    return 2 * src.numel() * 4 / statistics.median(times) / 1e9


class HostModel(HardwareModel):
    """A calibrated profile as the inference model reads a machine: the profile's times
    (every HardwareModel method and ability, delegated) on one host of `n_gpus` ranks
    (the model's topology: one node, a port per rank), with this host's streaming rate as
    its `gpu.memory_bandwidth_gbps`; pass-Q's merges, the computes of no pairs and no
    keys, timed as the model times them (sim.inference.prefill.merge_s at that rate)."""

    def __init__(self, profile, n_gpus: int, stream_gbps: float, prefill_shape=None):
        self.profile = profile
        self.gpus_per_node = n_gpus
        self.nics_per_node = n_gpus
        self.link = SimpleNamespace(name="loopback")
        self.fabric = None
        self.gpu = SimpleNamespace(memory_bandwidth_gbps=stream_gbps)
        self.stream_gbps = stream_gbps
        self.prefill_shape = prefill_shape
        for name in ("contention", "gpu_pull", "inline_send_after_s", "p2p_queue", "merge_copies_slices",
                     "takes_call_order", "times_collectives", "times_groups"):
            setattr(self, name, getattr(profile, name))

    def compute_time_s(self, flops: float, **kw) -> float:
        return self.profile.compute_time_s(flops, **kw)

    def compute_times_s(self, flops, *, kv_tokens, **kw) -> np.ndarray:
        out = np.asarray(self.profile.compute_times_s(flops, kv_tokens=kv_tokens, **kw), dtype=np.float64)
        if self.prefill_shape is not None:
            from sim.inference.prefill import merge_s

            merges = (np.asarray(flops) == 0) & (np.asarray(kv_tokens) == 0)
            out[merges] = merge_s(self.prefill_shape, self.prefill_shape.n_ranks, self.stream_gbps)
        return out

    def transfer_time_s(self, nbytes: float, src: int, dst: int) -> float:
        return self.profile.transfer_time_s(nbytes, src, dst)

    def transfer_times_s(self, nbytes, src, dst) -> np.ndarray:
        return self.profile.transfer_times_s(nbytes, src, dst)

    def collective_times_s(self, kind, nbytes, default, *, group=None) -> np.ndarray:
        return self.profile.collective_times_s(kind, nbytes, default, group=group)

    def rate_flops(self, dtype: str, head_dim: int | None = None) -> float:
        return self.profile.rate_flops(dtype, head_dim)

    def describe(self) -> dict[str, Any]:
        return {**self.profile.describe(), "stream_gbps": self.stream_gbps}


def model_shape(run: InferRun):
    """The model's shape of the run's layer, read from the header its measured traces
    carry (sim.inference's from_config): the measured trace and the model name one layer."""
    from sim.inference.decode import DecodeAttention
    from sim.inference.prefill import PrefillAttention

    kind = PrefillAttention if run.phase == "prefill" else DecodeAttention
    return kind.from_config(run.describe())


def simulate(run: InferRun, profile, stream_gbps: float, jitter: int | None = None) -> Trace:
    """The model's trace of the run's layer on the profile (module docstring)."""
    shape = model_shape(run)
    if run.phase == "decode":
        from sim.inference.decode import simulate_decode_attention

        return simulate_decode_attention(shape, HostModel(profile, run.n_gpus, stream_gbps))
    from sim.engine.play import play
    from sim.inference.prefill import build_prefill_schedule

    host = HostModel(profile, run.n_gpus, stream_gbps, shape)
    schedule, _merges = build_prefill_schedule(shape, host)
    header = {"config": {"kind": "prefill", **shape.describe()},
              "hardware": {**host.describe(), "rate_flops": host.rate_flops(run.dtype, run.head_dim)},
              "meta": {"phase": "prefill", "carries": "q" if run.scheme == "pass-q" else "kv"}}
    return play(schedule, host, shape.workload, header, jitter=jitter)


def cmd_validate_infer(a: argparse.Namespace, check_options) -> int:
    """`ringsim validate --infer PHASE...`: measure the inference matrix, simulate it on
    --profile, print (and with --out/--markdown write) the report; `check_options`: the ring
    validation's own checks of the options both share."""
    from sim.hardware.profile import load_profile

    if a.profile is None:
        raise RingsimError("validate --infer needs --profile PROFILE.json")
    check_options(a)
    for path in (a.out, a.markdown):
        why = kept_file(path, a.force)
        if why:
            raise RingsimError(why)
    profile = load_profile(a.profile)
    threads = int(profile.measured_on.get("threads_per_rank") or 1)
    runs = cases(gpu_counts=a.gpus or [2, 3], contexts=a.seqs or [4608], phases=a.infer, heads=a.heads,
                 kv_heads=a.kv_heads, head_dim=a.head_dim, dtype=a.dtype, warmup=a.warmup, repeats=a.repeats,
                 seed=a.seed, threads=threads)
    load = [os.getloadavg()[0]]
    read = dict(dtype=a.dtype, heads=a.heads, head_dim=a.head_dim, threads=threads, seconds=a.reference_s)
    before = _host_state(profile, read) if a.reference_s > 0 else None
    stream = host_stream_gbps(threads=threads)
    print(f"host streaming rate: {stream:.1f} GB/s (a copy of 64 MB, read and written)", file=sys.stderr)
    started = time.perf_counter()
    measured = measure_many(runs)
    stream_after = host_stream_gbps(threads=threads)
    after = _host_state(profile, read) if a.reference_s > 0 else None
    load.append(os.getloadavg()[0])
    state = None
    if before and after:      # the profile at the host's speed and sharing around the cases (hw.reference)
        speed = statistics.fmean((before["speed"], after["speed"]))
        sharing = statistics.fmean((before["sharing"], after["sharing"]))
        state = {"speed": speed, "sharing": sharing, "readings": [before, after]}
    rows = []
    for run, traces in zip(runs, measured):
        row = compare_case(InferCase.of(run), traces, _plays(run, profile, stream, a.replays))
        row["rule_scheme"] = _rule(run)
        if state is not None:
            at = compare_case(InferCase.of(run), traces,
                              _plays(run, profile.at_host_state(state["speed"], state["sharing"]), stream, a.replays))
            row["simulated_at_host_state_s"], row["error_at_host_state"] = at["simulated_s"], at["error"]
        rows.append(row)
        print(f"{row['key']}: measured {row['measured_median_s'] * 1e3:.1f} ms "
              f"({row['measured_min_s'] * 1e3:.1f}-{row['measured_max_s'] * 1e3:.1f}), simulated "
              f"{row['simulated_s'] * 1e3:.1f} ms ({row['error']:+.1%})  [{time.perf_counter() - started:.0f} s]",
              file=sys.stderr, flush=True)
    report = {"profile": a.profile, "measured_on": dict(measured[0][0].hardware), "warmup": a.warmup,
              "repeats": a.repeats, "replays": a.replays, "heads": a.heads, "kv_heads": a.kv_heads,
              "head_dim": a.head_dim, "dtype": a.dtype, "stream_gbps": [stream, stream_after],
              "host_state": state, "load_avg_1m": load, "summary": summary(rows), "cases": rows}
    if a.out:
        write_json(a.out, report, overwrite=True)     # checked above
    text = markdown(report)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text)
    print(json.dumps(report, indent=2) if a.json else text)
    return 0


def _plays(run: InferRun, profile, stream: float, replays: int) -> list[Trace]:
    """The model's traces of a case: one play, or `replays` seeded with the host's spread."""
    if replays <= 1:
        return [simulate(run, profile, stream)]
    return [simulate(run, profile, stream, jitter=seed) for seed in range(replays)]


def _host_state(profile, read: dict[str, Any]) -> dict[str, Any] | None:
    """The host's compute speed and sharing against the profile's (hw.reference), None
    where the profile measured no reference block of this shape."""
    from hw import reference

    speed = reference.host_speed(profile, **read)
    if not speed:
        return None
    sharing = reference.host_sharing(profile, **read)
    print(f"host speed {speed['factor']:.2f}x the profile's"
          + (f"; {reference.sharing_line(sharing)}" if sharing else ""), file=sys.stderr, flush=True)
    return {"speed": speed["factor"], "sharing": sharing["factor"] if sharing else 1.0}


def _rule(run: InferRun) -> str | None:
    if run.phase != "prefill":
        return None
    from sim.inference.work import rule_scheme

    return rule_scheme(run.cached, run.new, run.heads, run.kv_heads)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [abs(r["error"]) for r in rows]
    worst = max(rows, key=lambda r: abs(r["error"]))
    out = {"cases": len(rows), "median_abs_error": statistics.median(errors), "max_abs_error": max(errors),
           "worst_case": worst["key"], "within_range": sum(r["within_range"] for r in rows),
           "median_measured_cv": statistics.median(r["measured_cv"] for r in rows)}
    if all("error_at_host_state" in r for r in rows):
        out["median_abs_error_at_host_state"] = statistics.median(abs(r["error_at_host_state"]) for r in rows)
    return out


def markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table: each case's measured median and range over the
    repeats against the model's time, and the parts."""
    s = report["summary"]
    lines = [f"Measured on: {report['measured_on'].get('device', '?')}, "
             f"{report['measured_on'].get('threads_per_rank', '?')} thread per rank; profile {report['profile']}; "
             f"{report['heads']}/{report['kv_heads']} heads x {report['head_dim']}, {report['dtype']}; "
             f"{s['cases']} cases, {report['repeats']} repeats each after {report['warmup']} warm-up; "
             f"host streaming rate {report['stream_gbps'][0]:.1f} GB/s before, {report['stream_gbps'][1]:.1f} after"
             + (f"; load average {report['load_avg_1m'][0]:.1f} before, {report['load_avg_1m'][1]:.1f} after"
                if "load_avg_1m" in report else "") + ".",
             "",
             f"- median |error| {s['median_abs_error']:.1%}, worst {s['max_abs_error']:.1%} ({s['worst_case']}); "
             f"simulated inside the measured range: {s['within_range']} of {s['cases']}; median cv of the "
             f"measurements {s['median_measured_cv']:.1%}"]
    state = report.get("host_state")
    if state:
        lines.append(f"- the host around the cases (hw.reference): computing {state['speed']:.2f}x the profile's "
                     f"time, two processes sharing its cores {state['sharing']:.2f}x the profile's law; at that "
                     f"state the median |error| is {s['median_abs_error_at_host_state']:.1%}")
    at_state = bool(state)
    lines += ["",
              "| case | rule | measured median | measured range | simulated | error |"
              + (" at the host's state |" if at_state else "") + " compute, sum over ranks (meas / sim) |",
              "|---|---|---:|---:|---:|---:|" + ("---:|" if at_state else "") + "---:|"]
    for r in report["cases"]:
        comp = r["parts"]["compute_s"]
        extra = (f" {r['simulated_at_host_state_s'] * 1e3:.1f} ms ({r['error_at_host_state']:+.1%}) |"
                 if at_state else "")
        lines.append(f"| {r['key']} | {r.get('rule_scheme') or '-'} | {r['measured_median_s'] * 1e3:.1f} ms | "
                     f"{r['measured_min_s'] * 1e3:.1f}-{r['measured_max_s'] * 1e3:.1f} ms | "
                     f"{r['simulated_s'] * 1e3:.1f} ms | {r['error']:+.1%} |{extra} "
                     f"{comp['measured'] * 1e3:.1f} / {comp['simulated'] * 1e3:.1f} ms |")
    return "\n".join(lines) + "\n"
