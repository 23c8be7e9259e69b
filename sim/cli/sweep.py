"""`ringsim sweep SPEC --out RESULTS.parquet`: every configuration of a spec (sim.planning.spec)
simulated and tabulated (sim.planning.sweep), in this process or on Dask.

The spec's keys are `ringsim simulate`'s option names; any value may be a list or a
range. `--workers 1` (the default) runs in this process and needs no Dask; `--workers N`
starts a local Dask cluster of N single-threaded worker processes; `--scheduler
tcp://HOST:PORT` uses a running cluster (its workers need ringsim installed, and any
`profile` file at the same path). Running the same command again resumes: rows already
in the output are kept and not simulated again.
"""

from __future__ import annotations

import argparse
import signal

from sim.errors import RingsimError
from sim.files import check_output
from sim.units import fmt_s


def register(sub) -> None:
    p = sub.add_parser("sweep", help="simulate every configuration of a spec (YAML or TOML) into a "
                                     "Parquet or CSV table, in this process or on Dask")
    p.add_argument("spec", metavar="SPEC", help="YAML (.yaml, .yml) or TOML (.toml): simulate's options, "
                                                "each a value, a list or a range {from, to, step|times}")
    p.add_argument("--out", metavar="RESULTS",
                   help="results table, .parquet (needs pyarrow) or .csv; an existing one is resumed "
                        "(needed unless --dry-run)")
    p.add_argument("--format", choices=("parquet", "csv"), default=None,
                   help="table format (default: from the name of --out)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=1,
                       help="1 (default): in this process; N: a local Dask cluster of N worker "
                            "processes, one thread each")
    where.add_argument("--scheduler", metavar="tcp://HOST:PORT", default=None,
                       help="run on an existing Dask cluster")
    p.add_argument("--dask", action="store_true",
                   help="use a local Dask cluster even with one worker")
    p.add_argument("--batch-size", type=int, default=None,
                   help="configurations per Dask task (default: about 16 tasks per worker, at most 256)")
    p.add_argument("--fresh", action="store_true", help="discard earlier results in --out and start over")
    p.add_argument("--dry-run", action="store_true",
                   help="print how many configurations the spec makes and the first few commands")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_sweep)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def cmd_sweep(a: argparse.Namespace) -> int:
    # the sweep runner and the engine's player load when `sweep` runs, not on every start
    from sim.planning.results import format_of, read_rows
    from sim.planning.spec import load_spec
    from sim.planning.sweep import Runner, sweep, unique

    if not a.out and not a.dry_run:
        raise RingsimError("sweep needs --out RESULTS (.parquet or .csv): where the rows go")
    if a.out and not a.dry_run:
        # the output is read (resumed) and rewritten: checked before the spec is expanded
        format_of(a.out, a.format)
        check_output(a.out, resumes=True)
    spec = load_spec(a.spec)
    if a.dry_run:
        configs = unique(spec.configs())
        print(f"{spec.size} combinations, {len(configs)} distinct configurations "
              f"({' x '.join(str(len(v)) for _, v in spec.axes)})")
        for c in configs[:5]:
            print("  " + c.command)
        if len(configs) > 5:
            print(f"  ... {len(configs) - 5} more")
        return 0
    if a.scheduler is not None and not a.scheduler.strip():
        raise RingsimError("--scheduler needs an address such as tcp://HOST:8786")
    runner = Runner(workers=a.workers, scheduler=a.scheduler, dask=a.dask, batch_size=a.batch_size)
    configs = list(spec.configs())
    if not a.quiet:
        print(f"sweep of {spec.size} configurations on {runner.describe()} into {a.out}")
    # a batch system's SIGTERM (a job past its time) ends the sweep as Ctrl-C does: the
    # rows that finished are merged into the output before the process goes
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        r = sweep(configs, a.out, runner=runner, fmt=a.format, fresh=a.fresh, quiet=a.quiet)
    finally:
        signal.signal(signal.SIGTERM, previous)
    rate = f", {r.ran / r.elapsed_s:.1f} configurations/s" if r.ran and r.elapsed_s > 0 else ""
    print(f"{r.rows} rows in {a.out}: {r.ran} simulated ({r.failed} failed), {r.skipped} already there; "
          f"{r.elapsed_s:.1f} s{rate}")
    if r.failed:
        print("a failed row has its error in the `error` column and its `command` to rerun it alone")
    seeds = dict(spec.axes).get("seed", ())
    if len(seeds) > 1:
        print()
        print(seed_summary(read_rows(a.out, a.format), [d for d, v in spec.axes if d != "seed" and len(v) > 1],
                           seeds))
    return 0


SEED_METRICS = (("work_imbalance", "work max/mean"), ("busiest_tflop", "busiest GPU TFLOP"),
                ("load_imbalance", "compute max/mean"), ("makespan_s", "makespan"))
"""What the seed summary gives, mean and worst, over the seeds of each configuration."""


def seed_summary(rows: list[dict], keys: list[str], seeds) -> str:
    """A table of the sweep's configurations over their drawn batches of documents: per
    combination of the other varying options, each metric's mean and worst (highest)
    over the seeds."""
    groups: dict[tuple, list[dict]] = {}
    wanted = set(seeds)
    for row in rows:
        if row.get("seed") in wanted and row.get("makespan_s") is not None:
            groups.setdefault(tuple(row.get(k) for k in keys), []).append(row)
    head = [k.rstrip("_") for k in keys] + ["seeds"] + [f"{label} {x}" for _, label in SEED_METRICS
                                                         for x in ("mean", "worst")]
    lines = []
    for combo, rs in groups.items():
        cells = [str(v) for v in combo] + [str(len(rs))]
        for name, _ in SEED_METRICS:
            vals = [float(r[name]) if name in r else
                    # the busiest GPU's work: its share of the total, as the kernel counts it
                    float(r["work_imbalance"]) * float(r["total_flops"]) / int(r["gpus"]) / 1e12 for r in rs]
            mean, worst = sum(vals) / len(vals), max(vals)
            cells += [fmt_s(mean), fmt_s(worst)] if name.endswith("_s") else [f"{mean:.3f}", f"{worst:.3f}"]
        lines.append(cells)
    widths = [max(len(h), *(len(x[i]) for x in lines)) if lines else len(h) for i, h in enumerate(head)]
    out = [f"over {len(wanted)} seeds (documents drawn again for each): mean and worst",
           "  ".join(h.ljust(w) for h, w in zip(head, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(cells, widths)) for cells in lines]
    return "\n".join(out)
