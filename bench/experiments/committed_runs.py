"""A CPU calibration run's files as committed with it (`git show COMMIT:PATH`), for the
experiments that read earlier runs again: its microbenchmarks, profile and validation
reports. Runs now lie in bench/results/calibration/cpu-2core/ under the names
bench/calibration/calibrate_cpu.sh gives them; runs 1-106 were committed before bench/ was
arranged by purpose, in bench/results/ under their earlier names, and are read there."""

from __future__ import annotations

import json
import subprocess

from sim.errors import RingsimError

RUN_DIR = "bench/results/calibration/cpu-2core"
EARLIER = {"microbenchmarks.json": "bench/results/cpu-bench.json",
           "profile.json": "bench/results/cpu-profile.json",
           "validation-ring.json": "bench/results/validation-quick.json",
           "validation-allgather-ulysses.json": "bench/results/validation-quick-schemes.json"}
"""Each file's path in the runs committed before the arrangement by purpose."""


def committed_file(commit: str, name: str) -> tuple[str, dict]:
    """(`COMMIT:PATH`, the JSON) of the run file `name` (a key of EARLIER) committed at `commit`."""
    tried = []
    for path in (f"{RUN_DIR}/{name}", EARLIER[name]):
        run = subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True)
        if run.returncode == 0:
            return f"{commit}:{path}", json.loads(run.stdout)
        tried.append(run.stderr.strip())
    raise RingsimError(f"git show {commit}: no {name} ({'; '.join(tried)})")
