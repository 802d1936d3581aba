"""Exact time shifts: a rank's ``ts`` moved by a whole number of nanoseconds.

Why exact: a ``ts`` is microseconds with three decimals at epoch scale; a float
addition would round it (a double has 0.25 us steps there), so the shift is decimal
arithmetic whose rounding would raise instead (rewrite/rules.py uses it per event).
"""

from __future__ import annotations

from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow
from typing import Any

# Exact decimal arithmetic for time shifts: 100 digits hold any timestamp a trace
# can carry; a result that would still round raises instead (Inexact is trapped).
_EXACT = Context(prec=100, traps=[InvalidOperation, Inexact, Overflow])
_THOUSAND = Decimal(1000)


class TimeShifter:
    """Adds an exact number of nanoseconds to microsecond timestamps.

    Integer results of a whole-microsecond shift stay JSON integers; anything else
    is an exact ``Decimal`` (both encoders write it as a JSON number with its digits)
    instead of a float that could round.
    """

    def __init__(self, shift_ns: int) -> None:
        self.shift_ns = shift_ns
        self.identity = shift_ns == 0
        self._int_us = shift_ns // 1000 if shift_ns % 1000 == 0 else None
        self._dshift = _EXACT.divide(Decimal(shift_ns), _THOUSAND)
        self._add = _EXACT.add

    def __call__(self, ts: Any) -> Any:
        if self.identity:
            return ts
        t = type(ts)
        if t is Decimal:
            if ts.is_finite():
                return self._add(ts, self._dshift)
            raise ValueError(f"timestamp is {ts}")
        if t is int:
            if self._int_us is not None:
                return ts + self._int_us
            return self._add(Decimal(ts), self._dshift)
        if t is float:
            r = repr(ts)
            if r in ("nan", "inf", "-inf"):
                raise ValueError(f"timestamp is {r}")
            return self._add(Decimal(r), self._dshift)
        raise ValueError(f"timestamp is not a number: {ts!r}")


__all__ = ["TimeShifter"]
