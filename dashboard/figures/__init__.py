"""Figure builders: pure functions from a trace, a metrics table or a small result to a
Plotly figure. No Dash here, no simulation: callers pass in what to draw, so each
builder can be tested on its own.

One module per view over a shared style (`style`): `layout_strip`, `timeline`,
`block_map`, `comparison` (layouts), `documents` (layouts on packed documents),
`schemes` (schemes), `sweep`, `memory`, `merge`, `overlay`, `plan` (the planner's
candidates, a step's time and a pipeline). Figures read a trace's columns
(sim.trace.format.SpanTable), ask the trace's scheme (sim.schemes) how to name, colour and
map its operations, and ask sim.layouts about layouts. Definitions (exposed communication,
idle, efficiency, imbalance, work of a block) are those of docs/design.md.
"""
