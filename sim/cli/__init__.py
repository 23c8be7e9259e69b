"""The `ringsim` command line: one module per command group over the shared options.
"""
