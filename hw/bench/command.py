"""`ringsim hw bench`: every part in order, written as it completes (hw.bench)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import torch

from hw.bench.bounds import add_pass
from hw.bench.document import _describe_device, _fmt, _key, _open_doc
from hw.bench.measure import _comm_worker, measure_compute, measure_compute_paired
from hw.bench.options import PARTS, plan_from_args
from hw.bench.parts import (
    _collective_worker,
    _measure_host_parts,
    _plan_collectives,
    _plan_concurrency,
    _plan_jobs,
    _plan_ring,
    _reference_entry,
    host_pass_places,
)
from hw.blocks import select_block_ops
from hw.config import default_threads
from hw.spawn import spawn
from sim.errors import RingsimError
from sim.files import check_output, write_json


def run_bench(a: argparse.Namespace) -> int:
    # the folder and the kind of file before anything; a file there without --force or
    # --resume is refused by _open_doc, before any measurement
    check_output(a.output, a.force, resumes=True)
    plan = plan_from_args(a)
    kind = _device_kind(a.device)
    device = torch.device("cuda", torch.cuda.current_device()) if kind == "cuda" else torch.device("cpu")
    backend = "nccl" if kind == "cuda" else "gloo"
    if a.threads is not None and a.threads <= 0:
        raise RingsimError("--threads must be positive")
    threads = a.threads or default_threads(2)
    # the first save creates the file exclusively unless it replaces or continues one
    resumed = a.resume and os.path.exists(a.output)
    out = _BenchFile(a.output, _open_doc(a, _describe_device(device, backend, threads), plan),
                     replace=a.force or resumed)
    out.doc["complete"] = False
    # keys measured already (from --resume) or planned: each is measured once
    seen = {part: {_key(part, e) for e in out.doc[part]} for part in PARTS}
    out.save()
    compute_jobs, comm_jobs = _plan_jobs(plan, seen)
    # the host parts' entries of each pass (CPU only), by where it runs (HOST_PASSES)
    host_jobs = ({place: (_plan_concurrency(plan, seen, i), _plan_ring(plan, seen, i))
                  for i, place in enumerate(host_pass_places(plan["host_passes"]), 1)} if kind == "cpu" else {})
    coll_jobs = _plan_collectives(plan, seen)
    if kind == "cuda":
        coll_jobs = _collectives_with_gpus(coll_jobs)
    out.total = (len(compute_jobs) + len(comm_jobs) + sum(len(c) + len(r) for c, r in host_jobs.values())
                 + sum(len(es) for es in coll_jobs.values()))
    cores = out.doc["device"].get("cpu_count") or os.cpu_count() or 1

    def host_parts(place: str) -> None:
        if place in host_jobs:
            _measure_host_parts(*host_jobs[place], plan, threads, cores, a, out.progress)

    host_parts("start")
    if compute_jobs:
        _measure_compute_part(a, plan, compute_jobs, device, threads, out)
    skipped = bool(comm_jobs) and kind == "cuda" and torch.cuda.device_count() < 2
    if skipped:
        print("transfer and interference need two GPUs; skipped", file=sys.stderr)
    elif comm_jobs:
        spawn(_comm_worker, 2, args=(comm_jobs, plan["samples"], plan["warmup"], kind, threads,
                                     a.block_impl),
              backend=backend, timeout_s=a.timeout, on_progress=lambda _rank, msg: out.progress(*msg))
    host_parts("middle")
    for n_gpus, entries in sorted(coll_jobs.items()):
        spawn(_collective_worker, n_gpus, args=(entries, plan["samples"], plan["warmup"], kind, threads),
              backend=backend, timeout_s=a.timeout, on_progress=lambda _rank, msg: out.progress(*msg))
    host_parts("end")
    skipped = skipped or (kind == "cuda" and "collective" in plan["parts"]
                          and any(w > torch.cuda.device_count() for w in plan["collective_gpus"]))
    out.doc["complete"] = out.count == out.total and not skipped
    out.save()
    print(f"{out.count} entries measured, {sum(len(out.doc[p]) for p in PARTS)} in {a.output}", file=sys.stderr)
    return 0


def _device_kind(asked: str) -> str:
    """cpu or cuda: --device, where auto is cuda when a GPU is there."""
    kind = asked
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise RingsimError("--device cuda: no CUDA device is available")
    return kind


def _collectives_with_gpus(coll_jobs: dict[int, list]) -> dict[int, list]:
    """The collective entries of GPU counts this host has GPUs for; the others are said
    to be skipped."""
    too_big = [w for w in coll_jobs if w > torch.cuda.device_count()]
    if too_big:
        print(f"collectives over {', '.join(map(str, too_big))} ranks need as many GPUs; skipped",
              file=sys.stderr)
    return {w: es for w, es in coll_jobs.items() if w not in too_big}


class _BenchFile:
    """The bench file as it is written: saved whole after every entry, so that an
    interrupted run keeps what it measured (`--resume`), with a progress line per entry."""

    def __init__(self, path: str, doc: dict[str, Any], *, replace: bool = False):
        self.path = path
        self.doc = doc
        self.count = 0
        self.total = 0
        self.replace = replace
        """Whether the next save may replace the file (after the first: it is ours)."""

    def save(self) -> None:
        write_json(self.path, self.doc, overwrite=self.replace)
        self.replace = True

    def add(self, part: str, entry: dict[str, Any]) -> None:
        # the host may be shared: how busy it was when this entry completed
        entry["load_avg_1m"] = os.getloadavg()[0]
        self.doc[part].append(entry)
        self.save()

    def progress(self, part: str, entry: dict[str, Any]) -> None:
        self.count += 1
        self.add(part, entry)
        print(f"[{self.count}/{self.total}] {_fmt(part, entry)}", file=sys.stderr, flush=True)


def _measure_compute_part(a: argparse.Namespace, plan: dict[str, Any], jobs: list[dict[str, Any]], device,
                          threads: int, out: _BenchFile) -> None:
    """The compute part: every block timed once (on the CPU with a rank's threads, each
    sample between two of the reference block's: measure_compute_paired), then again
    `compute_passes - 1` times, last first, each pass added to its entry."""
    saved_threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads)
    reference = _reference_entry(plan) if device.type == "cpu" else None
    if reference is not None:
        out.doc["reference_block"] = reference
    ref_ops = (select_block_ops("cpu", reference["dtype"], reference["head_dim"], a.block_impl)
               if reference is not None else None)

    def measure_entry(e: dict[str, Any]) -> dict[str, Any]:
        ops = select_block_ops(device.type, e["dtype"], e["head_dim"], a.block_impl)
        if reference is not None:   # the host's speed of the moment, around every sample
            return measure_compute_paired(e, ops, reference, ref_ops, plan["samples"], plan["warmup"])
        return measure_compute(e, ops, device, plan["samples"], plan["warmup"])

    try:
        measured = []
        for e in jobs:
            measured.append(measure_entry(e))
            out.progress("compute", measured[-1])
        for _ in range(plan["compute_passes"] - 1):     # again, last first
            for e, entry in reversed(list(zip(jobs, measured))):
                add_pass(entry, measure_entry(e))
                out.save()
                print(f"[compute, again] {_fmt('compute', entry)}", file=sys.stderr, flush=True)
    finally:
        torch.set_num_threads(saved_threads)
