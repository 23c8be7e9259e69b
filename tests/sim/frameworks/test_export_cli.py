"""`ringsim step --export/--from` and `ringsim plan --export`: an export read back simulates the
same step; a job's unknown and ignored keys are named; the traps are refused naming the flag;
a run that cannot reach its logged throughput is called out; files are never overwritten
unasked."""

from __future__ import annotations

import json

import pytest

from sim.cli.main import main

HW = ["--cluster", "dgx-h100"]
SEQ = ["--seq", "128k", "--global-batch", "16M"]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


NUMBERS = ("step_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "palm_tflops_per_gpu", "memory_bytes_per_gpu",
           "breakdown", "memory", "stage_layers", "stage_s", "gpus", "seq", "global_batch")


@pytest.mark.parametrize("framework,split", [
    ("megatron", ["--tp", 8, "--cp", 4, "--dp", 8, "--recompute", "full"]),
    ("megatron", ["--tp", 4, "--cp", 8, "--dp", 8, "--zero", 3, "--recompute", "full", "--scheme", "hybrid",
                  "--fp8", "--grad-reduce", "bf16"]),
    ("nemo", ["--tp", 8, "--cp", 2, "--pp", 4, "--dp", 2, "--interleave", 2, "--recompute", "full",
              "--scheme", "allgather", "--tp-overlap"]),
    ("torchtitan", ["--tp", 8, "--cp", 4, "--dp", 8, "--zero", 3, "--recompute", "full", "--scheme", "allgather"]),
    ("torchtitan", ["--tp", 8, "--cp", 2, "--pp", 4, "--dp", 2, "--zero", 3, "--interleave", 2, "--recompute", "full",
                    "--scheme", "allgather", "--layout", "contiguous"]),
])
def test_an_export_read_back_simulates_the_same_step(capsys, tmp_path, framework, split):
    job = tmp_path / f"job.{framework}"
    code, out, err = run(capsys, "step", "--model", "llama3-70b", *SEQ, *split, *HW, "--json")
    assert code == 0, err
    direct = json.loads(out)
    code, _, err = run(capsys, "step", "--model", "llama3-70b", *SEQ, *split, *HW, "--export", framework, "--out", job)
    assert code == 0, err
    code, out, err = run(capsys, "step", "--from", job, *HW, "--json")
    assert code == 0, err
    read = json.loads(out)
    assert {k: read[k] for k in NUMBERS} == {k: direct[k] for k in NUMBERS}
    for k in ("tp", "cp", "pp", "dp", "zero", "recompute", "fp8", "microbatches", "interleave", "tp_overlap",
              "grad_reduce", "layout"):
        assert read["parallel"][k] == direct["parallel"][k], k
    if direct["parallel"]["cp"] > 1:
        assert read["parallel"]["scheme"] == direct["parallel"]["scheme"]


def test_the_torchtitan_launch_line_reads_as_its_toml(capsys, tmp_path):
    toml = tmp_path / "job.toml"
    split = ["--tp", 8, "--cp", 4, "--dp", 8, "--zero", 3, "--recompute", "full", "--scheme", "allgather"]
    assert run(capsys, "step", "--model", "llama3-70b", *SEQ, *split, *HW, "--export", "torchtitan", "--out", toml)[0] == 0
    line = next(x for x in toml.read_text().splitlines() if "torchrun" in x).lstrip("# ")
    (tmp_path / "job.sh").write_text(line + "\n")
    _, from_toml, _ = run(capsys, "step", "--from", toml, *HW, "--json")
    code, from_line, err = run(capsys, "step", "--from", tmp_path / "job.sh", *HW, "--json")
    assert code == 0, err
    assert json.loads(from_line)["step_s"] == json.loads(from_toml)["step_s"]


def test_an_export_never_replaces_a_file_unasked(capsys, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("mine\n")
    argv = ["step", "--model", "llama3-70b", *SEQ, "--tp", 8, "--cp", 4, "--dp", 8, "--recompute", "full", *HW,
            "--export", "megatron", "--out", job]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "pass --force" in err and job.read_text() == "mine\n"
    assert run(capsys, *argv, "--force")[0] == 0 and "--context-parallel-size 4" in job.read_text()


MEGATRON = ("torchrun --nnodes 4 --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
            "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu "
            "--vocab-size 128256 --seq-length {seq} --micro-batch-size 1 --global-batch-size 64 "
            "--tensor-model-parallel-size 2 --context-parallel-size {cp} --sequence-parallel --recompute-granularity full "
            "--recompute-method uniform --recompute-num-layers 1 {more}")


@pytest.mark.parametrize("seq,cp,more,flag", [
    (131072, 16, "--cp-comm-type a2a+p2p", "--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes"),
    (131072, 16, "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 4 2",
     "--hierarchical-context-parallel-sizes 4 x 2 = 8, not --context-parallel-size 16"),
    (131072 + 16, 16, "--cp-comm-type p2p", "--seq-length 131088 does not divide into 2 x --context-parallel-size 16"),
    (131072, 16, "--cp-comm-type a2a", "--cp-comm-type a2a: a 16-way all-to-all needs the K/V heads of a TP rank "
                                       "(--num-query-groups 8 / --tensor-model-parallel-size 2 -> 4)"),
    (131072, 8, "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 8 1",
     "--cp-comm-type a2a+p2p: a 8-way all-to-all needs the K/V heads"),
    (131072 + 16, 16, "--cp-comm-type p2p --reset-attention-mask", "--reset-attention-mask: packed (THD) sequences"),
])
def test_a_trap_is_refused_naming_the_flag(capsys, tmp_path, seq, cp, more, flag):
    job = tmp_path / "train.sh"
    job.write_text(MEGATRON.format(seq=seq, cp=cp, more=more) + "\n")
    code, out, err = run(capsys, "step", "--from", job, *HW)
    assert code == 2
    lines = err.removeprefix("ringsim: error: ").splitlines()
    assert any(line.startswith(flag) for line in lines), err


def test_memory_per_gpu_is_a_trap(capsys, tmp_path):
    job = tmp_path / "train.sh"
    job.write_text(MEGATRON.format(seq=131072, cp=2, more="").replace("--micro-batch-size 1", "--micro-batch-size 4")
                   .replace("--global-batch-size 64", "--global-batch-size 32") + "\n")
    code, out, err = run(capsys, "step", "--from", job, *HW)
    assert code == 2 and err.startswith("ringsim: error: memory per GPU:") and "--micro-batch-size 4" in err


def test_unknown_and_ignored_flags_are_named(capsys, tmp_path):
    job = tmp_path / "args.txt"
    job.write_text(MEGATRON.format(seq=131072, cp=16, more="--cp-comm-type p2p").split("pretrain_gpt.py ")[1]
                   .replace(" --", "\n--") + "\n--lr 3e-4 --train-iters 100\n--frobnicate 3\n")
    code, out, err = run(capsys, "step", "--from", job, "--gpus", 32, *HW)
    assert code == 0, err
    assert "ignored (they do not change the step): --lr, --train-iters" in out
    assert "not read (unknown to ringsim): --frobnicate" in out


def test_a_bridge_run_without_hierarchical_sizes_is_called_out(capsys, tmp_path):
    job = tmp_path / "bridge.sh"
    job.write_text("torchrun --nnodes 4 --nproc-per-node 8 scripts/training/run_recipe.py --model llama3_8b "
                   "--mode pretrain model.tensor_model_parallel_size=2 model.context_parallel_size=16 "
                   "model.cp_comm_type=a2a+p2p dataset.seq_length=131072 train.micro_batch_size=1 "
                   "train.global_batch_size=64\n")
    code, out, err = run(capsys, "step", "--from", job, *HW, "--logged-tflops", 2100)
    assert code == 2
    assert "CALLED OUT: Megatron-Bridge ran cp_comm_type a2a+p2p without hierarchical_context_parallel_sizes " \
           "without context parallelism" in out and "91c39a0" in out
    assert "above the H100-SXM's dense BF16 peak of 989" in out and "its context parallelism did not run" in out
    assert "model.cp_comm_type a2a+p2p needs model.hierarchical_context_parallel_sizes" in err


def test_from_refuses_flags_that_would_change_the_job(capsys, tmp_path):
    job = tmp_path / "train.sh"
    job.write_text(MEGATRON.format(seq=131072, cp=16, more="") + "\n")
    code, _, err = run(capsys, "step", "--from", job, "--tp", 4, *HW)
    assert code == 2 and "--from gives the job; --tp cannot change it" in err


PLAN = ["plan", "--model", "llama3-8b", "--seq", "32k", "--global-batch", "2M", "--nodes", 2, *HW]


def test_plan_exports_the_best_split_the_framework_runs(capsys, tmp_path):
    code, out, err = run(capsys, *PLAN, "--json", "--top", 0)
    ranked = json.loads(out)["candidates"]
    code, out, err = run(capsys, *PLAN, "--export", "megatron")
    assert code == 0 and err.startswith("exported rank 1 ")
    assert f"--tensor-model-parallel-size {ranked[0]['parallel']['tp']} " in out
    code, out, err = run(capsys, *PLAN, "--export", "torchtitan")
    assert code == 0
    rank = int(err.split()[2])
    chosen = ranked[rank - 1]["parallel"]
    assert chosen["zero"] != 1 or chosen["dp"] * chosen["cp"] == 1
    assert all(c["parallel"]["zero"] == 1 for c in ranked[:rank - 1])
    code, _, err = run(capsys, *PLAN, "--export", "torchtitan", "--rank", 1)
    if ranked[0]["parallel"]["zero"] == 1:
        assert code == 2 and "rank 1" in err and "ZeRO-1 is not one of its settings" in err
