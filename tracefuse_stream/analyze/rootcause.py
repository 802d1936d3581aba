"""The verdict's root-cause figures: delayed ranks and what fixing each straggler saves.

Why apart from analyze/stragglers.py: the verdict names ranks from how long the others
waited for each (held, capped by own lateness); this reads the steps' dependency graphs
(analyze/graph.py) once the stragglers are named, for the ranks that are late only
because they waited and for the re-timed what-if.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.analyze import graph as G


def root_cause(
    rows: Sequence[Any], stragglers: Sequence[Any]
) -> Tuple[List[G.Delay], Dict[Tuple[int, Optional[int]], int], Dict[Optional[int], int]]:
    """(the delayed ranks: late past their threshold with no own lateness past it, with
    whom they waited for; (straggler, step) -> what fixing it saves in each step it
    stands out in; step -> what fixing every named straggler of the step saves, where
    there are several)."""
    delayed: List[G.Delay] = []
    for row in rows:
        if row.graph is None:
            continue
        late = {
            r: (t, row.late_at.get(r, -1))
            for r, t in row.lateness.items()
            if t > row.threshold.get(r, 0) and row.held.get(r, 0) <= row.threshold.get(r, 0)
        }
        delayed += G.delays(row.graph, late)
    saves: Dict[Tuple[int, Optional[int]], int] = {}
    for s in stragglers:
        for row in rows:
            if row.graph is not None and row.step in s.steps:
                saves[(s.rank, row.step)] = G.saves_ns(row.graph, [s.rank])
    together: Dict[Optional[int], int] = {}
    for row in rows:
        if row.graph is not None and len(row.stragglers) > 1:
            together[row.step] = G.saves_ns(row.graph, list(row.stragglers))
    return delayed, saves, together


__all__ = ["root_cause"]
