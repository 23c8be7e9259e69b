"""A comparison's large runs side by side on the machine's cores.

A comparison simulates one run per row (Compare layouts six, Compare schemes about ten),
and the simulator holds the interpreter, so in one process the rows run one after another:
at 1,024 GPUs each is seconds. Runs whose schedules are large enough to repay starting a
process (an interpreter and the simulator's imports, about a second) are handed to worker
processes instead, as many at once as the machine has cores and memory for; each sends
back only what its row keeps (the run's metrics, or its row of the schemes' comparison),
not its trace. This module imports only the simulator, so that a worker starts light.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Sequence

from dashboard import runners
from sim.engine.host_memory import BYTES_PER_OP, available_memory_bytes
from sim.engine.play import simulate
from sim.engine.threads import cores
from sim.scenario.config import Scenario
from sim.schemes import get as get_scheme
from sim.trace.format import Trace
from sim.trace.metrics import Metrics, compute_metrics, scheme_row

APART_OPS = 500_000
"""A run of at least this many operations is simulated in a process of its own when several
are: about a second of a core (a forward ring of 512 GPUs is 523,776), which the process's
start costs again."""

RUNNER_OPS = 50_000
"""Where the server keeps runners (dashboard/runners.py), a run of at least this many
operations goes to them when several are: no process to start, only the run and its row to
pass (milliseconds), and the runners take the largest first, on every core, while the
comparison's own process waits (a ring of 256 GPUs is 130,560, about 0.2 s of a core)."""

Summary = tuple
"""What a run's row keeps: ("metrics",) its Metrics; ("scheme-row", scheme, variant, clause)
its sim.trace.metrics.scheme_row with the variant's clause."""


def summarize(trace: Trace, metrics: Metrics, what: Summary) -> Any:
    """What a comparison keeps of one run (`what`: see Summary)."""
    if what[0] == "metrics":
        return metrics
    _, scheme, variant, clause = what
    return {**scheme_row(scheme, variant, trace, metrics), "variant_clause": clause}


def simulated(scenario: Scenario, profile: Any, what: Summary) -> Any:
    """Simulate `scenario` (on `profile` when given) and keep `what` of it."""
    trace = simulate(scenario, profile, player="recurrence")
    return summarize(trace, compute_metrics(trace), what)


def operations(scenario: Scenario) -> int:
    """The operations of the scenario's schedule, or 0 where its scheme does not count them."""
    count = get_scheme(scenario.scheme).count_ops
    return int(count(scenario)) if count is not None else 0


def apart(scenarios: Sequence[Scenario]) -> list[int]:
    """The positions of the runs worth a process of their own (APART_OPS; RUNNER_OPS where
    the server keeps runners): none unless two or more are and the machine has two or more
    cores."""
    least = RUNNER_OPS if runners.RUNNERS is not None else APART_OPS
    large = [i for i, sc in enumerate(scenarios) if operations(sc) >= least]
    return large if len(large) >= 2 and cores() >= 2 else []


def workers_for(scenarios: Sequence[Scenario]) -> int:
    """How many runs at once: the cores, the runs, and the memory the largest needs each
    (sim.engine.host_memory.BYTES_PER_OP) within what the system has available."""
    most = min(cores(), len(scenarios))
    free = available_memory_bytes()
    need = max(operations(sc) for sc in scenarios) * BYTES_PER_OP
    if free is not None and need > 0:
        most = min(most, max(1, free // need))
    return max(1, most)


def run_apart(jobs: Sequence[tuple[Scenario, Any, Summary]], done: Callable[[int, Any], None]) -> None:
    """Simulate each (scenario, profile, what) of `jobs` in worker processes and call
    `done(position, summary)` as each finishes; the first error is raised (a RingsimError
    as the run raised it). The largest runs go first, so that the last to start is a small
    one and the workers end together. The workers are the server's runners where it has
    them (dashboard/runners.py), else started for these runs; either way fresh interpreters
    (the server's processes hold threads that a forked copy would inherit mid-lock),
    running at WORKER_NICE, so that what the server does meanwhile (a comparison's small
    runs, the page's own run, another person's request) keeps its cores."""
    sizes = [operations(j[0]) for j in jobs]
    order = sorted(range(len(jobs)), key=lambda i: -sizes[i])
    most = workers_for([j[0] for j in jobs])
    if runners.RUNNERS is not None:
        order = runners.RUNNERS.run(jobs, order, most, done)
        if not order:
            return
    _spawned(jobs, order, most, done)


def _spawned(jobs: Sequence[tuple[Scenario, Any, Summary]], order: Sequence[int], most: int,
             done: Callable[[int, Any], None]) -> None:
    """run_apart's jobs in `order` on `most` worker processes started for them."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=most, mp_context=context,
                             initializer=lower_priority) as pool:
        futures = {pool.submit(simulated, *jobs[i]): i for i in order}
        try:
            for future in as_completed(futures):
                done(futures[future], future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            raise


WORKER_NICE = 5
"""How much lower than the server a comparison's worker process runs (os.nice): its runs
take the cores the server leaves; a request the server answers meanwhile is not slowed by
them."""


def lower_priority() -> None:
    try:
        os.nice(WORKER_NICE)
    except OSError:                     # a platform without nice: the worker runs as the server does
        pass
