"""Who holds the others back, per step and over the run, from matched collective instances.

Why "last to arrive" is not enough: with DDP the slow rank is last mainly at the first
bucket after its delay; later buckets arrive in an order decided by noise. What costs
the job is how long the OTHERS wait for a rank. So, for one instance with arrivals
``a`` (:mod:`tracefuse_stream.align.collectives`):

* ``wait`` of rank r = last arrival - a[r] (how long r sat in the collective);
* ``held`` of rank r = max(0, a[r] - median of the other ranks' arrivals): how long
  the typical other rank waited for r. For the last rank this is the others' median
  wait; a second, smaller straggler is credited with its own lateness too (the
  others would still wait that long for it if the first were fixed). In a group of
  two it is simply the gap when r came second.

Summed per step (the ``ProfilerStep#N`` of each instance) and per rank, ``held`` ranks
the stragglers. Whether a rank *stands out* in a step is judged against a threshold
derived from the run itself, never a fixed number:

* **noise** ``sigma``: the larger of two robust estimates of how far apart ranks that
  are not held up arrive: (a) the median over instances of 3 ranks or more of the
  arrival spread of the instance's *earliest half* of ranks -- stragglers arrive late,
  so the earliest half leaves them out (in a group of two the gap is all there is, so
  such instances are not used here); (b) the median, over ranks and over a group's k-th
  collective of a step, of the median absolute deviation from step to step of the
  rank's arrival relative to the instance's median arrival -- a rank always late by
  the same amount at the same collective varies little. Medians ignore the minority of
  steps where something was slow.
* **busy step** ``D``: the median over ranks and steps of the step's duration minus the
  time the rank spent waiting in collectives in it -- the step time without waiting,
  which a straggler does not inflate.
* a rank *passes* in a step when ``held > T = max(NOISE_FACTOR * sigma * sqrt(m),
  STEP_FRACTION * D, MIN_THRESHOLD)``, ``m`` being its instances in that step (a sum of
  m noisy lateness values grows about like sqrt(m)): the others waited for it longer
  than the arrival noise explains, and long enough to cost the job (a twentieth of the
  step's work: a rank 15% slower in every step is a straggler worth naming -- the
  recorded ``ddp4_mild_straggler``, which a quarter of the step, the first choice,
  called balanced);
* it *stands out* in that step when it passes in more than half of the steps (a
  persistent straggler), or else -- an intermittent one -- when the others' wait for
  it in that step is also longer than a typical whole step (the median ProfilerStep
  duration): one scheduler hiccup in one short step is not a straggler.

Stragglers are the ranks that stand out in at least one step, ordered by how long the
others waited for them in total; an intermittent one lists the steps it stood out in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import CollectiveTable, Instance

NOISE_FACTOR = 8.0
STEP_FRACTION = 0.05
MIN_THRESHOLD_NS = 100_000  # 0.1 ms: below this, arrival order is clock conversion noise


def held_ns(inst: Instance) -> Dict[int, int]:
    """rank -> how long the other ranks (median) waited for it in ``inst``."""
    arrivals = {r: e.start_ns for r, e in inst.entries.items()}
    out = {}
    for r, a in arrivals.items():
        others = sorted(v for q, v in arrivals.items() if q != r)
        out[r] = max(0, a - _median(others)) if others else 0
    return out


def _median(values: Sequence[int]) -> int:
    n = len(values)
    if not n:
        return 0
    s = sorted(values)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2


def noise_ns(instances: Sequence[Instance]) -> int:
    """Arrival noise: the larger of two robust estimates (module docstring)."""
    early = _early_spread(instances)
    mad = _deviation_mad(instances)
    return mad if early is None else max(early, mad)


def _early_spread(instances: Sequence[Instance]) -> Optional[int]:
    """The median arrival spread of the earliest half of each instance's ranks, over
    instances of 3 ranks or more (in a group of two the gap is all there is, straggler
    or not); None without such instances."""
    spreads = []
    for inst in instances:
        a = sorted(e.start_ns for e in inst.entries.values())
        if len(a) > 2:
            spreads.append(a[(len(a) + 1) // 2 - 1] - a[0])
    return _median(spreads) if spreads else None


def _deviation_mad(instances: Sequence[Instance]) -> int:
    """The median, over ranks and over a group's k-th collective of a step, of how much
    the rank's arrival relative to the instance's median arrival varies from step to
    step (median absolute deviation): the same collective of every step, so that a
    rank always late at one of them and never at another still varies little."""
    dev: Dict[Tuple[int, str, int], List[int]] = {}
    kth: Dict[Tuple[str, Optional[int]], int] = {}
    for inst in sorted(instances, key=lambda i: i.first_arrival_ns):
        k = kth.get((inst.group, inst.step), 0)
        kth[(inst.group, inst.step)] = k + 1
        mid = _median([e.start_ns for e in inst.entries.values()])
        for r, e in inst.entries.items():
            dev.setdefault((r, inst.group, k), []).append(e.start_ns - mid)
    mads = []
    for values in dev.values():
        m = _median(values)
        mads.append(_median([abs(v - m) for v in values]))
    return _median(mads)


@dataclass
class StepRow:
    """One step (``step`` None: instances outside every ProfilerStep)."""

    step: Optional[int]
    instances: int = 0
    wait: Dict[int, int] = field(default_factory=dict)  # rank -> ns waited in collectives
    held: Dict[int, int] = field(default_factory=dict)  # rank -> ns the others waited for it
    last: Dict[int, int] = field(default_factory=dict)  # rank -> instances it arrived last at
    count: Dict[int, int] = field(default_factory=dict)  # rank -> its instances in the step
    duration_ns: Optional[int] = None  # median ProfilerStep duration over the ranks
    stragglers: List[int] = field(default_factory=list)  # ranks standing out, most held first
    threshold: Dict[int, int] = field(default_factory=dict)  # rank -> its threshold in this step

    worst_spread_ns: int = -1
    last_rank: Optional[int] = None  # last to arrive at the step's instance of widest arrival spread


@dataclass
class Straggler:
    rank: int
    held_ns: int  # over all instances
    steps: List[Optional[int]]  # the steps it stood out in
    last_arrivals: int
    instances: int


@dataclass
class Verdict:
    """Everything ``info --collectives`` says about stragglers."""

    by_step: List[StepRow]
    stragglers: List[Straggler]
    noise_ns: int
    busy_step_ns: Optional[int]
    typical_step_ns: Optional[int] = None  # median ProfilerStep duration

    @property
    def straggler(self) -> Optional[int]:
        return self.stragglers[0].rank if self.stragglers else None

    def threshold_ns(self, m: int = 1) -> int:
        """The threshold for a rank with ``m`` instances in a step."""
        step_part = int(STEP_FRACTION * self.busy_step_ns) if self.busy_step_ns is not None else 0
        return max(int(NOISE_FACTOR * self.noise_ns * math.sqrt(max(m, 1))), step_part, MIN_THRESHOLD_NS)

    def worst_step(self) -> Optional[StepRow]:
        """The step where the others waited longest for the straggler (no straggler: the
        step with the most waiting)."""
        rows = [r for r in self.by_step if r.instances]
        if not rows:
            return None
        st = self.straggler
        if st is not None:
            return max(rows, key=lambda r: (r.held.get(st, 0), -(r.step or 0)))
        return max(rows, key=lambda r: (sum(r.wait.values()), -(r.step or 0)))


def _step_rows(table: CollectiveTable) -> List[StepRow]:
    rows: Dict[Optional[int], StepRow] = {}
    for inst in table.instances:
        row = rows.setdefault(inst.step, StepRow(inst.step))
        row.instances += 1
        held = held_ns(inst)
        for r in inst.entries:
            row.wait[r] = row.wait.get(r, 0) + inst.wait_ns(r)
            row.held[r] = row.held.get(r, 0) + held[r]
            row.count[r] = row.count.get(r, 0) + 1
        row.last[inst.last_rank] = row.last.get(inst.last_rank, 0) + 1
        if inst.spread_ns > row.worst_spread_ns:
            row.worst_spread_ns, row.last_rank = inst.spread_ns, inst.last_rank
    for row in rows.values():
        if row.step is not None:
            durs = [s[row.step][1] - s[row.step][0] for s in table.steps.values() if row.step in s]
            row.duration_ns = _median(durs) if durs else None
    return [rows[k] for k in sorted(rows, key=lambda s: (s is None, s or 0))]


def _busy_step(table: CollectiveTable, rows: Sequence[StepRow]) -> Optional[int]:
    busy = []
    for row in rows:
        if row.step is None:
            continue
        for r, steps in table.steps.items():
            if row.step in steps:
                lo, hi = steps[row.step]
                busy.append(max(0, hi - lo - row.wait.get(r, 0)))
    return _median(busy) if busy else None


def judge(table: CollectiveTable) -> Verdict:
    """Per-step waits and holds, the noise-derived threshold, and the stragglers."""
    rows = _step_rows(table)
    durs = [r.duration_ns for r in rows if r.duration_ns is not None]
    verdict = Verdict(
        rows, [], noise_ns(table.instances), _busy_step(table, rows), _median(durs) if durs else None
    )
    passes: Dict[int, List[StepRow]] = {}
    for row in rows:
        for r, h in row.held.items():
            row.threshold[r] = verdict.threshold_ns(row.count[r])
            if h > row.threshold[r]:
                passes.setdefault(r, []).append(row)
    standing: Dict[int, List[Optional[int]]] = {}
    for r, where in passes.items():
        persistent = 2 * len(where) > len(rows)
        for row in where:
            typical = verdict.typical_step_ns
            if persistent or typical is None or row.held[r] > typical:
                row.stragglers.append(r)
                standing.setdefault(r, []).append(row.step)
    for row in rows:
        row.stragglers.sort(key=lambda r: (-row.held[r], r))
    total_held: Dict[int, int] = {}
    lasts: Dict[int, int] = {}
    counts: Dict[int, int] = {}
    for row in rows:
        for r in row.held:
            total_held[r] = total_held.get(r, 0) + row.held[r]
            lasts[r] = lasts.get(r, 0) + row.last.get(r, 0)
            counts[r] = counts.get(r, 0) + row.count[r]
    verdict.stragglers = sorted(
        (Straggler(r, total_held[r], steps, lasts[r], counts[r]) for r, steps in standing.items()),
        key=lambda s: (-s.held_ns, s.rank),
    )
    return verdict


def held_by_rank(table: CollectiveTable) -> Dict[int, int]:
    """rank -> ns the others waited for it over all instances."""
    out: Dict[int, int] = {r: 0 for r in table.ranks}
    for inst in table.instances:
        for r, h in held_ns(inst).items():
            out[r] = out.get(r, 0) + h
    return out


def rule_text(v: Verdict) -> str:
    """How the threshold was derived, in one line."""
    d = "(no ProfilerStep)" if v.busy_step_ns is None else f"{_ms(v.busy_step_ns)} ms"
    t = (
        ""
        if v.typical_step_ns is None
        else f" or, in at most half of them, also > a typical step {_ms(v.typical_step_ns)} ms"
    )
    return (f"a rank stands out in a step when the others wait longer for it than max({NOISE_FACTOR:g} x "
            f"{_ms(v.noise_ns)} ms arrival noise x sqrt(its instances in the step), {STEP_FRACTION:g} x "
            f"busy step {d}, {_ms(MIN_THRESHOLD_NS)} ms) in more than half of the steps{t}")  # fmt: skip


def _ms(ns: Any) -> str:
    return f"{ns / 1e6:.3f}"


__all__ = ["MIN_THRESHOLD_NS", "NOISE_FACTOR", "STEP_FRACTION", "StepRow", "Straggler", "Verdict",
           "held_by_rank", "held_ns", "judge", "noise_ns", "rule_text"]  # fmt: skip
