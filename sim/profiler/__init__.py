"""Profiler traces in: torch.profiler (Kineto) traces read into one table per run, each kernel
classified, and the breakdown Holistic Trace Analysis defines (docs/traces.md)."""
