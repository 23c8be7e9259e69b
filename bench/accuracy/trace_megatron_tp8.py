"""A profiled Megatron-LM iteration replayed through the step model (docs/step.md, "Replaying a
profiled iteration").

The trace: one iteration (ProfilerStep#3) of a Megatron-LM GPT with tensor parallelism 8 on
8 x A100-SXM4-80GB, all eight ranks (astra-sim/astra-sim, branch 24S_HML_FP, commit
ab5d3e629c9d28257cf9d2b367474f0cbfdf450e, my_test/inputs/workload/megatron-tp8; vendored
in tests/data/traces/, MIT). The model's shapes are read from its recorded GEMM dims, the
A100's GEMM rate and the all-reduce's alpha-beta are fitted to its own kernels, and the
iteration is played with the step model (sim.profiler.step_replay): measured against
simulated, per rank and overall, beside the same play with the GPUs alone (no host idle)
and with the presets' constants in place of the fits.

    .venv/bin/python bench/accuracy/trace_megatron_tp8.py   # prints the table, writes
                                                            # bench/results/accuracy/trace-megatron-tp8-a100.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import RESULTS, add_force, keep_results, save_json  # noqa: E402
from sim.profiler.reader import read_run  # noqa: E402
from sim.profiler.step_replay import replay  # noqa: E402
from sim.units import fmt_s, table  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRACES = [ROOT / "tests" / "data" / "traces" / f"megatron-tp8-a100.rank{r}.json.gz" for r in range(8)]
SOURCE = ("astra-sim/astra-sim branch 24S_HML_FP, commit ab5d3e629c9d28257cf9d2b367474f0cbfdf450e, "
          "my_test/inputs/workload/megatron-tp8/megatron_kineto_{0..7}.json")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS / "accuracy" / "trace-megatron-tp8-a100.json"))
    add_force(ap)
    a = ap.parse_args()
    keep_results("trace_megatron_tp8", a.out, force=a.force, make_folders=True)
    t0 = time.perf_counter()
    r = replay(read_run([str(p) for p in TRACES]))
    took = time.perf_counter() - t0
    s = r.shapes
    print(f"Megatron-LM TP {s.tp} on 8 x {r.gpu}: {s.layers} layers, hidden {s.hidden}, {s.heads} heads x "
          f"{s.head_dim}, FFN {s.ffn} ({s.mlp}), vocabulary {s.vocab}, {s.micro_batch} x {s.seq} tokens, "
          f"{'forward only' if s.forward_only else 'forward and backward'}, attention {s.attention}")
    print(f"fitted: GEMMs {r.gemm.rate_tflops:.1f} TFLOP/s (MAMF {r.gemm.mamf_tflops:g}); all-reduce "
          f"{r.all_reduce.alpha_s * 1e6:.1f} us + bytes / {r.all_reduce.beta_gbps:.1f} GB/s "
          f"(bus {r.all_reduce.bus_gbps:.1f} GB/s)")
    rows = []
    for rank, m, sim, u, p in zip(r.ranks, r.measured_s, r.simulated_s, r.unfitted_s, r.parts):
        rows.append([rank, fmt_s(m), fmt_s(sim), f"{sim / m - 1:+.1%}", fmt_s(u), f"{u / m - 1:+.1%}",
                     fmt_s(p["gemm_modelled_s"] + p["all_reduce_modelled_s"]), fmt_s(p["other_kernels_s"]),
                     fmt_s(p["idle_s"])])
    rows.append(["all", fmt_s(r.measured_overall_s), fmt_s(r.simulated_overall_s), f"{r.overall_error:+.1%}",
                 fmt_s(max(r.unfitted_s)), f"{max(r.unfitted_s) / r.measured_overall_s - 1:+.1%}", "", "", ""])
    print("\n" + table(["rank", "measured", "simulated", "error", "presets' constants", "error",
                        "modelled (GEMMs + all-reduces)", "other kernels (meas.)", "GPU idle (meas.)"], rows))
    print(f"\nthe GPUs alone (no host idle): measured kernels {fmt_s(r.device_measured_s)}, modelled "
          f"{fmt_s(r.device_simulated_s)} ({r.device_simulated_s / r.device_measured_s - 1:+.1%}); presets' "
          f"constants {fmt_s(r.unfitted_device_s)} ({r.unfitted_device_s / r.device_measured_s - 1:+.1%})")
    print(f"the step model on its own (its fused attention and elementwise terms, no host): forward "
          f"{fmt_s(r.step_model['forward_s'])} ({r.step_model['forward_s'] / r.device_measured_s - 1:+.1%} against "
          "the GPUs alone measured)")
    print(f"the play with the measured kernel times: {fmt_s(max(r.identity_s))} "
          f"({max(r.identity_s) / r.measured_overall_s - 1:+.2%})")
    worst = max(abs(e) for e in r.errors())
    print(f"within 10%: {sum(abs(e) < 0.10 for e in r.errors())}/{len(r.ranks)} ranks (worst {worst:.1%}), overall "
          f"{'yes' if abs(r.overall_error) < 0.10 else 'no'}; replayed in {took:.1f} s")
    out = {"source": SOURCE, "files": [str(p.relative_to(ROOT)) for p in TRACES], **r.to_dict()}
    save_json(a.out, out, force=a.force, indent=2)
    print(f"wrote {Path(a.out).relative_to(ROOT) if Path(a.out).is_relative_to(ROOT) else a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
