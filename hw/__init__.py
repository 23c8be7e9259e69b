"""The real ring-attention kernel: torch.distributed on real processes and links.

It runs Ring Attention (forward and backward, every layout, causal or not, GQA) over
point-to-point operations, gloo on CPU and NCCL on GPU, and records what each rank did
and when in the trace record of the simulator (`sim.trace.format`, docs/design.md "One trace").

Importing `hw` does not import torch (the `ringsim` CLI registers `hw` commands on
every start); the public names below load on first use:

- `run_local(q, k, v, *, n_gpus, layout, causal, backend="gloo", dout=None)`: full
  tensors in, `RunResult` (`.out`, `.dq .dk .dv`, `.trace`) out, on local processes.
- `RunConfig`, `run_config`, `run_configs`: configured runs with inputs made from a seed
  (many configurations share one process group per GPU count).
- `ring_forward`, `ring_backward`: the per-rank kernel, inside a process group.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "run_local": "hw.launch",
    "run_config": "hw.launch",
    "run_configs": "hw.launch",
    "RunResult": "hw.launch",
    "RankFailure": "hw.spawn",
    "RunConfig": "hw.config",
    "ring_forward": "hw.ring",
    "ring_backward": "hw.ring",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'hw' has no attribute {name!r}")
