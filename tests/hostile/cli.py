"""The command line run in this process: argv in, (exit status, standard output, standard
error) out, as a user at a terminal would see them."""

from __future__ import annotations

import contextlib
import io

from sim.cli.main import main


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:      # --help and --version end through argparse
            rc = e.code if isinstance(e.code, int) else 0
    return rc, out.getvalue(), err.getvalue()


def assert_clean_refusal(rc: int, out: str, err: str) -> None:
    """Exit status 2 and exactly one line on standard error, no traceback."""
    assert rc == 2, (rc, out[-500:], err[-500:])
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("ringsim"), err
