"""Each rank's figures against the other ranks of its step, from one sort per step.

Why: the verdict compares every rank with the others (their held median and spread,
the members whose wait for it makes its held); computed over the others for each rank
in turn, that is quadratic in ranks (issue 38: 2,048 ranks must cost at most 2.3x
1,024). Each figure here is the same number, in O(log n) a rank.
"""

from __future__ import annotations

import bisect
from typing import Any, Dict, List, Sequence, Tuple

from tracefuse_stream.align.collectives import Instance
from tracefuse_stream.analyze.medians import median_without


class OthersOutlier:
    """For each rank of a step, the others' held median plus ``factor`` times their
    spread (the scaled median absolute deviation of the others' values, 0 for fewer than 3), from one sort of the step's values:
    O(log n) a rank, the same numbers as computing it over the others each time (issue
    38: that was quadratic in ranks). The others' median takes a few distinct values over
    the ranks; the deviations from each are sorted once."""

    def __init__(self, values: List[int], factor: float, mad_scale: float) -> None:
        self.factor, self.mad_scale = factor, mad_scale
        self.ordered = sorted(values)
        self._devs: Dict[int, List[int]] = {}

    def of(self, v: int) -> int:
        n = len(self.ordered) - 1  # the others
        if n <= 0:
            return 0
        m = median_without(self.ordered, v)
        if n < 3:
            return m
        devs = self._devs.get(m)
        if devs is None:
            devs = self._devs[m] = sorted(abs(x - m) for x in self.ordered)
        return m + int(self.factor * int(self.mad_scale * median_without(devs, abs(v - m))))


class Members:
    """The other ranks a rank's held is the median over: the members of its instances
    (sorted, itself left out), at most ``sample`` (stragglers.self.size) of them evenly spread. The
    union is the largest group's members whenever it holds the rank's other groups (a
    world group holds every pair and stage group): each group's members are sorted once
    and each containment checked once, not a union of every group per rank (issue 38:
    quadratic in ranks)."""

    def __init__(self, sample: int) -> None:
        self.size = sample
        self._gid: Dict[int, int] = {}  # id(instance entries) -> group id
        self._ids: Dict[frozenset[int], int] = {}  # members -> group id
        self._sorted: List[List[int]] = []  # group id -> sorted members
        self._sets: List[frozenset[int]] = []
        self._holds: Dict[Tuple[int, int], bool] = {}
        self._keep: List[Any] = []  # the entries whose ids key the cache stay alive

    def _group(self, inst: Instance) -> int:
        g = self._gid.get(id(inst.entries))
        if g is None:
            members = frozenset(inst.entries)
            g = self._ids.get(members)
            if g is None:
                g = self._ids[members] = len(self._sorted)
                self._sorted.append(sorted(members))
                self._sets.append(members)
            self._gid[id(inst.entries)] = g
            self._keep.append(inst.entries)
        return g

    def _contains(self, big: int, small: int) -> bool:
        hit = self._holds.get((big, small))
        if hit is None:
            hit = self._holds[(big, small)] = self._sets[small] <= self._sets[big]
        return hit

    def smaller_groups(self, insts: Sequence[Instance]) -> List[List[Instance]]:
        """``insts`` split by process group, the groups smaller than the largest only;
        none when they are all of one group (a single-group job costs nothing more). A
        rank only its pair waits for is held by the pair, not by the world's median."""
        by: Dict[int, List[Instance]] = {}
        for i in insts:
            by.setdefault(self._group(i), []).append(i)
        if len(by) < 2:
            return []
        size = max(len(self._sorted[k]) for k in by)
        return [v for k, v in by.items() if len(self._sorted[k]) < size]

    def sample(self, r: int, insts: Sequence[Instance]) -> List[int]:
        groups = {self._group(i): None for i in insts}
        big = max(groups, key=lambda k: (len(self._sorted[k]), k))  # any holder gives the union
        if all(self._contains(big, k) for k in groups):
            full = self._sorted[big]
        else:
            full = sorted({q for k in groups for q in self._sorted[k]})
        j = bisect.bisect_left(full, r)
        n = len(full) - 1  # r is a member of every group of its instances
        if n <= self.size:
            return full[:j] + full[j + 1 :]
        return [full[k] if k < j else full[k + 1] for k in ((i * n) // self.size for i in range(self.size))]


__all__ = ["Members", "OthersOutlier"]
