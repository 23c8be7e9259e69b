"""The one exception type for mistakes a user can make.

Bad flags, impossible configurations, unreadable or malformed files all raise
`RingsimError` with a sentence naming the problem; the CLI prints it as one line and
exits with status 2, the dashboard shows it beside the control. Programming errors are
left to raise as what they are.
"""

from __future__ import annotations

from typing import Any


class RingsimError(ValueError):
    """A problem with the user's input, described in one line; `reason`, where the problem is
    a configuration refused for a reason sim.reasons knows, the same as a clause (for a page
    to say in its own language)."""

    def __init__(self, message: str = "", reason: dict[str, Any] | None = None):
        super().__init__(message)
        self.reason = reason


def one_line(e: BaseException) -> str:
    """An exception as one line: a RingsimError's sentence, else its type and first line."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, RingsimError):
        return text or type(e).__name__
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
