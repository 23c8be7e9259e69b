"""Ulysses' implementations (all-to-all from token shards to head shards): one module per
library (sim.implementations)."""
