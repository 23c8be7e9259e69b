"""Playing a schedule: the schedule as plain data, the players that time it (SimPy and the
wave recurrence), NCCL's point-to-point queues, and the record that turns the times into
the trace (docs/design.md, "One trace").
"""
