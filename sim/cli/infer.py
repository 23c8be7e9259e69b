"""`ringsim infer`: long-context inference with context parallelism (sim.inference,
docs/inference.md): a prefill over a cached prefix, a decode step over a sharded cache, or a
whole request.

    ringsim infer --phase prefill --model llama3-405b --context 128k --new 8k --tp 8 \\
        --nodes 16 --cluster dgx-h100 [--scheme pass-kv|pass-q|allgather] [--dtype fp8] [--json]
    ringsim infer --phase decode --model llama3-70b --context 128k,32k --new 512 --tp 8 --nodes 2
    ringsim infer --phase request --model llama3-70b --context 128k --new 4k --output 512 ...

`--context` is the cached and new tokens together; `--new` the tokens computed now (prefill)
or generated (decode); in a request `--context` is the prompt, `--new` its uncached part and
`--output` the tokens generated. Sizes: 128k = 131072, 1M = 2^20 tokens.
"""

from __future__ import annotations

import argparse
import json

from sim.cli.options import add_hardware_args, add_model_args, hardware_from_args, model_from_args, save_traces
from sim.errors import RingsimError
from sim.units import fmt_s, parse_count, table

PHASES = ("prefill", "decode", "request")
PREFILL_NONE = "a prefill computes 1 new token or more (T = 0 leaves nothing to compute)"


def register(sub) -> None:
    p = sub.add_parser("infer", help="long-context inference with context parallelism: prefill (pass-KV, pass-Q, "
                                     "all-gather) over a cached prefix, decode over a sharded K/V cache, a request",
                       description="Prefill time, time per output token and K/V cache per GPU of a model on TP x CP "
                                   "GPUs (docs/inference.md).")
    p.add_argument("--phase", choices=PHASES, required=True, help="prefill, decode or request (both)")
    add_model_args(p)
    add_request_args(p)
    p.add_argument("--tp", type=int, default=None, help="tensor-parallel GPUs inside a node (default: a node's)")
    p.add_argument("--nodes", type=int, default=1, help="nodes (default 1); CP = nodes x GPUs per node / TP")
    add_hardware_args(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="one JSON object: prefill_s, tpot_s, kv_cache_gib_per_gpu, "
                                                       "rule_scheme, chosen_scheme, parts, ...")
    o.add_argument("--trace", metavar="FILE", help="save one layer's attention as a trace")
    o.add_argument("--chrome-trace", metavar="FILE", help="the same as a Chrome trace (Perfetto)")
    o.add_argument("--force", action="store_true", help="overwrite existing output files")
    p.set_defaults(func=cmd_infer)


def add_request_args(p: argparse.ArgumentParser) -> None:
    """The request's flags, shared with `ringsim plan --phase` (sim.inference.plan)."""
    w = p.add_argument_group("request")
    w.add_argument("--context", default=None,
                   help="tokens of context: cached + new (128k, 1M); decode: a list for requests of different "
                        "lengths (128k,32k)")
    w.add_argument("--new", default=None,
                   help="prefill: tokens computed now (default: the whole context); decode: tokens generated "
                        "(default 256); request: the prompt's uncached tokens (default: all of it)")
    w.add_argument("--cached", default=None, help="cached tokens, instead of --new: new = context - cached")
    w.add_argument("--output", default=None, help="request: tokens generated (default 256)")
    w.add_argument("--batch", type=int, default=1, help="requests of this shape served together (default 1)")
    w.add_argument("--scheme", default=None, help="prefill: pass-kv, pass-q or allgather (default: ringsim's choice)")
    w.add_argument("--layout", default=None,
                   help="prefill: the new tokens' layout, zigzag (default), striped or contiguous; decode: the "
                        "cache's, round-robin (default) or contiguous")
    w.add_argument("--cache-layout", default="zigzag",
                   help="prefill: how the cached prefix lies, as the prefill that wrote it cut it: zigzag (default), "
                        "contiguous or striped")
    w.add_argument("--merge-by", default="all-gather",
                   help="decode: how the ranks' partial outputs meet, all-gather (default) or all-to-all")
    w.add_argument("--dtype", default="bf16", help="the linear layers: bf16 (default) or fp8 (row-wise scaled)")
    w.add_argument("--kv-dtype", default="bf16", help="the K/V cache: bf16 (default) or fp8")


def _count(value, flag: str, *, zero: bool = False, why: str | None = None) -> int:
    """A token count from a flag (128k, 1M); `zero`: 0 is allowed; `why`: what 0 would
    mean, said when it is given."""
    if zero and str(value).strip() == "0":
        return 0
    if str(value).strip() in ("0", "0k", "0K"):
        raise RingsimError(f"{flag} 0: {why}" if why else f"{flag} must be 1 or more, got 0")
    return parse_count(value, flag)


def serving_from_args(a: argparse.Namespace):
    """The model on its split (sim.inference.serve.Serving) from the command's flags."""
    from sim.inference.serve import Serving

    if getattr(a, "profile", None):
        raise RingsimError("infer runs on the datasheet hardware model: --profile is not taken")
    hw = hardware_from_args(a)
    if a.nodes is None or a.nodes < 1:
        raise RingsimError(f"--nodes must be 1 or more, got {a.nodes!r}")
    tp = a.tp if a.tp is not None else hw.gpus_per_node
    gpus = a.nodes * hw.gpus_per_node
    if tp < 1 or gpus % tp:
        raise RingsimError(f"--tp {tp} does not divide the {gpus} GPUs of {a.nodes} node(s)")
    return Serving(model=model_from_args(a), hardware=hw, tp=tp, cp=gpus // tp, dtype=a.dtype, kv_dtype=a.kv_dtype)


def contexts_of(a: argparse.Namespace) -> list[int]:
    if a.context is None:
        raise RingsimError("give --context: the tokens of context (cached + new), such as 128k")
    return [_count(x.strip(), "--context") for x in str(a.context).split(",") if x.strip()]


def split_of(a: argparse.Namespace, context: int) -> tuple[int, int]:
    """(cached, new) of a prefill or a request's prompt, from --new or --cached."""
    if a.cached is not None:
        cached = _count(a.cached, "--cached", zero=True)
        if cached > context:
            raise RingsimError(f"the cached prefix ({cached:,} tokens) is longer than the context ({context:,} tokens)")
        new = context - cached
        if a.new is not None and _count(a.new, "--new", why=PREFILL_NONE) != new:
            raise RingsimError(f"--cached {cached:,} and --new {a.new} do not add up to --context {context:,}")
        if new == 0:
            raise RingsimError("the cached prefix is the whole context: a prefill computes 1 new token or more")
        return cached, new
    new = context if a.new is None else _count(a.new, "--new", why=PREFILL_NONE)
    if new > context:
        raise RingsimError(f"--new {new:,} is more than --context {context:,}: the context holds the cached prefix "
                           "and the new tokens")
    return context - new, new


def cmd_infer(a: argparse.Namespace) -> int:
    # the engine and the inference model load when the command runs, not on every start
    from sim.inference import serve
    from sim.inference.request import request

    if a.batch < 1:
        raise RingsimError(f"--batch must be 1 or more, got {a.batch}")
    serving = serving_from_args(a)
    contexts = contexts_of(a)
    if a.phase != "decode" and len(contexts) > 1:
        raise RingsimError("a list of contexts is for decode; a prefill or a request takes one --context")
    if a.phase == "prefill":
        cached, new = split_of(a, contexts[0])
        result = serve.prefill(serving, cached, new, batch=a.batch, scheme=a.scheme, layout=a.layout or "zigzag",
                               cache_layout=a.cache_layout)
        trace, out = result.trace, result.to_dict()
        out = {"prefill_s": result.prefill_s, "tpot_s": None, **out}
    elif a.phase == "decode":
        output = 256 if a.new is None else _count(a.new, "--new", why="decode generates 1 token or more")
        prompts = [c - output for c in contexts for _ in range(a.batch)]
        if min(prompts) < 1:
            raise RingsimError(f"--new {output:,} generated tokens leave no prompt in a context of "
                               f"{min(contexts):,}: the context holds the prompt and the generated tokens")
        result = serve.decode(serving, prompts, output, layout=a.layout or "round-robin", merge=a.merge_by)
        trace, out = result.trace, {"prefill_s": None, **result.to_dict()}
    else:
        cached, new = split_of(a, contexts[0])
        output = 256 if a.output is None else _count(a.output, "--output", why="a request generates 1 token or more")
        result = request(serving, contexts[0], cached, output, batch=a.batch, scheme=a.scheme,
                         layout=a.layout or "zigzag", cache_layout=a.cache_layout, merge=a.merge_by)
        trace, out = result.prefill.trace, {"prefill_s": result.ttft_s, **result.to_dict()}
    save_traces(a, trace)
    if a.json:
        print(json.dumps(out, indent=2))
        return 0
    print(describe(out))
    return 0


def _parts_table(parts: dict[str, float], total: float) -> str:
    names = {"attention_s": "attention", "merge_comm_s": "merge collective", "merge_s": "merge kernel",
             "linear_s": "linear layers", "tp_comm_s": "TP all-reduces", "elementwise_s": "elementwise",
             "head_s": "output layer"}
    rows = [[names.get(k, k), fmt_s(v), f"{v / total:.1%}" if total else "-"] for k, v in parts.items()]
    return table(["part", "time", "share"], rows)


def describe(out: dict) -> str:
    """The command's text: the split, the answer, its parts."""
    head = (f"{out['model']} on {out['gpus']} x {out['gpu']} ({out['nodes']} node{'s' * (out['nodes'] > 1)}): "
            f"TP {out['tp']} x CP {out['cp']}, linear layers {out['dtype']}, K/V cache {out['kv_dtype']}")
    lines = [head]
    phase = out["phase"]
    if phase in ("prefill", "request"):
        p = out if phase == "prefill" else out["prefill"]
        lines.append(_prefill_lines(p))
    if phase in ("decode", "request"):
        d = out if phase == "decode" else out["decode"]
        lines.append(_decode_lines(d))
    if phase == "request":
        lines.append(f"\nrequest: time to first token {fmt_s(out['ttft_s'])}, time per output token "
                     f"{fmt_s(out['tpot_s'])}, {out['output']:,} tokens out in {fmt_s(out['total_s'])}")
    return "\n".join(lines)


def _prefill_lines(p: dict) -> str:
    lines = [f"\nprefill of {p['new']:,} new tokens over {p['cached']:,} cached (context {p['context']:,}"
             + (f", x {p['batch']} requests" if p["batch"] > 1 else "") + f"), {p['scheme']}, new tokens "
             f"{p['layout']}, cache {p['cache_layout']}: {fmt_s(p['prefill_s'])}"]
    if p["new_padded"] != p["new"]:
        lines.append(f"the new tokens padded to {p['new_padded']:,} (whole chunks of the layout)")
    lines.append(_parts_table(p["parts"], p["prefill_s"]))
    times = p["scheme_attention_s"]
    lines.append("\none layer's attention: " + ", ".join(f"{s} {fmt_s(t)}" for s, t in times.items()))
    lines.append(f"ringsim's choice: {p['chosen_scheme']} (the faster simulated); the paper's rule: "
                 f"{p['rule_scheme']} (new share T/(T+P) = {p['new_share']:.3f} against 2 H_kv/H = "
                 f"{p['rule_threshold']:.3f})")
    lines.append(f"load imbalance of the attention's pairs {p['load_imbalance']:.3f}; K/V cache "
                 f"{p['kv_cache_gib_per_gpu']:.2f} GiB per GPU beside {p['weights_gib_per_gpu']:.1f} GiB of weights")
    return "\n".join(lines)


def _decode_lines(d: dict) -> str:
    prompts = sorted(set(d["prompts"]))
    lines = [f"\ndecode of {d['batch']} request{'s' * (d['batch'] > 1)} (prompts "
             + ", ".join(f"{x:,}" for x in prompts) + f" tokens), {d['output']:,} tokens out, cache "
             f"{d['layout']}, partials merged by {d['merge']}: {fmt_s(d['tpot_s'])} a token "
             f"({d['tokens_per_s']:,.1f} tokens/s)"]
    lines.append(_parts_table(d["parts"], d["tpot_s"]))
    lines.append(f"K/V cache {d['kv_cache_gib_per_gpu']:.2f} GiB per GPU at the end beside "
                 f"{d['weights_gib_per_gpu']:.1f} GiB of weights; the longest context that fits: "
                 f"{d['max_context_tokens']:,} tokens a request")
    return "\n".join(lines)
