"""The Compare schemes figure: one bar per run and panel, the fastest outlined, a refused
run kept without bars, the full K/V beside the memory."""

from __future__ import annotations

import numpy as np
import pytest

from dashboard.figures.schemes import scheme_comparison
from dashboard.figures.style import scheme_color


def _row(scheme, variant, makespan, exposed=0.0, sent=2 ** 20, mem=2 ** 30):
    return {"scheme": scheme, "variant": variant, "makespan_s": makespan, "exposed_comm_s": exposed,
            "bytes_sent_per_gpu": sent, "peak_mem_bytes": mem, "explanation": f"why {scheme}"}


ROWS = [_row("ring", "zigzag", 2e-3, 1e-4), _row("allgather", "one gather", 1.5e-3, 5e-4, mem=3 * 2 ** 30),
        {"scheme": "ulysses", "variant": "degree 64", "refused": "ulysses degree 64 does not divide the 32 query heads"}]


def test_bars_are_the_rows():
    fig = scheme_comparison(ROWS, current=("ring", "zigzag"), full_kv_bytes=2 * 2 ** 30)
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 4
    assert list(bars[0].y) == ["ring (zigzag) ◂", "allgather (one gather)", "ulysses (degree 64) — not possible"]
    assert list(bars[0].x[:2]) == pytest.approx([2.0, 1.5])                    # ms
    assert list(bars[1].x[:2]) == pytest.approx([0.1, 0.5])
    assert list(bars[2].x[:2]) == pytest.approx([1.0, 1.0])                    # MiB
    assert list(bars[3].x[:2]) == pytest.approx([1.0, 3.0])                    # GiB
    assert all(np.isnan(b.x[2]) for b in bars)                                 # refused: no bar
    assert list(bars[0].marker.line.width) == [0, 2.5, 0]                      # the fastest outlined
    assert bars[0].marker.color[0] == scheme_color("ring") != scheme_color("allgather")
    (full,) = [t for t in fig.data if t.type == "scatter"]
    assert list(full.x) == [2.0, 2.0]
    assert fig.layout.meta["best"] == ["allgather", "one gather"]
    assert fig.layout.meta["refused"] == [["ulysses", "degree 64"]]
    assert "allgather (one gather)" in fig.layout.title.text
    assert "why allgather" in bars[0].customdata[1]


def test_nothing_runs():
    fig = scheme_comparison(ROWS[2:])
    assert fig.layout.meta["best"] is None and "nothing can run" in fig.layout.title.text


def test_runs_within_the_models_error_of_the_fastest_are_called_a_tie():
    """1.5, 1.52 and 1.57 ms are within 5% of the fastest (1.5 x 1.05 = 1.575), 2 ms is not:
    the title names no winner but the three tied and their span; a 6% lead is a win."""
    rows = ROWS + [_row("hybrid", "2 x 2", 1.52e-3), _row("ulysses", "degree 4", 1.57e-3)]
    fig = scheme_comparison(rows)
    assert fig.layout.title.text == "Which scheme wins: a tie, 3 runs within the model's error of 5% (1.5 ms to 1.57 ms)"
    assert fig.layout.meta["best"] == ["allgather", "one gather"]               # still the fastest outlined
    fig = scheme_comparison([ROWS[0], _row("allgather", "one gather", 2e-3 / 1.06)])
    assert fig.layout.title.text == "Which scheme wins: allgather (one gather), 1.887 ms"
