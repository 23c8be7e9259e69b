"""A step exported as Megatron-LM arguments (and as Megatron-Bridge overrides) builds
megatron-core 0.16.1's TransformerConfig (a ModelParallelConfig), each argument taken to its
field as Megatron-LM's arguments.py does (core_transformer_config_from_args at core_v0.16.1:
a flag is its field's name with dashes; --swiglu sets gated_linear_unit with SiLU,
--group-query-attention lets --num-query-groups through, --fp8-format is `fp8`, the virtual
pipeline size is the stage's layers over --num-layers-per-virtual-pipeline-stage), so that
megatron-core's own checks run on it; and what megatron-core refuses ringsim refuses first."""

from __future__ import annotations

import math
import shlex

import pytest

from sim.errors import RingsimError
from sim.frameworks import megatron, nemo
from sim.frameworks.job import export
from sim.scenario.models import MODEL_PRESETS
from sim.scenario.resolve import hardware_of
from sim.training.step import Parallel, StepRequest, simulate_step

torch = pytest.importorskip("torch")
core = pytest.importorskip("megatron.core.transformer")
F = pytest.importorskip("torch.nn.functional")

FIELD = {"--num-layers": "num_layers", "--hidden-size": "hidden_size", "--num-attention-heads": "num_attention_heads",
         "--kv-channels": "kv_channels", "--ffn-hidden-size": "ffn_hidden_size",
         "--tensor-model-parallel-size": "tensor_model_parallel_size",
         "--pipeline-model-parallel-size": "pipeline_model_parallel_size",
         "--context-parallel-size": "context_parallel_size", "--recompute-granularity": "recompute_granularity",
         "--recompute-method": "recompute_method", "--recompute-num-layers": "recompute_num_layers",
         "--fp8-format": "fp8", "--fp8-recipe": "fp8_recipe"}
SWITCH = {"--sequence-parallel": "sequence_parallel", "--tp-comm-overlap": "tp_comm_overlap",
          "--account-for-embedding-in-pipeline-split": "account_for_embedding_in_pipeline_split",
          "--account-for-loss-in-pipeline-split": "account_for_loss_in_pipeline_split"}


def program_args(text: str) -> dict[str, list[str]]:
    """The exported launch line's program arguments, by flag (a shell's reading)."""
    words = shlex.split(text.replace("\\\n", " "), comments=True)
    words = words[words.index(megatron.SCRIPT) + 1:]
    out: dict[str, list[str]] = {}
    for w in words:
        if w.startswith("--"):
            out[w] = []
            last = w
        else:
            out[last].append(w)
    return out


def transformer_config(args: dict[str, list[str]]):
    """megatron-core's TransformerConfig from Megatron-LM arguments (module docstring)."""
    kw = {FIELD[f]: (v[0] if not v[0].isdigit() else int(v[0])) for f, v in args.items() if f in FIELD}
    kw.update({SWITCH[f]: True for f in args if f in SWITCH})
    if "--group-query-attention" in args:
        kw["num_query_groups"] = int(args["--num-query-groups"][0])
    if "--swiglu" in args:
        kw["gated_linear_unit"], kw["activation_func"] = True, F.silu
    if "--cp-comm-type" in args:
        kw["cp_comm_type"] = args["--cp-comm-type"][0] if len(args["--cp-comm-type"]) == 1 else args["--cp-comm-type"]
    if "--hierarchical-context-parallel-sizes" in args:
        kw["hierarchical_context_parallel_sizes"] = [int(x) for x in args["--hierarchical-context-parallel-sizes"]]
    if "--num-layers-per-virtual-pipeline-stage" in args:
        layers = kw["num_layers"] + kw.get("account_for_embedding_in_pipeline_split", 0) + \
            kw.get("account_for_loss_in_pipeline_split", 0)
        kw["virtual_pipeline_model_parallel_size"] = (layers // kw["pipeline_model_parallel_size"]
                                                      // int(args["--num-layers-per-virtual-pipeline-stage"][0]))
    if "--bf16" in args:
        kw["bf16"], kw["params_dtype"], kw["pipeline_dtype"] = True, torch.bfloat16, torch.bfloat16
    return core.TransformerConfig(**kw)


def step_of(model: str, seq: int, global_batch: int, **parallel):
    return simulate_step(StepRequest(model=MODEL_PRESETS[model], seq=seq, global_batch=global_batch,
                                     parallel=Parallel(**parallel), hardware=hardware_of({"cluster": "dgx-h100"})))


CASES = [
    ("llama3-70b", 131072, 16 * 2**20, dict(tp=8, cp=4, dp=8, zero=1, recompute="full")),
    ("llama3-70b", 131072, 16 * 2**20, dict(tp=4, cp=8, dp=8, zero=3, recompute="full", scheme="hybrid")),
    ("llama3-70b", 131072, 16 * 2**20, dict(tp=8, cp=4, dp=8, zero=3, recompute="full", scheme="allgather",
                                            fp8=True, grad_reduce="bf16")),
    ("llama3-8b", 65536, 2**22, dict(tp=2, cp=4, dp=8, zero=1, recompute="selective", scheme="ulysses", tp_overlap=True)),
    ("llama3-405b", 8192, 2**23, dict(tp=8, pp=16, dp=4, zero=1, recompute="full", interleave=8)),
    ("llama3-70b", 8192, 2**21, dict(tp=8, pp=4, dp=2, zero=1, recompute="full", interleave=2)),
]


@pytest.mark.parametrize("model,seq,batch,par", CASES)
def test_megatron_core_builds_the_exported_arguments(model, seq, batch, par):
    step = step_of(model, seq, batch, **par)
    r, p, m = step.request, step.request.parallel, step.request.model
    args = program_args(export("megatron", step, source="test"))
    cfg = transformer_config(args)
    assert (cfg.tensor_model_parallel_size, cfg.context_parallel_size, cfg.pipeline_model_parallel_size) == \
        (p.tp, p.cp, p.pp)
    assert cfg.sequence_parallel == (p.tp > 1)
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_query_groups, cfg.kv_channels,
            cfg.ffn_hidden_size) == (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn)
    assert cfg.gated_linear_unit
    assert (cfg.virtual_pipeline_model_parallel_size or 1) == p.interleave
    assert cfg.recompute_granularity == (None if p.recompute == "none" else p.recompute)
    assert (cfg.fp8 == "e4m3") == p.fp8 and cfg.tp_comm_overlap == p.tp_overlap
    if p.cp > 1:
        assert cfg.cp_comm_type == {"ring": "p2p", "allgather": "all_gather", "ulysses": "a2a",
                                    "hybrid": "a2a+p2p"}[p.scheme]
    # Megatron-LM's own checks (arguments.py, core_v0.16.1), which megatron-core leaves to it
    if cfg.cp_comm_type == "a2a+p2p":
        sizes = cfg.hierarchical_context_parallel_sizes
        assert sizes and math.prod(sizes) == p.cp
        u = step.to_dict()["parallel"].get("ulysses_degree") or megatron.hierarchical_sizes(r)[0]
        assert sizes[0] == u
    if p.cp > 1:
        assert int(args["--seq-length"][0]) % (2 * p.cp) == 0
    dp = p.gpus // (p.tp * p.cp * p.pp)
    gbs, mbs = int(args["--global-batch-size"][0]), int(args["--micro-batch-size"][0])
    assert gbs // (mbs * dp) == r.microbatches and gbs * seq == batch
    assert ("--use-distributed-optimizer" in args) == (p.zero >= 1)
    assert ("--use-megatron-fsdp" in args) == (p.zero == 3)


@pytest.mark.parametrize("model,seq,batch,par", CASES[:4])
def test_megatron_core_builds_the_bridge_overrides(model, seq, batch, par):
    step = step_of(model, seq, batch, **par)
    words = shlex.split(export("nemo", step, source="test").replace("\\\n", " "), comments=True)
    model_fields = {}
    for w in words:
        key, eq, value = w.partition("=")
        if eq and key.startswith("model."):
            v = nemo._value(value)
            if v is not None:
                model_fields[key.removeprefix("model.")] = v
    m = step.request.model
    cfg = core.TransformerConfig(num_layers=m.layers, hidden_size=m.hidden, num_attention_heads=m.heads,
                                 num_query_groups=m.kv_heads, ffn_hidden_size=m.ffn, gated_linear_unit=True,
                                 bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16, **model_fields)
    p = step.request.parallel
    assert (cfg.tensor_model_parallel_size, cfg.context_parallel_size) == (p.tp, p.cp)


def test_megatron_core_and_ringsim_refuse_sequence_parallel_without_tp(tmp_path):
    with pytest.raises(ValueError, match="Cannot use sequence parallelism without tensor parallelism"):
        core.TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, sequence_parallel=True)
    job = megatron.read_arguments(["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
                                   "--ffn-hidden-size", "14336", "--swiglu", "--vocab-size", "128256",
                                   "--seq-length", "8192", "--micro-batch-size", "1", "--sequence-parallel"],
                                  "args", gpus=8)
    assert any(line.startswith("--sequence-parallel needs --tensor-model-parallel-size > 1") for line in job.traps)


def test_megatron_core_and_ringsim_refuse_tp_not_dividing_heads():
    with pytest.raises(ValueError, match="num_attention_heads"):
        core.TransformerConfig(num_layers=2, hidden_size=96, num_attention_heads=6, tensor_model_parallel_size=4)
    job = megatron.read_arguments(["--num-layers", "2", "--hidden-size", "768", "--num-attention-heads", "6",
                                   "--ffn-hidden-size", "2048", "--swiglu", "--vocab-size", "1024", "--seq-length", "4096",
                                   "--micro-batch-size", "1", "--tensor-model-parallel-size", "4"], "args", gpus=4)
    assert "--tensor-model-parallel-size 4 does not divide --num-attention-heads 6" in job.traps


def test_a_layout_megatron_does_not_run_is_refused():
    step = step_of("llama3-70b", 131072, 16 * 2**20, tp=8, cp=4, dp=8, zero=1, recompute="full", layout="striped")
    with pytest.raises(RingsimError, match="get_batch_on_this_cp_rank"):
        export("megatron", step, source="test")
