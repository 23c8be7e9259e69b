"""Many scenarios at once: schemes side by side (compare), sweep specifications and their
runs (spec, sweep), and the planner of a long-context run (plan).
"""
