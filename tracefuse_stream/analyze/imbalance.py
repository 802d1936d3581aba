"""Imbalance, named: how each step-time figure spreads across ranks, and the verdict.

Why: with no straggler, "every rank is slow the same way" and "one rank computes
more in every step" look alike in a table of numbers; this says which it is. Per step
and figure (analyze/step_time.py), the median over the ranks, the largest value, its
rank and max / median. Two verdicts:

* **compute imbalance**: in every step with GPU figures the largest ``compute`` is at
  least :data:`SPREAD` x the median and on the same rank ("compute spread 1.31x: rank
  12 has 31% more GEMM time in every step"; the category is the one where that rank
  is furthest above the others' median);
* **bound by a part**: a part (exposed communication, exposed copies, GPU idle) is at
  least :data:`BOUND_SHARE` of the step on every rank ("38% of the step is exposed
  communication on every rank": the smallest rank's share over all its steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.analyze.medians import median
from tracefuse_stream.analyze.step_time import StepTime

SPREAD = 1.10
BOUND_SHARE = 0.20
#: (figure, what the verdict calls it) of the GPU parts a step can be bound by
BOUND_PARTS = (
    ("comm_exposed", "exposed communication"),
    ("memcpy", "exposed memory copies"),
    ("idle", "GPU idle"),
)
FIGURES = ("step", "compute", "comm", "comm_exposed", "memcpy", "idle", "idle_host_wait")


@dataclass
class Spread:
    """One figure of one step across the ranks (ns)."""

    step: int
    figure: str
    median_ns: int
    max_ns: int
    max_rank: int
    ratio: Optional[float]  # max / median; None when the median is 0

    def to_json(self) -> Dict[str, object]:
        return {
            "step": self.step,
            "figure": self.figure,
            "median_us": round(self.median_ns / 1000.0, 3),
            "max_us": round(self.max_ns / 1000.0, 3),
            "max_rank": self.max_rank,
            "max_over_median": None if self.ratio is None else round(self.ratio, 3),
        }


def figure_ns(st: StepTime, figure: str) -> Optional[int]:
    """One figure of one rank's step (None: a GPU figure of a step without GPU events)."""
    if figure == "step":
        return st.step_ns
    if st.gpu is None:
        return None
    return int(getattr(st.gpu.figures, figure + "_ns"))


def spreads(rows: Sequence[StepTime]) -> List[Spread]:
    """Every step's :class:`Spread` per figure (steps in order; figures as :data:`FIGURES`)."""
    by_step: Dict[int, List[StepTime]] = {}
    for st in rows:
        by_step.setdefault(st.step, []).append(st)
    out = []
    for step, sts in sorted(by_step.items()):
        for fig in FIGURES:
            vals = [(v, st.rank) for st in sts if (v := figure_ns(st, fig)) is not None]
            if not vals:
                continue
            med = int(median([v for v, _r in vals]))
            top, rank = max(vals, key=lambda x: (x[0], -x[1]))
            out.append(Spread(step, fig, med, top, rank, top / med if med > 0 else None))
    return out


def _category_excess(rows: Sequence[StepTime], rank: int) -> Tuple[str, float]:
    """The GPU category where ``rank`` is furthest above the others' median (summed
    over its steps), and by how much (a fraction of that median)."""
    totals: Dict[int, Dict[str, int]] = {}
    for st in rows:
        if st.gpu is not None:
            t = totals.setdefault(st.rank, {})
            for c, ns in st.gpu.categories.items():
                t[c] = t.get(c, 0) + ns
    mine = totals.get(rank, {})
    best: Tuple[str, float, int] = ("compute", 0.0, 0)
    for c, ns in sorted(mine.items()):
        others = [t.get(c, 0) for r, t in totals.items() if r != rank]
        med = median(others) if others else 0
        if med > 0 and ns - med > best[2]:
            best = (c, (ns - med) / med, int(ns - med))
    return best[0], best[1]


def verdicts(rows: Sequence[StepTime], sp: Sequence[Spread]) -> List[str]:
    """The verdict lines (see the module docstring); empty: balanced and no part dominates."""
    out: List[str] = []
    comp = [s for s in sp if s.figure == "compute"]
    if comp and len({st.rank for st in rows}) > 1:
        ranks = {s.max_rank for s in comp}
        if len(ranks) == 1 and all(s.ratio is not None and s.ratio >= SPREAD for s in comp):
            rank = ranks.pop()
            worst = min(s.ratio for s in comp if s.ratio is not None)
            cat, extra = _category_excess(rows, rank)
            every = "in every step" if len(comp) > 1 else "in the one step"
            out.append(
                f"compute spread {worst:.2f}x: rank {rank} has {100 * extra:.0f}% more {cat} time {every} "
                f"(GPU compute at least {worst:.2f}x the median rank's)"
            )
    for fig, what in BOUND_PARTS:
        shares = _shares(rows, fig)
        if shares and min(shares.values()) >= BOUND_SHARE:
            low = min(shares.values())
            out.append(f"{100 * low:.0f}% of the step is {what} on every rank (at least; all steps)")
    return out


def _shares(rows: Sequence[StepTime], fig: str) -> Dict[int, float]:
    """rank -> the part's share of its steps, over all its steps with GPU figures."""
    part: Dict[int, int] = {}
    total: Dict[int, int] = {}
    for st in rows:
        v = figure_ns(st, fig)
        if v is None or st.step_ns <= 0:
            continue
        part[st.rank] = part.get(st.rank, 0) + v
        total[st.rank] = total.get(st.rank, 0) + st.step_ns
    return {r: part[r] / total[r] for r in part if total[r] > 0}


__all__ = ["BOUND_SHARE", "FIGURES", "SPREAD", "Spread", "figure_ns", "spreads", "verdicts"]
