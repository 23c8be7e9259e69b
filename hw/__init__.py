"""The real ring-attention kernel: torch.distributed on real processes and links.

It runs Ring Attention (forward and backward, every layout, causal or not, GQA) over
point-to-point operations, gloo on CPU and NCCL on GPU, and records what each rank did
and when in the trace record of the simulator (`sim.trace.format`, docs/design.md "One trace").

Importing `hw` does not import torch (the `ringsim` CLI registers `hw` commands on
every start). The entry points, each in its module:

- `hw.launch.run_local(q, k, v, *, n_gpus, causal, layout="zigzag", backend="gloo", dout=None)`:
  full tensors in, `hw.launch.RunResult` (`.out`, `.dq .dk .dv`, `.trace`) out, on local
  processes; a rank that raised or died is a `hw.spawn.RankFailure`.
- `hw.config.RunConfig`, `hw.launch.run_config`, `hw.launch.run_configs`: configured runs
  with inputs made from a seed (many configurations share one process group per GPU count).
- `hw.ring.ring_forward`, `hw.ring.ring_backward`: the per-rank kernel, inside a process group.
"""
