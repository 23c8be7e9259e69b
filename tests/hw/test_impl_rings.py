"""bench/gpu/impl_rings.py on the CPU at tiny sizes: every implementation's ring is profiled,
read back, and each step's kernels are set beside the model's step."""

from __future__ import annotations

import json

import pytest

import bench.gpu.impl_rings as impl_rings
from hw import impl_steps
from sim.implementations.base import Implementation
from sim.layouts import block_pieces


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("impl-rings")
    out, traces = d / "impl-rings.json", d / "traces"
    rc = impl_rings.main([str(out), "--device", "cpu", "--gpus", "2", "--tokens-per-rank", "16", "--heads", "4",
                          "--kv-heads", "2", "--head-dim", "16", "--trace-dir", str(traces)])
    assert rc == 0
    return json.loads(out.read_text()), traces


def _expected_rings():
    """(library, layout, mask) every library runs, worked from its sim.implementations record."""
    want = set()
    for lib in impl_steps.ring_libraries():
        impl: Implementation = impl_steps.ring_implementation(lib)
        layouts = impl.layouts or ("contiguous", "zigzag", "striped")
        for layout in layouts:
            if layout in ("contiguous", "zigzag", "striped") and layout not in impl.full_layouts:
                want.add((lib, layout, "causal"))
        want.add((lib, "contiguous", "full"))
    return want


def test_every_ring_of_every_library_is_played(report):
    data, traces = report
    assert {(r["library"], r["layout"], r["mask"]) for r in data["rings"]} == _expected_rings()
    for r in data["rings"]:
        assert (traces / f"{r['library']}-{r['layout']}-{r['mask']}.json.gz").is_file()
    assert data["config"]["gpus"] == 2 and data["config"]["batch"] == 1


def test_every_computed_step_has_its_kernels_and_the_model_beside_them(report):
    data, _ = report
    n = 2
    for ring in data["rings"]:
        causal = ring["mask"] == "causal"
        # the steps that compute: every (rank, step) whose block has a piece, forward and backward
        want = {(kind, r, s0 + s) for kind, s0 in (("fwd", 0), ("bwd", n)) for r in range(n) for s in range(n)
                if block_pieces(ring["layout"], r, (r - s) % n, n, 16, causal)}
        assert {(row["kind"], row["rank"], row["step"]) for row in ring["steps"]} == want
        assert ring["unmatched_steps"] == [] and ring["kernels_outside_model"] == []
        for row in ring["steps"]:
            calls = [k for k in row["kernels"] if k["part"] == "call"]
            kind = "cpu_attention_fwd" if row["kind"] == "fwd" else "cpu_attention_bwd"
            # one attention call per step, as sim.implementations counts them
            assert sum(k["kind"] == kind for k in calls) == 1
            assert row["measured_us"] > 0 and row["model_us"] > 0 and row["model_call_us"] > 0
            assert row["error"] == pytest.approx(row["model_us"] / row["measured_us"] - 1)
            assert row["model_us"] == pytest.approx(row["model_call_us"] + row["model_merge_us"])
            assert row["model_engine_step_us"] > 0


def test_merges_are_the_libraries_own(report):
    data, _ = report
    names = {}
    for ring in data["rings"]:
        for row in ring["steps"]:
            if row["kind"] == "fwd":
                names.setdefault(ring["library"], set()).update(
                    k["name"] for k in row["kernels"] if k["part"] == "merge")
    # ring-flash-attention's update_out_and_lse and torch's merger: sigmoid and logsigmoid;
    # TransformerEngine's correction: log1p; the fused merge: lerp
    assert {"aten::sigmoid", "aten::log_sigmoid"} <= names["rfa"] and names["usp"] == names["rfa"]
    assert "aten::log1p" in names["te"] and "aten::sigmoid" not in names["te"]
    assert "aten::lerp_" in names["ideal"]
    assert "aten::cat" in names["torch"]


def test_summary_has_every_library_and_pass(report):
    data, _ = report
    assert set(data["summary"]) == set(impl_steps.ring_libraries())
    for cells in data["summary"].values():
        assert set(cells) == {"fwd", "bwd"}
        for c in cells.values():
            assert c["steps"] > 0 and c["median_abs_error"] >= 0


def test_the_gpu_checks_run_it_as_the_step_impls():
    from pathlib import Path

    root = Path(impl_rings.__file__).resolve().parent
    script = (root / "check.sh").read_text()
    assert "exact,grid,run,sdpa,steps,gemm,varlen,impls}" in script
    assert 'bench/gpu/impl_rings.py "$out/impl-rings.json" --gpus 4' in script
    assert "--tokens-per-rank 8192 --heads 32 --kv-heads 8 --head-dim 128" in script
    assert "bench/gpu/impl_rings.py" in script.split("set -uo pipefail")[0]    # in its header's list
    assert "impl_rings.py" in (root / "README.md").read_text()


def _gpu_trace(path):
    """A Kineto trace as a CUDA run writes one: two ranks' annotations on two host threads,
    their launches (cudaLaunchKernel) and the kernels on one stream, linked by correlation."""
    def x(cat, name, ts, dur, tid, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}

    ev = [
        x("user_annotation", "impl_step/rfa/fwd/0/1/call", 100, 20, 11),
        x("cuda_runtime", "cudaLaunchKernel", 105, 3, 11, correlation=1),
        x("user_annotation", "impl_step/rfa/fwd/0/1/merge", 130, 20, 11),
        x("cuda_runtime", "cudaLaunchKernel", 132, 3, 11, correlation=2),
        x("cuda_runtime", "cudaLaunchKernel", 140, 3, 11, correlation=3),
        # rank 1's thread launches a copy while rank 0's merge is open: not rank 0's
        x("cuda_runtime", "cudaMemcpyAsync", 135, 2, 12, correlation=4),
        x("user_annotation", "impl_step/rfa/fwd/1/1/call", 200, 20, 12),
        x("cuda_runtime", "cudaLaunchKernel", 201, 3, 12, correlation=5),
        x("kernel", "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", 110, 50, 7,
          correlation=1, stream=7, device=0),
        x("kernel", "void at::native::vectorized_elementwise_kernel<4, sigmoid>", 161, 4, 7,
          correlation=2, stream=7, device=0),
        x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 166, 2, 7, correlation=4, stream=7, device=0),
        x("kernel", "void at::native::vectorized_elementwise_kernel<4, sub>", 170, 5, 7,
          correlation=3, stream=7, device=0),
        x("kernel", "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", 205, 40, 7,
          correlation=5, stream=7, device=0),
    ]
    path.write_text(json.dumps({"traceEvents": ev}))


def test_gpu_kernels_go_to_the_step_whose_annotation_launched_them(tmp_path):
    from sim.profiler.reader import read_run

    _gpu_trace(tmp_path / "t.json")
    found = impl_rings.step_kernels(read_run([tmp_path / "t.json"]), gpu=True)
    assert set(found) == {("fwd", 0, 1), ("fwd", 1, 1)}
    mine = found["fwd", 0, 1]
    assert [(k["part"], k["kind"]) for k in mine] == [("call", "attention_fwd"), ("merge", "other"), ("merge", "other")]
    assert [k["kind"] for k in found["fwd", 1, 1]] == ["attention_fwd"]
    # the call's kernel alone, then the merge's two from the first's start to the second's end
    # (the other rank's copy between them included, as the GPU was busy with it)
    assert impl_rings.busy_s(mine) == pytest.approx(50e-6 + (175 - 161) * 1e-6)


def test_a_ring_that_fails_is_recorded_and_the_others_run(tmp_path, monkeypatch):
    real = impl_rings.play_profiled

    def fails_for_te(lib, *args, **kw):
        if lib == "te":
            raise RuntimeError("planted for te")
        return real(lib, *args, **kw)

    monkeypatch.setattr(impl_rings, "play_profiled", fails_for_te)
    out = tmp_path / "r.json"
    rc = impl_rings.main([str(out), "--device", "cpu", "--gpus", "2", "--tokens-per-rank", "8", "--heads", "2",
                          "--kv-heads", "1", "--head-dim", "8", "--libraries", "te,rfa", "--masks", "full"])
    assert rc == 1
    data = json.loads(out.read_text())
    by_lib = {r["library"]: r for r in data["rings"]}
    assert "planted for te" in by_lib["te"]["failed"] and by_lib["te"]["steps"] == []
    assert by_lib["rfa"]["steps"] and by_lib["rfa"]["compiled_merges"] is False
    assert set(data["summary"]) == {"rfa"}
