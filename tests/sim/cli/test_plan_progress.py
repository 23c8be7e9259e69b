"""`ringsim plan`'s progress line (sim.cli.plan.progress_line): shown on a terminal or when
asked, not before the plan has run a while, rewritten at most a few times a second, with
the time left at the rate so far, and gone at the end."""

import io

import pytest

from sim.cli import plan as cli_plan


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(cli_plan.time, "monotonic", c)
    return c


def test_nothing_where_stderr_is_not_a_terminal_unless_asked():
    assert cli_plan.progress_line(io.StringIO()) is None
    assert cli_plan.progress_line(io.StringIO(), always=True) is not None
    assert cli_plan.progress_line(Terminal()) is not None


def test_the_line_waits_is_throttled_says_the_time_left_and_is_erased(clock):
    out = Terminal()
    show = cli_plan.progress_line(out)
    clock.now += 0.5
    show(10, 100)
    assert out.getvalue() == ""                       # a quick plan shows nothing
    clock.now += 1.5                                  # 2 s in, 20 of 100 done: 8 s left at this rate
    show(20, 100)
    assert out.getvalue() == "\r20 of 100 candidates, 2 s, about 8 s left"
    clock.now += 0.1
    show(21, 100)                                     # within PROGRESS_EVERY_S of the last: not rewritten
    assert out.getvalue().count("\r") == 1
    clock.now += cli_plan.PROGRESS_EVERY_S
    show(50, 100)
    assert out.getvalue().endswith("\r50 of 100 candidates, 2 s, about 2 s left")
    show(100, 100)                                    # done: the line is blanked and the cursor back
    width = len("20 of 100 candidates, 2 s, about 8 s left")
    assert out.getvalue().endswith("\r" + " " * width + "\r")


def test_a_plan_done_before_the_line_shows_writes_nothing(clock):
    out = Terminal()
    show = cli_plan.progress_line(out)
    clock.now += 0.2
    show(5, 5)
    assert out.getvalue() == ""
