"""What an original value is to the rewrite rules: the table key of a pid (JSON
values apart, not Python-equal ones), whether a link value is an id, and a value as
short text for an error message. Pure functions, no state (rules.py holds the tables)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from tracefuse_stream.rewrite.contract import ID_LIMIT


def pid_key(pid: Any) -> Any:
    """The table key of an original pid: ints, strings and null as they are; other
    JSON numbers and booleans apart from ints (Python's ``1 == 1.0 == True`` would make
    one process of three JSON values, and the header's pid map would list one); a list
    or object is not a pid (``TypeError``)."""
    t = type(pid)
    if t is int or t is str or pid is None:
        return pid
    if t is bool:
        return ("bool", pid)
    if t is Decimal:
        return ("number", pid)  # 1.0 and 1.00 spell one number
    if t is float:  # the same number as the exact reader's Decimal of its text
        return ("number", Decimal(repr(pid)))
    raise TypeError(f"a pid must be a number or a string, not {short_text(pid)}")


def short_text(value: Any) -> str:
    """A value as JSON-like text for an error message, at most 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _beyond_ids(v: Any) -> bool:
    """A non-strict link value that is an integer >= 2**32 (or spells one): kept as
    it is, it could equal another rank's rewritten id ``r * 2**32 + id``."""
    if type(v) is int:
        return v >= ID_LIMIT
    try:
        if type(v) is str:
            return int(v, 16) >= ID_LIMIT
        if isinstance(v, (float, Decimal)):
            return v == int(v) and v >= ID_LIMIT
    except (ValueError, OverflowError, ArithmeticError):
        return False
    return False


def _is_id(v: Any) -> bool:
    """A non-strict link value that is still an id (hex string, integral number)?
    Sentinels such as -1 and other non-ids are not rewritten."""
    if type(v) is str:
        try:
            return 0 <= int(v, 16) < ID_LIMIT
        except ValueError:
            return False
    if not isinstance(v, (float, Decimal)) or isinstance(v, bool):
        return False
    try:
        return v == int(v) and 0 <= v < ID_LIMIT
    except (ValueError, OverflowError, ArithmeticError):
        return False


__all__ = ["_beyond_ids", "_is_id", "pid_key", "short_text"]
