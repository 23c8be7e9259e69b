"""The byte and FLOP counts every part of ringsim shares (docs/design.md, Definitions).

A leaf: it imports nothing of ringsim, so the configuration, the kernel model and the
schemes can all read it without importing one another.
"""

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
"""Bytes per element of Q, K, V by dtype."""
ACCUM_BYTES = 4
"""The running output, the softmax statistics and the gradient accumulators (dK/dV on the
ring included) are fp32, whatever the input dtype."""
BWD_FLOPS_FACTOR = 2.5
"""Backward FLOPs per forward FLOP for the same pairs: five matrix products against two."""
PASS_FLOPS_FACTOR = {"fwd": 1.0, "bwd": BWD_FLOPS_FACTOR}
"""FLOPs per forward FLOP of the same pairs, by pass."""
