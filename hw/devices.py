"""A rank's device: the GPU a local rank takes (one each), the device it computes on, its
name in a report, and waiting for the work queued on it.

Shared by the launcher (hw.spawn), the measured run (hw.runner) and the benchmarks
(hw.bench), below all of them.
"""

from __future__ import annotations

import os

import torch

from sim.errors import RingsimError
from sim.hardware.host import cpu_model


def gpu_for_rank(local_rank: int, ranks_on_host: int, device_count: int) -> int:
    """The GPU of local rank `local_rank`: its own, one per rank, or a RingsimError."""
    if ranks_on_host > device_count or not 0 <= local_rank < device_count:
        raise RingsimError(
            f"{ranks_on_host} ranks on this host but {device_count} GPU"
            f"{'s' if device_count != 1 else ''} visible (local rank {local_rank}): every rank "
            f"needs a GPU of its own; start at most {device_count} ranks per host "
            f"(torchrun --nproc-per-node {device_count}) or make more GPUs visible")
    return local_rank


def pick_device(kind: str, local_rank: int, ranks_on_host: int = 1) -> torch.device:
    """The rank's device: the CPU, or GPU `local_rank` of this host (made current)."""
    if kind == "cuda":
        idx = gpu_for_rank(local_rank, ranks_on_host, torch.cuda.device_count())
        torch.cuda.set_device(idx)
        return torch.device("cuda", idx)
    return torch.device("cpu")


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()} ({os.cpu_count()} cores)"


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
