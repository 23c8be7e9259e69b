"""A whole request: its prompt's prefill (time to first token) and its output's decode
(time per output token), on one split of TP x CP GPUs (docs/inference.md).

The prompt is `context` tokens, of which `cached` are already in the cache (a prefix
shared with an earlier turn) and the rest are prefilled now (sim.inference.serve.prefill);
the first token comes out of the prefill's last logits, so the time to first token is the
prefill's time. The `output` tokens that follow each take a decode step over the cache
(sim.inference.serve.decode, taken at the middle of the output); the whole request takes
TTFT + (output - 1) x TPOT, and the cache must hold the prompt and the output at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.errors import RingsimError
from sim.inference.serve import Decode, Prefill, Serving, decode, prefill


@dataclass
class Request:
    prefill: Prefill
    decode: Decode

    @property
    def ttft_s(self) -> float:
        return self.prefill.prefill_s

    @property
    def tpot_s(self) -> float:
        return self.decode.tpot_s

    @property
    def total_s(self) -> float:
        return self.ttft_s + (self.decode.output - 1) * self.tpot_s

    def to_dict(self) -> dict[str, Any]:
        return {"phase": "request", **self.prefill.serving.describe(), "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
                "total_s": self.total_s, "output": self.decode.output,
                "kv_cache_gib_per_gpu": self.decode.to_dict()["kv_cache_gib_per_gpu"],
                "prefill": self.prefill.to_dict(), "decode": self.decode.to_dict()}


def request(serving: Serving, context: int, cached: int, output: int, *, batch: int = 1, scheme: str | None = None,
            layout: str = "zigzag", cache_layout: str = "zigzag", decode_layout: str = "round-robin",
            merge: str = "all-gather") -> Request:
    """A request of `context` prompt tokens (`cached` of them already cached) generating
    `output` tokens, `batch` such requests together."""
    if cached > context:
        raise RingsimError(f"the cached prefix ({cached:,} tokens) is longer than the context ({context:,} tokens)")
    p = prefill(serving, cached, context - cached, batch=batch, scheme=scheme, layout=layout,
                cache_layout=cache_layout)
    d = decode(serving, [context] * batch, output, layout=decode_layout, merge=merge)
    return Request(prefill=p, decode=d)
