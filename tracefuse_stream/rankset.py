"""Parsing of the command line's selection arguments: ``--ranks``, ``--window``, ``--steps``.

Every parser is strict and raises :class:`~tracefuse_stream.errors.UsageError` with a
one-line message that quotes the offending part, so the CLI can print it as is.

``--ranks`` grammar (whitespace around every token is tolerated)::

    spec  := part ("," part)*
    part  := N | A "-" B | A "-" B ":" S       (non-negative integers, A <= B, S >= 1)

``32-63:8`` means 32, 40, 48, 56 (start, start + S, ... up to and including B).
"""

from __future__ import annotations

import math
import re
from typing import List, Set, Tuple

from tracefuse_stream.errors import UsageError

#: A spec may not expand to more ranks than this (guards against ``0-999999999``).
MAX_RANKS = 1 << 20

_INT = r"[0-9]+"
_RANK_PART_RE = re.compile(rf"\s*({_INT})\s*(?:-\s*({_INT})\s*(?::\s*({_INT})\s*)?)?", re.ASCII)
_NUMBER_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*", re.ASCII)
_STEP_RE = re.compile(rf"\s*({_INT})\s*", re.ASCII)


def _diagnose_rank_part(part: str) -> str:
    """Why ``part`` (which did not match the grammar) is wrong, in a few words."""
    p = part.strip()
    if re.fullmatch(r"-\s*[0-9]+.*", p, re.ASCII):
        return "ranks cannot be negative"
    if re.fullmatch(r"[0-9]+\s*:\s*[0-9]*", p, re.ASCII):
        return "a stride needs a range (write A-B:S)"
    if re.search(r"-\s*-", p):
        return "ranks cannot be negative"
    return "expected N, A-B or A-B:S with non-negative integers"


def parse_rank_spec(spec: str) -> List[int]:
    """Expand a rank spec such as ``"0,8,16-23,32-63:8"`` into a sorted list of
    distinct ranks (here 0, 8, 16..23, 32, 40, 48, 56).

    Raises UsageError for an empty spec or part, a non-number, a negative rank,
    a reversed range (``5-3``), a stride of 0 or a spec expanding to more than
    ``MAX_RANKS`` ranks; the message quotes the bad part.
    """
    if not isinstance(spec, str):
        raise UsageError(f"rank spec must be a string, got {type(spec).__name__}")
    if not spec.strip():
        raise UsageError("empty rank spec: expected e.g. '0,8,16-23,32-63:8'")
    ranks: Set[int] = set()
    for part in spec.split(","):
        if not part.strip():
            raise UsageError(f"bad rank spec {spec!r}: empty part (stray or doubled comma)")
        m = _RANK_PART_RE.fullmatch(part)
        if m is None:
            raise UsageError(f"bad rank spec part {part.strip()!r} in {spec!r}: {_diagnose_rank_part(part)}")
        a_s, b_s, s_s = m.groups()
        a = int(a_s)
        if b_s is None:
            ranks.add(a)
        else:
            b = int(b_s)
            step = int(s_s) if s_s is not None else 1
            if b < a:
                raise UsageError(
                    f"bad rank spec part {part.strip()!r} in {spec!r}: range end {b} is before its start {a}"
                )
            if step == 0:
                raise UsageError(
                    f"bad rank spec part {part.strip()!r} in {spec!r}: stride must be at least 1"
                )
            count = (b - a) // step + 1
            if count > MAX_RANKS:
                raise UsageError(
                    f"bad rank spec part {part.strip()!r} in {spec!r}: "
                    f"expands to {count} ranks (at most {MAX_RANKS})"
                )
            ranks.update(range(a, b + 1, step))
        if len(ranks) > MAX_RANKS:
            raise UsageError(f"rank spec {spec!r} expands to more than {MAX_RANKS} ranks")
    return sorted(ranks)


def _parse_ms(token: str, what: str, spec: str) -> float:
    if _NUMBER_RE.fullmatch(token) is None:
        if token.strip().startswith("-"):
            reason = "must not be negative"
        elif not token.strip():
            reason = "is missing"
        else:
            reason = "is not a number of milliseconds"
        raise UsageError(f"bad --window {spec!r}: {what} {token.strip()!r} {reason}")
    value = float(token)
    if not math.isfinite(value):  # e.g. "1e999"
        raise UsageError(f"bad --window {spec!r}: {what} {token.strip()!r} is not finite")
    return value


def parse_window_ms(spec: str) -> Tuple[float, float]:
    """Parse ``--window START_MS:END_MS`` (ms relative to the merged trace's first
    event) into ``(start_ms, end_ms)``; floats allowed, ``0 <= start < end``.

    Raises UsageError for a missing colon, a missing or non-numeric bound
    (``inf``/``nan`` included), a negative bound, or ``start >= end``.
    """
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise UsageError(f"bad --window {spec!r}: expected START_MS:END_MS, e.g. '1500:2250.5'")
    s_tok, e_tok = spec.split(":")
    start = _parse_ms(s_tok, "start", spec)
    end = _parse_ms(e_tok, "end", spec)
    if not start < end:
        raise UsageError(
            f"bad --window {spec!r}: start {s_tok.strip()} ms is not before end {e_tok.strip()} ms"
        )
    return start, end


def _parse_step(token: str, what: str, spec: str) -> int:
    m = _STEP_RE.fullmatch(token)
    if m is None:
        t = token.strip()
        if not t:
            reason = "is missing"
        elif t.startswith("-"):
            reason = "must not be negative"
        else:
            reason = "is not a non-negative integer"
        raise UsageError(f"bad --steps {spec!r}: {what} {t!r} {reason}")
    return int(m.group(1))


def parse_steps(spec: str) -> Tuple[int, int]:
    """Parse ``--steps A:B`` (profiler step numbers, inclusive) or ``--steps N``
    (meaning ``N:N``) into ``(first, last)``.

    Raises UsageError for a non-integer or negative step, more than one colon,
    or ``first > last``.
    """
    if not isinstance(spec, str) or spec.count(":") > 1:
        raise UsageError(f"bad --steps {spec!r}: expected A:B or N, e.g. '3:5'")
    if ":" in spec:
        a_tok, b_tok = spec.split(":")
        first = _parse_step(a_tok, "first step", spec)
        last = _parse_step(b_tok, "last step", spec)
    else:
        first = last = _parse_step(spec, "step", spec)
    if first > last:
        raise UsageError(f"bad --steps {spec!r}: first step {first} is after last step {last}")
    return first, last


def compress_ranges(numbers) -> str:
    """``[2, 3, 4, 6, 8, 9]`` -> ``"2-4,6,8-9"`` (the rank spec syntax); ``""`` if empty."""
    nums = sorted(set(numbers))
    out: List[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)


__all__ = [
    "MAX_RANKS",
    "parse_rank_spec",
    "parse_window_ms",
    "parse_steps",
    "compress_ranges",
]
