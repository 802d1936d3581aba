"""One run's per-rank, per-step figures: what ``tracefuse diff`` compares.

Why: a diff must compare like with like, from the same pass and the same aggregates
``info --collectives`` builds (no second engine): info's single pass keeps each rank's
timeline partitioned at its step starts and ends (analyze/timeline.py), so a whole
step's operators (self time and calls), time outside operators (by annotation), GPU
kernels and GPU idle time are a sum of segments; the step time is the step's span; the
collective wait of a rank in a step is the straggler analysis' (analyze/stragglers.py).

Every figure is a ``(kind, name)`` with a value (ns) and a count per rank and step: a
new figure (the per-step GPU compute / communication / exposed communication / idle of
the step-breakdown analysis) plugs in with :meth:`RunFigures.add`, and the diff, its
test, its classes and its report take it as they take the others.
"""

from __future__ import annotations

import bisect
import re
from array import array
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple, Union

from tracefuse_stream.align.collectives import RankScan
from tracefuse_stream.analyze.analysis import Analysis
from tracefuse_stream.analyze.stretch import breakdown, unit_parts
from tracefuse_stream.analyze.timeline import Part, Segments

Key = Tuple[str, str]  # (kind, name)
STEP_KEY: Key = ("step", "step time")
WAIT_KEY: Key = ("wait", "collectives")
#: kinds that partition the step's main thread: their changes add up to the step time's
PARTITION_KINDS = ("op", "outside_ops")
#: where each kind is measured (the JSON's ``where``)
WHERE = {
    "step": "step",
    "op": "main thread",
    "outside_ops": "main thread",
    "kernel": "GPU",
    "kernel_category": "GPU",
    "gpu_idle": "GPU",
    "gpu_step": "GPU",
    "wait": "collectives",
}
#: the step-time figures of the step's GPU (analyze/step_time.py, issue 36) a diff compares
GPU_STEP_FIGURES = ("compute", "comm", "comm_exposed", "memcpy", "idle")


#: GPU kernel categories by name, first match wins (convolutions before GEMMs: cuDNN's
#: implicit-GEMM convolutions say "gemm" too)
CATEGORIES: Tuple[Tuple[str, re.Pattern[str]], ...] = tuple(
    (cat, re.compile(rx, re.I))
    for cat, rx in (
        ("communication", r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|sendrecv|alltoall"),
        ("memcpy", r"memcpy"),
        ("memset", r"memset"),
        ("convolution", r"conv|implicit_?gemm|dgrad|wgrad|fprop|winograd|cudnn::cnn"),
        ("attention", r"flash|fmha|attention|sdpa"),
        ("GEMM", r"gemm|gemv|matmul|cublas|cutlass"),
        ("normalization", r"norm|bn_fw|bn_bw"),
        ("elementwise / reduction", r"elementwise|reduce|reduction|softmax"),
    )
)


@lru_cache(maxsize=4096)
def kernel_category(name: str) -> str:
    """The category of a GPU kernel (or memcpy / memset) by its name; ``other``: none
    (cached: a run has few kernel names, met once per rank and step, and C++ kernel
    names run to kilobytes)."""
    return next((cat for cat, rx in CATEGORIES if rx.search(name)), "other")


def step_parts(segments: Segments, steps: Dict[int, Tuple[int, int]]) -> Dict[int, Dict[Key, Part]]:
    """Each step's whole span (``steps``: step -> (lo, hi), file-relative ns): its main
    thread's parts and those of every GPU the pass partitioned, summed over the GPUs (a
    run-vs-run diff compares whole steps, not stretches up to a collective); a step the
    pass did not cut at is left out. Unit by unit, steps inside: each unit's rows are
    decompressed once (Segments.rows keeps the last blocks)."""
    out: Dict[int, Dict[Key, Part]] = {}
    for step, (lo, hi) in sorted(steps.items(), key=lambda kv: (segments.step_thread.get(kv[0], b""), kv[0])):
        bd = breakdown(segments, step, lo, hi)
        if bd is not None:
            out[step] = dict(bd.parts)
    for dev in sorted(segments.gpu):
        for step, parts in out.items():
            lo, hi = steps[step]
            for key, part in unit_parts(segments, segments.gpu[dev], lo, hi).items():
                old = parts.get(key)
                parts[key] = part if old is None else Part(old.ns + part.ns, old.count + part.count)
    return out


Ints = Union["array[int]", List[int]]


def _extend_wide(arr: Ints, values: List[int]) -> Ints:
    """``arr`` extended by ``values``: as int64 when one does not fit its int32, as a
    list of Python ints when one does not fit int64 (a step number of 2**64 is read
    as it is written, never wrapped); a failed ``extend`` may have added some: they
    are dropped with the narrower array."""
    start = len(arr)
    try:
        arr.extend(values)
        return arr
    except OverflowError:
        pass
    if isinstance(arr, array) and arr.typecode != "q":
        return _extend_wide(array("q", arr[:start]), values)
    return list(arr[:start]) + list(values)


class Column:
    """One figure's values over a run, rank by rank in rank order: the ranks, where
    each one's entries start, and per entry its step, ns and count: arrays of int64
    for the ns, of int32 for the step and count until one does not fit (then int64,
    then Python ints: never a wrapped number), 16 bytes an entry. Why not dicts rank -> step -> (ns,
    count): those took ~120 bytes an entry, 81 MB a run of 1,024 ranks x 10 steps
    (~670,000 entries), so a diff of two 16,384-rank runs would need ~2.6 GB for its
    figures alone (issue 38); in arrays 11 MB a run of 1,024 ranks."""

    __slots__ = ("ranks", "starts", "steps", "ns", "counts")

    def __init__(self) -> None:
        self.ranks: Ints = array("q")
        self.starts = array("q", [0])
        self.steps: Ints = array("i")
        self.ns: Ints = array("q")
        self.counts: Ints = array("i")

    def put(self, rank: int, per_step: Dict[int, List[int]]) -> None:
        """``rank``'s values (step -> [ns, count]); ranks come in increasing order."""
        if self.ranks and rank <= self.ranks[-1]:
            raise ValueError(f"diff figures: rank {rank} after rank {self.ranks[-1]}")
        steps = sorted(per_step)
        self.ns = _extend_wide(self.ns, [per_step[s][0] for s in steps])
        self.steps = _extend_wide(self.steps, steps)
        self.counts = _extend_wide(self.counts, [per_step[s][1] for s in steps])
        self.ranks = _extend_wide(self.ranks, [rank])
        self.starts.append(len(self.ns))

    def of(self, rank: int) -> Dict[int, Tuple[int, int]]:
        """``rank``'s values, step -> (ns, count) (empty: the rank has none)."""
        i = bisect.bisect_left(self.ranks, rank)
        if i == len(self.ranks) or self.ranks[i] != rank:
            return {}
        a, b = self.starts[i], self.starts[i + 1]
        return dict(zip(self.steps[a:b], zip(self.ns[a:b], self.counts[a:b])))


@dataclass
class RunFigures:
    """``values[(kind, name)]``: that figure's :class:`Column` (per rank and step, an
    ns value and a count); ``steps[rank]``: the steps the rank recorded; the run's
    straggler verdict beside them. Filled a rank at a time (:meth:`add` then
    :meth:`end_rank`, ranks in increasing order)."""

    ranks: List[int]
    steps: Dict[int, List[int]]
    values: Dict[Key, Column] = field(default_factory=dict)
    world_size: Optional[int] = None
    verdict: str = ""
    stragglers: List[int] = field(default_factory=list)
    _rank: Dict[Key, Dict[int, List[int]]] = field(default_factory=dict, repr=False)

    def add(self, kind: str, name: str, step: int, ns: int, count: int = 0) -> None:
        """One figure of the rank being filled in one step (added to what is there)."""
        per = self._rank.setdefault((kind, name), {})
        old = per.get(step)
        if old is None:
            per[step] = [ns, count]
        else:
            old[0] += ns
            old[1] += count

    def end_rank(self, rank: int) -> None:
        """The figures :meth:`add` gave, ``rank``'s: moved into the columns."""
        for key, per in self._rank.items():
            col = self.values.get(key)
            if col is None:
                col = self.values[key] = Column()
            col.put(rank, per)
        self._rank = {}

    def series(self, key: Key, rank: int, steps: Sequence[int]) -> Tuple[List[int], List[int]]:
        """(ns per step, count per step) of ``key`` on ``rank`` over ``steps`` (0 where absent)."""
        col = self.values.get(key)
        per = col.of(rank) if col is not None else {}
        got = [per.get(s, (0, 0)) for s in steps]
        return [g[0] for g in got], [g[1] for g in got]


def _add_scan(out: RunFigures, rank: int, scan: RankScan) -> None:
    """One rank's step times, partitions and GPU step figures (``out.add``)."""
    out.steps[rank] = sorted(scan.steps)
    every = step_parts(scan.timeline, scan.steps) if scan.timeline is not None else {}
    for step, (lo, hi) in sorted(scan.steps.items()):
        out.add(*STEP_KEY, step, hi - lo, 1)
        for (kind, name), part in sorted(every.get(step, {}).items()):
            out.add(kind, name, step, part.ns, part.count)
            if kind == "kernel":  # by category too: "GEMM +3.1 ms" over many kernel names
                out.add("kernel_category", kernel_category(name), step, part.ns, part.count)
    for st in getattr(scan, "step_time", None) or []:  # the step's GPU union (issue 36)
        if st.gpu is not None and st.step in scan.steps:
            for fig in GPU_STEP_FIGURES:
                out.add("gpu_step", fig, st.step, getattr(st.gpu.figures, fig + "_ns"), 0)


def run_figures(
    ranks: Sequence[int],
    scans: Sequence[RankScan],
    analysis: Optional[Analysis],
    world_size: Optional[int] = None,
    verdict: str = "",
) -> RunFigures:
    """The figures of one run (one cycle): ``scans`` in the order of ``ranks``, from
    info's single pass with its timelines; ``analysis``: the same cycle's (waits and
    stragglers)."""
    out = RunFigures(sorted(ranks), {}, world_size=world_size, verdict=verdict)
    waits: Dict[int, Dict[int, int]] = {}  # rank -> step -> the analysis' wait
    if analysis is not None:
        out.stragglers = [s.rank for s in analysis.verdict.stragglers]
        for row in analysis.verdict.by_step:
            if row.step is not None:
                for rank, ns in row.wait.items():
                    per = waits.setdefault(rank, {})
                    per[row.step] = per.get(row.step, 0) + ns
    by_rank: Dict[int, List[RankScan]] = {}
    for rank, scan in zip(ranks, scans):
        by_rank.setdefault(rank, []).append(scan)
    for rank in sorted(set(by_rank) | set(waits)):  # the columns are filled in rank order
        for scan in by_rank.get(rank, []):
            _add_scan(out, rank, scan)
        for step, ns in sorted(waits.get(rank, {}).items()):
            out.add(*WAIT_KEY, step, ns, 0)
        out.end_rank(rank)
    return out


__all__ = [
    "CATEGORIES",
    "Column",
    "Key",
    "PARTITION_KINDS",
    "RunFigures",
    "STEP_KEY",
    "WAIT_KEY",
    "WHERE",
    "kernel_category",
    "run_figures",
]
