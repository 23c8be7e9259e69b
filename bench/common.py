"""Helpers the benchmark scripts share (import them as `bench.common`, with the
repository's root on the path, as every script in bench/ puts it)."""

from __future__ import annotations

import time
from typing import Any, Callable


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
