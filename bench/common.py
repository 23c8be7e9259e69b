"""Helpers the benchmark scripts share (import them as `bench.common`, with the
repository's root on the path, as every script in bench/ puts it): timing, argument
types, and where results are kept. A result lies under bench/results/<purpose>/, the
purpose being the folder of the script that made it (speed, accuracy, gpu, calibration,
experiments), and, where it was measured rather than simulated, under the machine's name:
`cpu-<cores>core` for a CPU host (the committed runs: cpu-2core), the GPU's for a GPU
(h200)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_host() -> str:
    """This CPU host as result folders name it: `cpu-<cores>core`."""
    return f"cpu-{os.cpu_count()}core"


def keep_results(prog: str, *paths: str | os.PathLike | None, force: bool = False,
                 make_folders: bool = False) -> None:
    """Refuse, in one line on stderr and exit status 2, before any measuring, to write a
    results file where one is already kept (unless `force`: the script's --force) or
    where it cannot be written (sim.files.output_problem): a bench run never replaces a
    kept result unasked, and a long run is not lost to a name it cannot write.
    `make_folders`: each file's folder is made first, for a script that makes its own
    results folder (a new host's has none yet); one that cannot be made is refused by name."""
    from sim.files import output_problem

    for path in paths:
        if make_folders and path is not None:
            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        why = output_problem(path, force)
        if why:
            print(f"{prog}: {why}", file=sys.stderr)
            raise SystemExit(2)


def save_json(path: str | os.PathLike, obj: Any, *, force: bool = False, indent: int | None = 1) -> None:
    """Write a results file whole (`obj` as JSON, a new line at the end), replacing one
    already there only with `force` (sim.files.write_text: a crash leaves the old file or
    the new one, never half of either)."""
    from sim.files import write_text

    write_text(path, json.dumps(obj, indent=indent, default=float) + "\n", overwrite=force)


def add_force(parser: argparse.ArgumentParser) -> None:
    """The --force option of a script that writes results (`keep_results`, `save_json`)."""
    parser.add_argument("--force", action="store_true", help="replace a results file already there")


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
