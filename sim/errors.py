"""The one exception type for mistakes a user can make.

Bad flags, impossible configurations, unreadable or malformed files all raise
`RingsimError` with a sentence naming the problem; the CLI prints it as one line and
exits with status 2, the dashboard shows it beside the control. Programming errors are
left to raise as what they are.
"""


class RingsimError(ValueError):
    """A problem with the user's input, described in one line."""
