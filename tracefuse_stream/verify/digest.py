"""Multiset digests of events: "every kept input event exactly once" in bounded memory.

An event is reduced to its canonical tuple ``(ph, cat, name, ts_ns, dur_ns, pid)``
(the output pid; ``ts_ns`` absolute). Per rank, the digest keeps per bucket a count
and two sums of 64-bit hashes: equal multisets give equal digests, and a missing,
extra or moved event changes its bucket. On a mismatch only the differing buckets
are examined again (see :mod:`tracefuse_stream.verify.against`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, List, Tuple

from tracefuse_stream.timeunits import us_to_ns_or_none

#: digest buckets per rank.
NBUCKETS = 64
MASK64 = (1 << 64) - 1

EventTuple = Tuple[Any, Any, Any, Any, Any, Any]


def hashable(v: Any) -> Any:
    """``v`` itself when it can be a dict key, else its repr (lists, dicts as pids)."""
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


def pid_hashable(v: Any) -> Any:
    """An input pid as a dict key that keeps ``1``, ``1.0`` and ``true`` apart (the
    merge gives them three output pids: rewrite/rules.pid_key)."""
    if type(v) is bool:
        return ("bool", v)
    if type(v) is Decimal:
        return ("number", v)
    if type(v) is float:  # as rewrite/values.pid_key: the number its text spells
        return ("number", Decimal(repr(v)))
    return hashable(v)


def tuple_hashes(t: Tuple[Any, ...]) -> Tuple[int, int]:
    """Two independent hashes of a canonical event tuple."""
    try:
        h1 = hash(t)
    except TypeError:
        t = tuple(hashable(x) for x in t)
        h1 = hash(t)
    h2 = hash((t[5], t[3], t[2], t[4], t[1], t[0], 0x5BD1E995))
    return h1, h2


def event_tuple(ev: dict, pid: Any) -> EventTuple:
    """The canonical tuple of a merged event (its pid already made hashable)."""
    dur = ev.get("dur")
    return (
        ev.get("ph"),
        ev.get("cat"),
        ev.get("name"),
        us_to_ns_or_none(ev.get("ts")),
        us_to_ns_or_none(dur) if dur is not None else None,
        pid,
    )


def tuple_example(t: EventTuple) -> dict:
    return {"ph": t[0], "cat": t[1], "name": t[2], "ts_ns": t[3], "dur_ns": t[4], "pid": t[5]}


class Digest:
    """Multiset digest per rank: per bucket a count and two hash sums."""

    __slots__ = ("n", "s1", "s2")

    def __init__(self) -> None:
        self.n = [0] * NBUCKETS
        self.s1 = [0] * NBUCKETS
        self.s2 = [0] * NBUCKETS

    def add(self, h1: int, h2: int) -> None:
        b = h1 % NBUCKETS
        self.n[b] += 1
        self.s1[b] += h1
        self.s2[b] += h2

    def total(self) -> int:
        return sum(self.n)

    def diff_buckets(self, other: Digest) -> List[int]:
        return [
            b
            for b in range(NBUCKETS)
            if self.n[b] != other.n[b]
            or (self.s1[b] - other.s1[b]) & MASK64
            or (self.s2[b] - other.s2[b]) & MASK64
        ]


__all__ = ["Digest", "NBUCKETS", "event_tuple", "hashable", "tuple_example", "tuple_hashes"]
