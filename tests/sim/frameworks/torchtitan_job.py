"""A torchtitan config registry for the tests: torchtitan 0.3.0's own sections
(TrainingConfig, ParallelismConfig, CompileConfig and the activation-checkpointing policies)
in one job, for its ConfigManager to parse a command line into. torchtitan's Trainer.Config
holds the same sections with these names, but importing it needs Triton (its models), which
a CPU machine lacks."""

from __future__ import annotations

from dataclasses import dataclass, field

from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import ActivationCheckpointingConfig, SelectiveAC


@dataclass(kw_only=True, slots=True)
class Job:
    hf_assets_path: str = "."
    training: TrainingConfig = field(default_factory=TrainingConfig)
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    activation_checkpoint: ActivationCheckpointingConfig = field(default_factory=SelectiveAC.Config)
    compile: CompileConfig = field(default_factory=CompileConfig)


def llama3_8b() -> Job:
    return Job()


llama3_70b = llama3_405b = llama3_8b
