#!/usr/bin/env bash
# Calibrate from measured ring traces and compare with the microbenchmark profile, on the
# same held-out runs, in bench/results/calibration/cpu-<cores>core/ (OUT below):
#   1. measured runs of the real kernel, fit set and held-out set -> $dir/{fit,held}/*.trace.npz
#                                                                    (default OUT/traces, not kept)
#   2. a profile fitted to the fit set                            -> OUT/profile-from-traces.json
#   3. both profiles predict the held-out runs (other layouts, GPU counts and sizes, and
#      forward+backward): the table, and which route predicts better, are printed and kept
#      in the profile's report (report.holdout)
# Run it on an otherwise idle machine: other load shows up as error.
#   bench/calibration/calibrate_traces.sh [--force] [MICRO_PROFILE]   (default OUT/profile.json)
set -euo pipefail
cd "$(dirname "$0")/../.."
force=""
if [ "${1:-}" = "--force" ]; then force=--force; shift; fi
out=bench/results/calibration/cpu-$(getconf _NPROCESSORS_ONLN)core
micro=${1:-$out/profile.json}
dir=${TRACE_DIR:-$out/traces}
scripts/setup.sh  # .venv with ringsim, as the README's commands make it (quick when it is there)
R=.venv/bin/ringsim
mkdir -p "$dir/fit" "$dir/held"
run() {  # set name layout causal n_gpus seq pass
    local set=$1 name=$2 layout=$3 causal=$4 ws=$5 seq=$6 pass=$7
    $R hw run --gpus "$ws" --seq "$seq" --heads 8 --kv-heads 8 --head-dim 64 --dtype fp32 \
        --layout "$layout" "--$causal" --pass "$pass" --warmup 1 --repeats 3 \
        --trace "$dir/$set/$name-{i}.trace.npz" --force > /dev/null
    echo "measured $set/$name" >&2
}
# the fit set: two sizes, two GPU counts, two layouts, forward and forward+backward
run fit zz-c-2-3072-f zigzag causal 2 3072 fwd
run fit zz-c-2-6144-f zigzag causal 2 6144 fwd
run fit ct-f-2-3072-f contiguous no-causal 2 3072 fwd
run fit zz-c-3-3072-f zigzag causal 3 3072 fwd
run fit zz-c-2-3072-fb zigzag causal 2 3072 fwdbwd
run fit ct-f-3-3072-fb contiguous no-causal 3 3072 fwdbwd
# held out: a layout, a GPU count and sizes the fit never saw, both passes
run held st-c-2-6144-f striped causal 2 6144 fwd
run held zz-c-4-6144-f zigzag causal 4 6144 fwd
run held ct-c-3-6144-f contiguous causal 3 6144 fwd
run held ct-f-2-6144-fb contiguous no-causal 2 6144 fwdbwd
run held zz-c-4-3072-fb zigzag causal 4 3072 fwdbwd
run held st-c-3-6144-fb striped causal 3 6144 fwdbwd
uptime >&2
$R calibrate --from-traces "$dir"/fit/*.trace.npz --holdout "$dir"/held/*.trace.npz \
    --compare "$micro" -o "$out/profile-from-traces.json" $force
