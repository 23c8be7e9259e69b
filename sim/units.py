"""Human-readable times and sizes for tables and messages."""

from __future__ import annotations


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
