"""ringsim sweep: spec expansion, rows against `ringsim simulate` run alone, failures,
resuming, Ctrl-C, CSV, the plain install without Dask, and a real 2-worker Dask cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from sim.cli.main import main
from sim.errors import RingsimError
from sim.planning.results import read_rows
from sim.planning.spec import Spec, expand_range, load_spec
from sim.planning.sweep import Runner, simulate_config, sweep
from sim.units import parse_count

SMALL = {"gpus": [2, 4], "seq": ["4k", 8192], "scheme": ["ring", "ulysses"], "heads": 8, "kv-heads": 4}
"""8 configurations, each a few milliseconds."""


def simulate_json(capsys, command: str) -> dict:
    argv = command.split()[1:] + ["--json"]
    assert argv[0] == "simulate"
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


# --- sizes and specs ------------------------------------------------------------------------

def test_sizes_are_binary():
    assert parse_count("1M") == 1048576 == 2 ** 20
    assert parse_count("128k") == 131072
    assert parse_count("1.5M") == 1572864
    assert parse_count("2G") == 2 ** 31
    assert parse_count(65536) == 65536
    for bad in ("1X", "0", "-5", "0.3k", "", "M", True):
        with pytest.raises(RingsimError):
            parse_count(bad)


def test_expansion_is_the_product_of_the_lengths_last_key_fastest():
    spec = Spec.from_dict({"gpus": [8, 16, 32], "seq": [65536, 131072], "scheme": ["ring", "ulysses"],
                           "layout": "zigzag"})
    assert spec.size == 3 * 2 * 2 * 1
    configs = list(spec.configs())
    assert len(configs) == 12
    assert configs[0].command == "ringsim simulate --gpus 8 --seq 65536 --scheme ring --layout zigzag"
    assert configs[1].command == "ringsim simulate --gpus 8 --seq 65536 --scheme ulysses --layout zigzag"
    assert configs[2].command == "ringsim simulate --gpus 8 --seq 131072 --scheme ring --layout zigzag"
    assert len({c.key for c in configs}) == 12


@pytest.mark.parametrize("spec,values", [
    ({"from": 8, "to": 64, "step": 8}, [8, 16, 24, 32, 40, 48, 56, 64]),      # inclusive of `to`
    ({"from": 8, "to": 60, "step": 8}, [8, 16, 24, 32, 40, 48, 56]),          # stops before passing it
    ({"from": 8, "to": 64, "times": 2}, [8, 16, 32, 64]),
    ({"from": 64, "to": 8, "step": -16}, [64, 48, 32, 16]),
    ({"from": 0.1, "to": 0.5, "step": 0.1}, [0.1, 0.2, 0.3, 0.4, 0.5]),
])
def test_ranges_include_both_ends(spec, values):
    assert expand_range("x", spec) == values


def test_ranges_multiply_with_lists():
    spec = Spec.from_dict({"gpus": {"from": 2, "to": 16, "times": 2}, "seq": ["64k", "128k", "256k"],
                           "causal": [True, False]})
    assert spec.size == 4 * 3 * 2


@pytest.mark.parametrize("raw,match", [
    ({"gpus": [8], "bogus": 1}, "unknown option 'bogus'"),
    ({"json": True}, "writes output"),
    ({"layout": ["zigzag", "spiral"]}, "layout value must be one of"),
    ({"kv-heads": 8, "kv_heads": 4}, "sets kv-heads twice"),
    ({"gpus": []}, "empty list"),
    ({"gpus": {"from": 8, "to": 1, "step": 2}}, "never reaches"),
    ({"causal": "maybe"}, "true or false"),
    ([1, 2], "mapping"),
])
def test_bad_specs_are_one_line_errors(raw, match):
    with pytest.raises(RingsimError, match=match):
        Spec.from_dict(raw)


def test_toml_and_yaml_specs_read_alike(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text('gpus = [8, 16]\nseq = ["64k", 131072]\nscheme = ["ring", "ulysses"]\n'
                    'tile = {from = 64, to = 256, times = 2}\ncausal = [true, false]\n')
    yaml = tmp_path / "s.yaml"
    yaml.write_text("gpus: [8, 16]\nseq: [64k, 131072]\nscheme: [ring, ulysses]\n"
                    "tile: {from: 64, to: 256, times: 2}\ncausal: [true, false]\n")
    a, b = load_spec(str(toml)), load_spec(str(yaml))
    assert a == b and a.size == 2 * 2 * 2 * 3 * 2
    (tmp_path / "bad.toml").write_text("gpus = [8,\n")
    with pytest.raises(RingsimError, match="not valid TOML"):
        load_spec(str(tmp_path / "bad.toml"))
    with pytest.raises(RingsimError, match="toml, .yaml or .yml"):
        load_spec(str(tmp_path / "s.json"))


def test_two_spellings_of_one_configuration_share_a_key():
    a = list(Spec.from_dict({"seq": "128k"}).configs())[0]
    b = list(Spec.from_dict({"seq": 131072, "gpus": 8}).configs())[0]   # 8 is the default
    assert a.key == b.key and a.command != b.command


# --- rows -----------------------------------------------------------------------------------

def test_rows_match_simulate_run_alone(tmp_path, capsys):
    out = tmp_path / "r.parquet"
    r = sweep(list(Spec.from_dict(SMALL).configs()), str(out), quiet=True)
    assert (r.total, r.ran, r.skipped, r.failed, r.rows) == (8, 8, 0, 0, 8)
    rows = read_rows(str(out))
    assert len(rows) == 8
    for row in rows:
        d = simulate_json(capsys, row["command"])
        assert row["makespan_s"] == d["makespan_s"]
        assert row["efficiency"] == d["efficiency"]
        assert row["load_imbalance"] == d["load_imbalance"]
        assert row["bytes_per_gpu"] == max(d["bytes_sent"])
        assert row["peak_mem_bytes"] == max(x["peak_mem_bytes"] for x in d["ranks"])
        assert row["exposed_comm_s"] == max(x["exposed_comm_s"] for x in d["ranks"])
        assert row["error"] is None and row["fits"] is True
        assert (row["gpus"], row["heads"], row["kv_heads"]) == (d["scenario"]["n_gpus"], 8, 4)


def test_a_failing_configuration_gets_its_error_and_the_sweep_goes_on(tmp_path):
    # ulysses on 16 GPUs cannot split 8 heads; 12300 tokens do not cut into zigzag's 32 chunks
    spec = Spec.from_dict({"gpus": [2, 16], "seq": [12300, 16384], "scheme": ["ring", "ulysses"],
                           "heads": 8, "kv-heads": 4})
    out = tmp_path / "r.csv"
    r = sweep(list(spec.configs()), str(out), quiet=True)
    rows = {(x["gpus"], x["seq"], x["scheme"]): x for x in read_rows(str(out))}
    assert len(rows) == 8
    assert "does not divide the 8 query heads" in rows[(16, 16384, "ulysses")]["error"]
    assert "does not divide into 32 equal chunks" in rows[(16, 12300, "ring")]["error"]
    for key in [(2, 12300, "ring"), (2, 16384, "ulysses"), (16, 16384, "ring")]:
        assert rows[key]["error"] is None and rows[key]["makespan_s"] > 0
    failed = [x for x in rows.values() if x["error"]]
    assert all("\n" not in x["error"] and x["makespan_s"] is None for x in failed)
    assert r.failed == len(failed) == 3


def test_a_resumed_sweep_simulates_only_the_new_configurations(tmp_path):
    calls = []

    def counting(values):
        calls.append(dict(values))
        return simulate_config(values)

    out = str(tmp_path / "r.parquet")
    first = {**SMALL, "gpus": [2]}                                   # 4 of the 8
    sweep(list(Spec.from_dict(first).configs()), out, quiet=True, simulate=counting)
    assert len(calls) == 4
    calls.clear()
    r = sweep(list(Spec.from_dict(SMALL).configs()), out, quiet=True, simulate=counting)
    assert len(calls) == 4 and all(values["gpus"] == 4 for values in calls)
    assert (r.skipped, r.ran, r.rows) == (4, 4, 8)
    calls.clear()
    sweep(list(Spec.from_dict(SMALL).configs()), out, quiet=True, simulate=counting)
    assert calls == []
    # rows in the order of the expansion, whatever order they were simulated in
    expected = [c.key for c in Spec.from_dict(SMALL).configs()]
    assert [x["key"] for x in read_rows(out)] == expected
    sweep(list(Spec.from_dict(SMALL).configs()), out, quiet=True, simulate=counting, fresh=True)
    assert len(calls) == 8


def test_ctrl_c_leaves_a_valid_partial_file_and_a_rerun_finishes(tmp_path):
    import pyarrow.parquet as pq

    calls = []

    def interrupted_at_the_fourth(values):
        calls.append(values)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return simulate_config(values)

    out = str(tmp_path / "r.parquet")
    configs = list(Spec.from_dict(SMALL).configs())
    with pytest.raises(KeyboardInterrupt):
        sweep(configs, out, quiet=True, simulate=interrupted_at_the_fourth)
    table = pq.read_table(out)
    assert table.num_rows == 3
    assert not os.path.exists(out + ".parts")
    calls.clear()
    r = sweep(configs, out, quiet=True, simulate=lambda values: calls.append(values) or simulate_config(values))
    assert len(calls) == 5 and r.rows == 8


def test_parts_a_killed_run_left_are_picked_up(tmp_path):
    from sim.planning.results import ResultsFile
    from sim.planning.sweep import row_of

    out = str(tmp_path / "r.parquet")
    configs = list(Spec.from_dict(SMALL).configs())
    results = ResultsFile(out)
    results.add([row_of(c, simulate_config(c.values)) for c in configs[:2]])
    results.flush()                 # as a run killed after its first part would leave it
    assert not os.path.exists(out)
    calls = []
    r = sweep(configs, out, quiet=True, simulate=lambda values: calls.append(values) or simulate_config(values))
    assert (len(calls), r.skipped, r.rows) == (6, 2, 8)


def test_csv_and_parquet_hold_the_same_rows(tmp_path):
    configs = list(Spec.from_dict(SMALL).configs())
    sweep(configs, str(tmp_path / "r.csv"), quiet=True)
    sweep(configs, str(tmp_path / "r.parquet"), quiet=True)
    assert read_rows(str(tmp_path / "r.csv")) == read_rows(str(tmp_path / "r.parquet"))


def test_the_command_line(tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text('gpus = [2, 4]\nseq = "8k"\nlayout = ["striped", "zigzag"]\n')
    out = tmp_path / "r.parquet"
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 0
    assert "4 rows" in capsys.readouterr().out
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 0
    assert "0 simulated (0 failed), 4 already there" in capsys.readouterr().out
    assert main(["sweep", str(spec), "--out", str(out), "--dry-run"]) == 0
    assert "4 combinations" in capsys.readouterr().out
    for argv, match in [(["sweep", str(tmp_path / "none.toml"), "--out", str(out)], "cannot read"),
                        (["sweep", str(spec), "--out", str(tmp_path / "r.txt")], ".parquet or .csv"),
                        (["sweep", str(spec), "--out", str(tmp_path / "no" / "r.csv")], "does not exist"),
                        (["sweep", str(spec), "--out", str(out), "--workers", "0"], "--workers")]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1


def test_without_dask_workers_1_runs_in_process(tmp_path):
    """The plain install: no dask, distributed, pyarrow or yaml importable."""
    spec = tmp_path / "s.toml"
    spec.write_text('gpus = [2, 4]\nseq = "8k"\n')
    script = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("dask", "distributed", "pyarrow", "yaml"):
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        sys.meta_path.insert(0, Block())
        from sim.cli.main import main
        codes = [main(["sweep", {str(spec)!r}, "--out", {str(tmp_path / "r.csv")!r}, "--quiet"]),
                 main(["sweep", {str(spec)!r}, "--out", {str(tmp_path / "r.parquet")!r}, "--quiet"]),
                 main(["sweep", {str(spec)!r}, "--out", {str(tmp_path / "s.csv")!r}, "--workers", "2"])]
        print(codes, "distributed" in sys.modules, file=sys.stderr)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "[0, 2, 2] False" in p.stderr
    assert "Parquet needs pyarrow" in p.stderr and "needs Dask" in p.stderr
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 3


@pytest.mark.slow
def test_a_two_worker_dask_cluster_gives_the_in_process_rows(tmp_path):
    spec = Spec.from_dict({**SMALL, "gpus": [2, 4, 16], "layout": ["striped", "zigzag"]})
    configs = list(spec.configs())
    sweep(configs, str(tmp_path / "here.parquet"), quiet=True)
    r = sweep(configs, str(tmp_path / "dask.parquet"), quiet=True, runner=Runner(workers=2, batch_size=3))
    assert r.ran == len(configs) == 24
    here, there = read_rows(str(tmp_path / "here.parquet")), read_rows(str(tmp_path / "dask.parquet"))
    assert len(here) == len(there) == 24
    assert sum(1 for x in here if x["error"]) == 4        # ulysses on 16 GPUs: 8 heads
    for a, b in zip(here, there):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == b[k], (a["command"], k)


def test_batches_keep_the_scheduler_from_flooding():
    from sim.planning.sweep import MAX_BATCH, auto_batch_size

    assert auto_batch_size(100_000, 2) == MAX_BATCH == 256        # 391 tasks for 100,000
    assert auto_batch_size(480, 2) == 15                          # 16 tasks per worker
    assert auto_batch_size(5, 8) == 1


@pytest.mark.slow
def test_an_existing_cluster_through_its_scheduler_address(tmp_path, capsys):
    import logging

    from distributed import LocalCluster

    spec = tmp_path / "s.yaml"
    spec.write_text("gpus: [2, 4]\nseq: 8k\nscheme: [ring, allgather]\n")
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster:
        assert main(["sweep", str(spec), "--out", str(tmp_path / "d.csv"), "--scheduler",
                     cluster.scheduler_address]) == 0
    assert f"on the Dask cluster at {cluster.scheduler_address}" in capsys.readouterr().out
    assert main(["sweep", str(spec), "--out", str(tmp_path / "here.csv"), "--quiet"]) == 0
    assert read_rows(str(tmp_path / "d.csv")) == read_rows(str(tmp_path / "here.csv"))


def test_an_output_that_is_not_a_sweep_result_is_refused(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = tmp_path / "s.toml"
    spec.write_text('gpus = [2, 4]\nseq = "8k"\n')
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "other.parquet")
    for name, match in (("junk.parquet", "cannot read the results"), ("other.parquet", "has no key column")):
        assert main(["sweep", str(spec), "--out", str(tmp_path / name), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1


def test_a_file_from_an_older_table_is_merged_into_the_current_columns(tmp_path):
    import pyarrow.parquet as pq

    configs = list(Spec.from_dict(SMALL).configs())
    out = str(tmp_path / "r.parquet")
    sweep(configs[:3], out, quiet=True)
    old = pq.read_table(out).drop_columns(["explanation"]).append_column("retired", [["x"] * 3])
    pq.write_table(old, out)
    r = sweep(configs, out, quiet=True)
    assert (r.skipped, r.ran) == (3, 5)
    table = pq.read_table(out)
    # a column the current table does not write is kept with its rows (never dropped)
    assert table.column("retired").to_pylist() == ["x"] * 3 + [None] * 5
    assert table.column("explanation").null_count == 3


def test_parts_a_killed_csv_run_left_are_picked_up(tmp_path):
    """As with Parquet: the CSV part files a killed run left are read on the rerun, which
    simulates only the rest and leaves one file with every row."""
    import csv

    from sim.planning.results import ResultsFile
    from sim.planning.sweep import row_of

    out = str(tmp_path / "r.csv")
    configs = list(Spec.from_dict(SMALL).configs())
    results = ResultsFile(out)
    results.add([row_of(c, simulate_config(c.values)) for c in configs[:3]])
    results.flush()                 # as a run killed after its first part would leave it
    assert not os.path.exists(out) and os.listdir(out + ".parts")
    calls = []
    r = sweep(configs, out, quiet=True, simulate=lambda values: calls.append(values) or simulate_config(values))
    assert (len(calls), r.skipped, r.rows) == (5, 3, 8)
    with open(out, newline="") as f:
        assert len(list(csv.DictReader(f))) == 8
    assert not os.path.exists(out + ".parts")
