"""The ring's implementations (pass-KV): one module per library (sim.implementations)."""
