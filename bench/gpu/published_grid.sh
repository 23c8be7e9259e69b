#!/usr/bin/env bash
# The bf16 blocks of FlashAttention's published benchmark, timed on this GPU: batch x
# seqlen held at 16k tokens, 16 heads of 128 (flash-attention
# benchmarks/benchmark_flash_attention.py, the setting behind the preset's kernel
# tables, sim.hardware.presets), seqlen 512 to 16k, full and causal, forward and backward, through
# the ring kernel's own block operator. bench/gpu/vs_preset.py sets them against the
# table: what is left after this is the table's, not the block's shape.
#
#   bench/gpu/published_grid.sh OUTDIR      (one bench file per length: published-L.json;
#                                            the committed H200 run: bench/results/gpu/h200/)
#
# Needs ringsim's hw commands and a torch build with CUDA in $PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 1 ] || { echo "usage: bench/gpu/published_grid.sh OUTDIR" >&2; exit 2; }
PY=${PYTHON:-python3}
mkdir -p "$1"
for L in 512 1024 2048 4096 8192 16384; do
    "$PY" -m sim.cli.main hw bench --device cuda --parts compute --block-impl fused --dtypes bf16 --head-dims 128 \
        --heads 16 --batch $((16384 / L)) --blocks "$L" --masks full,diagonal --kinds fwd,bwd \
        --samples 5 --warmup 2 -o "$1/published-$L.json" --force
done
