"""One training step over tensor, context, pipeline and data parallelism (step), its
pipeline schedule, and the plan that searches those degrees together.
"""
