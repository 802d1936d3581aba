"""Imbalance, named: how each step-time figure spreads across ranks, and the verdict.

Why: with no straggler, "every rank is slow the same way" and "one rank computes
more in every step" look alike in a table of numbers; this says which it is. Per step
and figure (analyze/step_time.py), the median over the ranks, the largest value, its
rank and max / median. Two verdicts:

* **compute imbalance**: in every step with GPU figures the largest ``compute`` is at
  least :data:`SPREAD` x the median and on the same rank ("compute spread 1.31x: rank
  12 has 31% more GEMM time in every step"; the category is the one where that rank
  is furthest above the others' median);
* **CPU compute imbalance** (a run without GPU events, as gloo's): the same rule on
  ``cpu_busy``, the step less the rank's time blocked in its matched collectives
  (waiting + communicating, analyze/step_time.py), naming the operator (self time) or
  the time outside operators (by annotation) where that rank is furthest above the
  others' median ("CPU busy spread 1.37x: rank 2 has +34.9 ms/step of
  aten::_linalg_svd self time in every step"). Named only when material: the rank's
  excess is at least :data:`CPU_MATERIAL` of the median step in every step; the
  operator or annotation is named when it holds at least half of that excess (else
  the line gives the rank and its excess, and the why of the straggler verdict says
  where the time went). With gloo the collectives run on
  their own threads, so the step thread may still work while its collective waits:
  ``cpu_busy`` is then a lower bound for the waiting ranks, which can only make the
  spread look larger for the rank nobody waits for -- the same rank in every step
  is what is asked, as on the GPU;
* **bound by a part**: a part (exposed communication, exposed copies, GPU idle) is at
  least :data:`BOUND_SHARE` of the step on every rank ("38% of the step is exposed
  communication on every rank": the smallest rank's share over all its steps).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.analyze.medians import median
from tracefuse_stream.analyze.step_time import OTHER_NAMES, StepTime

SPREAD = 1.10
CPU_MATERIAL = 0.10  # a CPU busy excess named: at least this share of the median step
BOUND_SHARE = 0.20
#: (figure, what the verdict calls it) of the GPU parts a step can be bound by
BOUND_PARTS = (
    ("comm_exposed", "exposed communication"),
    ("memcpy", "exposed memory copies"),
    ("idle", "GPU idle"),
)
FIGURES = ("step", "compute", "comm", "comm_exposed", "memcpy", "idle", "idle_host_wait", "cpu_busy")


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
    if figure == "cpu_busy":
        c = st.cpu
        if c.collective_wait_ns is None:
            return None  # not in a matched step: what it waited for is unknown
        return max(0, st.step_ns - c.collective_wait_ns - (c.collective_comm_ns or 0))
    if st.gpu is None:
        return None
    return int(getattr(st.gpu.figures, figure + "_ns"))


def _append(cols: List[Any], k: int, x: int) -> None:
    try:
        cols[k].append(x)
    except OverflowError:  # beyond an int64: a list from here on
        cols[k] = [*cols[k], x]


def spreads(rows: Sequence[StepTime]) -> List[Spread]:
    """Every step's :class:`Spread` per figure (steps in order; figures as :data:`FIGURES`)."""
    # the figures only, not the rows: ``rows`` may be decoded as they are read, one
    # rank at a time (analyze/step_pack.py), and must not all be held at once; held as
    # int64 arrays [values, ranks]: 16 bytes a figure, not ~100 as a tuple (issue 38); a
    # number beyond 64 bits (a hostile file's times or ranks) turns its array into a list
    by_step: Dict[int, Dict[str, List[Any]]] = {}
    for st in rows:
        per = by_step.get(st.step)
        if per is None:
            per = by_step[st.step] = {fig: [array("q"), array("q")] for fig in FIGURES}
        for fig in FIGURES:
            v = figure_ns(st, fig)
            if v is not None:
                _append(per[fig], 0, v)
                _append(per[fig], 1, st.rank)
    out = []
    for step, per in sorted(by_step.items()):
        for fig in FIGURES:
            values, ranks = per[fig]
            if not values:
                continue
            med = int(median(values))
            top, rank = max(zip(values, ranks), key=lambda x: (x[0], -x[1]))
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


def _cpu_excess(rows: Sequence[StepTime], rank: int) -> Tuple[str, int]:
    """What ``rank`` spends most above the others' median per step on the step thread:
    an operator's self time or the time outside operators under one annotation
    (``(what, ns per step)``; a name the others never show counts from 0)."""
    totals: Dict[int, Dict[str, int]] = {}
    steps: Dict[int, int] = {}
    for st in rows:
        t = totals.setdefault(st.rank, {})
        steps[st.rank] = steps.get(st.rank, 0) + 1
        for name, self_ns, _calls in st.cpu.ops:
            if name != OTHER_NAMES:  # the ops beyond the top N: no one name to give
                t[f"{name} self time"] = t.get(f"{name} self time", 0) + self_ns
        for ann, ns in st.cpu.outside:
            key = f"time outside operators in {ann}"
            t[key] = t.get(key, 0) + ns
    mine = totals.get(rank, {})
    best: Tuple[str, int] = ("time", 0)
    for what, ns in sorted(mine.items()):
        others = [t.get(what, 0) // max(1, steps[r]) for r, t in totals.items() if r != rank]
        extra = ns // max(1, steps[rank]) - int(median(others) if others else 0)
        if extra > best[1]:
            best = (what, extra)
    return best


def _spread_verdict(comp: Sequence[Spread]) -> Optional[Tuple[int, float, str]]:
    """(rank, smallest ratio, "in every step" / "in the one step") when one rank has
    the largest value, at least :data:`SPREAD` x the median, in every step."""
    ranks = {s.max_rank for s in comp}
    if not comp or len(ranks) != 1 or not all(s.ratio is not None and s.ratio >= SPREAD for s in comp):
        return None
    worst = min(s.ratio for s in comp if s.ratio is not None)
    return ranks.pop(), worst, "in every step" if len(comp) > 1 else "in the one step"


def _material(busy: Sequence[Spread], sp: Sequence[Spread]) -> Optional[int]:
    """The rank's mean CPU busy excess per step (ns) when it is worth a line: at least
    :data:`CPU_MATERIAL` of the median step in every step; else None."""
    step_med = {s.step: s.median_ns for s in sp if s.figure == "step"}
    extra = [s.max_ns - s.median_ns for s in busy]
    if any(e < CPU_MATERIAL * step_med.get(s.step, 0) for s, e in zip(busy, extra)):
        return None
    return sum(extra) // len(extra)


def _cpu_verdict(rows: Sequence[StepTime], sp: Sequence[Spread]) -> Optional[str]:
    """The CPU busy spread line of a run without GPU figures, or None (module docstring).
    A material spread with no one operator or annotation holding half of it is still
    said (the rank and its excess), never left as "none named" beside a table that
    shows it."""
    busy = [s for s in sp if s.figure == "cpu_busy"]
    found = _spread_verdict(busy)
    if found is None:
        return None
    rank, worst, every = found
    excess = _material(busy, sp)
    if excess is None:
        return None
    what, ns = _cpu_excess(rows, rank)
    tail = f"(the step outside collectives at least {worst:.2f}x the median rank's)"
    if ns >= 0.5 * excess:
        return (
            f"CPU busy spread {worst:.2f}x: rank {rank} has +{ns / 1e6:.1f} ms/step of {what} {every} {tail}"
        )
    return (
        f"CPU busy spread {worst:.2f}x: rank {rank} is busy +{excess / 1e6:.1f} ms/step over the median rank "
        f"{every} {tail}, in no one operator or annotation (its step thread's time outside operators "
        "mixes it with the others' waiting: the why of the straggler verdict says where it went)"
    )


def verdicts(rows: Sequence[StepTime], sp: Sequence[Spread]) -> List[str]:
    """The verdict lines (see the module docstring); empty: balanced and no part dominates."""
    out: List[str] = []
    if len({st.rank for st in rows}) < 2:
        return out
    comp = [s for s in sp if s.figure == "compute"]
    found = _spread_verdict(comp)
    if found is not None:
        rank, worst, every = found
        cat, extra = _category_excess(rows, rank)
        out.append(
            f"compute spread {worst:.2f}x: rank {rank} has {100 * extra:.0f}% more {cat} time {every} "
            f"(GPU compute at least {worst:.2f}x the median rank's)"
        )
    cpu = _cpu_verdict(rows, sp) if not comp else None
    if cpu is not None:
        out.append(cpu)
    by_part = _shares(rows, [fig for fig, _what in BOUND_PARTS])
    for fig, what in BOUND_PARTS:
        shares = by_part[fig]
        if shares and min(shares.values()) >= BOUND_SHARE:
            low = min(shares.values())
            out.append(f"{100 * low:.0f}% of the step is {what} on every rank (at least; all steps)")
    return out


def _shares(rows: Sequence[StepTime], figs: Sequence[str]) -> Dict[str, Dict[int, float]]:
    """figure -> rank -> the part's share of its steps, over all its steps with GPU
    figures (every figure in one pass over ``rows``: they may be decoded as read)."""
    part: Dict[str, Dict[int, int]] = {fig: {} for fig in figs}
    total: Dict[str, Dict[int, int]] = {fig: {} for fig in figs}
    for st in rows:
        for fig in figs:
            v = figure_ns(st, fig)
            if v is None or st.step_ns <= 0:
                continue
            part[fig][st.rank] = part[fig].get(st.rank, 0) + v
            total[fig][st.rank] = total[fig].get(st.rank, 0) + st.step_ns
    return {fig: {r: part[fig][r] / total[fig][r] for r in part[fig] if total[fig][r] > 0} for fig in figs}


__all__ = ["BOUND_SHARE", "CPU_MATERIAL", "FIGURES", "SPREAD", "Spread", "figure_ns", "spreads", "verdicts"]
