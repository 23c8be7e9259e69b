"""The hybrid's implementations (Ulysses inside, a ring across): one module per library
(sim.implementations)."""
