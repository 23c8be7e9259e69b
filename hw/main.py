"""torchrun entry: `torchrun --nproc-per-node N [--nnodes ...] -m hw.main [options]`.

Every rank reads its place from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR/PORT), makes the inputs from the seed, runs the ring
(`hw.runner.run_rank`) and sends its spans to rank 0, which saves and prints the result
like `ringsim hw run` (same options, without --gpus). A rank that fails prints
one line naming itself and exits with status 1; the others stop when their transfers
fail (naming the failed rank when it left word in the rendezvous store) and torchrun
tears the job down.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch.distributed as dist

from hw.cli import add_run_args, config_from_args, report
from hw.comm import PeerFailure, note_failure
from hw.devices import pick_device
from hw.reporting import check_outputs
from hw.runner import build_traces, run_rank
from hw.spawn import join_group, release_group_after_failure
from sim.errors import RingsimError


def main(argv: list[str] | None = None) -> int:
    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:
            raise RingsimError(message)

    p = _Parser(prog="torchrun ... -m hw.main", description="One rank of a measured ring run.")
    add_run_args(p, gpus=False)
    rank = int(os.environ.get("RANK", "0"))
    try:
        a = p.parse_args(argv)
        n_gpus = int(os.environ.get("WORLD_SIZE", "1"))
        cfg = config_from_args(a, n_gpus=n_gpus)
        if rank == 0:
            check_outputs(a, cfg.repeats)
        results = _run(cfg, rank, n_gpus)
        if rank == 0:
            return report(a, cfg, build_traces(cfg, results))
        return 0
    except RingsimError as e:
        print(f"ringsim hw: rank {rank}: error: {e}", file=sys.stderr)
        return 2


def _run(cfg, rank: int, n_gpus: int):
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    ranks_on_host = int(os.environ.get("LOCAL_WORLD_SIZE", str(n_gpus)))
    store = group = control = None
    try:
        device = pick_device(cfg.device, local_rank, ranks_on_host)
        if n_gpus > 1:
            group, control = join_group(cfg.resolved_backend, rank=rank, n_gpus=n_gpus,
                                        local_rank=local_rank, timeout_s=cfg.timeout_s)
            try:  # torchrun's agent keeps this store alive when a rank dies
                store = dist.distributed_c10d._get_default_store()
            except Exception:
                store = None

        def barrier() -> None:
            if n_gpus > 1:
                dist.barrier(group=control)

        res = run_rank(cfg, rank=rank, group=group, inputs=None, device=device,
                       barrier=barrier, store=store, ranks_on_host=ranks_on_host)
        gathered = [None] * n_gpus if rank == 0 else None
        if n_gpus > 1:
            dist.gather_object(res, gathered, dst=0, group=control)
            # A gloo gather returns on the sender before rank 0 has read it; tearing the
            # group down then can abort the sender. Leave together once rank 0 has all.
            dist.barrier(group=control)
            dist.destroy_process_group()
        else:
            gathered = [res]
        return gathered
    except PeerFailure as e:
        print(f"ringsim hw: rank {rank} stopped: {e}", file=sys.stderr)
        release_group_after_failure()
        sys.exit(1)
    except Exception as e:
        note_failure(store, f"rank {rank} failed: {type(e).__name__}: {e}")
        print(f"ringsim hw: rank {rank} failed: {type(e).__name__}: {e}", file=sys.stderr)
        release_group_after_failure()
        sys.exit(1)


if __name__ == "__main__":
    sys.exit(main())
