"""The one error type for user mistakes.

A SpecError names the field, the value and the fix; the CLI prints it as one line on
stderr and exits 2. An infeasible configuration is not an error: it is a result.
"""
import re


class SpecError(ValueError):
    """Bad user input: an unknown preset, a malformed size, degrees that do not multiply."""


LONG_WORD = 200    # a run of characters this long without a space or quote is user input echoed back: cut it


def one_line(message: str) -> str:
    """User text inside a message (a key, a file name, a value) may hold newlines or control
    characters, or run to thousands of characters; escape the one and cut the other, so the
    error stays one readable line."""
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message)
    return re.sub(r"[^\s'\"]{%d,}" % (LONG_WORD + 1),
                  lambda m: f"{m.group()[:LONG_WORD // 2]}...({len(m.group()):,} characters)", text)
