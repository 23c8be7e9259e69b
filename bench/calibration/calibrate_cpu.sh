#!/usr/bin/env bash
# Reproduce the committed CPU calibration evidence on this machine, into
# bench/results/calibration/cpu-<cores>core/ (the committed runs: cpu-2core/):
#   1. microbenchmarks of the kernel's parts (with the host's concurrency and ring
#      conditions, checked against the core count) -> microbenchmarks.json
#   2. a profile fitted to them                   -> profile.json
#   3. the quick validation matrix on that profile -> validation-ring.{json,md}
#   4. the same for the all-gather and Ulysses kernels -> validation-allgather-ulysses.{json,md}
# The validation runs are separate from the microbenchmarks the profile comes from.
# Run it on an otherwise idle machine: other load shows up as error.
#   bench/calibration/calibrate_cpu.sh [--force]
set -euo pipefail
cd "$(dirname "$0")/../.."
force=${1:-}
out=bench/results/calibration/cpu-$(getconf _NPROCESSORS_ONLN)core
mkdir -p "$out"
scripts/setup.sh  # .venv with ringsim, as the README's commands make it (quick when it is there)
R=.venv/bin/ringsim
# block sizes cover the validation's pieces: 3072..6144 tokens on 2..4 ranks, zigzag halves
$R hw bench -o "$out/microbenchmarks.json" ${force:+--force} \
    --dtypes fp32 --heads 8 --head-dims 64 --blocks 128,256,384,512,768,1024,1536,2048,3072 \
    --masks full,diagonal --kinds fwd,bwd --sizes 64K,256K,1M,2M,4M,8M \
    --interference-blocks 1024,2048 --interference-sizes kv --concurrency 1,2,3,4 \
    --ring-processes 2,3,4 --collective-gpus 2,3,4 --collective-sizes 256K,1M,4M,16M \
    --host-passes 3 --samples 5 --warmup 2
$R calibrate "$out/microbenchmarks.json" -o "$out/profile.json" ${force:+--force}
$R validate --profile "$out/profile.json" --quick --repeats 5 --warmup 1 --replays 31 \
    --out "$out/validation-ring.json" --markdown "$out/validation-ring.md" ${force:+--force}
$R validate --profile "$out/profile.json" --quick --schemes allgather ulysses --repeats 5 --warmup 1 --replays 31 \
    --out "$out/validation-allgather-ulysses.json" --markdown "$out/validation-allgather-ulysses.md" ${force:+--force}
