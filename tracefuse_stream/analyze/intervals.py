"""Lengths of unions of intervals: a rank's wait, and how long the others waited for it.

Why apart: the verdict (analyze/stragglers.py), the root cause (analyze/rootcause.py)
and every rank's step (analyze/step_time.py) all measure time as the union of
overlapping stretches (DDP's buckets all-reduced two at a time on gloo's runloop
threads: two overlapping waits are one stretch of waiting), and the root cause is read
by the verdict, so the one rule lives below both.
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import Instance
from tracefuse_stream.analyze.medians import median


def union_ns(intervals: Iterable[Tuple[int, int]], lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """The length of the union of ``intervals``, clipped to ``[lo, hi]`` when given."""
    total = 0
    end: Optional[int] = None
    start = 0
    for a, b in sorted(intervals):
        if lo is not None and a < lo:  # comparisons, not max()/min(): called per step and rank
            a = lo
        if hi is not None and b > hi:
            b = hi
        if b <= a:
            continue
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        elif b > end:
            end = b
    if end is not None:
        total += end - start
    return total


def held_median(
    r: int,
    others: Sequence[int],
    insts: Sequence[Instance],
    spans: Dict[int, Tuple[Optional[int], Optional[int]]],
) -> int:
    """The median over ``others`` of the union of their waits for ``r`` at ``insts``
    (each clipped to its own step)."""
    waits = []
    for q in others:
        lo, hi = spans[q]
        pairs = ((i.entries[q].start_ns, i.entries[r].start_ns) for i in insts if q in i.entries)
        waits.append(union_ns(pairs, lo, hi))
    return median(waits) if waits else 0


__all__ = ["held_median", "union_ns"]
