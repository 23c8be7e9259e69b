"""`ringsim hw bench`: every part in order, written as it completes (hw.bench)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

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
from sim.errors import RingsimError
from sim.files import write_json


def run_bench(a: argparse.Namespace) -> int:
    import torch

    from hw.blocks import select_block_ops
    from hw.config import default_threads
    from hw.spawn import spawn

    plan = plan_from_args(a)
    kind = a.device
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise RingsimError("--device cuda: no CUDA device is available")
    device = torch.device("cuda", torch.cuda.current_device()) if kind == "cuda" else torch.device("cpu")
    backend = "nccl" if kind == "cuda" else "gloo"
    if a.threads is not None and a.threads <= 0:
        raise RingsimError("--threads must be positive")
    threads = a.threads or default_threads(2)
    doc = _open_doc(a, _describe_device(device, backend, threads), plan)
    doc["complete"] = False
    # keys measured already (from --resume) or planned: each is measured once
    seen = {part: {_key(part, e) for e in doc[part]} for part in PARTS}

    def save() -> None:
        write_json(a.output, doc, overwrite=True)

    def add(part: str, entry: dict[str, Any]) -> None:
        # the host may be shared: how busy it was when this entry completed
        entry["load_avg_1m"] = os.getloadavg()[0]
        doc[part].append(entry)
        save()

    save()
    compute_jobs, comm_jobs = _plan_jobs(plan, seen)
    # the host parts' entries of each pass (CPU only), by where it runs (HOST_PASSES)
    host_jobs = ({place: (_plan_concurrency(plan, seen, i), _plan_ring(plan, seen, i))
                  for i, place in enumerate(host_pass_places(plan["host_passes"]), 1)} if kind == "cpu" else {})
    coll_jobs = _plan_collectives(plan, seen)
    if kind == "cuda":
        too_big = [w for w in coll_jobs if w > torch.cuda.device_count()]
        if too_big:
            print(f"collectives over {', '.join(map(str, too_big))} ranks need as many GPUs; skipped",
                  file=sys.stderr)
        coll_jobs = {w: es for w, es in coll_jobs.items() if w not in too_big}
    total = (len(compute_jobs) + len(comm_jobs) + sum(len(c) + len(r) for c, r in host_jobs.values())
             + sum(len(es) for es in coll_jobs.values()))
    count = 0

    def progress(part: str, entry: dict[str, Any]) -> None:
        nonlocal count
        count += 1
        add(part, entry)
        print(f"[{count}/{total}] {_fmt(part, entry)}", file=sys.stderr, flush=True)

    cores = doc["device"].get("cpu_count") or os.cpu_count() or 1

    def host_parts(place: str) -> None:
        if place in host_jobs:
            _measure_host_parts(*host_jobs[place], plan, threads, cores, a, progress)

    host_parts("start")
    if compute_jobs:
        saved_threads = torch.get_num_threads()
        if device.type == "cpu":
            torch.set_num_threads(threads)
        reference = _reference_entry(plan) if device.type == "cpu" else None
        if reference is not None:
            doc["reference_block"] = reference
        ref_ops = (select_block_ops("cpu", reference["dtype"], reference["head_dim"], a.block_impl)
                   if reference is not None else None)

        def measure_entry(e: dict[str, Any]) -> dict[str, Any]:
            ops = select_block_ops(device.type, e["dtype"], e["head_dim"], a.block_impl)
            if reference is not None:   # the host's speed of the moment, around every sample
                return measure_compute_paired(e, ops, reference, ref_ops, plan["samples"], plan["warmup"])
            return measure_compute(e, ops, device, plan["samples"], plan["warmup"])

        try:
            measured = []
            for e in compute_jobs:
                measured.append(measure_entry(e))
                progress("compute", measured[-1])
            for _ in range(plan["compute_passes"] - 1):     # again, last first
                for e, entry in reversed(list(zip(compute_jobs, measured))):
                    add_pass(entry, measure_entry(e))
                    save()
                    print(f"[compute, again] {_fmt('compute', entry)}", file=sys.stderr, flush=True)
        finally:
            torch.set_num_threads(saved_threads)
    skipped = bool(comm_jobs) and kind == "cuda" and torch.cuda.device_count() < 2
    if skipped:
        print("transfer and interference need two GPUs; skipped", file=sys.stderr)
    elif comm_jobs:
        spawn(_comm_worker, 2, args=(comm_jobs, plan["samples"], plan["warmup"], kind, threads,
                                     a.block_impl),
              backend=backend, timeout_s=a.timeout, on_progress=lambda _rank, msg: progress(*msg))
    host_parts("middle")
    for n_gpus, entries in sorted(coll_jobs.items()):
        spawn(_collective_worker, n_gpus, args=(entries, plan["samples"], plan["warmup"], kind, threads),
              backend=backend, timeout_s=a.timeout, on_progress=lambda _rank, msg: progress(*msg))
    host_parts("end")
    skipped = skipped or (kind == "cuda" and "collective" in plan["parts"]
                          and any(w > torch.cuda.device_count() for w in plan["collective_gpus"]))
    doc["complete"] = count == total and not skipped
    save()
    print(f"{count} entries measured, {sum(len(doc[p]) for p in PARTS)} in {a.output}", file=sys.stderr)
    return 0
