"""Helpers the benchmark scripts share (import them as `bench.common`, with the
repository's root on the path, as every script in bench/ puts it): timing, argument
types, and where results are kept. A result lies under bench/results/<purpose>/, the
purpose being the folder of the script that made it (speed, accuracy, gpu, calibration,
experiments), and, where it was measured rather than simulated, under the machine's name:
`cpu-<cores>core` for a CPU host (the committed runs: cpu-2core), the GPU's for a GPU
(h200)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_host() -> str:
    """This CPU host as result folders name it: `cpu-<cores>core`."""
    return f"cpu-{os.cpu_count()}core"


def timed(fn: Callable[[], Any], samples: int, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of `samples` calls of `fn`, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def ints(text: str, least: int = 1) -> list[int]:
    """argparse type: comma-separated whole numbers, each at least `least`."""
    try:
        out = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not out or min(out) < least:
        raise argparse.ArgumentTypeError(f"expected whole numbers of at least {least}, got {text!r}")
    return out
