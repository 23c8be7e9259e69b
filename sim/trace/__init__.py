"""The trace record shared by the simulator and the real kernels (format), and the metrics
read from it alone (docs/design.md, Definitions).
"""
