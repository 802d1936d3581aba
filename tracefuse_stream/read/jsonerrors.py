"""The one boundary where third-party error messages become an :class:`ErrorKind`.

ijson (yajl's C backend or its pure-Python one), msgspec and zlib report problems as
text, differently per backend and version. Code that has to decide — is this file
truncated or invalid? can salvage help? must the exact reader take over? — asks here
and reads the returned kind; nothing else in the package looks at their messages.
Each mapping below has a test in ``tests/test_errors.py`` that produces the real
message from the real library.
"""

from __future__ import annotations

from typing import Tuple

from tracefuse_stream.errors import ErrorKind

TRUNCATED_EVENTS = "file ends in the middle of the events (truncated)"

# ijson: yajl says "parse error: premature EOF"; the Python backend "Incomplete JSON
# content"; msgspec "Input data was truncated".
_TRUNCATION_MARKERS = ("premature eof", "incomplete json", "input data was truncated", "truncated")


def first_line(e: BaseException) -> str:
    """The first non-blank line of an exception's message (yajl's can be bytes and
    span several lines, with a caret diagram after the first)."""
    text = e.args[0] if e.args else ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def is_truncation(e: BaseException) -> bool:
    """Whether a parser error means the text ended early (rather than being wrong)."""
    return any(m in first_line(e).lower() for m in _TRUNCATION_MARKERS)


def describe_json_error(e: BaseException) -> Tuple[ErrorKind, str]:
    """``(kind, one-line problem)`` for an ijson, msgspec or UTF-8 decoding error."""
    if isinstance(e, UnicodeDecodeError):
        return ErrorKind.INVALID_UTF8, f"invalid UTF-8 in a string ({e.reason})"
    if is_truncation(e):
        return ErrorKind.TRUNCATED, TRUNCATED_EVENTS
    return ErrorKind.INVALID_JSON, f"invalid JSON: {first_line(e)}"


__all__ = ["TRUNCATED_EVENTS", "describe_json_error", "first_line", "is_truncation"]
