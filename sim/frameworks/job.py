"""A training step as a framework's job, and a framework's job read back as a step.

A step (sim.training.step.StepRequest: a model, a sequence length, a global batch, and the
split of Parallel) is written by one framework module (sim.frameworks.torchtitan, .megatron,
.nemo) as that framework's configuration, or refused there with the framework's reason when
the framework cannot run it as ringsim simulates it. A framework's configuration (a file, or
a launch line) is read back by the same module as a `Job`: the step it describes, the keys it
read, those it knows but which do not change a step (ignored), those it does not know
(unknown), and what it had to assume (notes). Both ways go through sim.frameworks.traps.
"""

from __future__ import annotations

import importlib
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from sim.errors import RingsimError
from sim.frameworks import traps
from sim.scenario.models import MODEL_PRESETS, Model
from sim.training.step import Parallel, Step, StepRequest, layer_params

FRAMEWORKS = ("torchtitan", "megatron", "nemo")
"""The frameworks a step is exported to (`--export`) and read from (`--from`)."""


@dataclass
class Job:
    """A framework's configuration read as a step."""

    framework: str
    model: Model
    seq: int
    global_batch: int
    """Tokens a step, over all replicas."""
    parallel: Parallel
    mlp: str = "swiglu"
    gpus: int | None = None
    """The GPUs the launch line gives (nodes x GPUs per node), where it gives them."""
    gpus_per_node: int | None = None
    ignored: list[str] = field(default_factory=list)
    """Keys read that do not change a step (learning rate, data, logging, ...)."""
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the reading assumed, or what of the job ringsim does not model."""
    traps: list[str] = field(default_factory=list)
    """Traps found while reading (sim.frameworks.traps), one line each."""
    cp_ignored: str | None = None
    """Why the framework runs this configuration without context parallelism, where it does."""

    def request(self, hardware: Any) -> StepRequest:
        return StepRequest(model=self.model, seq=self.seq, global_batch=self.global_batch, parallel=self.parallel,
                           hardware=hardware, mlp=self.mlp)


def framework_module(name: str):
    """The module of framework `name` (FRAMEWORKS)."""
    if name not in FRAMEWORKS:
        raise RingsimError(f"unknown framework {name!r}; choose one of {', '.join(FRAMEWORKS)}")
    return importlib.import_module(f"sim.frameworks.{name}")


def refusal(name: str, step: Step) -> str | None:
    """Why framework `name` cannot run the simulated `step` as it was simulated: the
    framework's reason, or the traps it falls into (one line each, naming the flag),
    memory per GPU included; None where it can."""
    module = framework_module(name)
    why = module.refusal(step.request)
    if why:
        return why
    found = module.check(step.request)
    memory = traps.memory_line(step, module.FLAGS, step.request.micro_batch)
    return "\n".join(found + ([memory] if memory else [])) or None


def export(name: str, step: Step, *, source: str) -> str:
    """The simulated `step` as framework `name`'s job (text), `source` saying where it came
    from; RingsimError where refusal() says why not."""
    why = refusal(name, step)
    if why:
        raise RingsimError(why)
    return framework_module(name).export_text(step.request, micro_batch=step.request.micro_batch, source=source)


def read(text: str, where: str, gpus: int | None = None) -> Job:
    """The job in `text` (a file's contents, read from `where`), by whichever framework's
    form it takes: a torchtitan TOML or launch line, Megatron-LM arguments or launch line, or
    Megatron-Bridge KEY=VALUE overrides; `gpus` where the text does not say."""
    # comments (an export's header) say nothing of the form
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    for name in ("torchtitan", "nemo", "megatron"):
        module = framework_module(name)
        if module.recognises(body):
            return module.read_text(text, where, gpus)
    raise RingsimError(f"{where}: neither a torchtitan job, Megatron-LM arguments nor Megatron-Bridge overrides")


# --- launch lines ------------------------------------------------------------------------

@dataclass
class Launch:
    """A command line split into the launcher's part and the program's arguments."""

    program: str | None
    """The script (pretrain_gpt.py) or module (torchtitan.train) launched; None: the whole
    text is the program's arguments."""
    args: list[str]
    nnodes: int | None = None
    nproc_per_node: int | None = None

    @property
    def gpus(self) -> int | None:
        return self.nnodes * self.nproc_per_node if self.nnodes and self.nproc_per_node else None


def tokens(text: str, where: str) -> list[str]:
    """The words of a file of arguments or a shell line: continued lines joined, comments
    left out, quotes as the shell reads them."""
    try:
        return shlex.split(re.sub(r"\\\r?\n", " ", text), comments=True)
    except ValueError as e:
        raise RingsimError(f"{where}: cannot split it into arguments as a shell would: {e}") from None


_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def launch(words: list[str]) -> Launch:
    """The launcher (torchrun, python -m torch.distributed.run) and its program found in
    `words`: the first word ending in .py, or the module after -m other than torch's
    launcher; environment assignments before it left out."""
    for i, w in enumerate(words):
        module = words[i + 1] if w == "-m" and i + 1 < len(words) else None
        if w.endswith(".py") or (module and module != "torch.distributed.run"):
            head = words[:i]
            program, args = (module, words[i + 2:]) if module else (w, words[i + 1:])
            return Launch(program, args, _int_option(head, "nnodes"), _int_option(head, "nproc-per-node"))
    return Launch(None, [w for w in words if not _ENV.match(w)])


def _int_option(words: list[str], name: str) -> int | None:
    """A launcher's integer option (--nnodes 4, --nproc_per_node=8), or None."""
    names = {f"--{name}", f"--{name.replace('-', '_')}"}
    for i, w in enumerate(words):
        key, eq, value = w.partition("=")
        if key in names:
            value = value if eq else (words[i + 1] if i + 1 < len(words) else "")
            try:
                return int(value.split(":")[-1])      # torchrun's --nnodes MIN:MAX
            except ValueError:
                return None
    return None


def flag_values(args: list[str]) -> list[tuple[str, list[str]]]:
    """(flag, its values) in order: a flag takes the words up to the next flag (--x=1 one
    value); a word before any flag is returned under the flag ''."""
    out: list[tuple[str, list[str]]] = []
    for w in args:
        if w.startswith("--"):
            key, eq, value = w.partition("=")
            out.append((key, [value] if eq else []))
        elif out:
            out[-1][1].append(w)
        else:
            out.append(("", [w]))
    return out


# --- numbers -----------------------------------------------------------------------------

def whole(value: Any, what: str) -> int:
    """A positive whole number read from a file, or RingsimError naming `what`."""
    try:
        n = int(str(value).strip())
    except ValueError:
        raise RingsimError(f"{what} must be a whole number, got {value!r}") from None
    if n <= 0:
        raise RingsimError(f"{what} must be positive, got {value!r}")
    return n


def model_of(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, head_dim: int | None = None,
             *, mlp: str = "swiglu", where: str) -> Model:
    """The preset with this shape, or a model of it whose parameters are counted from it
    (layers, the untied embedding and output layer, the final norm)."""
    head_dim = head_dim or hidden // heads
    for m in MODEL_PRESETS.values():
        if (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn, m.vocab) == (
                layers, hidden, heads, kv_heads, head_dim, ffn, vocab) and mlp == "swiglu":
            return m
    shape = Model(name="custom", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                  ffn=ffn, vocab=vocab)
    per_layer = layer_params(shape) - (hidden * ffn if mlp == "gelu" else 0)     # GeLU: up and down, no gate
    params = layers * per_layer + 2 * vocab * hidden + hidden
    return Model(name=f"custom ({where})", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                 head_dim=head_dim, ffn=ffn, vocab=vocab, params=float(params), source=f"read from {where}")

