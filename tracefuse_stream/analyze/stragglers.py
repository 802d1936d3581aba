"""Who holds the others back, per step and over the run, from matched collective instances.

Every figure is a duration you can find on the timeline (docs/collectives.md has the
definitions with an example). For one instance ``i`` with arrivals ``a`` (the start of
each rank's collective, :mod:`tracefuse_stream.align.collectives`) and last arrival
``L``:

* a rank's **wait** in a step is the length of the union of its intervals
  ``[a[r], L]`` over the step's instances, clipped to its own step: DDP's gradient
  buckets are all-reduced concurrently on gloo's two runloop threads (and NCCL's
  streams), and two overlapping waits are one stretch of waiting, never two. It is
  never more than the step.
* **held** of rank R in a step: how long the others really waited for R. For each other
  rank q, the union over the step's instances of ``[a[q], a[R]]`` (q sits in the
  collective until R arrives), clipped to q's step; held is the median of that over
  the others (zeros included: a rank that arrived after R did not wait for it), or over
  the other members of a smaller group of R's at that group's instances when that is
  more (a rank only its pair partner waits for is held by the pair), and
  never more than R's **lateness**: at the step's instance where it is latest, R's
  time from its step start to its arrival minus the median of the others' (what the
  why analysis, analyze/why.py, breaks down). Without ProfilerStep spans the arrivals
  themselves are compared.
* **busy step**: a rank's step duration minus its wait: the step's work, which a
  straggler does not inflate; ``D`` is the median over ranks and steps.

Whether a rank *passes* in a step is judged against thresholds derived from the run
itself, never a fixed number: ``held > T = max(NOISE_FACTOR * sigma,
median of the others' held + NOISE_FACTOR * their spread, STEP_FRACTION * D,
MIN_THRESHOLD)``, ``sigma`` being the arrival noise (:func:`noise_ns`; no sqrt(m) any
more: held is a union capped by the lateness at one collective, not a sum over them),
the others' spread the scaled median absolute deviation of
their held values in that step (a rank is an outlier among the ranks, not merely later
than the median). A rank *stands out* in a step when it passes there and either passes
in more than half of the steps (persistent) or the others' wait for it in that step is
longer than a typical step, or than half of one when that is also at least
STRONG_MARGIN x the noise bound (intermittent: one hiccup of a few ms in one short step
is none; a stall that makes its step 1.5x the others' is one).

**Evidence.** A rank that stands out is *named* only when the pattern is unlikely by
chance: ``p_chance`` is the probability that a rank with no problem would be the most
waited-for rank of its group in at least ``k`` of its ``N`` steps (binomial, ``1/g``
per step for a group of ``g``; a step-down test: a second straggler is tested leaving
out the stronger ones already named); or when the wait for it is at least
``NOISE_MARGIN`` times what arrival noise explains (``NOISE_FACTOR x sigma``:
a few steps of two ranks can never make p_chance small, a 90 ms lead over 1.7 ms of
noise is no chance). ``strong``: noise margin >= ``STRONG_MARGIN``, or p_chance <= 0.01
with a noise margin >= 1; ``moderate``: named otherwise; ``weak``: not named (the verdict
says who came closest, with its p_chance). A coin flip names nobody.

A step with no collective, only linked send/recv pairs (a pure pipeline), is judged the
same way at its pairs (wait, held) and its step end (lateness, own lateness): see
analyze/p2p_steps.py.

Every figure depends only on the ranks' own timelines and the instances they share,
never on which other ranks were merged beyond them: the verdict on a subset that keeps
the straggler and a rank that waits for it is the verdict of the whole run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import CollectiveTable, Instance
from tracefuse_stream.analyze import graph as G
from tracefuse_stream.analyze.intervals import held_median, union_ns
from tracefuse_stream.analyze.medians import median, median_without
from tracefuse_stream.analyze.noise import noise_ns
from tracefuse_stream.analyze.others import Members, OthersOutlier
from tracefuse_stream.analyze.p2p_steps import add_step_ends, held_in_pipeline
from tracefuse_stream.analyze.rank_ints import freeze_step_rows
from tracefuse_stream.analyze.rootcause import (
    late_thresholds,
    not_estimated,
    off_path,
    root_cause,
    saves_nothing_alone,
)

NOISE_FACTOR = 4.0
STEP_FRACTION = 0.05
MIN_THRESHOLD_NS = 100_000  # 0.1 ms: below this, arrival order is clock conversion noise
P_NAMED = 0.05  # p_chance at or below this names a rank that passes its threshold
NOISE_MARGIN = 3.0  # ... and so does held >= this x NOISE_FACTOR x the arrival noise
STRONG_MARGIN = 10.0  # a noise margin this large is strong evidence whatever p_chance
MAD_SCALE = 1.4826  # MAD -> standard deviation for normal noise


def held_ns(inst: Instance) -> Dict[int, int]:
    """rank -> how far behind the median of the other ranks' arrivals it arrived in
    ``inst`` (the per-instance figure of the summary track's slice names)."""
    arrivals = {r: e.start_ns for r, e in inst.entries.items()}
    out = {}
    for r, a in arrivals.items():
        others = sorted(v for q, v in arrivals.items() if q != r)
        out[r] = max(0, a - median(others)) if others else 0
    return out


@dataclass
class StepRow:
    """One step (``step`` None: instances outside every ProfilerStep)."""

    step: Optional[int]
    instances: int = 0
    wait: Dict[int, int] = field(default_factory=dict)  # rank -> ns waited in collectives (union)
    held: Dict[int, int] = field(default_factory=dict)  # rank -> ns the others waited for it
    lateness: Dict[int, int] = field(default_factory=dict)  # rank -> ns late at its latest instance
    late_at: Dict[int, int] = field(default_factory=dict)  # rank -> instance id where it is latest
    busy: Dict[int, int] = field(default_factory=dict)  # rank -> step duration - wait
    last: Dict[int, int] = field(default_factory=dict)  # rank -> instances it arrived last at
    count: Dict[int, int] = field(default_factory=dict)  # rank -> its instances in the step
    duration_ns: Optional[int] = None  # median ProfilerStep duration over the ranks
    stragglers: List[int] = field(default_factory=list)  # ranks standing out (named), most held first
    threshold: Dict[int, int] = field(default_factory=dict)  # rank -> its threshold in this step

    worst_spread_ns: int = -1
    last_rank: Optional[int] = None  # last to arrive at the step's instance of widest arrival spread
    worst_instance: Optional[int] = None  # the instance where the others waited longest (for the top rank)
    # analyze/graph.py: own lateness (no waiting; entering late), where, skew, held by plain lateness
    own: Dict[int, int] = field(default_factory=dict)
    own_at: Dict[int, int] = field(default_factory=dict)
    skew: Dict[int, int] = field(default_factory=dict)
    held_raw: Dict[int, int] = field(default_factory=dict)
    graph: Optional[G.StepGraph] = None

    def why_at(self, rank: int) -> int:
        """The instance a why of ``rank`` is about: where its lateness is greatest (the
        why's stretches, from each rank's step start, show that lateness), or where its
        own lateness is, when the plain one shows less than half of it (it entered the
        step late); -1: none."""
        at = self.own_at.get(rank, -1)
        if at >= 0 and 2 * self.lateness.get(rank, 0) < self.own.get(rank, 0):
            return at
        return self.late_at.get(rank, -1)

    @property
    def most_held(self) -> Optional[int]:
        if not self.held:
            return None
        return max(sorted(self.held), key=lambda r: self.held[r])


@dataclass
class Straggler:
    rank: int
    held_ns: int  # summed over the steps it stood out in (``steps``): the headline's figure
    steps: List[Optional[int]]  # the steps it stood out in
    last_arrivals: int
    instances: int
    p_chance: float = 1.0
    margin: float = 0.0  # smallest held / threshold over its steps
    noise_margin: float = 0.0  # smallest held / (NOISE_FACTOR x noise x sqrt(m)) over its steps
    evidence: str = "weak"
    held_all_ns: int = 0  # summed over every step it took part in

    @property
    def by_size_only(self) -> bool:
        """Named for the size of the wait alone, its p_chance above :data:`P_NAMED` (too
        few steps for a pattern; issue 35, item 6): the text's "by size only"."""
        return bool(self.p_chance > P_NAMED)


@dataclass
class Verdict:
    """Everything ``info --collectives`` says about stragglers."""

    by_step: List[StepRow]
    stragglers: List[Straggler]
    noise_ns: int
    busy_step_ns: Optional[int]
    typical_step_ns: Optional[int] = None  # median ProfilerStep duration
    candidates: List[Straggler] = field(default_factory=list)  # passed somewhere, not named (weak)
    delayed: List[G.Delay] = field(default_factory=list)  # late only because they waited
    saves: Dict[Tuple[int, Optional[int]], int] = field(default_factory=dict)  # (straggler, step) -> ns
    saves_all: Dict[Optional[int], int] = field(default_factory=dict)  # step -> ns, every straggler fixed

    @property
    def straggler(self) -> Optional[int]:
        return self.stragglers[0].rank if self.stragglers else None

    @property
    def not_estimated(self) -> List[int]:
        """The stragglers whose ``saves`` are no estimate (analyze/rootcause.py)."""
        return not_estimated(self.stragglers, self.saves)

    @property
    def off_path(self) -> List[int]:
        """The stragglers whose own extra time is off the critical path (analyze/rootcause.py)."""
        return off_path(self.stragglers, self.saves)

    @property
    def saves_nothing_alone(self) -> List[int]:
        """The stragglers another one still holds the step up for (analyze/rootcause.py)."""
        return saves_nothing_alone(self.stragglers, self.saves)

    @property
    def steps_profiled(self) -> int:
        return sum(1 for r in self.by_step if r.step is not None)

    def base_threshold_ns(self) -> int:
        """The threshold without the others' spread (the same for every rank of the run)."""
        step_part = int(STEP_FRACTION * self.busy_step_ns) if self.busy_step_ns is not None else 0
        return max(int(NOISE_FACTOR * self.noise_ns), step_part, MIN_THRESHOLD_NS)

    def noise_part_ns(self) -> int:
        """What arrival noise alone explains (at least the minimum)."""
        return max(int(NOISE_FACTOR * self.noise_ns), MIN_THRESHOLD_NS)

    def worst_step(self) -> Optional[StepRow]:
        """The step where the others waited longest for the straggler (no straggler: the
        step with the most waiting)."""
        rows = [r for r in self.by_step if r.instances or r.wait]  # a pure pipeline: waits in its pairs
        if not rows:
            return None
        st = self.straggler
        if st is not None:
            return max(rows, key=lambda r: (r.held.get(st, 0), -(r.step or 0)))
        return max(rows, key=lambda r: (sum(r.wait.values()), -(r.step or 0)))


def _step_span(table: CollectiveTable, rank: int, step: Optional[int]) -> Tuple[Optional[int], Optional[int]]:
    if step is None:
        return None, None
    span = table.steps.get(rank, {}).get(step)
    return (None, None) if span is None else span


HELD_SAMPLE = 32  # held: the median over at most this many other ranks (evenly spread by rank)


def _fill_row(table: CollectiveTable, row: StepRow, insts: Sequence[Instance], g: G.StepGraph) -> None:
    """Wait (union), lateness, held (median over the others of the union of their waits
    for the rank) and busy time of every rank of one step."""
    mine: Dict[int, List[Instance]] = {}
    for inst in insts:
        for r in inst.entries:
            mine.setdefault(r, []).append(inst)
    ranks = sorted(mine)
    spans = {r: _step_span(table, r, row.step) for r in ranks}
    last = {id(i): i.last_arrival_ns for i in insts}  # once an instance, not once a rank
    for r in ranks:
        lo, hi = spans[r]
        row.count[r] = len(mine[r])
        row.wait[r] = union_ns(((i.entries[r].start_ns, last[id(i)]) for i in mine[r]), lo, hi)
        if lo is not None and hi is not None:
            row.busy[r] = max(0, hi - lo - row.wait[r])
        row.lateness[r], row.late_at[r] = 0, -1
    end = g.ends  # a pipeline's step ends (analyze/p2p_steps.py)
    for inst in end or insts:  # lateness: arrival from the step start, against the others' median
        if len(inst.entries) < 2:
            continue
        rel = {q: e.start_ns - (spans[q][0] or 0) for q, e in inst.entries.items()}
        ordered = sorted(rel.values())
        for r, v in rel.items():
            late = max(0, v - median_without(ordered, v))
            if late > row.lateness[r] or row.late_at[r] < 0:
                row.lateness[r], row.late_at[r] = late, inst.id
    row.graph = g
    floor_ns = g.floor_ns
    members = Members(HELD_SAMPLE)
    row.own, row.own_at, row.skew = g.own_late, g.own_late_at, g.skew
    recorded: Optional[Tuple[Dict[int, int], Dict[Tuple[int, int], int]]] = None
    arrivals: Dict[Tuple[int, int], int] = {}
    for r in ranks:
        row.held[r] = row.held_raw[r] = 0
        if row.lateness[r] <= 0 and row.own.get(r, 0) <= 0:
            continue  # held is at most the lateness
        at_end = g.end_of(r)  # a pipeline: the stages of its own
        med = held_median(r, members.sample(r, [at_end] if at_end is not None else mine[r]), mine[r], spans)
        if at_end is None:  # a smaller group's members held by it, the rest not (issue 35: two stragglers)
            for sub in members.smaller_groups(mine[r]):
                med = max(med, held_median(r, members.sample(r, sub), sub, spans))
        row.held_raw[r] = min(med, row.lateness[r])
        own = row.own.get(r, 0)
        if own > max(med, floor_ns):  # others held up through other groups (a cascade) or in send/recv
            if recorded is None:  # the step re-timed as recorded: once a step, not once a rank
                recorded = (G.retime_ends(g, None, arrivals), arrivals)
            cut_arrivals: Dict[Tuple[int, int], int] = {}
            cut = G.retime_ends(g, G.extra_cut(g, r), cut_arrivals)
            med = max(med, G.held_through(g, r, recorded[0], cut), G.held_in_p2p(g, r),
                      held_in_pipeline(g, r, recorded[1], cut_arrivals))  # fmt: skip
        row.held[r] = min(med, own)  # waiting for others is never lateness


def _by_step(table: CollectiveTable) -> Dict[Optional[int], List[Instance]]:
    by: Dict[Optional[int], List[Instance]] = {}
    for inst in table.instances:
        by.setdefault(inst.step, []).append(inst)
    return by


def _step_rows(table: CollectiveTable, graphs: Dict[Optional[int], G.StepGraph]) -> List[StepRow]:
    by = _by_step(table)
    rows = []
    for step in sorted(graphs, key=lambda s: (s is None, s or 0)):
        insts = by.get(step, [])
        row = StepRow(step, instances=len(insts))
        if graphs[step].ends:  # no collective: the waits and holds are the pairs'
            insts = list(graphs[step].by_id.values())
        for inst in insts:
            row.last[inst.last_rank] = row.last.get(inst.last_rank, 0) + 1
            if inst.spread_ns > row.worst_spread_ns:
                row.worst_spread_ns, row.last_rank = inst.spread_ns, inst.last_rank
        _fill_row(table, row, insts, graphs[step])
        top = row.most_held
        row.worst_instance = row.why_at(top) if top is not None else None
        if row.worst_instance is not None and row.worst_instance < 0:
            row.worst_instance = None
        if step is not None:
            durs = [s[step][1] - s[step][0] for s in table.steps.values() if step in s]
            row.duration_ns = median(durs) if durs else None
        rows.append(row)
    return rows


def _busy_step(rows: Sequence[StepRow]) -> Optional[int]:
    busy = [b for row in rows if row.step is not None for b in row.busy.values()]
    return median(busy) if busy else None


def binomial_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return min(1.0, sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1)))


def judge(table: CollectiveTable) -> Verdict:
    """Per-step waits and holds, the thresholds, the stragglers and the evidence."""
    pairs: Dict[Optional[int], List[Instance]] = {}
    for pair in table.p2p_pairs:  # linked send/recv: edges of the graph only (align/p2p.py)
        pairs.setdefault(pair.step, []).append(pair)
    by = _by_step(table)
    # a step of a pipeline may hold no collective at all: its graph is its pairs alone
    graphs = {
        step: G.build(table, step, by.get(step, []) + pairs.get(step, [])) for step in set(by) | set(pairs)
    }
    add_step_ends(table, graphs)  # a step of pairs alone (a pipeline): its end is compared like a collective
    noise = noise_ns(table.instances, [x for sg in graphs.values() for x in G.own_spreads(sg)])
    for sg in graphs.values():
        G.settle(sg, max(int(NOISE_FACTOR * noise), MIN_THRESHOLD_NS))
    rows = _step_rows(table, graphs)
    durs = [r.duration_ns for r in rows if r.duration_ns is not None]
    verdict = Verdict(rows, [], noise, _busy_step(rows), median(durs) if durs else None)
    passes: Dict[int, List[StepRow]] = {}
    for row in rows:
        outliers = OthersOutlier(list(row.held.values()), NOISE_FACTOR, MAD_SCALE)
        for r, h in row.held.items():
            row.threshold[r] = max(verdict.base_threshold_ns(), outliers.of(h))
            if h > row.threshold[r]:
                passes.setdefault(r, []).append(row)
    group_size = _group_sizes([*table.instances, *(e for g in graphs.values() for e in g.ends)])
    found: List[Straggler] = []
    for r, where in sorted(passes.items()):
        persistent = 2 * len(where) > len(rows)
        typical = verdict.typical_step_ns
        steps = [
            row for row in where if persistent or typical is None or _one_off(row.held[r], typical, verdict)
        ]
        if steps:
            mine = [row for row in rows if r in row.held]
            found.append(Straggler(
                r, sum(row.held[r] for row in steps), [row.step for row in steps],
                sum(row.last.get(r, 0) for row in mine), sum(row.count[r] for row in mine),
                margin=min(row.held[r] / max(row.threshold[r], 1) for row in steps),
                noise_margin=min(row.held[r] / verdict.noise_part_ns() for row in steps),
                held_all_ns=sum(row.held[r] for row in mine),
            ))  # fmt: skip
    found.sort(key=lambda s: (-s.held_ns, -s.held_all_ns, s.rank))
    named: List[int] = []  # step-down: each rank is tested leaving out the stronger ones named
    for s in found:
        mine = [row for row in rows if s.rank in row.held]
        k = sum(1 for row in mine if _most_held(row, named) == s.rank)
        g = max(group_size.get(s.rank, 2) - len(named), 2)
        s.p_chance = binomial_tail(len(mine), k, 1.0 / g)
        s.evidence = _evidence(s)
        if s.evidence != "weak":
            named.append(s.rank)
    found.sort(key=lambda s: (-s.held_ns, -s.held_all_ns, s.rank))
    verdict.stragglers = [s for s in found if s.evidence != "weak"]
    verdict.candidates = [s for s in found if s.evidence == "weak"]
    if verdict.steps_profiled == 1 and len(verdict.stragglers) > 1:
        # one step is one sample: the most waited-for rank at most (issue 35, item 6)
        verdict.candidates = sorted(
            verdict.candidates + verdict.stragglers[1:], key=lambda s: (-s.held_ns, s.rank)
        )
        verdict.stragglers = verdict.stragglers[:1]
    for s in verdict.stragglers:
        for row in rows:
            if row.step in s.steps:
                row.stragglers.append(s.rank)
    for row in rows:
        row.stragglers.sort(key=lambda r: (-row.held[r], r))
    late = late_thresholds(rows, verdict.base_threshold_ns(), NOISE_FACTOR, MAD_SCALE)
    verdict.delayed, verdict.saves, verdict.saves_all = root_cause(rows, verdict.stragglers, late)
    for sg in graphs.values():
        G.compact(sg)  # what is read after the verdict stays (issue 38: bounded memory)
    freeze_step_rows(rows)
    return verdict


def _one_off(held: int, typical: int, v: Verdict) -> bool:
    """A rank standing out in at most half of the steps stands out in this one: the
    others waited for it longer than a typical step, or than half of one when that is
    also at least :data:`STRONG_MARGIN` x the noise bound (a 60 ms stall in one 65 ms
    step; a 4 ms hiccup in one 7 ms step of an unpinned balanced run is not)."""
    return held > typical or (2 * held > typical and held >= STRONG_MARGIN * v.noise_part_ns())


def _most_held(row: StepRow, leave_out: Sequence[int]) -> Optional[int]:
    rest = [r for r in sorted(row.held) if r not in leave_out]
    return max(rest, key=lambda r: row.held[r]) if rest else None


def _evidence(s: Straggler) -> str:
    if s.noise_margin >= STRONG_MARGIN or (s.p_chance <= 0.01 and s.noise_margin >= 1):
        return "strong"
    if s.p_chance <= P_NAMED or s.noise_margin >= NOISE_MARGIN:
        return "moderate"
    return "weak"


def _group_sizes(instances: Sequence[Instance]) -> Dict[int, int]:
    """rank -> the median size of the instances it took part in (a pipeline's step ends:
    its stages)."""
    sizes: Dict[int, List[int]] = {}
    for inst in instances:
        for r in inst.entries:
            sizes.setdefault(r, []).append(len(inst.entries))
    return {r: median(v) for r, v in sizes.items()}


def held_by_rank(table: CollectiveTable, verdict: Optional[Verdict] = None) -> Dict[int, int]:
    """rank -> ns the others waited for it, summed over the steps."""
    v = verdict if verdict is not None else judge(table)
    out: Dict[int, int] = {r: 0 for r in table.ranks}
    for row in v.by_step:
        for r, h in row.held.items():
            out[r] = out.get(r, 0) + h
    return out


def wait_by_rank(verdict: Verdict) -> Dict[int, int]:
    """rank -> ns it waited in collectives, summed over the steps (unions per step)."""
    out: Dict[int, int] = {}
    for row in verdict.by_step:
        for r, w in row.wait.items():
            out[r] = out.get(r, 0) + w
    return out


DEFINITIONS = (
    "wait = union of a rank's time in collectives before the last member arrives (concurrent ones "
    "counted once, within its step); held = median over the other ranks of the union of their time "
    "in collectives before the rank arrived (or over the members of a smaller group of its, when more), at most its lateness; lateness = its time from step start "
    "to arrival minus the others' median, at its latest collective; own lateness = that without its "
    "waiting for other ranks (docs/collectives.md), which caps held; busy step = step - wait"
)


def rule_text(v: Verdict) -> str:
    """How the threshold was derived, in one line."""
    d = "(no ProfilerStep)" if v.busy_step_ns is None else f"{_ms(v.busy_step_ns)} ms"
    t = (
        ""
        if v.typical_step_ns is None
        else f" or, in at most half of them, also > a typical step {_ms(v.typical_step_ns)} ms (> half of it at >= {STRONG_MARGIN:g} x the noise bound)"
    )
    return (f"a rank stands out in a step when the others wait longer for it than max({NOISE_FACTOR:g} x "
            f"{_ms(v.noise_ns)} ms arrival noise, the others' median + "
            f"{NOISE_FACTOR:g} x their spread, {STEP_FRACTION:g} x busy step {d}, {_ms(MIN_THRESHOLD_NS)} ms) "
            f"in more than half of the steps{t}; it is named when p_chance <= {P_NAMED:g} or the wait is "
            f">= {NOISE_MARGIN:g} x {NOISE_FACTOR:g} x the arrival noise (then 'by size only' when p_chance > "
            f"{P_NAMED:g}); strong: >= {STRONG_MARGIN:g} x the noise bound, or p_chance <= 0.01; one profiled "
            f"step names at most one rank; waiting for other ranks is never lateness (own lateness caps held)")  # fmt: skip


def _ms(ns: Any) -> str:
    return f"{ns / 1e6:.3f}"


__all__ = ["DEFINITIONS", "MIN_THRESHOLD_NS", "NOISE_FACTOR", "STEP_FRACTION", "StepRow", "Straggler",
           "Verdict", "binomial_tail", "held_by_rank", "held_ns", "judge", "noise_ns", "rule_text",
           "union_ns", "wait_by_rank"]  # fmt: skip
