"""Packed documents: the lengths of the documents a sequence holds (docs/packed.md).

A workload's `docs` is one of three specs, each a string (so that a trace header or a
sweep carries it as it is):

- a list of lengths, ``256,7392,544`` (sizes such as ``4k`` allowed): repeated whole to
  fill the sequence, so the list's sum must divide the sequence length;
- ``lognormal:median=4k,sigma=1.2``: lengths drawn from a log-normal distribution with
  that median (tokens) and log-space deviation, each rounded to a whole token (at least
  one) and capped at the sequence length;
- ``sample:300,4096,812,...``: lengths drawn, with replacement, from the given ones (an
  empirical distribution; the command line reads ``file:lengths.txt`` into this form).

Drawn lengths come from numpy's PCG64 generator seeded with the workload's `seed`, and are
drawn until they fill the sequence; the last document is cut where the sequence ends,
as a packer does. The mask is causal within each document and empty between documents;
with a window W a query sees itself and the W - 1 keys before it in its document
(FlashAttention's window_size = (W - 1, 0)).
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import numpy as np

from sim.errors import RingsimError
from sim.reasons import clause, refusal
from sim.units import parse_count

DISTRIBUTIONS = ("lognormal", "sample")
MAX_DOCS = 1 << 22
"""The most documents a spec may give (a list's entries, or a file's lengths)."""


def _of(what: str) -> dict:
    """What a list of lengths is, as a refusal's clause says it: the document list, the sample,
    or a file (its path)."""
    return {"the document list": clause("docs.list"), "the sample": clause("docs.sample")}.get(
        what, clause("docs.file", path=what))


def _lengths(text: str, what: str) -> list[int]:
    parts = [p for p in re.split(r"[\s,]+", text.strip()) if p]
    if not parts:
        raise RingsimError(f"{what} names no document lengths")
    if len(parts) > MAX_DOCS:
        raise RingsimError(f"{what} gives {len(parts):,} lengths; at most {MAX_DOCS:,}")
    out = []
    for i, p in enumerate(parts):
        if p.lstrip().startswith("-"):
            raise refusal("refused.docs-negative", option="docs", doc=i + 1, what=_of(what), typed=p)
        try:
            n = parse_count(p, f"document {i + 1}'s length")
        except RingsimError:
            if p.strip() in ("0", "0k", "0.0"):
                raise refusal("refused.docs-zero", option="docs", doc=i + 1, what=_of(what)) from None
            raise refusal("refused.docs-length", option="docs", doc=i + 1, what=_of(what), typed=repr(p)) from None
        out.append(n)
    return out


def _params(body: str, name: str, allowed: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in [x for x in body.split(",") if x.strip()]:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in allowed:
            raise refusal("refused.docs-takes", option="docs", distribution=name,
                          allowed=", ".join(k + "=" for k in allowed), typed=repr(item.strip()))
        out[key] = value.strip()
    missing = [k for k in allowed if k not in out]
    if missing:
        raise refusal("refused.docs-needs", option="docs", distribution=name,
                      allowed=", ".join(k + "=" for k in missing))
    return out


def check_spec(spec: str) -> None:
    """RingsimError, one line, unless `spec` is a well-formed documents spec (module
    docstring). Whether it fits a sequence is `lengths`'s to say."""
    if not isinstance(spec, str) or not spec.strip():
        raise RingsimError(f"docs must be a list of lengths or a distribution, got {spec!r}")
    _parse(spec)


@functools.lru_cache(maxsize=64)
def _parse(spec: str) -> tuple[str, tuple]:
    kind, colon, body = spec.partition(":")
    kind = kind.strip()
    if not colon:
        return "list", tuple(_lengths(spec, "the document list"))
    if kind == "lognormal":
        p = _params(body, "lognormal", ("median", "sigma"))
        median = parse_count(p["median"], "lognormal median")
        try:
            sigma = float(p["sigma"])
        except ValueError:
            raise refusal("refused.docs-sigma", option="docs", parameter="lognormal sigma",
                          typed=repr(p["sigma"])) from None
        if not (math.isfinite(sigma) and 0 <= sigma <= 10):
            raise refusal("refused.docs-sigma-range", option="docs", parameter="lognormal sigma", typed=p["sigma"])
        return "lognormal", (median, sigma)
    if kind == "sample":
        return "sample", tuple(_lengths(body, "the sample"))
    if kind == "file":
        raise RingsimError("file: documents are read by the command line (read_file_spec), not here")
    raise refusal("refused.docs-unknown", option="docs", typed=repr(kind), lognormal="lognormal:median=M,sigma=S",
                  file="file:PATH")


def read_file_spec(spec: str) -> str:
    """`spec` as the workload keeps it: ``file:PATH`` read into ``sample:...``; any other
    spec checked and returned. RingsimError, one line, on a file it cannot use."""
    if not spec.startswith("file:"):
        check_spec(spec)
        return spec
    path = Path(spec[5:])
    try:
        if path.stat().st_size > 64 << 20:
            raise RingsimError(f"{path}: a file of document lengths over 64 MiB")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RingsimError(f"cannot read document lengths from {path}: {getattr(e, 'strerror', None) or e}") from None
    return "sample:" + ",".join(str(n) for n in _lengths(text, str(path)))


def lengths(spec: str, seq: int, seed: int = 0) -> np.ndarray:
    """The documents of one sequence of `seq` tokens, in order (int64; they sum to seq)."""
    return _lengths_cached(spec, seq, seed).copy()


@functools.lru_cache(maxsize=256)
def _lengths_cached(spec: str, seq: int, seed: int) -> np.ndarray:
    kind, args = _parse(spec)
    if kind == "list":
        total = sum(args)
        if total > seq:
            raise refusal("refused.docs-exceed", option="docs", total_tokens=total, seq_tokens=seq)
        if seq % total:
            raise refusal("refused.docs-fill", option="docs", other="seq", total_tokens=total, seq_tokens=seq)
        return np.tile(np.array(args, dtype=np.int64), seq // total)
    rng = np.random.Generator(np.random.PCG64(seed))
    out: list[np.ndarray] = []
    filled = 0
    while filled < seq:
        # draw a batch sized to about fill what is left
        mean = args[0] * math.exp(args[1] ** 2 / 2) if kind == "lognormal" else float(np.mean(args))
        k = int(min(1 << 20, max(16, 2 * (seq - filled) / max(mean, 1.0))))
        if kind == "lognormal":
            x = np.rint(args[0] * np.exp(args[1] * rng.standard_normal(k)))
        else:
            x = np.asarray(args, dtype=np.float64)[rng.integers(0, len(args), k)]
        x = np.clip(x, 1, seq).astype(np.int64)
        out.append(x)
        filled += int(x.sum())
    docs = np.concatenate(out)
    ends = np.cumsum(docs)
    last = int(np.searchsorted(ends, seq))          # the document in which the sequence ends
    docs = docs[:last + 1]
    docs[-1] -= int(ends[last]) - seq
    return docs


def bounds(spec: str | None, seq: int, seed: int = 0) -> np.ndarray:
    """Cumulative lengths (cu_seqlens, as varlen kernels take them): [0, l0, l0 + l1, ..., seq];
    one document when `spec` is None."""
    if spec is None:
        return np.array([0, seq], dtype=np.int64)
    return np.concatenate([[0], np.cumsum(lengths(spec, seq, seed))])


def check_window(window: int | None) -> None:
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
        raise RingsimError(f"window must be a positive whole number of tokens, got {window!r}")


def describe(spec: str | None, seq: int, seed: int = 0) -> str:
    """'37 documents, median 3,012, longest 20,480 tokens' (one document: 'one document')."""
    if spec is None:
        return "one document"
    d = lengths(spec, seq, seed)
    if d.size == 1:
        return "one document"
    return (f"{d.size:,} documents, median {int(np.median(d)):,}, longest {int(d.max()):,} tokens")


def describe_packed(spec: str | None, seq: int, seed: int = 0, window: int | None = None) -> str:
    """A packed run's documents in words, with the seed of drawn ones and the window:
    '24 documents, median 3,323, longest 21,110 tokens (seed 0), window 4,096 tokens'."""
    drawn = spec is not None and ":" in spec
    return (describe(spec, seq, seed) + (f" (seed {seed})" if drawn else "")
            + (f", window {window:,} tokens" if window else ""))
