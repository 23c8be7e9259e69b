"""The README's tour shows what its commands print: each block that starts with
`$ .venv/bin/ringsim ...` is run, and its lines (pieces of the output, where a line `...`
stands for lines left out) must be the command's own, in order."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "$ .venv/bin/ringsim "


def shown_runs(text: str) -> list[tuple[str, list[list[str]]]]:
    """(the command's arguments, the pieces of output shown) of each block that runs ringsim."""
    out, blocks, inside = [], [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            inside = not inside
            if inside:
                blocks.append([])
        elif inside:
            blocks[-1].append(line)
    for lines in blocks:
        if not lines or not lines[0].startswith(PROMPT):
            continue
        pieces: list[list[str]] = [[]]
        for line in lines[1:]:
            if line == "...":
                pieces.append([])
            else:
                pieces[-1].append(line)
        out.append((lines[0][len(PROMPT):], [p for p in pieces if p]))
    return out


def test_the_readme_shows_commands_with_their_output():
    assert len(shown_runs((ROOT / "README.md").read_text())) >= 5


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


@pytest.mark.parametrize("args,pieces", shown_runs((ROOT / "README.md").read_text()),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_a_readme_command_prints_what_the_readme_shows(args, pieces):
    run = subprocess.run([sys.executable, "-m", "sim.cli.main", *shlex.split(args)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    printed = [line.rstrip() for line in run.stdout.splitlines()]
    missing = _found_in_order(pieces, printed)
    assert missing is None, f"README shows lines `ringsim {args}` does not print:\n{missing}"


def test_pieces_are_found_only_in_order_and_whole():
    printed = ["a", "b", "c", "d"]
    assert _found_in_order([["a", "b"], ["d"]], printed) is None
    assert _found_in_order([["b", "d"]], printed) == "b\nd"          # not consecutive
    assert _found_in_order([["c"], ["a"]], printed) == "a"           # not in order
    assert _found_in_order([["b x"]], printed) == "b x"              # a line changed
