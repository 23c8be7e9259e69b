"""The README and docs/ show what their commands print. A block whose first line starts with
`$ ` is a session; a page's sessions run in turn, in one empty folder (`ringsim` and
`.venv/bin/ringsim` being this tree's command line), so that a later one may read what an
earlier one wrote. The lines shown under each command must be lines it prints, in order,
where a line `...` stands for lines left out and a last line `(exit status N)` for how it
ends (else with 0). A `cat` of a file no command made shows a file the reader writes: it is
written from the lines shown."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXIT = re.compile(r"^\(exit status (\d+)\)$")


def sessions(text: str) -> list[list[tuple[str, list[list[str]], int]]]:
    """Each block that is a session: its commands, each with the pieces of output shown
    under it and the exit status it shows (0 where none)."""
    blocks, inside = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            inside = not inside
            if inside:
                blocks.append([])
        elif inside:
            blocks[-1].append(line.rstrip())
    out = []
    for lines in blocks:
        if not lines or not lines[0].startswith("$ "):
            continue
        steps: list[tuple[str, list[list[str]], int]] = []
        for line in lines:
            if line.startswith("$ "):
                steps.append((line[2:], [[]], 0))
                continue
            command, pieces, status = steps[-1]
            m = EXIT.match(line)
            if m:
                status = int(m.group(1))
            elif line == "...":
                pieces.append([])
            else:
                pieces[-1].append(line)
            steps[-1] = (command, pieces, status)
        out.append([(c, [p for p in pieces if p], s) for c, pieces, s in steps])
    return out


def cases() -> list:
    """A page's sessions, for each page that runs ringsim in one."""
    found = []
    for doc in DOCS:
        page = sessions(doc.read_text())
        if any("ringsim" in command for session in page for command, _, _ in session):
            found.append(pytest.param([step for session in page for step in session], id=str(doc.relative_to(ROOT))))
    return found


def _found_in_order(pieces: list[list[str]], printed: list[str]) -> str | None:
    """Where the pieces are not consecutive lines of `printed` in turn: the first piece
    missing, else None."""
    at = 0
    for piece in pieces:
        starts = [i for i in range(at, len(printed) - len(piece) + 1) if printed[i:i + len(piece)] == piece]
        if not starts:
            return "\n".join(piece)
        at = starts[0] + len(piece)
    return None


def _shims(folder: Path, work: Path) -> dict[str, str]:
    """`ringsim` on the path (in `folder`) and `.venv/bin/ringsim` in `work`, both this
    tree's command line; the environment that finds them."""
    script = f"#!/bin/sh\nexec {sys.executable} -m sim.cli.main \"$@\"\n"
    for where in (folder / "bin", work / ".venv" / "bin"):
        where.mkdir(parents=True)
        (where / "ringsim").write_text(script)
        (where / "ringsim").chmod(stat.S_IRWXU)
    return {**os.environ, "PATH": f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}


def test_the_readme_and_the_command_line_page_show_sessions():
    assert [c.id for c in cases()] == ["README.md", "docs/cli.md"]


@pytest.mark.parametrize("steps", cases())
def test_a_page_s_sessions_print_what_the_page_shows(tmp_path, steps):
    work = tmp_path / "work"
    work.mkdir()
    env = _shims(tmp_path, work)
    for command, pieces, status in steps:
        given = re.fullmatch(r"cat (\S+)", command)
        if given and not (work / given.group(1)).exists() and len(pieces) == 1:
            (work / given.group(1)).write_text("\n".join(pieces[0]) + "\n")     # a file the reader writes
        run = subprocess.run(["bash", "-c", command + " 2>&1"], cwd=work, env=env, capture_output=True, text=True,
                             timeout=300)
        printed = [line.rstrip() for line in run.stdout.splitlines()]
        assert run.returncode == status, f"`{command}` ended with {run.returncode}:\n{run.stdout[-2000:]}"
        missing = _found_in_order(pieces, printed)
        assert missing is None, f"the docs show lines `{command}` does not print:\n{missing}"


def test_pieces_are_found_only_in_order_and_whole():
    printed = ["a", "b", "c", "d"]
    assert _found_in_order([["a", "b"], ["d"]], printed) is None
    assert _found_in_order([["b", "d"]], printed) == "b\nd"          # not consecutive
    assert _found_in_order([["c"], ["a"]], printed) == "a"           # not in order
    assert _found_in_order([["b x"]], printed) == "b x"              # a line changed


def test_a_session_reads_its_commands_output_and_exit_status():
    text = "```\n$ ringsim a\none\n...\ntwo\n$ cat f\n(exit status 2)\n```\n```bash\nringsim b\n```\n"
    assert sessions(text) == [[("ringsim a", [["one"], ["two"]], 0), ("cat f", [], 2)]]
