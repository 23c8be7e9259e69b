"""The shared style: time units, rank colours, shades, the scheme of a trace."""

from __future__ import annotations

import pytest

from dashboard.figures.style import lighter, rank_colors, scheme_of, time_unit
from sim.errors import RingsimError
from sim.trace.format import Span, Trace


def test_time_unit():
    assert time_unit(2.0) == (1.0, "s")
    assert time_unit(0.02) == (1e3, "ms")
    assert time_unit(2e-5) == (1e6, "µs")


@pytest.mark.parametrize("n", [1, 8, 24, 1024])
def test_one_distinct_color_per_rank(n):
    colors = rank_colors(n)
    assert len(colors) == n
    if n <= 24:
        assert len(set(colors)) == n


def test_lighter_mixes_with_white():
    assert lighter("#000000", 0.5) == "#808080"
    assert lighter("#3a6fd8", 0.0) == "#3a6fd8"
    assert lighter("#3a6fd8", 1.0) == "#ffffff"


def test_scheme_of_a_trace():
    bare = Trace("measured", 1, [Span(0, "compute", "fwd", 0, 0.0, 1.0)])
    assert scheme_of(bare).name == "ring"            # a header that names none
    bare.config["scheme"] = "no-such-scheme"
    with pytest.raises(RingsimError, match="unknown scheme"):
        scheme_of(bare)
