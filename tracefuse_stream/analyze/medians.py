"""The integer median every figure of the analysis uses, and the median of the others.

Why one module: held, the thresholds, the noise, own lateness and the re-timed
what-if all compare a rank with the median of the other ranks; one definition (the
mean of the two middle values, floored, for an even count; 0 for none) keeps them one
rule.
"""

from __future__ import annotations

import bisect
from typing import Any, Sequence


def median(values: Sequence[int]) -> int:
    """The median of ``values`` (0 for none)."""
    n = len(values)
    if not n:
        return 0
    s = sorted(values)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2


def kth_without(ordered: Sequence[Any], value: Any, k: int) -> Any:
    """Item ``k`` of sorted ``ordered`` with one occurrence of ``value`` left out
    (O(log n): the others' figure for every rank of an instance from one sort)."""
    j = bisect.bisect_left(ordered, value)
    return ordered[k] if k < j else ordered[k + 1]


def median_without(ordered: Sequence[int], value: int) -> int:
    """The median of sorted ``ordered`` with one occurrence of ``value`` left out
    (O(log n): asked for every rank of an instance)."""
    m = len(ordered) - 1
    if m <= 0:
        return 0
    if m % 2:
        return int(kth_without(ordered, value, m // 2))
    return (kth_without(ordered, value, m // 2 - 1) + kth_without(ordered, value, m // 2)) // 2


__all__ = ["kth_without", "median", "median_without"]
