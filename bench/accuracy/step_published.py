"""The training step against published whole-step runs of Llama 3 models: torchtitan's and NeMo's.

**torchtitan**, pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (added in
commit 820504e; runs of torch 1963fc8, torchao eab345c and torchtitan 9dec370, December
2024), tables 1-6: Llama 3.1 8B, 70B and 405B on Grand Teton hosts of 8 H100s on NVLink,
400 Gb/s RDMA per GPU, tokens per second per GPU read at the 90th iteration, and the peak
memory of any GPU. Their H100 is the 96 GB HBM2e part at a 500 W limit, "between SXM and
NVL" in peak FLOP/s (its exact peak unknown, the page says). And table "H200",
benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (torchtitan e7c0cae, June 2025;
Trainy on WhiteFiber): Llama 3.1 8B with FSDP, torch.compile and Float8 on 4 and 8 hosts
of 8 H200s (400 Gb/s per GPU), local batch 2. Each row: FSDP as ZeRO-3, torchtitan's
activation checkpointing ("selective" for its op-level policy, "full"), Float8 linears as
`--fp8`, AsyncTP as `--tp-overlap`, context parallelism as the all-gather scheme
(torchtitan's default `context_parallel_rotate_method`), gradients reduced in fp32
(its default `mixed_precision_reduce`), 8,192-token sequences where the page gives none
(the train configs' `seq_len`), one micro-batch per step without pipeline parallelism
and, with it, torchtitan's default of one micro-batch per stage (8). torch.compile is not
modelled: ringsim's elementwise work is already the fused minimum, so a compiled row and
its eager twin get the same time. The interleaved 1F1B row is left out (its stages per
GPU are not given).

**NeMo**, NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md (at 067f987),
the DGX-H100 pre-training rows of Llama 3 70B and Llama 3.1 405B, FP8 current scaling,
each measured in several NeMo containers (26.02 to 26.06): the median is the published
rate here, the range beside it. DGX-H100 is the dgx-h100 preset itself (H100 SXM, 700 W).
Each row as its perf recipe sets it (src/megatron/bridge/perf_recipes/llama/h100): the
distributed optimizer (ZeRO-1), no recomputation, sequence parallelism with TP
communication overlapped (`--tp-overlap`), the virtual pipeline size as `--interleave`,
context parallelism as the zigzag ring (Megatron-Core's default `cp_comm_type`, "p2p"),
micro-batches of one sequence, and gradients reduced in bf16 (the benchmark recipes set
`grad_reduce_in_fp32 = False`).

Nothing is fitted to any row. Printed: simulated against published tokens/s per GPU,
their ratio, memory where published, whether each table's rows keep their order, and the
ratio's median per GPU.

    .venv/bin/python bench/accuracy/step_published.py   # prints the table, writes
                                                        # bench/results/accuracy/step-torchtitan-nemo-h100-h200.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.accuracy.step_llama3 import run_step  # noqa: E402
from bench.common import RESULTS, add_force, keep_results, save_json  # noqa: E402
from sim.scenario.models import model_preset  # noqa: E402
from sim.training.plan import step_argv  # noqa: E402
from sim.training.step import Parallel  # noqa: E402
from sim.units import table  # noqa: E402

TORCHTITAN = ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (commit 820504e; torchtitan 9dec370) "
              "and benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (torchtitan e7c0cae)")
NEMO = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md (067f987), DGX-H100 rows, containers 26.02-26.06"
GiB = 2 ** 30


@dataclass(frozen=True)
class Row:
    source: str                 # "torchtitan" or "nemo"
    table: str
    label: str
    model: str
    tp: int
    cp: int
    pp: int
    dp: int
    seq: int
    sequences: int              # a step's sequences over all replicas
    microbatches: int
    published: float            # tokens/s per GPU (the median, where measured several times)
    recompute: str = "none"
    zero: int = 3
    fp8: bool = False
    tp_overlap: bool = False
    compiled: bool = False
    interleave: int = 1
    grad_reduce: str = "fp32"
    gpu: str = "H100-SXM"
    published_gib: float | None = None
    published_range: tuple[float, float] | None = None
    their_gpu: str = "H100 96 GB HBM2e, 500 W"
    cp_scheme: str = "allgather"

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def command(self) -> list[str]:
        par = Parallel(tp=self.tp, cp=self.cp, pp=self.pp, dp=self.dp, zero=self.zero, recompute=self.recompute,
                       fp8=self.fp8, microbatches=self.microbatches, interleave=self.interleave,
                       tp_overlap=self.tp_overlap, grad_reduce=self.grad_reduce, scheme=self.cp_scheme)
        args = ["step", *step_argv(model_preset(self.model), self.seq, self.sequences * self.seq, par),
                "--cluster", "dgx-h100"]
        return args + (["--gpu", self.gpu] if self.gpu != "H100-SXM" else []) + ["--json"]


def _tt(table_, label, model, tp, cp, pp, dp, seq, seqs, mb, recompute, fp8, async_tp, compiled, pub, gib,
        **kw) -> Row:
    return Row("torchtitan", table_, label, model, tp, cp, pp, dp, seq, seqs, mb, pub, recompute=recompute, fp8=fp8,
               tp_overlap=async_tp, compiled=compiled, published_gib=gib, **kw)


def _nemo(label, model, tp, cp, pp, dp, vp, sequences, runs) -> Row:
    return Row("nemo", "NeMo", label, model, tp, cp, pp, dp, 8192, sequences, sequences // dp,
               statistics.median(runs), zero=1, fp8=True, tp_overlap=True, compiled=True, interleave=vp,
               grad_reduce="bf16", published_range=(min(runs), max(runs)), their_gpu="H100 SXM (DGX-H100)",
               cp_scheme="ring")


H200 = dict(gpu="H200", their_gpu="H200")
ROWS = [
    _tt("1", "FSDP", "llama3-8b", 1, 1, 1, 8, 8192, 16, 1, "selective", False, False, False, 5762, 82.4),
    _tt("1", "FSDP + compile", "llama3-8b", 1, 1, 1, 8, 8192, 16, 1, "selective", False, False, True, 6667, 77.0),
    _tt("1", "FSDP + compile + Float8", "llama3-8b", 1, 1, 1, 8, 8192, 16, 1, "selective", True, False, True,
        8532, 76.8),
    _tt("2", "FSDP 8, CP 1", "llama3-8b", 1, 1, 1, 8, 32768, 8, 1, "full", True, False, True, 3890, 83.9),
    _tt("2", "FSDP 4, CP 2", "llama3-8b", 1, 2, 1, 4, 65536, 4, 1, "full", True, False, True, 2540, 84.2),
    _tt("2", "FSDP 2, CP 4", "llama3-8b", 1, 4, 1, 2, 131072, 2, 1, "full", True, False, True, 1071, 84.0),
    _tt("2", "FSDP 1, CP 8", "llama3-8b", 1, 8, 1, 1, 262144, 1, 1, "full", True, False, True, 548, 84.5),
    _tt("3", "FSDP", "llama3-8b", 1, 1, 1, 128, 8192, 256, 1, "selective", False, False, False, 5605, 67.0),
    _tt("3", "FSDP + compile", "llama3-8b", 1, 1, 1, 128, 8192, 256, 1, "selective", False, False, True,
        6514, 62.0),
    _tt("3", "FSDP + compile + Float8", "llama3-8b", 1, 1, 1, 128, 8192, 256, 1, "selective", True, False, True,
        8380, 61.8),
    _tt("4", "2D", "llama3-70b", 8, 1, 1, 32, 8192, 512, 1, "full", True, False, True, 829, 71.9),
    _tt("4", "2D + AsyncTP", "llama3-70b", 8, 1, 1, 32, 8192, 512, 1, "full", True, True, True, 876, 67.6),
    _tt("5", "1F1B", "llama3-405b", 8, 1, 8, 8, 8192, 256, 8, "full", True, True, True, 100, 82.5),
    _tt("6", "FSDP 8, CP 1", "llama3-405b", 8, 1, 8, 8, 32768, 64, 8, "full", True, True, True, 76, 75.3),
    _tt("6", "FSDP 4, CP 2", "llama3-405b", 8, 2, 8, 4, 65536, 32, 8, "full", True, True, True, 47, 75.9),
    _tt("6", "FSDP 2, CP 4", "llama3-405b", 8, 4, 8, 2, 131072, 16, 8, "full", True, True, True, 31, 77.1),
    _tt("6", "FSDP 1, CP 8", "llama3-405b", 8, 8, 8, 1, 262144, 8, 8, "full", True, True, True, 16, 84.9),
    _tt("H200", "4 hosts", "llama3-8b", 1, 1, 1, 32, 8192, 64, 1, "selective", True, False, True, 10938, 47.96,
        **H200),
    _tt("H200", "8 hosts", "llama3-8b", 1, 1, 1, 64, 8192, 128, 1, "selective", True, False, True, 10753, 46.97,
        **H200),
    # NeMo 26.02, 26.02.01, 26.04, 26.04.01 (70B); 26.02, 26.04.01, 26.06 (405B)
    _nemo("70B TP4 PP8 VP5", "llama3-70b", 4, 1, 8, 2, 5, 256, [1621, 1639, 1633, 1664]),
    _nemo("405B TP8 PP8 CP2 VP8", "llama3-405b", 8, 2, 8, 8, 8, 1536, [311, 328, 326]),
]


def order_kept(rows: list[dict]) -> bool:
    """Whether the simulated rates fall in the published order."""
    pub = sorted(range(len(rows)), key=lambda i: -rows[i]["published"])
    sim = sorted(range(len(rows)), key=lambda i: -rows[i]["simulated"])
    return pub == sim


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(RESULTS / "accuracy" / "step-torchtitan-nemo-h100-h200.json"))
    add_force(p)
    a = p.parse_args()
    keep_results("step_published", a.out, force=a.force)
    rows, out = [], []
    for r in ROWS:
        d = run_step(r.command())
        sim = d["tokens_per_s_per_gpu"]
        rows.append({**{k: getattr(r, k) for k in Row.__dataclass_fields__}, "gpus": r.gpus, "simulated": sim,
                     "ratio": sim / r.published, "mfu": d["mfu"], "simulated_gib": d["memory_bytes_per_gpu"] / GiB,
                     "breakdown": d["breakdown"], "command": "ringsim " + " ".join(r.command())})
        pub = f"{r.published:,.0f}" + (f" ({r.published_range[0]:,.0f}-{r.published_range[1]:,.0f})"
                                       if r.published_range else "")
        out.append([r.table, r.label, r.model.removeprefix("llama3-"), f"{r.gpus}", r.gpu,
                    f"{r.tp}/{r.cp}/{r.pp}/{r.dp}", f"{r.seq:,}", pub, f"{sim:,.0f}", f"{sim / r.published:.2f}",
                    "" if r.published_gib is None else f"{r.published_gib:.1f}",
                    f"{d['memory_bytes_per_gpu'] / GiB:.1f}"])
    print(f"Llama 3 training steps, tokens/s per GPU\n  {TORCHTITAN}\n  {NEMO}\n"
          "tables 1-6 ran on H100 96 GB HBM2e at 500 W and are simulated on the H100-SXM preset (700 W, 80 GB "
          "HBM3); table H200 and NeMo's DGX-H100 ran on the preset's own GPU\n")
    print(table(["table", "run", "model", "GPUs", "GPU", "TP/CP/PP/DP", "seq", "published", "simulated", "sim/pub",
                 "GiB pub", "GiB sim"], out))
    groups = {"torchtitan on H100 at 500 W": [r for r in rows if r["source"] == "torchtitan" and r["gpu"] == "H100-SXM"],
              "torchtitan on H200": [r for r in rows if r["source"] == "torchtitan" and r["gpu"] == "H200"],
              "NeMo on DGX-H100": [r for r in rows if r["source"] == "nemo"]}
    summary = {}
    for name, mine in groups.items():
        ratios = [r["ratio"] for r in mine]
        summary[name] = {"rows": len(mine), "median": statistics.median(ratios), "min": min(ratios),
                         "max": max(ratios)}
        print(f"sim/pub, {name}: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f} "
              f"over {len(mine)} rows")
    orders = {}
    for t in dict.fromkeys(r["table"] for r in rows):
        mine = [r for r in rows if r["table"] == t]
        # a compiled run and its eager twin get one time here: only the rows the model tells apart
        told = [r for r in mine if r["compiled"] or not any(s["compiled"] and s["fp8"] == r["fp8"]
                                                            and s["tp_overlap"] == r["tp_overlap"] for s in mine)]
        if len(told) > 1 and len({r["model"] for r in told}) == 1:      # rows of one model
            orders[t] = order_kept(told)
    print("published order kept within a table: "
          + ", ".join(f"table {t} {'yes' if ok else 'no'}" for t, ok in orders.items()))
    save_json(a.out, {"sources": [TORCHTITAN, NEMO], "rows": rows, "order_kept": orders, "summary": summary},
              force=a.force, indent=1)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
