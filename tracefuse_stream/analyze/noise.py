"""Arrival noise: how far apart ranks that are not held up arrive at a collective.

Why a module of its own: the threshold a rank must pass to stand out, the floor a
step-start skew must pass to count as lateness and the evidence's noise margin all
scale with it (analyze/stragglers.py, analyze/graph.py).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import Instance
from tracefuse_stream.analyze.medians import median


def noise_ns(instances: Sequence[Instance], own_spreads: Optional[Sequence[int]] = None) -> int:
    """Arrival noise: the larger of two robust estimates of how far apart ranks that are
    not held up arrive: (a) the median over instances of 3 ranks or more of the arrival
    spread of the instance's earliest half of ranks (stragglers arrive late, so the
    earliest half leaves them out; in a group of two the gap is all there is); (b) the
    median, over ranks and over a group's k-th collective of a step, of the median
    absolute deviation from step to step of the rank's arrival relative to the
    instance's median arrival (a rank always late by the same amount at the same
    collective varies little). With ``own_spreads`` (analyze/graph.py), (a) is taken on
    the ranks' own times, waiting left out: in a cascade most ranks arrive late only
    because they waited, and their arrivals would make noise of the delay itself."""
    early = (
        _early_spread(instances) if own_spreads is None else (median(own_spreads) if own_spreads else None)
    )
    mad = _deviation_mad(instances)
    return mad if early is None else max(early, mad)


def _early_spread(instances: Sequence[Instance]) -> Optional[int]:
    spreads = []
    for inst in instances:
        a = sorted(e.start_ns for e in inst.entries.values())
        if len(a) > 2:
            spreads.append(a[(len(a) + 1) // 2 - 1] - a[0])
    return median(spreads) if spreads else None


def _deviation_mad(instances: Sequence[Instance]) -> int:
    dev: Dict[Tuple[int, str, int], List[int]] = {}
    kth: Dict[Tuple[str, Optional[int]], int] = {}
    for inst in sorted(instances, key=lambda i: i.first_arrival_ns):
        k = kth.get((inst.group, inst.step), 0)
        kth[(inst.group, inst.step)] = k + 1
        mid = median([e.start_ns for e in inst.entries.values()])
        for r, e in inst.entries.items():
            dev.setdefault((r, inst.group, k), []).append(e.start_ns - mid)
    mads = []
    for values in dev.values():
        m = median(values)
        mads.append(median([abs(v - m) for v in values]))
    return median(mads)


__all__ = ["noise_ns"]
