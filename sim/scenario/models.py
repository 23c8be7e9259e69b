"""Model presets: the attention shapes, layer counts and sizes `ringsim plan` needs.

Only the attention of each layer is simulated: its query heads, key/value heads and head
dim set the work and the bytes; the layer count turns a layer's time into a step's and
multiplies what each layer keeps for backward; the parameter count (with a sharding the
user gives) sizes the weights and optimizer state per GPU.

Sources: "The Llama 3 Herd of Models" (Llama Team, AI @ Meta, arXiv 2407.21783, 2024),
Table 3 ("Overview of the key hyperparameters of Llama 3"): layers, model dimension,
attention heads and key/value heads of the 8B, 70B and 405B models; head dim = model
dimension / attention heads = 128 for all three (the `head_dim` of each model card's
config.json), the FFN dimension (14,336, 28,672 and 53,248) and the vocabulary of
128,256 tokens (each card's `intermediate_size` and `vocab_size`). Parameter counts as the Hugging Face model pages list them
(meta-llama/Meta-Llama-3-8B: 8.03B, Meta-Llama-3-70B: 70.6B, Llama-3.1-405B: 406B).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import RingsimError
from sim.units import require_whole

_PAPER = "Llama 3 Herd of Models (arXiv 2407.21783), Table 3"


@dataclass(frozen=True, kw_only=True)
class Model:
    """A transformer's attention shape and size."""

    name: str
    layers: int
    """Transformer layers, each with one attention."""
    hidden: int
    """Model dimension."""
    heads: int
    """Query heads."""
    kv_heads: int
    """Key/value heads (GQA)."""
    head_dim: int
    params: float | None = None
    """Parameters (for the weights and optimizer state when the user gives a sharding)."""
    ffn: int | None = None
    """The feed-forward (SwiGLU) dimension; None: not known (attention-only questions)."""
    vocab: int | None = None
    """Vocabulary size (the embedding and the output layer)."""
    source: str = "given on the command line"

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "head_dim"):
            require_whole(f"model {name}", getattr(self, name))
        if self.heads % self.kv_heads:
            raise RingsimError(f"model kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        if self.params is not None and not (isinstance(self.params, (int, float)) and self.params > 0):
            raise RingsimError(f"model params must be a positive number, got {self.params!r}")
        for name in ("ffn", "vocab"):
            if getattr(self, name) is not None:
                require_whole(f"model {name}", getattr(self, name))

    def shape_params(self) -> float | None:
        """Parameters the shapes give (None without the FFN and vocabulary): per layer the
        Q, K, V and output projections, a SwiGLU MLP (three matrices) and two norms; an
        embedding and an untied output layer, and the final norm (Llama 3's architecture;
        8.030B for llama3-8b, its model page's 8.03B)."""
        if self.ffn is None or self.vocab is None:
            return None
        h, d = self.hidden, self.head_dim
        layer = h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h + 3 * h * self.ffn + 2 * h
        return float(self.layers * layer + 2 * self.vocab * h + h)

    def describe(self) -> dict:
        return {"name": self.name, "layers": self.layers, "hidden": self.hidden, "heads": self.heads,
                "kv_heads": self.kv_heads, "head_dim": self.head_dim, "params": self.params, "ffn": self.ffn,
                "vocab": self.vocab, "source": self.source}


PARAMS_AGREE = 0.01
"""How far a given parameter count may lie from the shapes' (Model.shape_params): the
presets' published counts are rounded to three significant figures (at most 0.5% off), and
a count further off would make every MFU, memory and gradient figure wrong by as much."""


MODEL_PRESETS: dict[str, Model] = {m.name: m for m in [
    Model(name="llama3-8b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, params=8.03e9,
          ffn=14336, vocab=128256,
          source=f"{_PAPER}; 8.03B parameters (meta-llama/Meta-Llama-3-8B model page)"),
    Model(name="llama3-70b", layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, params=70.6e9,
          ffn=28672, vocab=128256,
          source=f"{_PAPER}; 70.6B parameters (meta-llama/Meta-Llama-3-70B model page)"),
    Model(name="llama3-405b", layers=126, hidden=16384, heads=128, kv_heads=8, head_dim=128, params=406e9,
          ffn=53248, vocab=128256,
          source=f"{_PAPER}; 406B parameters (meta-llama/Llama-3.1-405B model page)"),
]}


def model_preset(name: str) -> Model:
    """The preset called `name` (case and `-`/`_`/`.` ignored: Llama-3-70B, llama3_70b)."""
    want = _norm(name)
    for key, m in MODEL_PRESETS.items():
        if _norm(key) == want:
            return m
    raise RingsimError(f"unknown model {name!r}; choose from {', '.join(MODEL_PRESETS)} "
                       "or give --layers --heads --kv-heads --head-dim")


def _norm(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum())
