"""bench/gpu/vs_preset.py: measured GPU blocks against the block model, checked against
the published table's own numbers worked by hand."""

from __future__ import annotations

import json

import pytest

import bench.gpu.vs_preset as gpu_vs_preset


def _entry(kind, mask, tokens, heads, median_s, batch=1):
    pairs = tokens * tokens if mask == "full" else tokens * (tokens + 1) // 2
    flops = 4.0 * batch * heads * 128 * pairs * (2.5 if kind == "bwd" else 1.0)
    return {"kind": kind, "dtype": "bf16", "batch": batch, "heads": heads, "kv_heads": heads, "head_dim": 128,
            "q_tokens": tokens, "kv_tokens": tokens, "mask": mask, "flops": flops, "median_s": median_s}


def _bench(entries):
    return {"device": {"kind": "cuda", "name": "NVIDIA H200", "torch": "2.11"}, "compute": entries}


# FlashAttention-2 on H100, head dim 128, as its authors published it (the preset's fa2 table):
# forward dense 4k 368 TFLOP/s, forward causal 16k 335, backward dense 2k 291. At their
# benchmark's own setting (batch x tokens = 16k, 16 heads) the block model's main kernel takes
# the published time; an isolated call adds the H200's measured floor (33.3 us forward,
# 36.3 us backward) and its kernels' gaps (1 us each), and a backward its preprocess and dQ
# conversion, memory-bound at the H200's streaming rate (3,165 GB/s).
PUBLISHED = [("fwd", "full", 4096, 368.0), ("fwd", "diagonal", 16384, 335.0), ("bwd", "full", 2048, 291.0)]
H200_STREAM = 3165e9
H100_STREAM = 2500e9


def _fill_bytes(kind, tokens, heads):
    """The pipeline fill's bytes by hand (FlashAttention-2, head dim 128, 132 SMs): the
    forward's first wave is 2 CTAs per SM of 128 query rows, and one 64-row K and V tile
    per head it touches; the backward's 1 CTA per SM of 128 key and value rows, and one
    64-row Q and dO tile per head."""
    if kind == "fwd":
        per_head, resident = tokens // 128, min(tokens // 128 * heads, 132 * 2)
        rows = resident * 128 + min(heads, -(-resident // per_head)) * 2 * 64
    else:
        per_head, resident = tokens // 128, min(tokens // 128 * heads, 132)
        rows = resident * 2 * 128 + min(heads, -(-resident // per_head)) * 2 * 64
    return rows * 128 * 2


def _model_s(kind, tokens, flops, tflops, batch, causal=False):
    rows = batch * 16 * tokens
    if causal:      # the benchmark counts a causal call as half the dense pairs, the bench exactly
        flops = flops * (tokens / 2) / ((tokens + 1) / 2)
    # the published call loaded its fill at the H100's rate, the H200 at its own
    fill = _fill_bytes(kind, tokens, batch * 16)
    fill_s = fill / H200_STREAM - fill / H100_STREAM
    if kind == "fwd":
        return 33.3e-6 + flops / (tflops * 1e12) + 1e-6 + fill_s
    others = rows * (2 * 128 * 2 + 4 + 4 * 128) + rows * 128 * 6
    # the published call ran its other kernels at the H100's rate: the main kernel is the rest
    return 36.3e-6 + flops / (tflops * 1e12) - others / H100_STREAM + others / H200_STREAM + 3e-6 + fill_s


@pytest.mark.parametrize("kind,mask,tokens,tflops", PUBLISHED)
def test_a_block_at_the_published_setting_reads_the_model_by_hand(kind, mask, tokens, tflops):
    batch = 16384 // tokens
    e = _entry(kind, mask, tokens, 16, 0.0, batch=batch)
    e["median_s"] = _model_s(kind, tokens, e["flops"], tflops, batch, mask == "diagonal")
    (row,) = gpu_vs_preset.block_rows(_bench([e]), gpu_vs_preset.preset_gpu("H200", "fa2"))
    assert row["error"] == pytest.approx(0.0, abs=1e-9)
    assert row["tiles"] == batch * 16 * tokens // 128


def test_a_block_twice_as_slow_reads_minus_half():
    e = _entry("fwd", "full", 4096, 16, 0.0, batch=4)
    e["median_s"] = 2 * _model_s("fwd", 4096, e["flops"], 368.0, 4)
    (row,) = gpu_vs_preset.block_rows(_bench([e]), gpu_vs_preset.preset_gpu("H200", "fa2"))
    assert row["error"] == pytest.approx(-0.5)
    assert row["measured_tflops"] == pytest.approx(e["flops"] / e["median_s"] / 1e12)


def test_command_prints_rows_and_writes_json(tmp_path, capsys):
    src = tmp_path / "b.json"
    e = _entry("fwd", "full", 4096, 16, 0.0, batch=4)
    e["median_s"] = _model_s("fwd", 4096, e["flops"], 368.0, 4)
    src.write_text(json.dumps(_bench([e])))
    out = tmp_path / "o.json"
    assert gpu_vs_preset.main([str(src), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert ("+0.0%" in printed or "-0.0%" in printed) and "over 1024 tiles 0.0% (1)" in printed
    assert ">= 2k tokens: median |error| 0.0%, worst 0.0%, 1 of 1 within 10%" in printed
    written = json.loads(out.read_text())
    assert written["blocks"][0]["tokens"] == 4096 and written["summary"]["from_2k"]["within"] == 1
    assert gpu_vs_preset.main([str(src), "--json", str(out)]) == 2          # kept unless --force
    assert "exists; pass --force" in capsys.readouterr().err


def test_cpu_benches_and_unreadable_files_are_refused(tmp_path, capsys):
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"device": {"kind": "cpu"}, "compute": [_entry("fwd", "full", 512, 8, 1e-3)]}))
    assert gpu_vs_preset.main([str(cpu)]) == 2
    assert "no GPU compute entries" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert gpu_vs_preset.main([str(bad)]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert gpu_vs_preset.main([str(tmp_path / "missing.json")]) == 2
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"device": {"kind": "cuda"}, "compute": [{"kind": "fwd"}]}))
    assert gpu_vs_preset.main([str(broken)]) == 2
    assert "lacks a field" in capsys.readouterr().err
