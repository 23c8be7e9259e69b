#!/usr/bin/env bash
# The bf16 block compute grid of the ring kernel on one GPU, for calibration:
# head dim 128, blocks of 512 to 16k tokens, 8 and 32 heads, full and diagonal masks,
# forward and backward, each timed with CUDA events (2 warm-up calls, 5 samples).
#
#   bench/gpu/block_grid.sh [OUT.json]   (default bench/results/gpu/GPU/block-grid.json, GPU the
#                                        preset the device matches, lower case: h200, h100-sxm)
#
# Needs a torch build with CUDA (>= 2.11) in $PYTHON (default .venv/bin/python). Results
# are written as each entry completes; rerunning continues an interrupted grid (--resume).
# About 50 entries; well under a minute of GPU time on an H100/H200.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device visible to torch " + torch.__version__)'
if [ $# -ge 1 ]; then
    OUT=$1
else
    gpu=$("$PY" -c 'import torch; from sim.calibration.gpu_profile import gpu_preset_of
print(gpu_preset_of(torch.cuda.get_device_name()).lower())') || { echo "name the output: bench/gpu/block_grid.sh OUT.json" >&2; exit 2; }
    OUT=bench/results/gpu/$gpu/block-grid.json
fi
mkdir -p "$(dirname "$OUT")"
resume=()
[ -f "$OUT" ] && resume=(--resume)
# --block-impl fused: a fused operator or an error, never the matmul fallback (which
# materializes the score matrix and runs out of memory at these block sizes)
exec "$PY" -m sim.cli.main hw bench --device cuda --parts compute --block-impl fused \
    --dtypes bf16 --head-dims 128 --heads 8,32 \
    --blocks 512,1024,2048,4096,8192,16384 --masks full,diagonal --kinds fwd,bwd \
    --samples 5 --warmup 2 -o "$OUT" "${resume[@]}"
