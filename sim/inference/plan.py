"""Plan a long-context deployment: which TP x CP split, on how many of the nodes, with which
prefill scheme or decode merge, for a latency target (docs/inference.md).

`plan_inference` tries, for the phase asked (prefill or decode), every tensor-parallel
degree that divides a node's GPUs and the model's heads, on 1, 2, 4, ... of the nodes (and
all of them), and each prefill scheme (pass-KV, pass-Q, all-gather) or each decode merge
(all-gather, all-to-all) with each cache layout (round-robin, contiguous); each candidate is
one `ringsim infer` run (sim.inference.serve), and one whose cache does not fit, or which
the model's shape refuses, is listed with the reason. The ranking: with a latency target,
the candidates that meet it first, the fewest GPUs among them first (the cheapest way to
meet it), then by latency; without one, by latency, then GPUs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sim.errors import RingsimError

PLAN_PHASES = ("prefill", "decode")


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """`ringsim plan --phase`'s own flags (the model, cluster and output flags are plan's)."""
    g = p.add_argument_group("inference (with --phase)")
    g.add_argument("--phase", choices=PLAN_PHASES, default=None,
                   help="plan inference instead: the TP x CP splits and schemes of a prefill or a decode "
                        "(docs/inference.md); takes --context and --new instead of --seq")
    g.add_argument("--context", default=None, help="with --phase: tokens of context, cached + new (128k, 1M)")
    g.add_argument("--new", default=None,
                   help="with --phase: prefill, tokens computed now (default all); decode, tokens generated "
                        "(default 256)")
    g.add_argument("--latency-target", type=float, default=None, metavar="S",
                   help="with --phase: seconds the prefill (or a decode step) must take at most")
    g.add_argument("--kv-dtype", default="bf16", help="with --phase: the K/V cache, bf16 (default) or fp8")


def _splits(gpus_per_node: int, nodes: int, heads: int, kv_heads: int) -> list[tuple[int, int]]:
    """(nodes used, TP) of every split tried (module docstring)."""
    used = sorted({n for n in (1 << k for k in range(nodes.bit_length())) if n <= nodes} | {nodes})
    tps = [t for t in range(1, gpus_per_node + 1)
           if gpus_per_node % t == 0 and heads % t == 0 and (kv_heads % t == 0 or t % kv_heads == 0)]
    return [(n, t) for n in used for t in tps]


def plan_inference(model, hardware, nodes: int, phase: str, context: int, new: int, *, batch: int = 1,
                   dtype: str = "bf16", kv_dtype: str = "bf16", latency_target_s: float | None = None,
                   hardware_flags: str | None = None) -> dict[str, Any]:
    """Every candidate (module docstring), ranked; each a dict with its split, variant,
    `latency_s` (prefill_s, or tpot_s), `meets`, `gpus`, memory and its `ringsim infer`
    command (its hardware `hardware_flags`, else the GPU's preset), or `refused` with the reason."""
    # the inference model and the engine load when a plan runs, not on every start
    from sim.inference.serve import Serving, decode, prefill
    from sim.inference.work import SCHEMES as PREFILL_SCHEMES

    if phase not in PLAN_PHASES:
        raise RingsimError(f"--phase must be one of {', '.join(PLAN_PHASES)}, got {phase!r}")
    if latency_target_s is not None and not latency_target_s > 0:
        raise RingsimError(f"--latency-target must be a positive number of seconds, got {latency_target_s!r}")
    gpn = hardware.gpus_per_node
    rows: list[dict[str, Any]] = []
    for used, tp in _splits(gpn, nodes, model.heads, model.kv_heads):
        cp = used * gpn // tp
        variants = ([("scheme", s) for s in PREFILL_SCHEMES] if phase == "prefill"
                    else [("merge", (m, lay)) for m in ("all-gather", "all-to-all")
                          for lay in ("round-robin", "contiguous")])
        if cp == 1:          # one rank: no ring to choose, nothing to merge
            variants = variants[:1]
        for what, v in variants:
            row: dict[str, Any] = {"nodes": used, "gpus": used * gpn, "tp": tp, "cp": cp}
            if what == "scheme":
                row["variant"] = v
                flags = f"--scheme {v}"
            else:
                row["variant"] = f"{v[0]}, {v[1]}"
                flags = f"--merge-by {v[0]} --layout {v[1]}"
            row["command"] = (f"ringsim infer --phase {phase} --model {model.name} --context {context} --new {new} "
                              f"--tp {tp} --nodes {used} --gpus-per-node {gpn} "
                              f"{hardware_flags or '--gpu ' + hardware.gpu.name} {flags}"
                              + (" --dtype fp8" if dtype == "fp8" else "")
                              + (f" --kv-dtype {kv_dtype}" if kv_dtype != "bf16" else "")
                              + (f" --batch {batch}" if batch > 1 else ""))
            try:
                serving = Serving(model=model, hardware=hardware, tp=tp, cp=cp, dtype=dtype, kv_dtype=kv_dtype)
                if phase == "prefill":
                    r = prefill(serving, context - new, new, batch=batch, scheme=v)
                    row |= {"latency_s": r.prefill_s, "kv_cache_gib_per_gpu": r.to_dict()["kv_cache_gib_per_gpu"],
                            "rule_scheme": r.rule_scheme, "chosen_scheme": r.chosen_scheme}
                else:
                    r = decode(serving, [context - new] * batch, new, merge=v[0], layout=v[1])
                    row |= {"latency_s": r.tpot_s, "kv_cache_gib_per_gpu": r.to_dict()["kv_cache_gib_per_gpu"],
                            "max_context_tokens": r.max_context_tokens}
            except RingsimError as e:
                row["refused"] = str(e)
            rows.append(row)
    timed = [r for r in rows if "refused" not in r]
    for r in timed:
        r["meets"] = latency_target_s is None or r["latency_s"] <= latency_target_s
    if latency_target_s is None:
        timed.sort(key=lambda r: (r["latency_s"], r["gpus"]))
    else:
        timed.sort(key=lambda r: (not r["meets"], r["gpus"] if r["meets"] else 0, r["latency_s"]))
    for i, r in enumerate(timed, 1):
        r["rank"] = i
    return {"phase": phase, "model": model.name, "context": context, "new": new, "batch": batch,
            "latency_target_s": latency_target_s, "candidates": timed,
            "refused": [r for r in rows if "refused" in r]}


def format_plan(result: dict[str, Any], top: int) -> str:
    """The ranking as text: a table, then each shown candidate's command."""
    from sim.units import fmt_s, table

    target = result["latency_target_s"]
    what = "prefill" if result["phase"] == "prefill" else "time per output token"
    lines = [f"{result['model']}: {result['phase']} of {result['new']:,} tokens, context {result['context']:,}"
             + (f", x {result['batch']} requests" if result["batch"] > 1 else "")
             + (f"; target {fmt_s(target)} ({what})" if target is not None else "")]
    shown = result["candidates"][:top]
    rows = [[r["rank"], f"TP {r['tp']} x CP {r['cp']}", r["nodes"], r["gpus"], r["variant"], fmt_s(r["latency_s"]),
             "yes" if r["meets"] else "no", f"{r['kv_cache_gib_per_gpu']:.2f}"] for r in shown]
    lines.append(table(["#", "split", "nodes", "GPUs", "scheme" if result["phase"] == "prefill" else "merge, cache",
                        what.split(" of")[0], "meets", "K/V GiB/GPU"], rows))
    for r in shown:
        lines.append(f"{r['rank']}. {r['command']}")
    if result["refused"]:
        lines.append(f"{len(result['refused'])} not possible, for example: {result['refused'][0]['refused']}")
    return "\n".join(lines)


def cmd_plan_inference(a: argparse.Namespace) -> int:
    """`ringsim plan --phase prefill|decode` (sim.cli.plan dispatches here)."""
    from sim.cli.options import model_from_args
    from sim.scenario.resolve import hardware_of
    from sim.scenario.schema import SCENARIO_OPTIONS
    from sim.units import parse_count

    if getattr(a, "profile", None):
        raise RingsimError("plan --phase runs on the datasheet hardware model: --profile is not taken")
    if a.context is None:
        raise RingsimError("plan --phase needs --context: the tokens of context, cached + new (128k, 1M)")
    values = {o.name: v for o in SCENARIO_OPTIONS
              if o.group == "hardware" and (v := getattr(a, o.dest, None)) is not None}
    hardware = hardware_of(values)
    context = parse_count(a.context, "--context")
    default_new = context if a.phase == "prefill" else 256
    new = default_new if a.new is None else parse_count(a.new, "--new")
    if new > context:
        raise RingsimError(f"--new {new:,} is more than --context {context:,}: the context holds the cached prefix "
                           "and the new tokens")
    if a.phase == "decode" and new >= context:
        raise RingsimError(f"--new {new:,} generated tokens leave no prompt in a context of {context:,}")
    defaults = {"kernel": "default", "merge": "fused", "gpus-per-node": None}
    flags = " ".join(f"--{k} {v}" for k, v in values.items() if defaults.get(k, "") != v and k in values
                     and k != "gpus-per-node")
    result = plan_inference(model_from_args(a), hardware, a.nodes, a.phase, context, new, batch=a.batch,
                            dtype="fp8" if a.fp8 else "bf16", kv_dtype=a.kv_dtype,
                            latency_target_s=a.latency_target, hardware_flags=flags or None)
    if a.json:
        top = a.top or None
        json.dump({**result, "candidates": result["candidates"][:top]}, sys.stdout, indent=2)
        print()
        return 0
    print(format_plan(result, a.top or len(result["candidates"])))
    return 0
