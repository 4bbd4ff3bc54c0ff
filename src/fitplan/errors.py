"""The one error type for user mistakes.

A SpecError names the field, the value and the fix; the CLI prints it as one line on
stderr and exits 2. An infeasible configuration is not an error: it is a result.
"""


class SpecError(ValueError):
    """Bad user input: an unknown preset, a malformed size, degrees that do not multiply."""


def one_line(message: str) -> str:
    """User text inside a message (a key, a file name) may hold newlines or control
    characters; escape them so the error stays one line."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message)
