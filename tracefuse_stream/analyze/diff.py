"""Run vs run: what got slower, on which ranks, and is it real (``tracefuse diff``).

Why: "yesterday 410 ms a step, today 470: what changed?" is answered by comparing the
same figures of two runs, rank by rank and step by step, and keeping only what stands
above the runs' own noise. This module takes two runs' figures (analyze/diff_figures.py,
from info's single pass), the ranks and steps matched (analyze/diff_match.py), tests
each figure on each rank (analyze/diff_stats.py) and lists the changes, largest first,
each classified:

* ``new`` / ``gone``: absent from every compared rank of one run;
* ``uniform``: significant on every rank, by similar sizes (diff_stats.uniform);
* ``uneven``: significant on every rank, by different sizes;
* ``rank-local``: significant on some ranks only (``ranks`` lists them);

and, for operators and kernels, ``how``: ``more calls`` / ``fewer calls`` (the count
per step changed by 10% or more) or ``longer calls`` / ``shorter calls`` (same count).
A significant step-time change is explained by the changes of the figures that
partition the step's main thread (operators' self time, time outside operators): each
one's share of the mean step-time change over the ranks, the rest "unexplained".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Dict, List, Optional, Sequence

from tracefuse_stream.analyze.diff_figures import PARTITION_KINDS, STEP_KEY, WAIT_KEY, WHERE, Key, RunFigures
from tracefuse_stream.analyze.diff_match import Matched
from tracefuse_stream.analyze.diff_stats import ALPHA, ALPHA_ALL, FigureTest, figure_test, uniform

#: a change smaller than this on a rank is never listed, whatever its p-value ...
MIN_CHANGE_NS = 50_000
#: ... nor smaller than this fraction of the base run's median step time
STEP_FRACTION = 0.01
#: a count per step that moved by this fraction (or at least 1 call) is "more calls"
COUNT_FRACTION = 0.1
COUNTED_KINDS = ("op", "kernel", "kernel_category")


@dataclass
class Change:
    """One figure that changed significantly, on ``ranks`` (its figures: per step, the
    mean over its ranks of each rank's median over the matched steps)."""

    kind: str
    name: str
    ranks: List[int]
    all_ranks: bool
    base_ns: float
    new_ns: float
    count_base: float
    count_new: float
    p_value: float
    cls: str
    how: Optional[str]
    per_rank_ns: Dict[int, float]  # rank -> its change (medians), every compared rank
    step_part_ns: float  # its part of the mean step time over all compared ranks
    share: Optional[float] = None  # of the step-time change (partition kinds only)
    waiting: bool = False  # time its ranks spent waiting for others (see _mark_waiting)

    @property
    def delta_ns(self) -> float:
        return self.new_ns - self.base_ns

    @property
    def where(self) -> str:
        return WHERE.get(self.kind, self.kind)


@dataclass
class StepTime:
    """The step time of both runs (per step, mean over the ranks of their medians)."""

    base_ns: float
    new_ns: float
    p_value: float
    significant: bool
    per_rank: Dict[int, Dict[str, float]]  # rank -> base_ns, new_ns, p_value
    heat_ns: Dict[int, List[int]]  # rank -> new minus base step time, per step pair
    explained_ns: float = 0.0

    @property
    def delta_ns(self) -> float:
        return self.new_ns - self.base_ns


@dataclass
class Diff:
    """Everything ``tracefuse diff`` says."""

    matched: Matched
    step_time: StepTime
    changes: List[Change]
    floor_ns: float
    noise_ns: float  # the step time's step-to-step noise
    figures: int  # figures tested
    base: RunFigures
    new: RunFigures
    notes: List[str] = field(default_factory=list)

    @property
    def significant(self) -> bool:
        return bool(self.changes) or self.step_time.significant


def _test(base: RunFigures, new: RunFigures, key: Key, m: Matched) -> FigureTest:
    return figure_test(
        {r: base.series(key, r, m.base_steps)[0] for r in m.ranks},
        {r: new.series(key, r, m.new_steps)[0] for r in m.ranks},
    )


def _counts(run: RunFigures, key: Key, ranks: Sequence[int], steps: Sequence[int]) -> Dict[int, float]:
    return {r: float(median(run.series(key, r, steps)[1])) for r in ranks}


def _how(kind: str, cls: str, cb: float, cn: float, base_ns: float, new_ns: float) -> Optional[str]:
    """More calls or longer calls (operators and kernels that were there before)."""
    if kind not in COUNTED_KINDS or cls in ("new", "gone") or cb <= 0:
        return None
    if abs(cn - cb) >= max(1.0, COUNT_FRACTION * cb):
        return "more calls" if cn > cb else "fewer calls"
    per_b, per_n = base_ns / cb, new_ns / max(cn, 1.0)
    return "longer calls" if per_n > per_b else "shorter calls"


def _class(
    ft: FigureTest, sig: List[int], every: List[int], cb: Dict[int, float], cn: Dict[int, float]
) -> str:
    base_zero = all(ft.ranks[r].base_ns == 0 and cb[r] == 0 for r in every)
    new_zero = all(ft.ranks[r].new_ns == 0 and cn[r] == 0 for r in every)
    if base_zero and not new_zero:
        return "new"
    if new_zero and not base_zero:
        return "gone"
    if set(sig) != set(every):
        return "rank-local"
    return "uniform" if uniform([ft.ranks[r].delta_ns for r in sig], ft.noise_ns) else "uneven"


def _everywhere(ft: FigureTest, every: List[int], floor: float) -> List[int]:
    """``every`` rank when the test of all ranks together passes and each rank changed
    the same way by at least ``floor``; else none."""
    ds = [ft.ranks[r].delta_ns for r in every]
    if len(every) < 2 or ft.all_p >= ALPHA_ALL or not all(abs(d) >= floor for d in ds):
        return []
    return list(every) if all(d > 0 for d in ds) or all(d < 0 for d in ds) else []


def _change(base: RunFigures, new: RunFigures, key: Key, m: Matched, floor: float) -> Optional[Change]:
    """``key``'s change, or None when no rank changed significantly by ``floor`` or more."""
    ft = _test(base, new, key, m)
    every = [r for r in m.ranks if r in ft.ranks]
    sig = _everywhere(ft, every, floor)
    p = ft.all_p
    if not sig:
        sig = [r for r in every if ft.ranks[r].p_value < ALPHA and abs(ft.ranks[r].delta_ns) >= floor]
        p = max((ft.ranks[r].p_value for r in sig), default=1.0)
    if not sig:
        return None
    cb, cn = _counts(base, key, every, m.base_steps), _counts(new, key, every, m.new_steps)
    cls = _class(ft, sig, every, cb, cn)
    n = len(sig)
    b = sum(ft.ranks[r].base_ns for r in sig) / n
    nw = sum(ft.ranks[r].new_ns for r in sig) / n
    c_b, c_n = sum(cb[r] for r in sig) / n, sum(cn[r] for r in sig) / n
    return Change(
        key[0], key[1], sig, set(sig) == set(every), b, nw, c_b, c_n, p, cls,
        _how(key[0], cls, c_b, c_n, b, nw),
        {r: ft.ranks[r].delta_ns for r in every},
        sum(ft.ranks[r].delta_ns for r in sig) / len(m.ranks),
    )  # fmt: skip


def _step_time(base: RunFigures, new: RunFigures, m: Matched, floor: float) -> StepTime:
    ft = _test(base, new, STEP_KEY, m)
    rows = {r: {"base_ns": t.base_ns, "new_ns": t.new_ns, "p_value": t.p_value} for r, t in ft.ranks.items()}
    n = max(len(ft.ranks), 1)
    b = sum(t.base_ns for t in ft.ranks.values()) / n
    nw = sum(t.new_ns for t in ft.ranks.values()) / n
    p = ft.all_p if len(ft.ranks) > 1 else max((t.p_value for t in ft.ranks.values()), default=1.0)
    heat = {
        r: [new.series(STEP_KEY, r, [ns])[0][0] - base.series(STEP_KEY, r, [bs])[0][0] for bs, ns in m.pairs]
        for r in m.ranks
    }
    alpha = ALPHA_ALL if len(ft.ranks) > 1 else ALPHA
    return StepTime(b, nw, p, p < alpha and abs(nw - b) >= floor, rows, heat)


def _mark_waiting(changes: List[Change], waits: FigureTest) -> None:
    """A change is *waiting* when it is the collective wait itself, or a longer time on
    the main thread of ranks whose collective wait grew by at least half as much (the
    main thread spends the wait outside operators or in the op that waits): an effect
    of another rank's change, not a cause of its own. Waiting lengthens what a rank
    already did; it never adds an operator or calls: a new op or more calls is the
    rank's own work, though it also waits (two slow ranks in two groups: the one off
    the critical path waits for the other and has its own extra ops)."""
    for c in changes:
        if c.kind == WAIT_KEY[0]:
            c.waiting = True
        elif c.kind in PARTITION_KINDS and c.delta_ns > 0 and (_communicates(c.name) or _same_work(c)):
            c.waiting = all(
                r in waits.ranks and waits.ranks[r].delta_ns >= 0.5 * c.per_rank_ns[r] for r in c.ranks
            )


#: operators that communicate (and so wait in them): more of their calls is still waiting
COMM_NAME_PARTS = ("c10d::", "nccl", "gloo", "record_param_comms", "allreduce", "all_reduce", "barrier")


def _communicates(name: str) -> bool:
    low = name.lower()
    return any(part in low for part in COMM_NAME_PARTS)


def _same_work(c: Change) -> bool:
    """The change lengthens what the rank already did (no new op, no more calls)."""
    return c.cls != "new" and c.how != "more calls"


def compare(base: RunFigures, new: RunFigures, m: Matched) -> Diff:
    """The diff of two runs' figures over the matched ranks and steps."""
    base_step = median(
        v for r in m.ranks for v in base.series(STEP_KEY, r, m.base_steps)[0]
    ) if m.ranks and m.pairs else 0  # fmt: skip
    floor = max(float(MIN_CHANGE_NS), STEP_FRACTION * base_step)
    keys = sorted((set(base.values) | set(new.values)) - {STEP_KEY})
    changes = [c for k in keys if (c := _change(base, new, k, m, floor)) is not None]
    _mark_waiting(changes, _test(base, new, WAIT_KEY, m))
    # most time per rank first, the waiting last: a rank that waits longer waits for
    # another rank's change, which is listed (a wait is never longer than its cause)
    changes.sort(key=lambda c: (c.waiting, -abs(c.delta_ns), c.kind, c.name))
    st = _step_time(base, new, m, floor)
    for c in changes if st.significant else ():  # no step-time change: nothing to explain
        if c.kind in PARTITION_KINDS:
            st.explained_ns += c.step_part_ns
            c.share = c.step_part_ns / st.delta_ns if st.delta_ns else None
    noise = _test(base, new, STEP_KEY, m).noise_ns
    d = Diff(m, st, changes, floor, noise, len(keys) + 1, base, new)
    if len(m.pairs) < 2:
        d.notes.append(
            "one step per run: the step-to-step noise cannot be measured, so nothing can be "
            "tested; compare more steps"
        )
    return d


__all__ = ["COUNTED_KINDS", "Change", "Diff", "MIN_CHANGE_NS", "STEP_FRACTION", "StepTime", "compare"]
