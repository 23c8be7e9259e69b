"""Microbenchmarks for calibration: `ringsim hw bench -o FILE`.

Three parts, each an input to calibrating the simulator's hardware model (docs/design.md,
"Compute time of a block" and "Link time"), measured apart from any run used to
validate it:

- compute: one block of the ring's own per-block operator (`hw.blocks`), forward and
  backward, over a grid of block sizes, head counts, dtypes and masks ("full": every
  pair, "diagonal": the causal square), on one process with a rank's thread count;
- transfer: point-to-point time between two ranks over message sizes, one way (half a
  ping-pong round trip) and both ways at once (each rank sends and receives, as in a
  ring step);
- interference: a block's compute time alone and while a both-ways transfer is in
  flight on the same ranks (on a 2-core host a transfer takes CPU the compute needs;
  on a GPU the compute is timed on its own stream, not until NCCL's is done too);
- concurrency: the same block computed by k processes at once (k = 1, 2, ...), each
  with a rank's thread count, back to back over one common window (a start time and a
  deadline every process shares, so that all k run at once the whole time): how much
  slower compute runs when ranks share the host's cores and memory (CPU only; on GPUs
  each rank has its own device); the forward block, and its backward where the kinds
  hold bwd (time-sliced, a backward can lose more than its share of the cores);
- ring_conditions: k ranks (k = 2, 3, ...) in a ring, as a ring run loads the host:
  every rank computes the block back to back while it sends the block's K/V to the next
  rank and receives from the previous one, exchange after exchange; the compute time
  and the exchange time under those conditions, and both alone on the same ranks (each
  rank computing in turn with the others idle; the exchanges with no compute). The
  forward block with one hop each exchange, as a forward step; where the kinds hold bwd,
  the backward block with two (K/V and dK/dV), as a step of the backward pass. CPU only;
- collective: the collectives the all-gather and Ulysses schemes run (all_gather,
  reduce_scatter, all_to_all, the list forms their kernels call), over shard sizes and
  GPU counts, each timed from a barrier to the slowest rank's completion: the input of
  the alpha-beta fit of each collective (sim.calibration.calibrate.calibrate_collectives).

Physical bounds are checked before a measurement is kept: k busy processes of t
threads on C cores cannot each run faster than k·t/C times slower than one alone
(sim.calibration.calibrate.bound_violation, with 5% for noise). A concurrency entry (against the
1-process entry) or a ring-conditions entry (its compute) below the bound is measured
again, up to three times in all; if every attempt violates it, the last is written
with "rejected" (why) and a one-line message goes to stderr: calibration does not fit
it. A concurrency entry whose median block is more than 1.5 times slower than its bound
is measured again as well, up to three times, and the least slowed attempt is kept
(other load on the host only ever slows a measurement; "attempt_slowdowns" lists them
all). A ring-conditions slowdown is the mean of the samples under sharing (throughput: a
time-sliced process's short blocks are untouched or very slow, and only the mean counts
both) over the median alone (bench.ring_slowdown).

Results are written to FILE as each completes (atomically), so an interrupted run
keeps what it measured; `--resume` measures only what FILE lacks, `--force` starts
over. Progress goes to stderr.

The JSON file (format "ringsim-hw-bench", version 1):

    {"format": "ringsim-hw-bench", "version": 1,
     "complete": true once every requested entry is measured,
     "device": {"kind": "cpu"|"cuda", "name": CPU model or GPU name, "torch": version,
                "backend": "gloo"|"nccl", "threads_per_rank": int|null, "cpu_count": int,
                "hostname": str},
     "settings": {"samples": int, "warmup": int, "quick": bool},
     "compute": [{"kind": "fwd"|"bwd", "dtype": "fp32"|"bf16"|"fp16", "batch", "heads",
                  "kv_heads", "head_dim", "q_tokens", "kv_tokens",
                  "mask": "full"|"diagonal", "flops": work of the block (docs/design.md: 4·d·pairs
                  ·heads·batch, backward 2.5x), "impl": per-block operator,
                  "time_s": [samples], "median_s", "rate_flops": flops / median_s,
                  "reference_s": [samples of the reference block (full forward, 1024
                  tokens): one before the entry's first sample and one after each; CPU
                  only (files before speed_ratios: the samples just before the entry)],
                  "speed_ratios": [each sample over the mean of the references just
                  before and after it; CPU only],
                  "pass_medians_s": [median of each pass over the grid, with
                  --compute-passes 2 or more; the samples above are every pass's],
                  "pass_references_s": [median of each pass's reference_s],
                  "pass_speed_ratios": [median of each pass's speed_ratios]}],
     "reference_block": {the block reference_s times: kind, dtype, batch, heads, kv_heads,
                         head_dim, q_tokens, kv_tokens, mask, flops; CPU only},
     "transfer": [{"bytes", "direction": "one_way"|"both_ways", "time_s": [samples],
                   "median_s", "gbps": bytes / median_s / 1e9}],
     "interference": [{"kind": "fwd", "dtype", "batch", "heads", "kv_heads", "head_dim",
                       "q_tokens", "kv_tokens", "mask", "flops", "bytes" (each way),
                       "compute_alone_s": [samples], "compute_with_transfer_s": [samples],
                       "median_alone_s", "median_with_s", "slowdown": with / alone}],
     "concurrency": [{"processes": k, "kind": "fwd"|"bwd", "dtype", "batch", "heads", "kv_heads",
                      "head_dim", "q_tokens", "kv_tokens", "mask", "flops",
                      "threads_per_rank", "time_s": [samples of every process, all at once],
                      "time_by_process_s": [[the same samples, one list per process]],
                      "alone_s": [samples of every process alone, just before], "median_s",
                      "rounds": [{"alone_s", "time_s", "time_by_process_s"}: the samples
                                 of each of the rounds the entry alternated alone and
                                 shared, every process's],
                      "mean_s", "slowdown": the rounds' median of mean shared / median
                      alone (k > 1),
                      "bound": k·threads/cores (at least 1), "attempts": int,
                      "rejected": why (only when every attempt broke the bound),
                      "pass": which of the --host-passes measured it (1 in older files)}],
     "ring_conditions": [{"processes": k, "kind": "fwd"|"bwd", "dtype", "batch", "heads",
                          "kv_heads", "head_dim", "q_tokens", "kv_tokens", "mask", "flops",
                          "bytes" (each way per hop), "hops": hops each exchange (bwd: 2,
                          K/V and dK/dV; absent: 1), "threads_per_rank",
                          "compute_alone_s", "transfer_alone_s", "compute_ring_s",
                          "transfer_ring_s": [samples of every rank],
                          "compute_ring_by_process_s": [[compute_ring_s, one list per rank]],
                          "compute_slowdown", "transfer_slowdown": mean ring / median alone,
                          "bound", "attempts", "rejected", "pass" (as in concurrency)}],
     "collective": [{"op": "allgather"|"reducescatter"|"alltoall", "n_gpus": ranks,
                     "shard_bytes": a rank's piece (all-gather input, reduce-scatter output,
                     all-to-all piece for one peer), "sent_bytes": what each rank sends,
                     (n_gpus - 1) x shard_bytes, "time_s": [samples, each the slowest rank's],
                     "median_s", "gbps": sent_bytes / median_s / 1e9}]}


Files written before ring_conditions (or its backward entries) and the concurrency
fields after "median_s" existed lack them; calibration reads them as before.

The package's modules: `options` (the flags and the plan of a run), `measure` (timers, the
block operator's calls, the point-to-point worker), `bounds` (the physical bounds and
measuring again), `parts` (the host parts and the collectives: their jobs and workers),
`document` (the file being written) and `command` (the run, part after part).

Times are seconds (CUDA events on GPU, perf_counter on CPU); samples follow `warmup`
untimed calls. Every entry also has "load_avg_1m", the host's 1-minute load average when
it completed: on a shared host, a high value flags an entry measured under contention.
"""

