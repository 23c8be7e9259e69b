"""The ring found in profiler traces (sim.profiler.ring): a synthetic GPU trace written here
from a closed-form zigzag ring, and CPU traces recorded on gloo (tests/data/traces/cpu)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from sim.errors import RingsimError
from sim.profiler.reader import read_run
from sim.profiler.ring import find_ring

CPU = Path(__file__).resolve().parents[2] / "data" / "traces" / "cpu"

FLASH_FWD = ("void flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, cutlass::bfloat16_t>, "
             "true, true, false, false, true, true, false>(Flash_fwd_params)")
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


def zigzag_block(r: int, k: int, n: int, c: int) -> tuple[int, int, bool]:
    """(queries, keys, causal) of rank r's block at step k of a zigzag ring (docs/design.md,
    fact 8): its own block whole and causal; an earlier rank's first chunk against all of
    its queries; a later rank's whole block against its second chunk."""
    owner = (r - k) % n
    if k == 0:
        return c, c, True
    return (c, c // 2, False) if owner < r else (c // 2, c, False)


def pairs(q: int, k: int, causal: bool) -> float:
    return q * (q + 1) / 2 if causal else float(q * k)


def write_gpu_ring(folder: Path, *, n: int = 4, c: int = 1024, heads: int = 8, kv_heads: int = 2, d: int = 64,
                   iterations: int = 2, rate: float = 400e12, alpha_s: float = 20e-6,
                   bandwidth: float = 50e9, kernel_ids: bool = True, profiler_steps: bool = True) -> dict:
    """One Kineto trace per rank of a zigzag ring forward on GPUs (bf16), every rank alike:
    a FlashAttention kernel per step on stream 7 (FLOPs / `rate` long) launched by
    `aten::_flash_attention_forward` with its Input Dims, an NCCL SendRecv of the next K/V
    block (alpha + bytes / bandwidth) on stream 20 beside it; step k + 1 starts when step k
    and hop k are both done. Without `kernel_ids` the attention kernels carry no External
    id (as some traces keep them): only their launch's correlation links them to their op.
    Returns what a reader should find."""
    folder.mkdir(parents=True, exist_ok=True)
    kv_elems = 2 * kv_heads * c * d            # K and V of one block, batch 1
    hop_s = alpha_s + kv_elems * 2 / bandwidth
    expect_phase = 0.0
    for r in range(n):
        ev, ext, t = [], 1, 1000.0
        for it in range(1, iterations + 1):
            it_start = t
            for k in range(n):
                q, kv, causal = zigzag_block(r, k, n, c)
                comp_s = 4.0 * d * heads * pairs(q, kv, causal) / rate
                if k < n - 1:
                    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": r, "tid": 1,
                               "ts": t - 30, "dur": 5, "args": {"correlation": ext, "External id": ext}})
                    ev.append({"ph": "X", "cat": "kernel", "name": SENDRECV, "pid": 0, "tid": 20, "ts": t,
                               "dur": hop_s * 1e6, "args": {"stream": 20, "device": 0, "correlation": ext,
                                                            "External id": ext, "In msg nelems": kv_elems,
                                                            "Out msg nelems": kv_elems, "dtype": "BFloat16",
                                                            "Group size": 2}})
                    ext += 1
                dims = [[1, q, heads, d], [1, kv, kv_heads, d], [1, kv, kv_heads, d], [], [], [], [], []]
                ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::_flash_attention_forward", "pid": r, "tid": 1,
                           "ts": t - 20, "dur": 15, "args": {"External id": ext, "Input Dims": dims}})
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": r, "tid": 1,
                           "ts": t - 15, "dur": 5, "args": {"correlation": ext, "External id": ext}})
                ids = {"External id": ext} if kernel_ids else {}
                ev.append({"ph": "X", "cat": "kernel", "name": FLASH_FWD, "pid": 0, "tid": 7, "ts": t,
                           "dur": comp_s * 1e6, "args": {"stream": 7, "device": 0, "correlation": ext, **ids,
                                                         "grid": [8, 8, 1], "block": [128, 1, 1]}})
                ext += 1
                t += max(comp_s, hop_s if k < n - 1 else 0.0) * 1e6
            expect_phase = (t - it_start) * 1e-6
            if profiler_steps:
                ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{it}", "pid": r, "tid": 1,
                           "ts": it_start - 100, "dur": t - it_start + 200, "args": {}})
            t += 500
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": r, "world_size": n},
               "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
               "traceEvents": ev}
        with gzip.open(folder / f"rank{r}.json.gz", "wt") as f:
            json.dump(doc, f)
    return {"n": n, "c": c, "heads": heads, "kv_heads": kv_heads, "d": d, "iterations": iterations,
            "kv_bytes": kv_elems * 2, "phase_s": expect_phase, "hop_s": hop_s, "rate": rate}


@pytest.mark.parametrize("kernel_ids", [True, False])
def test_a_synthetic_gpu_zigzag_ring_is_found_step_by_step(tmp_path, kernel_ids):
    want = write_gpu_ring(tmp_path / "run", kernel_ids=kernel_ids)
    ring = find_ring(read_run([tmp_path / "run"]))
    n, c = want["n"], want["c"]
    cfg = ring.config
    assert (cfg.n_gpus, cfg.seq, cfg.batch, cfg.heads, cfg.kv_heads, cfg.head_dim) == (n, n * c, 1, 8, 2, 64)
    assert (cfg.causal, cfg.layout, cfg.pass_, cfg.transport, cfg.scheme) == (True, "zigzag", "fwd", "p2p", "ring")
    assert cfg.dtype == "bf16" and cfg.assumed == ()       # FlashAttention's name spells its dtype
    assert ring.unmatched == []
    assert len(ring.calls) == n * n * want["iterations"]
    for call in ring.calls:
        q, kv, causal = zigzag_block(call.rank, call.step, n, c)
        assert (call.q_tokens, call.kv_tokens, call.causal) == (q, kv, causal)
        assert call.flops == pytest.approx(4.0 * 64 * 8 * pairs(q, kv, causal))
    # N - 1 hops per rank and iteration, each the K/V block
    assert len(ring.transfers) == n * (n - 1) * want["iterations"]
    assert {t.bytes for t in ring.transfers} == {want["kv_bytes"]}
    assert sorted({t.hop for t in ring.transfers}) == list(range(n - 1))
    m = ring.measured()
    assert m["n"] == want["iterations"]
    assert m["median_s"] == pytest.approx(want["phase_s"], rel=1e-9)


def test_a_trace_without_profiler_steps_is_one_iteration(tmp_path):
    want = write_gpu_ring(tmp_path / "run", iterations=1, profiler_steps=False)
    ring = find_ring(read_run([tmp_path / "run"]))
    assert (ring.config.n_gpus, ring.config.seq, ring.config.layout) == (4, 4096, "zigzag")
    assert ring.iterations == [-1]
    assert ring.measured()["median_s"] == pytest.approx(want["phase_s"], rel=1e-9)
    assert any("no ProfilerStep" in u for u in ring.unmatched)


def test_the_projects_ring_recorded_on_gloo_is_found(tmp_path):
    ring = find_ring(read_run([CPU / "ring-zigzag-causal-fwd-2r"]))
    cfg = ring.config
    assert (cfg.n_gpus, cfg.seq, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.dtype) == (2, 2048, 8, 8, 64, "fp32")
    assert (cfg.causal, cfg.layout, cfg.pass_, cfg.transport) == (True, "zigzag", "fwd", "p2p")
    assert ring.unmatched == []
    assert ring.iterations == [1, 2, 3]
    for call in ring.calls:          # one call per step, as hw.ring makes them
        assert (call.q_tokens, call.kv_tokens, call.causal) == zigzag_block(call.rank, call.step, 2, 1024)
        assert call.busy_s >= call.dur_s
    # K and V travel as two messages of one block each: 8 heads x 1024 tokens x 64 x 4 bytes
    assert {t.bytes for t in ring.transfers} == {8 * 1024 * 64 * 4}
    assert {(t.op, t.hop) for t in ring.transfers} == {("send", 0), ("recv", 0)}


def test_torch_context_parallel_rotations_are_found():
    for name, transport in (("torchcp-alltoall-causal-2r", "alltoall"), ("torchcp-allgather-causal-2r", "allgather")):
        ring = find_ring(read_run([CPU / name]))
        cfg = ring.config
        assert (cfg.n_gpus, cfg.seq, cfg.heads, cfg.head_dim, cfg.transport) == (2, 2048, 8, 64, transport)
        # torch's head-tail balancing is the zigzag layout: half blocks after the first step
        assert (cfg.causal, cfg.layout) == (True, "zigzag")
        # DTensor's call around the whole ring is no block: every call is a rank's own size or less
        assert max(c.q_tokens for c in ring.calls) == 1024
        for call in ring.calls:
            assert (call.q_tokens, call.kv_tokens, call.causal) == zigzag_block(call.rank, call.step, 2, 1024)
        # one K/V block (K and V concatenated) of 8 x 1024 x 64 fp32 each way
        assert {t.bytes for t in ring.transfers} == {2 * 8 * 1024 * 64 * 4}


def test_three_ranks_of_torch_cp_take_three_steps():
    ring = find_ring(read_run([CPU / "torchcp-alltoall-causal-3r"]))
    assert (ring.config.n_gpus, ring.config.seq, ring.config.layout) == (3, 1536, "zigzag")
    for call in ring.calls:
        assert (call.q_tokens, call.kv_tokens, call.causal) == zigzag_block(call.rank, call.step, 3, 512)
    steps = {(c.rank, c.iteration): set() for c in ring.calls}
    for c in ring.calls:
        steps[(c.rank, c.iteration)].add(c.step)
    assert all(s == {0, 1, 2} for s in steps.values())


def test_a_backward_pass_and_its_dkv_hops_are_found():
    ring = find_ring(read_run([CPU / "ring-contiguous-full-fwdbwd-3r"]))
    cfg = ring.config
    assert (cfg.n_gpus, cfg.seq, cfg.pass_, cfg.causal) == (3, 1536, "fwdbwd", False)
    assert any("full mask" in a for a in cfg.assumed)
    for kind in ("fwd", "bwd"):
        per = {}
        for c in ring.calls:
            if c.kind == kind:
                per.setdefault((c.rank, c.iteration), []).append(c.step)
        assert all(sorted(v) == [0, 1, 2] for v in per.values())
    bwd = [c for c in ring.calls if c.kind == "bwd"]
    assert bwd and all(c.flops == pytest.approx(2.5 * 4.0 * 64 * 8 * 512 * 512) for c in bwd)


def test_a_run_without_attention_or_transfers_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1},
           "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
                            "args": {"Input Dims": [[4, 4], [4, 4]]}}]}
    (folder / "rank0.json").write_text(json.dumps(doc))
    with pytest.raises(RingsimError, match="no attention calls"):
        find_ring(read_run([folder]))
