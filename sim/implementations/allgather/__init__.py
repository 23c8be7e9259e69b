"""The all-gather scheme's implementations (Llama 3's context parallelism): one module per
library (sim.implementations)."""
