"""A sweep never drops a column it did not write: a user's own columns of an existing
results file (CSV or Parquet) stay, each value with its row, when the sweep resumes or
adds rows; a fresh sweep, which would drop them with their rows, refuses the file."""

from __future__ import annotations

import csv

import pytest

from sim.cli.main import main
from sim.errors import RingsimError
from sim.planning.results import column_names, read_rows
from sim.planning.spec import Spec
from sim.planning.sweep import sweep

SMALL = {"gpus": [2, 4], "seq": ["4k", 8192], "scheme": "ring", "heads": 8}
"""4 configurations, each a few milliseconds."""


def configs(**over):
    return list(Spec.from_dict({**SMALL, **over}).configs())


def add_note_csv(path, notes: dict[str, str]) -> None:
    """The user's edit: a column `note` (and `owner` before ringsim's) on their rows."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
        names = list(rows[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, ["owner", *names, "note"])
        w.writeheader()
        for r in rows:
            w.writerow({"owner": "me", **r, "note": notes.get(r["key"], "")})


def test_a_csv_keeps_the_users_columns_when_rows_are_added(tmp_path):
    out = str(tmp_path / "keyed.csv")
    first = configs(gpus=[2])
    sweep(first, out, quiet=True)
    notes = {c.key: f"checked, {i}" for i, c in enumerate(first)}
    add_note_csv(out, notes)
    r = sweep(configs(), out, quiet=True)                      # resumed: 2 kept, 2 added
    assert (r.skipped, r.ran, r.rows) == (2, 2, 4)
    with open(out, newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == [*column_names(), "owner", "note"]
        rows = {x["key"]: x for x in reader}
    for c in configs():
        assert rows[c.key]["note"] == notes.get(c.key, "")
        assert rows[c.key]["owner"] == ("me" if c.key in notes else "")
    # ringsim's own columns read as before
    assert [x["key"] for x in read_rows(out)] == [c.key for c in configs()]
    # run again with nothing to do: still there
    sweep(configs(), out, quiet=True)
    with open(out, newline="") as f:
        assert {x["key"]: x["note"] for x in csv.DictReader(f)} == {c.key: notes.get(c.key, "") for c in configs()}


def test_a_parquet_keeps_the_users_columns_when_rows_are_added(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = str(tmp_path / "keyed.parquet")
    sweep(configs(gpus=[2]), out, quiet=True)
    table = pq.read_table(out)
    table = table.append_column("note", pa.array(["a", "b"])).append_column("score", pa.array([1.5, 2.5]))
    pq.write_table(table, out)
    sweep(configs(), out, quiet=True)
    got = pq.read_table(out)
    assert got.column_names == [*column_names(), "note", "score"]
    by_key = {k: (n, s) for k, n, s in zip(*(got.column(c).to_pylist() for c in ("key", "note", "score")))}
    keys = [c.key for c in configs(gpus=[2])]
    assert by_key[keys[0]] == ("a", 1.5) and by_key[keys[1]] == ("b", 2.5)
    assert sum(1 for v in by_key.values() if v == (None, None)) == 2


@pytest.mark.parametrize("name", ["keyed.csv", "keyed.parquet"])
def test_a_fresh_sweep_refuses_a_file_with_the_users_columns(tmp_path, capsys, name):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / name
    sweep(configs(gpus=[2]), str(out), quiet=True)
    if name.endswith(".csv"):
        add_note_csv(out, {})
    else:
        pq.write_table(pq.read_table(out).append_column("note", pa.array(["x", "y"])), out)
    before = out.read_bytes()
    with pytest.raises(RingsimError, match="columns ringsim did not write"):
        sweep(configs(), str(out), quiet=True, fresh=True, simulate=lambda v: pytest.fail("simulated"))
    assert out.read_bytes() == before
    spec = tmp_path / "s.toml"
    spec.write_text('gpus = [2, 4]\nseq = "8k"\n')
    assert main(["sweep", str(spec), "--out", str(out), "--fresh", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "note" in err and "Traceback" not in err
    assert out.read_bytes() == before


def test_a_fresh_sweep_replaces_its_own_file_only_at_the_end(tmp_path):
    """--fresh forgets the old rows, but the file stays whole until the new one is written."""
    out = str(tmp_path / "r.csv")
    sweep(configs(gpus=[2]), out, quiet=True)
    before = open(out).read()
    seen = []

    def looking(values):
        seen.append(open(out).read())
        from sim.planning.sweep import simulate_config
        return simulate_config(values)

    r = sweep(configs(gpus=[4]), out, quiet=True, fresh=True, simulate=looking)
    assert all(s == before for s in seen) and (r.ran, r.rows) == (2, 2)
    assert [x["key"] for x in read_rows(out)] == [c.key for c in configs(gpus=[4])]


def test_a_csv_the_sweep_cannot_rewrite_whole_is_refused(tmp_path):
    out = tmp_path / "r.csv"
    sweep(configs(gpus=[2]), str(out), quiet=True)
    text = out.read_text().splitlines()
    out.write_text("\n".join([text[0] + ",note,note", *(t + ",a,b" for t in text[1:])]) + "\n")
    with pytest.raises(RingsimError, match="two columns named 'note'"):
        sweep(configs(), str(out), quiet=True)
    out.write_text("\n".join([text[0], text[1] + ",extra", *text[2:]]) + "\n")
    with pytest.raises(RingsimError, match="more values than the header"):
        sweep(configs(), str(out), quiet=True)
