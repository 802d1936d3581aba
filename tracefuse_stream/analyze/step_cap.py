"""The cap on the steps the analysis keeps per rank (issue 38, item 2: bounded memory).

Why: the reduce holds ~3.4 KiB per rank and step (the cross-rank graphs before they are
compacted, the collective events and their matched entries, the verdict's rows while
judged: docs/benchmarks.md), so 8 ranks x 6,400 steps cost as much as 16,384 ranks x 3.
Names are capped per step (analyze/name_cap.py); steps are capped here. The analysis
(``info --collectives``, ``report``, ``diff``) keeps at most K steps per rank file,

    K = min(MAX_STEPS, RANK_STEPS // files)   (at least 1; ``--max-steps N``: K = N)

so the rank-steps the reduce holds are at most RANK_STEPS (16,384 ranks x 10 steps)
whatever the run's length. The steps kept are the same step numbers on every rank: the
cycle's first K step numbers (within ``--steps A:B`` when given: the user's window
chooses, the cap still bounds it). A file with more than K steps drops the others at its
end, in its own pass, before its step figures and the why's partitions are built from
them (:func:`trim_file`: its own first K, which hold the cycle's first K); the table is
then cut to the cycle's first K (:func:`only_steps`). When steps are dropped the cap is
said (:class:`StepCap`: a line in the text, ``step_cap`` in the JSON, the page), never
silently; under the cap nothing changes, byte for byte.

Collectives outside every step are kept as before. At the kept steps' last edge a
collective that one rank issued in a kept step and another in a dropped one is counted
unmatched (the unmatched counts are those of the steps read).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

#: at most this many steps per rank, whatever the rank count (``--max-steps`` changes it)
MAX_STEPS = 1000
#: the rank-steps the reduce keeps at most: 16,384 ranks x 10 steps (issue 38's design figure)
RANK_STEPS = 16_384 * 10

Window = Optional[Tuple[int, int]]


def steps_limit(files: int, max_steps: Optional[int] = None) -> int:
    """K, the steps kept per rank file: ``max_steps`` when the user gave it, else
    ``min(MAX_STEPS, RANK_STEPS // files)``, at least 1."""
    if max_steps is not None:
        return max_steps
    return max(1, min(MAX_STEPS, RANK_STEPS // max(files, 1)))


def _in_window(steps: Iterable[int], window: Window) -> List[int]:
    nums = sorted(steps)
    if window is None:
        return nums
    lo, hi = window
    return nums[bisect.bisect_left(nums, lo) : bisect.bisect_right(nums, hi)]


def file_keep(steps: Iterable[int], limit: int, window: Window) -> Optional[Set[int]]:
    """The step numbers one file keeps: None (all, as before) when it has ``limit`` or
    fewer, else its first ``limit`` within ``window``."""
    nums = sorted(steps)
    if len(nums) <= limit:
        return None
    return set(_in_window(nums, window)[:limit])


def _union(spans: Iterable[Tuple[int, int]]) -> Tuple[List[int], List[int]]:
    """Sorted disjoint (starts, ends) covering ``spans`` (inclusive ends)."""
    los: List[int] = []
    his: List[int] = []
    for lo, hi in sorted(spans):
        if los and lo <= his[-1]:
            his[-1] = max(his[-1], hi)
        else:
            los.append(lo)
            his.append(hi)
    return los, his


def _inside(union: Tuple[List[int], List[int]], t: int) -> bool:
    k = bisect.bisect_right(union[0], t) - 1
    return k >= 0 and t <= union[1][k]


def timeline_spans(steps: Dict[int, Tuple[int, int]], keep: Set[int]) -> Dict[int, Tuple[int, int]]:
    """The spans a capped file's timeline is cut at: the kept steps' and the first step
    after them (its start ends the last kept step: analyze/name_cap.py's groups)."""
    after = [s for s in steps if keep and s > max(keep)]
    cut = set(keep) | ({min(after)} if after else set())
    return {s: v for s, v in steps.items() if s in cut}


def trim_file(scan: Any, keep: Set[int]) -> Dict[int, Tuple[int, int]]:
    """Drop from ``scan`` (align/collectives.py ``RankScan``, file-relative ns) the steps
    not in ``keep`` and every collective, point-to-point call and batch mark that starts
    in one of them (and in no kept step: the step an instance is given, align/
    collectives.py ``_step_at``). Returns the spans the file's timeline is cut at: the
    kept steps and the first step after them (its start ends the last kept one)."""
    gone = _union(v for s, v in scan.steps.items() if s not in keep)
    kept = _union(v for s, v in scan.steps.items() if s in keep)

    def stays(t: int) -> bool:
        return not _inside(gone, t) or _inside(kept, t)

    spans = timeline_spans(scan.steps, keep)
    scan.steps = {s: v for s, v in scan.steps.items() if s in keep}
    for name in ("events", "p2p_calls", "comms_calls", "coalesced"):
        setattr(scan, name, [e for e in getattr(scan, name) if stays(e.ts_ns)])
    return spans


class PassLimit:
    """The step cap inside one file's pass: once the file has shown more than ``limit``
    steps, its timeline (analyze/timeline.py, 32 bytes an event until the file ends)
    holds no event starting after the end of the first step past the ``limit`` smallest
    numbers seen in ``window``, nor (with a window) one ending before the end of the last
    step seen before the window: those steps are never read. :meth:`update` after each
    batch (the collector adds new steps at the end of ``steps``); :meth:`safe` at the
    file's end: False when the steps kept came out otherwise than the limits assumed
    (numbers not in time order), and the file is read again without them."""

    def __init__(self, steps: Dict[int, Tuple[int, int]], limit: int, window: Window, timeline: Any) -> None:
        self.steps, self.limit, self.window, self.timeline = steps, limit, window, timeline
        self._heap: List[int] = []  # the limit + 1 smallest numbers seen (in the window), negated
        self._seen = 0
        self.lowest: Optional[int] = None  # the lowest limit set (ns)
        self._below: Optional[int] = None  # the latest end of a step before the window
        self.floor: Optional[int] = None  # the highest floor set (ns)

    def update(self) -> None:
        n = len(self.steps)
        if n == self._seen:
            return
        fresh = [s for _, s in zip(range(n - self._seen), reversed(self.steps))]
        self._seen = n
        lo, hi = self.window if self.window is not None else (None, None)
        for s in fresh:
            if lo is not None and s < lo:
                end = self.steps[s][1]
                self._below = end if self._below is None else max(self._below, end)
                continue
            if hi is not None and s > hi:
                continue
            if len(self._heap) <= self.limit:
                heapq.heappush(self._heap, -s)
            elif s < -self._heap[0]:
                heapq.heapreplace(self._heap, -s)
        if len(self._heap) > self.limit:
            end = self.steps[-self._heap[0]][1]
            if self.lowest is None or end < self.lowest:
                self.lowest = end
                self.timeline.set_limit(end)
        if n > self.limit and self._below is not None and (self.floor is None or self._below > self.floor):
            self.floor = self._below
            self.timeline.set_floor(self._below)

    def safe(self, spans: Dict[int, Tuple[int, int]]) -> bool:
        """Whether every step the timeline is cut at (the kept ones and the next) lies
        between the floor and the limit: nothing they read was left out."""
        if self.floor is not None and any(lo < self.floor for lo, _hi in spans.values()):
            return False
        return self.lowest is None or all(hi <= self.lowest for _lo, hi in spans.values())


@dataclass(frozen=True)
class StepCap:
    """The cap as it applied to one cycle: ProfilerSteps ``first``..``last`` analysed,
    ``kept`` of the ``profiled`` step numbers (in ``window`` when given), at most
    ``limit`` per rank (``chosen``: ``"auto"`` for ``limit`` = min(MAX_STEPS,
    RANK_STEPS // ``files``), ``"--max-steps"`` when the user gave it)."""

    first: int
    last: int
    kept: int
    profiled: int
    limit: int
    files: int
    chosen: str
    window: Window = None

    def text(self) -> str:
        """The report's line (text, page, diff's warnings)."""
        where = "" if self.window is None else f" in the window #{self.window[0]}..#{self.window[1]}"
        why = (
            f"at most {self.limit:,} steps per rank at {self.files:,} rank file(s) keeps the analysis' memory bounded"
            if self.chosen == "auto"
            else f"--max-steps {self.limit:,}"
        )
        steps = f"#{self.first}" if self.first == self.last else f"#{self.first}..#{self.last}"
        return (
            f"steps capped: analysed ProfilerStep{steps}, {self.kept:,} of {self.profiled:,} "
            f"profiled steps{where} ({why}; --max-steps N, or --steps A:B (info: --step-window), to choose)"
        )

    def to_json(self) -> Dict[str, Any]:
        """``step_cap`` in ``info --collectives --json`` (docs/collectives.md)."""
        return {
            "first_step": self.first,
            "last_step": self.last,
            "steps_kept": self.kept,
            "steps_profiled": self.profiled,
            "max_steps": self.limit,
            "files": self.files,
            "chosen": self.chosen,
            "window": None if self.window is None else list(self.window),
            "text": self.text(),
        }


def cycle_cap(
    steps: Iterable[int], limit: int, files: int, user_limit: bool, window: Window
) -> Optional[StepCap]:
    """The cap on one cycle whose ranks recorded the step numbers ``steps``: None when
    its steps (in ``window``) are ``limit`` or fewer (nothing dropped), else the first
    ``limit`` of them."""
    nums = _in_window(set(steps), window)
    if len(nums) <= limit:
        return None
    kept = nums[:limit]
    chosen = "--max-steps" if user_limit else "auto"
    return StepCap(kept[0], kept[-1], len(kept), len(nums), limit, files, chosen, window)


def only_steps(table: Any, first: int, last: int) -> Any:
    """``table`` with only the instances, step spans and step-time figures of
    ProfilerSteps ``first``..``last``: the report on those steps, as a merge of them
    would show (``step_time``, its spreads and verdicts too: they were of every step).
    Unmatched counts stay those of the recording read (they have no step; the steps
    the cap dropped in the files' passes are not read)."""

    def keep(step: Optional[int]) -> bool:
        return step is not None and first <= step <= last

    return dataclasses.replace(
        table,
        instances=[i for i in table.instances if keep(i.step)],
        p2p_pairs=[i for i in table.p2p_pairs if keep(i.step)],
        steps={r: {s: v for s, v in st.items() if keep(s)} for r, st in table.steps.items()},
        step_times={r: [x for x in rows if keep(x.step)] for r, rows in table.step_times.items()},
        steps_selected=(first, last),
    )


def capped(table: Any, cap: Optional[StepCap], window: Window = None) -> Any:
    """``table`` cut to the cap's steps (and carrying it), else to ``window``, else as it is."""
    if cap is not None:
        return dataclasses.replace(only_steps(table, cap.first, cap.last), step_cap=cap)
    return only_steps(table, *window) if window is not None else table


__all__ = [
    "MAX_STEPS",
    "PassLimit",
    "RANK_STEPS",
    "StepCap",
    "capped",
    "cycle_cap",
    "file_keep",
    "only_steps",
    "steps_limit",
    "timeline_spans",
    "trim_file",
]
