"""Which host a profile belongs to, and whether this one is it.

A calibrated profile (sim.hardware.profile) predicts the host it was measured on. Used to
predict another (a different CPU model or core count, another torch, backend or thread
count per rank), its numbers describe the wrong machine: `differences` names what
differs, and `mismatch_line` says it in one line with the way to check or redo it.
Nothing here imports torch; its version is read from the installed package's metadata.
"""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata
from typing import Any


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def torch_version() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def this_host(*, kind: str = "cpu", device: str | None = None, backend: str | None = None,
              threads_per_rank: int | None = None) -> dict[str, Any]:
    """This host in the words of a profile's `measured_on` (sim.calibration.calibrate)."""
    cores = os.cpu_count()
    return {"kind": kind, "device": device or f"{cpu_model()} ({cores} cores)", "cpu_count": cores,
            "torch": torch_version(), "backend": backend or ("gloo" if kind == "cpu" else "nccl"),
            "threads_per_rank": threads_per_rank if kind == "cpu" else None,
            "hostname": socket.gethostname()}


# what makes a host another host, in the order a person reads them; the host name does not
_FIELDS = (("kind", "device kind"), ("device", "device"), ("cpu_count", "cores"), ("torch", "torch"),
           ("backend", "backend"), ("threads_per_rank", "threads per rank"))


def _torch_release(v: Any) -> Any:
    return v.split("+")[0] if isinstance(v, str) else v


def differences(measured_on: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """What differs between the host a profile was measured on and `here`; a field
    either side does not know is not compared. torch builds of one release (2.13.0+cpu,
    2.13.0) count as the same torch."""
    out = []
    for key, label in _FIELDS:
        a, b = measured_on.get(key), here.get(key)
        if key == "cpu_count" and measured_on.get("kind", "cpu") != "cpu":
            continue
        if key == "torch":
            a, b = _torch_release(a), _torch_release(b)
        if a is None or b is None or a == b:
            continue
        out.append(f"{label} {a} here {b}")
    return out


def mismatch_line(measured_on: dict[str, Any], here: dict[str, Any], source: str) -> str | None:
    """One line saying the profile in `source` was measured elsewhere, or None."""
    diff = differences(measured_on, here)
    if not diff:
        return None
    return (f"warning: profile {source or ''} was measured on another host ({'; '.join(diff)}); "
            f"check it with `ringsim calibrate --check {source or 'PROFILE'}` or calibrate afresh")
