"""Figure builders: pure functions from a trace, a metrics table or a small result to a
Plotly figure. No Dash here, no simulation: callers pass in what to draw, so each
builder can be tested on its own.

One module per view over a shared style (`style`): `layout_strip`, `timeline`,
`block_map`, `comparison` (layouts), `documents` (layouts on packed documents),
`schemes` (schemes), `sweep`, `memory`, `merge`, `overlay`. This package
re-exports their builders, so `figures.timeline(trace)` reads as before. Figures read a
trace's columns (sim.trace.format.SpanTable), ask the trace's scheme (sim.schemes) how to name,
colour and map its operations, and ask sim.layouts about layouts. Definitions (exposed
communication, idle, efficiency, imbalance, work of a block) are those of docs/design.md.
"""

from dashboard.figures.block_map import MAX_HOVER_CELLS, MAX_MAP_CHUNKS, block_map
from dashboard.figures.comparison import comparison
from dashboard.figures.documents import document_balance
from dashboard.figures.layout_strip import MAX_STRIP_RUNS, layout_strip
from dashboard.figures.memory import memory
from dashboard.figures.merge import merge_steps
from dashboard.figures.overlay import overlay, trace_summary
from dashboard.figures.schemes import fastest, run_name, scheme_comparison
from dashboard.figures.style import (
                                     COLORS,
                                     TEMPLATE,
                                     message_figure,
                                     rank_color,
                                     rank_colors,
                                     run_label,
                                     scheme_color,
                                     scheme_of,
                                     time_unit,
)
from dashboard.figures.sweep import overlap_sweep
from dashboard.figures.timeline import (
                                     LANES,
                                     MAX_BAR_SPANS,
                                     MAX_DRAWN_SPANS,
                                     SERIES,
                                     rank_starts,
                                     series_styles,
                                     timeline,
)

__all__ = [
    "COLORS", "LANES", "MAX_BAR_SPANS", "MAX_DRAWN_SPANS", "MAX_HOVER_CELLS", "MAX_MAP_CHUNKS",
    "MAX_STRIP_RUNS", "SERIES", "TEMPLATE", "block_map", "comparison", "document_balance", "fastest",
    "layout_strip", "memory", "merge_steps", "message_figure", "overlap_sweep", "overlay", "rank_color",
    "rank_colors", "rank_starts", "run_label", "run_name", "scheme_color", "scheme_comparison", "scheme_of",
    "series_styles", "time_unit", "timeline", "trace_summary",
]
