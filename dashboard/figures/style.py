"""What every view's figure shares: the template, the colours, time units, one colour
per rank, the message figure, and what a trace's scheme says about its operations.

The colours of a scheme's own operations (computes and transfers) come from its
`op_kinds` (sim.schemes.base.OpKind); COLORS holds the rest: exposed communication and
idle (docs/design.md, Definitions), simulated against measured, overlap on against off.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative, sample_colorscale

from dashboard.i18n import DEFAULT_LANG, Translator, run_words
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names
from sim.schemes.base import Scheme
from sim.trace.format import Trace

TEMPLATE = go.layout.Template(layout=dict(
    font=dict(family="Inter, Helvetica, Arial, sans-serif", size=12, color="#222"),
    paper_bgcolor="white", plot_bgcolor="white",
    xaxis=dict(gridcolor="#ececec", zeroline=False, linecolor="#999", ticks="outside"),
    yaxis=dict(gridcolor="#ececec", zeroline=False, linecolor="#999", ticks="outside"),
    margin=dict(l=70, r=20, t=50, b=45),
    legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    hoverlabel=dict(font_size=12),
))

LEGEND_BESIDE = dict(orientation="v", x=1.02, xanchor="left", y=1.0, yanchor="top", yref="paper",
                     bgcolor="rgba(255,255,255,0)")
"""A legend to the right of the plots, top-aligned with them: the template's (above the
plot, left) sits where a figure with subplot titles or a long title puts its text.
Plotly widens the right margin to hold it."""

COLORS = {
    "exposed": "#e0302a", "idle": "#d7d7d7",
    "compute": "#3a6fd8", "transfer": "#2e9e5b",
    "simulated": "#3a6fd8", "simulated alt": "#7ea3ea", "measured": "#f28e2b",
    "measured alt": "#f7b877", "ring": "#3a6fd8", "full": "#e0302a",
    "capacity": "#777777", "on": "#3a6fd8", "off": "#f28e2b",
}


def figure(**layout: Any) -> go.Figure:
    """An empty figure on the shared template."""
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, **layout)
    return fig


def time_unit(seconds: float) -> tuple[float, str]:
    """Scale and label that show `seconds` with a few digits before the point."""
    if seconds >= 1:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


LABEL_BACKGROUND = "rgba(255,255,255,0.85)"
"""Behind a label that sits on a line or a curve: the line does not strike it through."""
DISTINCT_RANKS = 24
"""Up to this many ranks each has a hue of its own; past it their colours run along RANK_SCALE."""
RANK_SCALE = "Turbo"


@lru_cache(maxsize=32)
def rank_colors(n: int) -> tuple[str, ...]:
    """One color per rank: distinct hues up to DISTINCT_RANKS ranks, a continuous scale past that."""
    if n <= 10:
        return tuple(qualitative.Plotly[:n])
    if n <= DISTINCT_RANKS:
        return tuple(qualitative.Dark24[:n])
    return tuple(sample_colorscale(RANK_SCALE, [r / (n - 1) for r in range(n)]))


def rank_color(rank: int, n: int) -> str:
    return rank_colors(n)[rank]


def lighter(color: str, amount: float = 0.35) -> str:
    """`color` (#rrggbb) mixed with white: the shade that tells back-to-back blocks apart; a
    negative `amount` mixes it with black instead (a darker shade)."""
    rgb = np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)], dtype=float)
    mixed = np.rint(rgb + (255 - rgb) * amount if amount >= 0 else rgb * (1 + amount)).astype(int)
    return "#" + "".join(f"{c:02x}" for c in mixed)


SCHEME_PALETTE = ("#3a6fd8", "#d35400", "#c2185b", "#16a085", "#7f8c8d", "#b8860b")
"""One colour per scheme, in the order of sim.schemes.names() (the ring first)."""


def scheme_color(scheme: str) -> str:
    names = scheme_names()
    i = names.index(scheme) if scheme in names else len(names)
    return SCHEME_PALETTE[i % len(SCHEME_PALETTE)]


def run_label(config: dict[str, Any]) -> str:
    """A run in a few words from its trace header, in English: the default scheme's (the
    ring's) layout and overlap, another scheme and what sets it apart
    (dashboard.i18n.run_words). A header without a scheme is the default's."""
    if config.get("scheme", DEFAULT_SCHEME) != DEFAULT_SCHEME:
        return run_words(Translator(DEFAULT_LANG), config)
    layout = config.get("layout")
    return f"{layout} layout, overlap {'on' if config.get('overlap') else 'off'}" if layout else ""


def scheme_of(trace: Trace) -> Scheme:
    """The scheme a trace's header names (the default, the ring, when it names none);
    RingsimError naming the choices when this ringsim does not know it."""
    return get_scheme(trace.config.get("scheme", DEFAULT_SCHEME))


TITLE_CHARS = 90
"""A chart title's line longer than this is broken in two: at 1,280 px a chart is about 850
px wide, some 110 characters of a 13 px title, less its margins."""


def wrap_title(text: str, width: int = TITLE_CHARS) -> str:
    """`text` with each line longer than `width` characters broken at the last ", " or " — "
    before `width` (a space where there is none; a title's own <br> kept)."""
    lines = []
    for line in text.split("<br>"):
        while len(line) > width:
            # between clauses where it can, between words only where a line has no clause to cut
            cut = max(line.rfind(sep, 0, width) for sep in (", ", " — "))
            if cut <= 0:
                cut = line.rfind(" ", 0, width)
            if cut <= 0:
                break
            sep = next(sep for sep in (", ", " — ", " ") if line.startswith(sep, cut))
            keep = sep.rstrip() if sep != " " else ""
            lines.append(line[:cut] + keep)
            line = line[cut + len(sep):]
        lines.append(line)
    return "<br>".join(lines)


def message_figure(text: str, height: int = 300) -> go.Figure:
    """An empty figure that says why there is nothing to draw."""
    fig = figure(height=height, xaxis=dict(visible=False), yaxis=dict(visible=False))
    fig.add_annotation(text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=14, color="#666"))
    return fig
