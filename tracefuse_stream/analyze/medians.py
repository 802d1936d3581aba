"""The integer median every figure of the analysis uses, and the median of the others.

Why one module: held, the thresholds, the noise, own lateness and the re-timed
what-if all compare a rank with the median of the other ranks; one definition (the
mean of the two middle values, floored, for an even count; 0 for none) keeps them one
rule.
"""

from __future__ import annotations

import bisect
from typing import Sequence


def median(values: Sequence[int]) -> int:
    """The median of ``values`` (0 for none)."""
    n = len(values)
    if not n:
        return 0
    s = sorted(values)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2


def median_without(ordered: Sequence[int], value: int) -> int:
    """The median of sorted ``ordered`` with one occurrence of ``value`` left out
    (O(log n): asked for every rank of an instance)."""
    j = bisect.bisect_left(ordered, value)
    m = len(ordered) - 1
    if m <= 0:
        return 0

    def at(k: int) -> int:
        return ordered[k] if k < j else ordered[k + 1]

    return at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) // 2


__all__ = ["median", "median_without"]
