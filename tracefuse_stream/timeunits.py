"""Exact microsecond -> nanosecond conversion, shared by every stage that compares times.

Kineto writes ``ts``/``dur`` in microseconds with three decimals. A parser gives an
int, a binary float or a Decimal. For floats below 2**42 us, ``round(v * 1000)`` is
exact (the float's error plus the product's rounding stay under half a nanosecond);
from 2**42 up the product's rounding can add a whole nanosecond, so the float's
shortest repr — the number as written in the JSON — goes through Decimal instead.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
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


#: Every clock a trace can come from -- and Perfetto, which keeps int64 nanoseconds --
#: fits in int64 nanoseconds: a time beyond that is no time at all.
CLOCK_NS = 2**63
_ABSENT = object()


def time_problem(value: Any, key: str, base_ns: int = 0) -> Optional[str]:
    """Why ``value``, the JSON value of an event's ``key`` (``"ts"`` or ``"dur"``), is
    no usable time, or None when it is one.

    One rule for every reader, filter and option (issue 21): a time is a JSON number
    (an int, a finite float or Decimal; not a bool, string or null) whose nanoseconds
    fit int64 -- for ``ts`` also once added to the rank's ``base_ns``, the absolute
    time. Anything else is malformed: the merge names the event, ``--salvage`` drops it.
    """
    if value is None:
        return f"{key} is null"
    if isinstance(value, bool):
        return f"{key} is {'true' if value else 'false'}, not a number"
    if isinstance(value, str):
        return f"{key} is a string ({value[:40]!r}), not a number"
    if not isinstance(value, (int, float, Decimal)):
        return f"{key} is not a number ({type(value).__name__})"
    try:
        ns = us_to_ns(value)
    except (TypeError, ValueError, ArithmeticError):
        return f"{key} is {value}, not a finite number"
    if not -CLOCK_NS <= ns < CLOCK_NS or (key == "ts" and not -CLOCK_NS <= ns + base_ns < CLOCK_NS):
        return f"{key} {value} is beyond any clock (int64 nanoseconds)"
    return None


class TimeCheck:
    """The fast form of :func:`time_problem` for a rank's events: ``check(event)`` is
    None when its ``ts`` and ``dur`` (where present) are usable times, else the
    problem. The common case -- Decimal or int values well inside the range -- costs a
    few comparisons; anything else goes through :func:`time_problem`."""

    def __init__(self, base_ns: int) -> None:
        self.base_ns = base_ns
        # whole microseconds safely inside the clock, as an offset and from base_ns; as
        # ints for int values and as Decimals for Decimal ones (a Decimal compared with
        # an int converts the int every time: ~10x slower)
        margin = CLOCK_NS // 1000 - 1
        self._ts_lo = max(-margin, (-CLOCK_NS - base_ns) // 1000 + 1)
        self._ts_hi = min(margin, (CLOCK_NS - base_ns) // 1000 - 1)
        self._dur_hi = margin
        self._ts_dlo, self._ts_dhi = Decimal(self._ts_lo), Decimal(self._ts_hi)
        self._dur_dlo, self._dur_dhi = Decimal(-margin), Decimal(margin)
        self._fast = abs(base_ns) <= 8 * 10**18

    def __call__(self, ev: Any) -> Optional[str]:
        get, absent, dec = ev.get, _ABSENT, Decimal
        ts = get("ts", absent)
        dur = get("dur", absent)
        # the common case in one line: Decimals below 1e15 us (1e18 ns: inside the
        # clock from any base within 8e18 ns); adjusted() is the decimal exponent
        if (
            self._fast
            and type(ts) is dec
            and ts.is_finite()
            and ts.adjusted() < 15
            and (dur is absent or (type(dur) is dec and dur.is_finite() and dur.adjusted() < 15))
        ):
            return None
        if ts is not absent:
            t = type(ts)
            try:  # a NaN Decimal raises InvalidOperation here: time_problem names it
                ok = (
                    self._ts_dlo <= ts <= self._ts_dhi
                    if t is Decimal
                    else t is int and self._ts_lo <= ts <= self._ts_hi
                )
            except ArithmeticError:
                ok = False
            if not ok:
                problem = time_problem(ts, "ts", self.base_ns)
                if problem is not None:
                    return problem
        if dur is not absent:
            t = type(dur)
            try:
                ok = (
                    self._dur_dlo <= dur <= self._dur_dhi
                    if t is Decimal
                    else t is int and -self._dur_hi <= dur <= self._dur_hi
                )
            except ArithmeticError:
                ok = False
            if not ok:
                return time_problem(dur, "dur")
        return None


#: ns from a file's base: the analysis reads no time beyond (the why's timeline,
#: analyze/timeline.py, and the kernel's walk, csrc/walk.c's WALK_FAR, skip such events)
FAR_NS = 1 << 62


def analysable(base_ns: int, ts_ns: int, dur_ns: int) -> bool:
    """Whether an event at ``ts_ns`` (file-relative) lasting ``dur_ns`` is one the
    analysis reads: the one rule for collectives, steps and the timeline's events, so
    that every step and arrival it cuts at has its events (a collective at 2**62.5 ns
    was matched while its timeline was empty: "0% explained" with no reason; at 2**63
    the kernel's int64 cuts overflowed: exit 70). Beyond it -- 146 years from the base --
    a time is as malformed as a string ``ts``: left out, as info leaves out every event
    the merge would refuse (timeunits.time_problem: beyond int64 ns, also absolute)."""
    return -FAR_NS < ts_ns < FAR_NS and -FAR_NS < dur_ns < FAR_NS and -CLOCK_NS <= base_ns + ts_ns < CLOCK_NS


def iso_utc(ns: Optional[int]) -> str:
    """``2026-12-01 08:11:31.974163Z`` for epoch nanoseconds (``-`` when unknown)."""
    if ns is None:
        return "-"
    try:
        dt = datetime.fromtimestamp(ns // 1_000_000_000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):  # beyond year 9999 or before 1 AD
        return f"{ns} ns since the epoch"
    return dt.strftime("%Y-%m-%d %H:%M:%S.") + f"{(ns // 1000) % 1_000_000:06d}Z"
