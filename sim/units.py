"""Human-readable times, sizes and plain text tables for people, and token counts read from them."""

from __future__ import annotations

import argparse
import re
from typing import Any, Sequence

from sim.errors import RingsimError


def fmt_s(x: float | None) -> str:
    """Seconds with a unit that keeps three decimals meaningful ('-' when unknown)."""
    if x is None:
        return "-"
    if x == 0:
        return "0"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(x) >= scale:
            return f"{x / scale:.3f} {unit}"
    return f"{x * 1e9:.1f} ns"


def fmt_bytes(x: float | None, spec: str = ".2f", missing: str = "-") -> str:
    """Bytes in binary units (KiB, MiB, GiB), formatted with `spec`."""
    if x is None:
        return missing
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= scale:
            return f"{x / scale:{spec}} {unit}"
    return f"{x:.0f} B"


def is_whole(value: Any) -> bool:
    """Whether `value` is a positive whole number (an int, not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def require_whole(what: str, value: Any) -> None:
    """RingsimError, one line, unless `value` is a positive whole number."""
    if not is_whole(value):
        raise RingsimError(f"{what} must be a positive whole number, got {value!r}")


def positive_ints(obj: Any, *names: str) -> None:
    """RingsimError, one line naming the field, unless each of `obj`'s fields `names` is a
    positive integer (the configuration dataclasses' check)."""
    for name in names:
        v = getattr(obj, name)
        if not is_whole(v):
            raise RingsimError(f"{name} must be a positive integer, got {v!r}")


_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*$")
SIZE_SCALE = {"": 1, "k": 2 ** 10, "m": 2 ** 20, "g": 2 ** 30}
"""A count's size suffixes (lower case), binary as context lengths are quoted: 128k = 131,072."""


def parse_count(value: Any, what: str = "value") -> int:
    """A positive whole number from an int or a size: '128k' = 131072, '1M' = 1048576
    (2^20: binary, as context lengths are quoted), '1.5M' = 1572864, '2G' = 2^31.
    RingsimError, one line, otherwise."""
    if isinstance(value, bool):
        raise RingsimError(f"{what} must be a positive whole number, got {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    else:
        m = _COUNT.match(str(value))
        if not m:
            raise RingsimError(f"{what} must be a positive whole number or a size such as 128k or 1M, got {value!r}")
        x = float(m.group(1)) * SIZE_SCALE[m.group(2).lower()]
        if not x.is_integer():
            raise RingsimError(f"{what} {value!r} is not a whole number of tokens")
        n = int(x)
    if n <= 0:
        raise RingsimError(f"{what} must be positive, got {value!r}")
    return n


def tokens(value: str) -> int:
    """argparse type of a token count: a whole number or a size (parse_count: 64k, 1M)."""
    try:
        return parse_count(value, "tokens")
    except RingsimError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table, columns right-aligned but the first."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for j, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
