#!/usr/bin/env bash
# The kernel's checks on one GPU, in one go (a few minutes on an H100/H200):
#   1. exactness: the ring on 2-8 ranks (threads of one process, bench/checks/ring_exact.py) on
#      the CUDA block operators, forward and backward, against fp64 attention
#   2. the bf16 block compute grid for calibration (bench/gpu/block_grid.sh)
#   3. one measured run of the kernel on the GPU (GPU count 1, CUDA events): a trace in
#      the simulator's format and the attention's measured FLOP/s
#   4. isolated calls of torch's SDPA by backend (flash, cuDNN), 8-64 heads with and without
#      GQA, 512-32k tokens (bench/gpu/sdpa_grid.py): the block model's check and a GPU
#      profile's input (`ringsim calibrate OUTDIR/sdpa-grid.json -o P.json`)
#   5. a ring on 2, 4 and 8 ranks of the one GPU (hw.inprocess, each step's compute alone),
#      every step against the block model with a fused and an unfused merge
#      (bench/gpu/ring_steps.py)
#   6. the linear layers' products of Llama-3 8B/70B/405B at TP 1-8 and 2k-32k tokens,
#      bf16 and FP8, against the GEMM model (bench/gpu/gemm_grid.py)
#   7. packed documents: ring-flash-attention's varlen packings as one varlen call, against
#      the block model, and the boolean-mask index operations of its zigzag varlen backward
#      against slices (bench/gpu/varlen.py)
#   8. each library's ring (ideal, TransformerEngine p2p, ring-flash-attention, torch
#      context_parallel, long-context-attention) on 4 ranks of the one GPU, batch 1, 8k tokens per
#      rank, Llama-3-8B attention, causal and full, forward and backward, under torch.profiler:
#      every step's kernels from the trace beside the model's step for that implementation
#      (bench/gpu/impl_rings.py)
#
#   bench/gpu/check.sh OUTDIR      (the committed H200 run: bench/results/gpu/h200/)
#
# Needs ringsim installed (its `ringsim hw` commands) in $PYTHON (default python3), with a
# torch build with CUDA (>= 2.11). Writes ring-exact.json, block-grid.json, run-1gpu-fwdbwd.json,
# trace-1gpu-fwdbwd.json, sdpa-grid.json, ring-steps.json, gemm-grid.json, varlen.json,
# impl-rings.json and its profiler traces (impl-traces/) to OUTDIR;
# exit status 1 when a step failed (the others still run).
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 1 ] || { echo "usage: bench/gpu/check.sh OUTDIR" >&2; exit 2; }
out=$1
mkdir -p "$out"
export PYTHON=${PYTHON:-python3} PYTHONUNBUFFERED=1
"$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device visible to torch " + torch.__version__)' || exit 2
"$PYTHON" -m sim.cli.main hw --help >/dev/null || { echo "ringsim's hw commands are not installed in $PYTHON (pip install .)" >&2; exit 2; }
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name())'
failed=0
step() { echo "== $*" >&2; local t0=$SECONDS; "$@" || { echo "== failed: $*" >&2; failed=1; }; echo "== $((SECONDS - t0)) s" >&2; }
steps=${GPU_CHECK_STEPS:-exact,grid,run,sdpa,steps,gemm,varlen,impls}   # a subset reruns the named steps alone
[[ ,$steps, == *,exact,* ]] && step "$PYTHON" bench/checks/ring_exact.py --device cuda --block-impl fused --json "$out/ring-exact.json" --force
[[ ,$steps, == *,grid,* ]] && step bench/gpu/block_grid.sh "$out/block-grid.json"
[[ ,$steps, == *,run,* ]] && step "$PYTHON" -m sim.cli.main hw run --device cuda --gpus 1 --dtype bf16 --seq 16k --heads 32 --head-dim 128 \
    --pass fwdbwd --warmup 2 --repeats 3 --measure-rate --trace "$out/trace-1gpu-fwdbwd.json" --force --json \
    > "$out/run-1gpu-fwdbwd.json"
[[ ,$steps, == *,sdpa,* ]] && step "$PYTHON" bench/gpu/sdpa_grid.py "$out/sdpa-grid.json" --heads 8,16,32,64 \
    --kv-heads 0,8 --tokens 512,1024,2048,4096,8192,16384,32768 --backends flash,cudnn --force
[[ ,$steps, == *,steps,* ]] && step "$PYTHON" bench/gpu/ring_steps.py "$out/ring-steps.json" --gpus 2,4,8 \
    --tokens-per-rank 4096 --force
[[ ,$steps, == *,gemm,* ]] && step "$PYTHON" bench/gpu/gemm_grid.py "$out/gemm-grid.json" --force
[[ ,$steps, == *,varlen,* ]] && step "$PYTHON" bench/gpu/varlen.py "$out/varlen.json" --force
[[ ,$steps, == *,impls,* ]] && step "$PYTHON" bench/gpu/impl_rings.py "$out/impl-rings.json" --gpus 4 \
    --tokens-per-rank 8192 --heads 32 --kv-heads 8 --head-dim 128 --trace-dir "$out/impl-traces" --force
exit $failed
