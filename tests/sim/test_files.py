"""Writing a user's file (sim.files): published exclusively (of several processes writing
one path without --force exactly one wins, whole), --force replaces only a regular file,
and an output that cannot be written is refused before the command does any work."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest

import sim.files as files
from sim.cli.main import main
from sim.errors import RingsimError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one_line_error(capsys, argv) -> str:
    code = main([str(x) for x in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ringsim: error: ") and "Traceback" not in err, err
    return lines[0]


def leftovers(folder) -> list[str]:
    """Temporary files a write left behind."""
    return [n for n in os.listdir(folder) if n.startswith(".tmp-")]


# --- exclusive publication ------------------------------------------------------------------

def test_a_new_file_is_written_whole_and_an_existing_one_kept(tmp_path):
    out = tmp_path / "t.json"
    files.write_json(out, {"a": 1})
    assert out.read_bytes() == b'{"a":1}'
    with pytest.raises(RingsimError, match="exists; pass --force"):
        files.write_json(out, {"a": 2})
    assert out.read_bytes() == b'{"a":1}'
    files.write_json(out, {"a": 3}, overwrite=True)
    assert out.read_bytes() == b'{"a":3}'
    assert leftovers(tmp_path) == []


def test_a_file_made_between_the_check_and_the_publication_is_not_overwritten(tmp_path, monkeypatch):
    """The race of a check followed by a rename: another writer creates the name after
    this one checked it. The publication must fail, and the other's file stay."""
    out = tmp_path / "t.json"
    real = files._new_temporary

    def other_writer_gets_there_first(folder, name):
        got = real(folder, name)
        if not out.exists():
            out.write_bytes(b"theirs")
        return got

    monkeypatch.setattr(files, "_new_temporary", other_writer_gets_there_first)
    with pytest.raises(RingsimError, match="exists; pass --force"):
        files.write_bytes(out, b"mine")
    assert out.read_bytes() == b"theirs"
    assert leftovers(tmp_path) == []


def test_without_hard_links_the_name_is_claimed_exclusively(tmp_path, monkeypatch):
    import errno

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    out = tmp_path / "t.bin"
    files.write_bytes(out, b"first")
    assert out.read_bytes() == b"first"
    with pytest.raises(RingsimError, match="exists"):
        files.write_bytes(out, b"second")
    assert out.read_bytes() == b"first"
    files.write_bytes(out, b"third", overwrite=True)
    assert out.read_bytes() == b"third"
    assert leftovers(tmp_path) == []


WRITER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {root!r})
    from sim.errors import RingsimError
    from sim.files import write_bytes
    me, path, go = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    data = bytes([65 + me]) * (4 << 20)
    while not os.path.exists(go):
        time.sleep(0.0005)
    try:
        write_bytes(path, data)
    except RingsimError as e:
        print(f"ringsim: error: {{e}}", file=sys.stderr)
        sys.exit(2)
""")


def test_of_processes_writing_one_path_exactly_one_wins_whole(tmp_path):
    """Four processes released together write 4 MB each to one path, five rounds: one
    exits 0, the others 2 with one line, and the file is the winner's, whole."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(root=ROOT))
    for round_ in range(5):
        out, go = tmp_path / f"out{round_}.bin", tmp_path / f"go{round_}"
        procs = [subprocess.Popen([sys.executable, str(script), str(i), str(out), str(go)],
                                  stderr=subprocess.PIPE, text=True) for i in range(4)]
        time.sleep(0.5)           # every writer imported and spinning (or late: still one wins)
        go.touch()
        codes, errs = [], []
        for p in procs:
            _, err = p.communicate(timeout=120)
            codes.append(p.returncode)
            errs.append(err)
        assert sorted(codes) == [0, 2, 2, 2], errs
        winner = codes.index(0)
        assert out.read_bytes() == bytes([65 + winner]) * (4 << 20)
        for code, err in zip(codes, errs):
            if code == 2:
                assert err.strip().count("\n") == 0 and "exists; pass --force" in err
        assert leftovers(tmp_path) == []


# --- what --force replaces ------------------------------------------------------------------

def test_force_refuses_a_fifo_a_folder_and_links_to_them(tmp_path):
    fifo, folder = tmp_path / "fifo", tmp_path / "folder"
    os.mkfifo(fifo)
    folder.mkdir()
    (tmp_path / "to-fifo").symlink_to(fifo)
    (tmp_path / "to-folder").symlink_to(folder)
    for path, says in ((fifo, "not a regular file"), (folder, "is a folder"),
                       (tmp_path / "to-fifo", "not a regular file"), (tmp_path / "to-folder", "is a folder")):
        with pytest.raises(RingsimError, match=says) as e:
            files.write_bytes(path, b"x", overwrite=True)
        assert str(path) in str(e.value) and "\n" not in str(e.value)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and folder.is_dir() and os.listdir(folder) == []
    assert os.path.islink(tmp_path / "to-fifo") and os.path.islink(tmp_path / "to-folder")
    assert leftovers(tmp_path) == []


def test_force_replaces_a_link_to_a_regular_file_and_a_dangling_one(tmp_path):
    target = tmp_path / "target"
    target.write_bytes(b"old")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    files.write_bytes(tmp_path / "link", b"new", overwrite=True)
    assert (tmp_path / "link").read_bytes() == b"new" and not os.path.islink(tmp_path / "link")
    assert target.read_bytes() == b"old"
    with pytest.raises(RingsimError, match="exists"):
        files.write_bytes(tmp_path / "dangling", b"x")
    files.write_bytes(tmp_path / "dangling", b"x", overwrite=True)
    assert (tmp_path / "dangling").read_bytes() == b"x"


def test_the_systems_own_files_are_never_written():
    """Only checks, which read: /dev/null stays the device it is."""
    before = os.stat("/dev/null")
    for path in ("/dev/null", "/dev/ringsim-new.json", "/proc/ringsim.parquet", "/sys/ringsim.json"):
        why = files.output_problem(path, overwrite=True)
        assert why is not None and path in why and "\n" not in why
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_simulate_force_onto_a_fifo_is_one_line(tmp_path, capsys, monkeypatch):
    import sim.engine.play as play

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(play, "simulate", lambda *a, **k: pytest.fail("simulated before checking --trace"))
    line = one_line_error(capsys, ["simulate", "--gpus", "4", "--seq", "8k", "--trace", fifo, "--force"])
    assert "not a regular file" in line and str(fifo) in line
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


# --- checked before any work ----------------------------------------------------------------

@pytest.mark.parametrize("where", ["missing", "system", "unwritable"])
def test_an_output_that_cannot_be_written_is_refused_first(tmp_path, where):
    if where == "missing":
        path, says = tmp_path / "no" / "such" / "t.json", "does not exist"
    elif where == "system":
        path, says = "/proc/x.parquet", "system"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a folder whatever its mode")
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        path, says = locked / "t.json", "not writable"
    with pytest.raises(RingsimError, match=says):
        files.check_output(path)


def test_an_empty_name_or_a_folders_name_is_refused(tmp_path):
    for path, says in (("", "empty"), (str(tmp_path) + os.sep, "names a folder"), (tmp_path, "is a folder")):
        with pytest.raises(RingsimError, match=says):
            files.check_output(path, overwrite=True)


def test_sweep_out_in_proc_is_refused_before_the_spec_is_read(tmp_path, capsys, monkeypatch):
    import sim.planning.spec as spec_mod

    spec = tmp_path / "s.toml"
    spec.write_text('gpus = [2, 4]\nseq = "8k"\n')
    monkeypatch.setattr(spec_mod, "load_spec", lambda *a: pytest.fail("spec read before --out was checked"))
    line = one_line_error(capsys, ["sweep", spec, "--out", "/proc/x.parquet"])
    assert "/proc/x.parquet" in line
    line = one_line_error(capsys, ["sweep", spec, "--out", tmp_path / "none" / "r.csv"])
    assert "does not exist" in line
    (tmp_path / "d.csv").mkdir()
    assert "is a folder" in one_line_error(capsys, ["sweep", spec, "--out", tmp_path / "d.csv"])


@pytest.mark.parametrize("command", [
    ["simulate", "--gpus", "4", "--seq", "8k", "--trace"],
    ["simulate", "--gpus", "4", "--seq", "8k", "--chrome-trace"],
    ["step", "--model", "llama3-8b", "--gpus", "8", "--seq", "8k", "--global-batch", "64k", "--tp", "8", "--trace"],
])
def test_simulate_and_step_check_their_traces_before_simulating(tmp_path, capsys, monkeypatch, command):
    import sim.cli.step as step_cli
    import sim.engine.play as play

    monkeypatch.setattr(play, "simulate", lambda *a, **k: pytest.fail("simulated before the check"))
    monkeypatch.setattr(step_cli, "simulate_step", lambda *a, **k: pytest.fail("simulated before the check"))
    kept = tmp_path / "kept.json"
    kept.write_text("mine")
    assert "exists; pass --force" in one_line_error(capsys, [*command, kept])
    assert kept.read_text() == "mine"
    assert "does not exist" in one_line_error(capsys, [*command, tmp_path / "no" / "t.json"])
    assert "system" in one_line_error(capsys, [*command, "/proc/t.json", "--force"])


def test_trace_import_checks_out_before_reading(tmp_path, capsys, monkeypatch):
    import sim.cli.trace as trace_cli

    monkeypatch.setattr(trace_cli, "read_run", lambda *a, **k: pytest.fail("read before --out was checked"))
    line = one_line_error(capsys, ["trace", "import", tmp_path, "--out", "/proc/t.parquet"])
    assert "/proc/t.parquet" in line


def test_calibrate_and_validate_check_their_outputs_before_reading(tmp_path, capsys):
    missing = tmp_path / "missing.json"     # never read: the output is refused first
    for argv in (["calibrate", missing, "-o", "/proc/p.json"],
                 ["calibrate", "--from-traces", missing, "-o", tmp_path / "no" / "p.json"],
                 ["validate", "--profile", missing, "--out", "/proc/r.json"],
                 ["validate", "--profile", missing, "--markdown", tmp_path / "no" / "r.md"],
                 ["validate", "--trace", missing, "--profile-out", "/proc/p.json"]):
        line = one_line_error(capsys, argv)
        assert "missing.json" not in line, line


def test_hw_run_and_bench_check_their_outputs_before_running(tmp_path, capsys, monkeypatch):
    import hw.bench.command as bench_cmd
    import hw.launch as launch

    monkeypatch.setattr(launch, "run_config", lambda *a, **k: pytest.fail("ran before the check"))
    monkeypatch.setattr(bench_cmd, "plan_from_args", lambda *a, **k: pytest.fail("planned before the check"))
    assert "/proc" in one_line_error(capsys, ["hw", "run", "--gpus", "2", "--seq", "256", "--trace",
                                              "/proc/t.json"])
    kept = tmp_path / "r0.json"
    kept.write_text("mine")
    # with several repeats, the second's file is the one that exists
    line = one_line_error(capsys, ["hw", "run", "--gpus", "2", "--seq", "256", "--repeats", "2", "--trace",
                                   tmp_path / "r{i}.json"])
    assert "r0.json exists" in line and kept.read_text() == "mine"
    assert "/proc" in one_line_error(capsys, ["hw", "bench", "-o", "/proc/b.json", "--quick"])
