"""Sweeps: many configurations simulated, one row of metrics each, in-process or on Dask.

A configuration (sim.planning.spec.Config) is a set of `ringsim simulate` options; its row holds
every option resolved, the command line that reproduces it, and the metrics of its run
(sim.trace.metrics; docs/design.md, Definitions): makespan, efficiency, load imbalance, overlap
efficiency, the worst GPU's exposed communication (and by kind), bytes sent and peak
memory per GPU (the largest), the GPU's memory and whether the peak fits in it, and the
sentence of what bounds the run (`sim.trace.metrics.explain`; the row also carries its
clauses, which a results file leaves out). A configuration that fails gets its one-line
error in `error` and no metrics; the sweep goes on.

Where it runs (`execute`): in this process, or on Dask (`distributed`), a LocalCluster of
single-threaded worker processes (the simulator holds the GIL) or an existing scheduler.
Configurations travel in batches, at most a few batches per worker in flight, so a sweep
of 100,000 makes a few hundred tasks and never floods the scheduler.

Results go to a results file (sim.planning.results): running the same sweep again skips
every configuration whose key is already there and simulates only the rest.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from itertools import islice
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from sim.engine.play import simulate
from sim.errors import RingsimError, one_line
from sim.invariants import check_run
from sim.planning.results import METRIC_COLUMNS, ResultsFile
from sim.planning.spec import Config
from sim.reasons import english
from sim.scenario.resolve import resolve
from sim.schemes import run_words
from sim.trace.metrics import compute_metrics, explain_clauses, scheme_row

MAX_BATCH = 256
"""Largest batch of configurations in one Dask task."""
BATCHES_PER_SLOT = 16
"""Batches per worker thread the configurations are cut into (load balance at the end)."""
IN_FLIGHT_PER_SLOT = 2
"""Batches submitted per worker thread at a time."""
WORKER_CONFIG = {
    # no dashboard shows it: the statistical profiler of each worker is only overhead
    "distributed.worker.profile.enabled": False,
    # Dask's default trim threshold turns off glibc's adaptive mmap threshold, and every
    # configuration allocates and frees large arrays: the workers took twice the page
    # faults of this process (218k against 98k for 96 configurations of 64 GPUs)
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
}
"""Dask settings of the LocalCluster a sweep starts."""
SCHEDULER_ADDRESS = re.compile(r"^([a-z]+://)?[^\s/:]+(:[^\s/:]+)*:\d{1,5}$|^[a-z]+://\[[0-9a-fA-F:.]+\]:\d{1,5}$")
"""What --scheduler takes: [protocol://]host:port (an IPv6 host in brackets), checked before
anything is written."""


# --- one configuration (runs wherever the sweep runs: here or on a worker) ------------------

def simulate_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """The metric columns of one configuration (its option values: Config.values), or its
    error.

    Played with the wave player, which gives the SimPy player's times bit for bit (the
    engine's own promise; `ringsim simulate` uses SimPy)."""
    try:
        run = resolve(values)
        scenario = run.scenario
        trace = simulate(scenario, run.profile, player="recurrence")
        m = compute_metrics(trace)
        row = check_run(scheme_row(scenario.scheme, run_words(scenario.describe()), trace, m), values)
    except Exception as e:   # noqa: BLE001 - a sweep records the failure and goes on
        return {"error": one_line(e)}
    out = {name: row.get(name) for name in METRIC_COLUMNS if name in row and name != "variant"}
    by_kind = row.get("exposed_by_kind_s") or {}
    for kind in ("kv", "dkv", "ag", "rs", "a2a"):
        out[f"exposed_{kind}_s"] = float(by_kind.get(kind, 0.0))
    out["bytes_per_gpu"] = row["bytes_sent_per_gpu"]
    out["variant"] = row["variant"]
    # what bounds the run, without explain's memory warning: `fits` is its own column
    out["explanation_clauses"] = explain_clauses({**row, "peak_mem_bytes": None})
    out["explanation"] = english(out["explanation_clauses"])
    peak, capacity = row.get("peak_mem_bytes"), row.get("memory_bytes")
    out["fits"] = None if peak is None or not capacity else bool(peak <= capacity)
    out["error"] = None
    return out


def run_batch(values: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """simulate_config of each: one Dask task."""
    return [simulate_config(v) for v in values]


def row_of(config: Config, metrics: dict[str, Any]) -> dict[str, Any]:
    """The full row: key, options, command, metrics (missing metrics are None), and what bounds
    the run as sim.reasons clauses (`explanation_clauses`, for a page that says it in its
    language; a results file keeps the English `explanation` alone)."""
    row = {"key": config.key, **config.columns(), "command": config.command}
    for name in METRIC_COLUMNS:
        row[name] = metrics.get(name)
    row["explanation_clauses"] = metrics.get("explanation_clauses")
    return row


# --- where configurations run ---------------------------------------------------------------

def dask_available() -> bool:
    # an optional dependency: importing it is the test that it is installed
    try:
        import distributed  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


def auto_batch_size(n_configs: int, slots: int) -> int:
    """Configurations per task: about BATCHES_PER_SLOT tasks per worker thread, at most
    MAX_BATCH each."""
    return max(1, min(MAX_BATCH, math.ceil(n_configs / max(1, slots * BATCHES_PER_SLOT))))


@dataclass
class Runner:
    """Where a sweep's configurations run: `workers` 1 without `scheduler` or `dask` is
    this process; otherwise a Dask LocalCluster of `workers` single-threaded processes, or
    the cluster at `scheduler` (tcp://host:port)."""

    workers: int = 1
    scheduler: str | None = None
    dask: bool = False
    batch_size: int | None = None
    client: Any = None
    """A connected `distributed.Client` to use (and leave open) instead of starting one."""

    def __post_init__(self) -> None:
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1:
            raise RingsimError(f"--workers must be a positive whole number, got {self.workers!r}")
        if self.batch_size is not None and (not isinstance(self.batch_size, int) or self.batch_size < 1):
            raise RingsimError(f"--batch-size must be a positive whole number, got {self.batch_size!r}")
        if self.scheduler is not None and not SCHEDULER_ADDRESS.match(self.scheduler.strip()):
            raise RingsimError(f"--scheduler {self.scheduler!r} is not an address such as tcp://HOST:8786")
        if self.on_dask and not dask_available():
            raise RingsimError("running on several workers or a scheduler needs Dask: "
                               "pip install 'ringsim[sweep]' (or run with --workers 1, in this process)")

    @property
    def on_dask(self) -> bool:
        return self.client is not None or self.scheduler is not None or self.workers > 1 or self.dask

    def describe(self) -> str:
        if self.client is not None:
            return f"the Dask cluster of {self.client}"
        if self.scheduler:
            return f"the Dask cluster at {self.scheduler}"
        if self.on_dask:
            return f"a local Dask cluster of {self.workers} worker process{'es' if self.workers > 1 else ''}"
        return "this process"

    def execute(self, configs: Sequence[Config],
                simulate: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
                ) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of finished rows (in completion order) until every configuration
        has its row. `simulate` (in this process only) replaces simulate_config."""
        if not configs:
            return
        if not self.on_dask:
            run = simulate or simulate_config
            for c in configs:
                yield [row_of(c, run(c.values))]
            return
        yield from self._execute_dask(configs)

    def _execute_dask(self, configs: Sequence[Config]) -> Iterator[list[dict[str, Any]]]:
        # Dask loads only when a sweep runs on it: a sweep in this process does not need it installed
        from distributed import Client, LocalCluster, as_completed

        cluster = None
        own = self.client is None
        if not own:
            client = self.client
        elif self.scheduler:
            try:
                client = Client(self.scheduler.strip(), timeout="20s")
            except (OSError, TimeoutError, ValueError) as e:
                raise RingsimError(f"cannot reach the Dask scheduler at {self.scheduler}: {one_line(e)}") from None
        else:
            import dask  # (as distributed above)

            with dask.config.set(WORKER_CONFIG):
                cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=logging.ERROR)
            client = Client(cluster)
        try:
            slots = max(1, sum(client.nthreads().values()))
            size = self.batch_size or auto_batch_size(len(configs), slots)
            batches = iter([list(configs[i:i + size]) for i in range(0, len(configs), size)])
            pending: dict[Any, list[Config]] = {}
            done = as_completed()

            def submit(batch: list[Config]) -> None:
                f = client.submit(run_batch, [c.values for c in batch], pure=False)
                pending[f] = batch
                done.add(f)

            for batch in islice(batches, slots * IN_FLIGHT_PER_SLOT):
                submit(batch)
            for f in done:
                batch = pending.pop(f)
                try:
                    results = f.result()
                except Exception as e:   # noqa: BLE001 - a worker that died takes its batch's rows with it
                    results = [{"error": "worker failed: " + one_line(e)}] * len(batch)
                del f
                nxt = next(batches, None)
                if nxt is not None:
                    submit(nxt)
                yield [row_of(c, r) for c, r in zip(batch, results)]
        finally:
            for f in list(pending):
                f.cancel()
            if own:
                client.close()
            if cluster is not None:
                cluster.close()


def run_configs(configs: Sequence[Config], runner: Runner | None = None,
                on_progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """The rows of `configs`, in their order (no file); `on_progress(done, total)` after
    each batch of finished ones."""
    rows: dict[str, dict[str, Any]] = {}
    todo = unique(configs)
    for batch in (runner or Runner()).execute(todo):
        for row in batch:
            rows[row["key"]] = row
        if on_progress is not None:
            on_progress(len(rows), len(todo))
    return [rows[c.key] for c in configs]


def unique(configs: Iterable[Config]) -> list[Config]:
    """The first configuration of each key, in order."""
    seen: set[str] = set()
    out = []
    for c in configs:
        k = c.key
        if k not in seen:
            seen.add(k)
            out.append(c)
    return out


# --- progress ---------------------------------------------------------------------------------

class Progress:
    """One line on stderr: rows done of the total, rate, errors; rewritten in place on a
    terminal, else printed every PRINT_S seconds."""

    PRINT_S = 10.0

    def __init__(self, total: int, skipped: int, *, stream=None, quiet: bool = False):
        self.total, self.skipped = total, skipped
        self.done = self.errors = 0
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = self._last = time.monotonic()

    def update(self, rows: Sequence[dict[str, Any]]) -> None:
        self.done += len(rows)
        self.errors += sum(1 for r in rows if r.get("error"))
        now = time.monotonic()
        if not self.quiet and (now - self._last >= (0.2 if self.tty else self.PRINT_S)):
            self._last = now
            self._show(end="\r" if self.tty else "\n")

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = self.total - self.skipped - self.done
        eta = f", {left / rate:.0f} s left" if rate > 0 and left > 0 else ""
        return (f"{self.skipped + self.done}/{self.total} configurations ({self.done} now, "
                f"{rate:.1f}/s{eta}), {self.errors} failed")

    def _show(self, end: str) -> None:
        print(self.line(), end=end, file=self.stream, flush=True)

    def close(self) -> None:
        if not self.quiet:
            self._show(end="\n")


# --- a sweep --------------------------------------------------------------------------------

@dataclass
class SweepResult:
    total: int
    """Distinct configurations in the spec."""
    skipped: int
    """Already in the results, not simulated again."""
    ran: int
    failed: int
    rows: int
    """Rows in the file at the end."""
    elapsed_s: float
    interrupted: bool = False


def sweep(configs: Sequence[Config], out: str, *, runner: Runner | None = None, fmt: str | None = None,
          fresh: bool = False, quiet: bool = False, stream=None,
          simulate: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None) -> SweepResult:
    """Simulate every configuration not yet in `out` and merge its row into `out`.
    Ctrl-C (KeyboardInterrupt) merges what finished and is raised again."""
    runner = runner or Runner()
    results = ResultsFile(out, fmt)
    if fresh:
        results.discard()
    configs = unique(configs)
    order = [c.key for c in configs]
    finished = results.finished_keys()
    todo = [c for c in configs if c.key not in finished]
    progress = Progress(len(configs), len(configs) - len(todo), stream=stream, quiet=quiet)
    t0 = time.monotonic()
    interrupted = False
    # a sweep that fails before its first row (an unreachable scheduler) leaves no empty
    # table behind; rows that did finish are merged, as on Ctrl-C
    keep_nothing = not os.path.exists(out)
    try:
        for rows in runner.execute(todo, simulate):
            results.add(rows)
            progress.update(rows)
            keep_nothing = False
        keep_nothing = False
    except KeyboardInterrupt:
        interrupted = True
        keep_nothing = False
        raise
    finally:
        n_rows = 0 if keep_nothing else results.finish(order)
        if not keep_nothing:        # a refusal before the first row is its one line alone
            progress.close()
        if interrupted and not quiet:
            print(f"interrupted: {n_rows} rows in {out}; run the same command again to finish the rest",
                  file=progress.stream, flush=True)
    return SweepResult(len(configs), len(configs) - len(todo), progress.done, progress.errors, n_rows,
                       time.monotonic() - t0, interrupted)
