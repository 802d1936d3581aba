"""Exact microsecond -> nanosecond conversion, shared by every stage that compares times.

Kineto writes ``ts``/``dur`` in microseconds with three decimals. A parser gives an
int, a binary float or a Decimal. For floats below 2**42 us, ``round(v * 1000)`` is
exact (the float's error plus the product's rounding stay under half a nanosecond);
from 2**42 up the product's rounding can add a whole nanosecond, so the float's
shortest repr — the number as written in the JSON — goes through Decimal instead.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Optional, Union

Number = Union[int, float, Decimal]

FLOAT_FAST_LIMIT = 2.0**42
_THOUSAND = Decimal(1000)


def us_to_ns(value: Number) -> int:
    """Integer nanoseconds of a microsecond value, exact for up to 3 decimals
    (sub-nanosecond digits round half-to-even). TypeError for non-numbers (bool
    included), ValueError for NaN and infinities."""
    if type(value) is int:
        return value * 1000
    if type(value) is float:
        if -FLOAT_FAST_LIMIT < value < FLOAT_FAST_LIMIT:
            return round(value * 1000)
        if not math.isfinite(value):
            raise ValueError(f"us_to_ns: {value!r} is not a finite time")
        value = Decimal(repr(value))
    if isinstance(value, bool):
        raise TypeError("us_to_ns: bool is not a time")
    if isinstance(value, int):
        return int(value) * 1000
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"us_to_ns: {value!r} is not a finite time")
        return int((value * _THOUSAND).to_integral_value(rounding=ROUND_HALF_EVEN))
    raise TypeError(f"us_to_ns: expected int, float or Decimal, got {type(value).__name__}")


def us_to_ns_or_none(value: Any) -> Optional[int]:
    """Like :func:`us_to_ns`, but None for anything that is not a finite number."""
    try:
        return us_to_ns(value)
    except (TypeError, ValueError):
        return None
