"""On one GPU: packed documents' varlen attention calls and zigzag varlen's index
operations, measured, against the block model (docs/packed.md).

Two measurements at ring-flash-attention's varlen benchmark shapes (8192 tokens a GPU,
32 query and 8 K/V heads of 128, bf16, its four packings of cu_seqlens):

1. `calls`: one causal varlen attention call over the packing (torch's FlashAttention-2
   varlen kernel, `torch.ops.aten._flash_attention_forward` with cumulative lengths; the
   backward through `torch.ops.aten._flash_attention_backward`), timed with CUDA events,
   beside `sim.hardware.kernel_model.varlen_times_s` for the same call on this GPU's preset.
2. `index`: the operations zigzag_ring_flash_attn_varlen_func's backward runs at every
   step on a packing of several documents and the batch api does not: boolean-mask
   gathers of K and V (`k[half_index0]`), and the read-add-write of dQ, dK, dV halves
   through a boolean mask (`dq[half_index1] += dq_buffer[:half]`), each timed by wall
   clock around a synchronised run (the mask's size is read back by the host), against
   the same work on slices. Their difference is the cost the block model leaves out
   (docs/packed.md, "Against ring-flash-attention's varlen table").

    python bench/gpu/varlen.py OUT.json [--force] [--device cuda|cpu]

`--device cpu` runs the second part alone (no flash kernel on a CPU): a check of the
script, not a measurement of a GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import keep_results, save_json  # noqa: E402

TOKENS = 8192
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
LOCAL_CU_SEQLENS = ([0, 8192], [0, 256, 7648, 8192], [0, 4096, 8192], [0, 3104, 6304, 7904, 8064, 8192])
REPEATS = 20


def _half_index(cu: list[int], front: bool, torch, device):
    """ring-flash-attention's get_half_index: each document's first (or second) half."""
    index = torch.zeros(cu[-1], dtype=torch.bool, device=device)
    for a, b in zip(cu[:-1], cu[1:]):
        mid = (a + b) // 2
        if front:
            index[a:mid] = True
        else:
            index[mid:b] = True
    return index


def _wall(fn, torch, device, repeats: int = REPEATS) -> list[float]:
    """Seconds of each call, synchronised before and after (what a step waits for)."""
    out = []
    for _ in range(repeats + 3):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out[3:]


def index_costs(torch, device: str) -> list[dict]:
    """Part 2: the boolean-mask operations against slices, per packing of several documents."""
    rows = []
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    for cu in LOCAL_CU_SEQLENS[1:]:
        half = TOKENS // 2
        k = torch.randn(TOKENS, KV_HEADS, HEAD_DIM, device=device, dtype=dt)
        v = torch.randn_like(k)
        dq = torch.zeros(TOKENS, HEADS, HEAD_DIM, device=device, dtype=torch.float32)
        dk = torch.zeros(TOKENS, KV_HEADS, HEAD_DIM, device=device, dtype=torch.float32)
        dq_buffer = torch.randn(TOKENS, HEADS, HEAD_DIM, device=device, dtype=dt)
        dk_buffer = torch.randn(TOKENS, KV_HEADS, HEAD_DIM, device=device, dtype=dt)
        i0, i1 = _half_index(cu, True, torch, device), _half_index(cu, False, torch, device)

        def masked_kv():
            return k[i0], v[i0]

        def sliced_kv():
            return k[:half], v[:half]

        def masked_dq():
            dq[i1] += dq_buffer[:half]

        def sliced_dq():
            dq[half:] += dq_buffer[:half]

        def masked_dkv():
            dk[i0] += dk_buffer[:half]
            dk[i0] += dk_buffer[:half]       # dV: the same shapes

        def sliced_dkv():
            dk[:half] += dk_buffer[:half]
            dk[:half] += dk_buffer[:half]

        row = {"cu_seqlens": cu}
        for name, masked, sliced in (("kv_gather", masked_kv, sliced_kv), ("dq_add", masked_dq, sliced_dq),
                                     ("dkv_add", masked_dkv, sliced_dkv)):
            m, s = _wall(masked, torch, device), _wall(sliced, torch, device)
            row[name] = {"masked_s": statistics.median(m), "sliced_s": statistics.median(s),
                         "masked_range_s": [min(m), max(m)], "sliced_range_s": [min(s), max(s)]}
        rows.append(row)
    return rows


def varlen_calls(torch) -> list[dict]:
    """Part 1: one causal varlen call per packing and pass, measured and modelled."""
    import numpy as np

    from sim.engine.players import head_geometry
    from sim.hardware.cluster import Gpu, Hardware
    from sim.layouts.packed import BlockCall
    from sim.scenario.config import Workload

    name = torch.cuda.get_device_name()
    preset = "H200" if "H200" in name else "H100-SXM" if "H100" in name else "A100-SXM-80GB"
    hw = Hardware(gpu=Gpu.preset(preset, kernel="fa2"))
    w = Workload(seq=TOKENS, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype="bf16")
    rows = []
    for cu in LOCAL_CU_SEQLENS:
        q = torch.randn(TOKENS, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(TOKENS, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        # FlashAttention-2's varlen kernel takes K/V heads as they are (GQA)
        cum = torch.tensor(cu, device="cuda", dtype=torch.int32)
        longest = max(b - a for a, b in zip(cu[:-1], cu[1:]))
        fwd = torch.ops.aten._flash_attention_forward
        try:
            out, lse, seed, offset, _ = fwd(q, k, v, cum, cum, longest, longest, 0.0, True, False)
        except (RuntimeError, TypeError, ValueError) as e:     # an operator this torch spells otherwise
            return [{"unavailable": f"{type(e).__name__}: {e}"}]
        dout = torch.randn_like(out)

        def forward():
            fwd(q, k, v, cum, cum, longest, longest, 0.0, True, False)

        def backward():
            torch.ops.aten._flash_attention_backward(dout, q, k, v, out, lse, cum, cum, longest, longest, 0.0,
                                                     True, seed, offset)

        pieces = tuple(("diagonal", b - a, b - a) for a, b in zip(cu[:-1], cu[1:]))
        pairs = sum(x * (x + 1) // 2 for _, x, _ in pieces)
        for kind, fn in (("fwd", forward), ("bwd", backward)):
            try:
                times = _events(fn, torch)
            except (RuntimeError, TypeError, ValueError) as e:
                rows.append({"cu_seqlens": cu, "pass": kind, "unavailable": f"{type(e).__name__}: {e}"})
                continue
            flops = (2.5 if kind == "bwd" else 1.0) * w.fwd_flops(pairs)
            model = float(hw.varlen_times_s([BlockCall(pieces)], np.array([flops]), dtype="bf16",
                                            kind=np.array([kind]), alone=np.array([True]),
                                            isolated=np.array([False]), **head_geometry(w))[0])
            rows.append({"cu_seqlens": cu, "pass": kind, "measured_s": statistics.median(times),
                         "measured_range_s": [min(times), max(times)], "model_s": model, "preset": preset})
    return rows


def _events(fn, torch, repeats: int = REPEATS) -> list[float]:
    for _ in range(3):
        fn()
    out = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="varlen calls and zigzag varlen's index operations on one GPU")
    p.add_argument("out", help="JSON to write")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a = p.parse_args(argv)
    keep_results("varlen", a.out, force=a.force)
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device visible to torch; --device cpu checks the script alone", file=sys.stderr)
        return 2
    result = {"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
              "torch": torch.__version__, "index": index_costs(torch, a.device)}
    if a.device == "cuda":
        result["calls"] = varlen_calls(torch)
    print(f"{'packing':40} {'operation':10} {'masked':>10} {'sliced':>10} {'extra':>10}")
    for row in result["index"]:
        for name in ("kv_gather", "dq_add", "dkv_add"):
            r = row[name]
            print(f"{str(row['cu_seqlens']):40} {name:10} {r['masked_s'] * 1e3:9.3f}ms {r['sliced_s'] * 1e3:9.3f}ms "
                  f"{(r['masked_s'] - r['sliced_s']) * 1e3:9.3f}ms")
    for row in result.get("calls", []):
        if "measured_s" in row:
            print(f"{str(row['cu_seqlens']):40} {row['pass']:10} measured {row['measured_s'] * 1e3:.3f} ms, "
                  f"model {row['model_s'] * 1e3:.3f} ms ({row['model_s'] / row['measured_s'] - 1:+.1%})")
        else:
            print(f"varlen call: {row['unavailable']}")
    save_json(a.out, result, force=a.force, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
