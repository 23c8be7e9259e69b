"""bench/accuracy/step_published.py runs every published row through `ringsim step` and writes what
it printed: the rows, the commands that reproduce them, and the summary by GPU."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_published_row_runs_and_its_command_reproduces_it(tmp_path):
    out = tmp_path / "published.json"
    run = subprocess.run([sys.executable, "bench/accuracy/step_published.py", "--out", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    d = json.loads(out.read_text())
    rows = d["rows"]
    assert len(rows) == 21 and {r["source"] for r in rows} == {"torchtitan", "nemo"}
    for r in rows:
        assert r["ratio"] == r["simulated"] / r["published"] and r["simulated"] > 0
        assert r["gpus"] == r["tp"] * r["cp"] * r["pp"] * r["dp"]
    # a row's command, run again, gives its number
    row = next(r for r in rows if r["source"] == "nemo" and r["cp"] > 1)
    again = subprocess.run([sys.executable, "-m", "sim.cli.main", *row["command"].split()[1:]], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["tokens_per_s_per_gpu"] == row["simulated"]
    assert set(d["summary"]) == {"torchtitan on H100 at 500 W", "torchtitan on H200", "NeMo on DGX-H100"}
