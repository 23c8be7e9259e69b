"""A step exported as a torchtitan job is the job torchtitan 0.3.0 parses: its ConfigManager
(tyro over torchtitan's own ParallelismConfig, TrainingConfig, CompileConfig and
activation-checkpointing policies) accepts every key of the TOML, as the launch line in its
header gives them, and holds the values ringsim meant; what torchtitan cannot run is refused
with its reason."""

from __future__ import annotations

import pytest

from sim.errors import RingsimError
from sim.frameworks import torchtitan
from sim.frameworks.job import export
from sim.hardware.cluster import Hardware
from sim.scenario.models import MODEL_PRESETS
from sim.scenario.resolve import hardware_of
from sim.training.step import Parallel, StepRequest, simulate_step

try:
    import tomllib
except ModuleNotFoundError:              # Python 3.10
    tomllib = pytest.importorskip("tomli")
config_manager = pytest.importorskip("torchtitan.config").ConfigManager
AC = pytest.importorskip("torchtitan.distributed.activation_checkpoint")

REGISTRY = "tests.sim.frameworks.torchtitan_job"


def dgx() -> Hardware:
    return hardware_of({"cluster": "dgx-h100"})


def step_of(model: str, seq: int, global_batch: int, **parallel):
    return simulate_step(StepRequest(model=MODEL_PRESETS[model], seq=seq, global_batch=global_batch,
                                     parallel=Parallel(**parallel), hardware=dgx()))


def parsed(text: str):
    """torchtitan's ConfigManager on the exported job's keys (our registry in place of
    torchtitan's llama3 one, whose models need Triton)."""
    doc = tomllib.loads(text)
    flat = {k: v for k, v in doc.items() if not isinstance(v, dict)}
    flat.update({f"{s}.{k}": v for s, keys in doc.items() if isinstance(keys, dict) for k, v in keys.items()})
    args = torchtitan.arguments(flat)
    assert args[:4] == ["--module", "llama3", "--config", flat["config"]]
    return doc, config_manager().parse_args(["--module", REGISTRY, *args[2:]])


CASES = [
    ("llama3-70b", 131072, 16 * 2**20, dict(tp=8, cp=4, dp=8, zero=3, recompute="full", scheme="allgather")),
    ("llama3-8b", 32768, 2**21, dict(tp=2, cp=2, dp=4, zero=3, recompute="selective", scheme="allgather",
                                     layout="contiguous", tp_overlap=True)),
    ("llama3-70b", 8192, 2**21, dict(tp=8, pp=4, dp=2, zero=3, recompute="full", interleave=2)),
    ("llama3-8b", 8192, 2**20, dict(tp=4, dp=2, zero=0, microbatches=32, recompute="full")),
    ("llama3-405b", 8192, 2**22, dict(tp=8, pp=8, dp=4, zero=3, recompute="full", fp8=True)),
]


@pytest.mark.parametrize("model,seq,batch,par", CASES)
def test_torchtitan_parses_every_key_to_the_value_meant(model, seq, batch, par):
    step = step_of(model, seq, batch, **par)
    doc, job = parsed(export("torchtitan", step, source="test"))
    for section in ("training", "parallelism", "compile"):
        for key, value in doc[section].items():
            got = getattr(getattr(job, section), key)
            assert (got is None if value == "None" else got == value), (section, key, got, value)
    p, r = step.request.parallel, step.request
    mode = {"none": type(None), "selective": AC.SelectiveAC.Config, "full": AC.FullAC.Config}[p.recompute]
    assert isinstance(job.activation_checkpoint, mode)
    # what torchtitan then runs, by its own fields: the same GPUs, batch and micro-batches
    pj = job.parallelism
    dp = pj.data_parallel_replicate_degree * pj.data_parallel_shard_degree
    assert dp * pj.tensor_parallel_degree * pj.context_parallel_degree * pj.pipeline_parallel_degree == p.gpus
    assert job.training.seq_len == r.seq and job.training.global_batch_size * r.seq == r.global_batch
    if p.pp > 1:
        assert job.training.local_batch_size // pj.pipeline_parallel_microbatch_size == r.microbatches
        assert job.training.disable_cuda_graphs          # Trainer.Config refuses a pipeline with CUDA graphs
    else:
        assert job.training.global_batch_size // (job.training.local_batch_size * dp) == r.microbatches
    assert (pj.context_parallel_load_balancer == "headtail") == (p.cp > 1 and p.layout == "zigzag") or p.cp == 1
    assert job.compile.enable_async_tensor_parallel == p.tp_overlap


def test_torchtitan_refuses_an_unknown_key():
    with pytest.raises(SystemExit):
        config_manager().parse_args(["--module", REGISTRY, "--config", "llama3_8b",
                                     "--parallelism.context-parallel-rotate-method", "alltoall"])


@pytest.mark.parametrize("par,reason", [
    (dict(tp=8, cp=4, dp=8, zero=3, scheme="ring"), "all-gather of K/V"),
    (dict(tp=8, cp=4, dp=8, zero=1, scheme="allgather"), "ZeRO-1 is not one of its settings"),
    (dict(tp=8, cp=4, dp=8, zero=0, scheme="allgather"), "FSDP over the CP ranks"),
    (dict(tp=8, cp=4, dp=8, zero=3, scheme="allgather", fp8=True), "sets Float8 in the config function"),
    (dict(tp=8, cp=4, dp=8, zero=3, scheme="allgather", grad_reduce="bf16"), "float32 only"),
])
def test_what_torchtitan_cannot_run_is_refused_with_its_reason(par, reason):
    step = step_of("llama3-70b", 131072, 16 * 2**20, **par)
    with pytest.raises(RingsimError, match=reason):
        export("torchtitan", step, source="test")


def test_the_interleaved_stages_are_torchtitans_count():
    # torchtitan: virtual stages = ceil((layers + first_less + last_less) / layers_per_stage)
    # (torchtitan/distributed/pipeline_parallel.py), which must be PP x v
    step = step_of("llama3-405b", 8192, 2**22, tp=8, pp=16, dp=2, zero=3, recompute="full", fp8=True, interleave=4)
    doc, job = parsed(export("torchtitan", step, source="test"))
    pj = job.parallelism
    stages = -(-(126 + pj.pipeline_parallel_first_stage_less_layers + pj.pipeline_parallel_last_stage_less_layers)
               // pj.pipeline_parallel_layers_per_stage)
    assert stages == 16 * 4 and pj.pipeline_parallel_schedule == "Interleaved1F1B"
