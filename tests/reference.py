"""Independent references shared by the test packages (written from docs/design.md, not from
the code under test)."""


def token_owner(layout: str, seq: int, n: int, t: int) -> int:
    """The rank that holds token t: contiguous, striped, or zigzag (2N chunks, rank r
    holds chunks r and 2N-1-r)."""
    if layout == "contiguous":
        return t // (seq // n)
    if layout == "striped":
        return t % n
    chunk = t // (seq // (2 * n))
    return chunk if chunk < n else 2 * n - 1 - chunk
