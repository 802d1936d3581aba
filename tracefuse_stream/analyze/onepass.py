"""``info``'s single pass per file: counts and span, and -- in the same pass -- what
``--steps``, ``--collectives`` and ``--align`` need.

Why one pass: each of those used to read every file again (four passes for
``info --steps --align --collectives``). The compiled kernel counts and times every
event in C and hands over only the ``ph: X`` events whose name holds ``ProfilerStep#``, the
annotations whose name holds ``gloo:``, the ``c10d::send`` / ``c10d::recv_`` ops (their
point-to-point peer, align/p2p.py) and the GPU kernels whose name holds
``nccl``/``rccl`` or whose text holds ``"Collective name"`` (:data:`INFO_SELECTION`;
a rank with batched SendRecv kernels is read once more for their ops:
align/coalesced.py ``read_batches``);
:class:`~tracefuse_stream.align.collectives.
CollectiveCollector` keeps the collective events and the step spans from those.
With ``--collectives``, the same pass keeps what the why needs (analyze/timeline.py:
the file's operator, annotation and kernel events, compactly, partitioned at the
file's end into per-segment aggregates, which is all that is kept). Memory: the
collective events and steps of a file and those aggregates; while a file is read, 32
bytes per operator/kernel event of it, up to the end of the steps the step cap keeps
(analyze/step_cap.py: a long file's steps past the kept ones are neither held nor kept). With ``jobs`` > 1 the files are read in worker
processes.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from tracefuse_stream.align.coalesced import read_batches
from tracefuse_stream.align.collective_event import _step_of
from tracefuse_stream.align.collectives import (
    COLLECTIVE_SELECTION,
    GLOO_CAT,
    GLOO_PREFIX,
    STEP_PREFIX,
    CollectiveCollector,
    RankScan,
)
from tracefuse_stream.align.ends import DEFAULT_CAP, RankCollectives
from tracefuse_stream.align.p2p import P2P_CALLS
from tracefuse_stream.align.step_spans import step_spans
from tracefuse_stream.analyze import step_time
from tracefuse_stream.analyze.kernel_categories import CategorySpec, from_spec
from tracefuse_stream.analyze.name_cap import NAME_CAP, cap_names
from tracefuse_stream.analyze.step_cap import PassLimit, Window, file_keep, timeline_spans, trim_file
from tracefuse_stream.analyze.step_pack import HoldBudget, NameIds, pack_rows
from tracefuse_stream.analyze.timeline import Spill, TimelineFeed
from tracefuse_stream.errors import InputError, TraceFuseError
from tracefuse_stream.gcpause import cyclic_gc_paused
from tracefuse_stream.plan.extent import RankInfo, scan_rank
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.read.scan import ScanSelection
from tracefuse_stream.workers import parallel_map, resolve_jobs

SECTIONS = ("steps", "collectives", "align")
#: the collectives' selection, each needle in the category the collector keeps it from
#: (align/collectives.py CollectiveCollector: gloo ops are annotations, NCCL/RCCL ones
#: GPU kernels, steps any, the c10d send/recv ops that carry a point-to-point peer
#: cpu ops): the profiler's nccl:* annotations and record_param_comms ops, half of what
#: the selection handed over, stay in the kernel (its timeline records them as Python would)
INFO_SELECTION = dataclasses.replace(
    COLLECTIVE_SELECTION,
    extremes=True,
    validate=False,
    name_contains_cats=tuple(
        {GLOO_PREFIX: GLOO_CAT, STEP_PREFIX: None, **dict.fromkeys(P2P_CALLS, "cpu_op")}.get(n, "kernel")
        for n in COLLECTIVE_SELECTION.name_contains
    ),
    text_contains_cat="kernel",
)


def broken_text(e: Any) -> str:
    """What is wrong with a file, without its path (the line names it) and without a
    ``--salvage`` hint (``info`` has no such option)."""
    if isinstance(e, InputError):
        at = ([f"event #{e.event_index}"] if e.event_index is not None else []) + (
            [f"byte {e.offset}"] if e.offset is not None else []
        )
        return f"{e.problem} (at {', '.join(at)})" if at else e.problem
    return str(e)


#: plain ``info``'s selection: only the ``ProfilerStep#N`` events are handed over (their
#: numbers: the run check's steps with none in common), the others counted and timed
STEPS_SELECTION = ScanSelection(ph="X", name_prefix=STEP_PREFIX, extremes=True, validate=False)


@dataclass
class FileScan:
    """What one pass over one file found (``broken``: why it could not be read;
    ``steps``: the ProfilerStep numbers, from the sections' scan or plain info's)."""

    info: Optional[RankInfo]
    scan: Optional[RankScan]
    broken: Optional[str] = None
    steps: Set[int] = dataclasses.field(default_factory=set)


def scan_file(
    plan: RankPlan,
    sections: Tuple[str, ...],
    kernel_categories: Optional[CategorySpec] = None,
    name_cap: int = NAME_CAP,
    step_cap: Optional[Tuple[int, Window]] = None,
) -> FileScan:
    """The single pass over ``plan``'s file (see the module docstring), with the cyclic
    collector paused as the merge pauses it (gcpause.py: the pass makes no cycles, and
    the collector's walks over the live batches were ~2% of ``info --collectives``);
    ``name_cap``: the why's names kept per step (analyze/name_cap.py); ``step_cap``:
    (steps kept at most, the user's window) with ``collectives`` (analyze/step_cap.py)."""
    with cyclic_gc_paused():
        return _scan_file(plan, sections, kernel_categories, name_cap, step_cap)


def _scan_file(
    plan: RankPlan,
    sections: Tuple[str, ...],
    kernel_categories: Optional[CategorySpec],
    name_cap: int,
    step_cap: Optional[Tuple[int, Window]] = None,
    early: bool = True,
) -> FileScan:
    try:
        if not sections:
            steps: Set[int] = set()
            base = int(plan.base_time_ns or 0)

            def step(batch: List[Any]) -> None:
                steps.update(
                    st[0] for ev in batch if type(ev) is dict and (st := _step_of(ev, base)) is not None
                )

            return FileScan(scan_rank(plan, select=STEPS_SELECTION, visit=step), None, steps=steps)
        scan = RankScan(plan.rank, int(plan.base_time_ns or 0))
        collector = CollectiveCollector(scan, None)
        feed = TimelineFeed() if "collectives" in sections else None
        # the step cap in the pass (``early``): the timeline holds no event past the steps kept
        limit = PassLimit(scan.steps, *step_cap, feed.timeline) if feed and step_cap and early else None

        def visit(batch: List[Any]) -> None:
            for ev in batch:
                if feed is not None:
                    feed.offer(ev)  # before the collector, which may decode its args in place
                collector.feed(ev, -1)
            if limit is not None:
                limit.update()

        info = scan_rank(
            plan, select=INFO_SELECTION, visit=visit, timeline=None if feed is None else feed.timeline
        )
        read_batches(plan.path, scan, compression=plan.compression, layout=plan.layout)
        recorded = set(scan.steps)  # every step number: the run check's, and what the cap reports
        if feed is not None:
            keep = file_keep(recorded, *step_cap) if step_cap is not None else None
            if limit is not None and keep is not None and not limit.safe(timeline_spans(scan.steps, keep)):
                return _scan_file(plan, sections, kernel_categories, name_cap, step_cap, early=False)
            _finish_timeline(plan.rank, scan, feed, keep, kernel_categories, name_cap)
        return FileScan(info, scan, steps=recorded)
    except TraceFuseError as e:
        return FileScan(None, None, broken_text(e))


def _finish_timeline(
    rank: int,
    scan: RankScan,
    feed: TimelineFeed,
    keep: Optional[Set[int]],
    kernel_categories: Optional[CategorySpec],
    name_cap: int,
) -> None:
    """The why's partitions and the step figures of ``scan`` from ``feed``'s events, once
    the file is read; ``keep``: the steps the step cap keeps (analyze/step_cap.py; None:
    all), the others dropped first, before anything per step is built from them. The
    timeline is cut at the next step's start too, so that the last kept step's names
    are capped over that step alone, as without the cap (analyze/name_cap.py groups)."""
    spans: Dict[int, Tuple[int, int]] = scan.steps
    if keep is not None:
        spans = trim_file(scan, keep)
        feed.keep_steps(spans)
    scan.timeline = feed.finish(
        spans,
        [e.ts_ns for e in scan.events] + _last_ends(scan),
        [(e.tid, e.ts_ns) for e in scan.events if e.kind == "gpu"],
        keep=True,
        compress=False,  # cap_names compresses them, once
    )
    names = scan.timeline.names  # the timeline's ids: the step figures read by them
    # the rows capped and packed first (~5x smaller): the step figures' work then
    # runs beside the packed rows, not the whole file's rows as they came (issue 38)
    cap_names(scan.timeline, spans, name_cap)
    scan.step_time = step_time.compute(
        rank,
        feed.step_windows(),
        scan.timeline,
        feed.timeline,
        feed.step_threads(),
        from_spec(kernel_categories),
        names,
    )
    if keep is not None:  # the next step's figures: only its start was needed
        scan.step_time = [x for x in scan.step_time if x.step in keep]
    del names
    feed.release()


def _last_ends(scan: RankScan) -> List[int]:
    """Per step, the end of the collective that ends last in it (file-relative ns): the
    start of the step's tail, which the why breaks down when the rank enters the next
    step late (analyze/why.py); one cut per step."""
    spans = sorted(scan.steps.values())
    los = [lo for lo, _hi in spans]
    last: Dict[int, int] = {}
    for e in scan.events:
        k = bisect.bisect_right(los, e.ts_ns) - 1
        end = e.ts_ns + e.dur_ns
        if k >= 0 and end <= spans[k][1] and end > last.get(k, -1):
            last[k] = end
    return list(last.values())


def scan_files(
    plans: Sequence[RankPlan],
    jobs: int,
    sections: Sequence[str],
    kernel_categories: Optional[CategorySpec] = None,
    name_cap: int = NAME_CAP,
    step_cap: Optional[Tuple[int, Window]] = None,
) -> List[FileScan]:
    """:func:`scan_file` for every plan, in ``jobs`` worker processes
    (``kernel_categories``: a :meth:`KernelCategories.spec`, None: the built-in table;
    ``name_cap``: the why's names kept per step, analyze/name_cap.py; ``step_cap``:
    (steps kept per file at most, the user's window), analyze/step_cap.py)."""
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown info sections: {sorted(unknown)}")
    want = tuple(s for s in SECTIONS if s in sections)
    args = [(p, want, kernel_categories, name_cap, step_cap) for p in plans]
    cache: Dict[str, str] = {}  # every rank names the same ops: one string each, shared
    ids = NameIds()  # the same for the step figures, packed per rank (analyze/step_pack.py)
    spill = Spill()  # the why's rows and the step figures: on disk until read (issue 38)
    budget = HoldBudget()  # the first ranks' step figures held as they are (analyze/step_pack.py)

    def share(fs: FileScan) -> FileScan:
        if fs.scan is not None:
            fs.scan.events = [_shared_event(e, cache) for e in fs.scan.events]
            fs.scan.steps = step_spans(fs.scan.steps)  # type: ignore[assignment]  # read only from here
            if fs.scan.timeline is not None:
                fs.scan.timeline.share_names(cache)
                fs.scan.timeline.spill(spill)
            fs.scan.step_time = pack_rows(fs.scan.step_time, ids, spill, budget)  # type: ignore[assignment]
        return fs

    return parallel_map(scan_file, args, resolve_jobs(jobs, len(plans)), each=share)


def _shared_event(e: Any, cache: Dict[Any, Any]) -> Any:
    """``e`` with its name, match key, group, members, shapes and sizes the one copy
    ``cache`` holds: every rank's event of one instance carries equal ones (~4 KB a
    rank of 18 collectives, issue 38). Each is a str, an int or a tuple of them (never
    a float or a bool: see align/collective_event.py), so equal is the same value."""
    return e._replace(
        name=cache.setdefault(e.name, e.name),
        key=cache.setdefault(e.key, e.key),
        pg=cache.setdefault(e.pg, e.pg),
        ranks=cache.setdefault(e.ranks, e.ranks),
        signature=cache.setdefault(e.signature, e.signature),
        size=cache.setdefault(e.size, e.size),
    )


def steps_us(scan: RankScan) -> Dict[int, Tuple[float, float]]:
    """``{step: (start_us, end_us)}`` in the file's own relative microseconds, sorted
    (what :func:`~tracefuse_stream.select.window.list_steps` gives)."""
    return {s: (lo / 1000, hi / 1000) for s, (lo, hi) in sorted(scan.steps.items())}


def collective_ends(scan: RankScan, cap: int = DEFAULT_CAP) -> RankCollectives:
    """The GPU collective end times clock alignment needs, keyed as
    :func:`~tracefuse_stream.align.ends.collect_collective_ends` keys them."""
    out = RankCollectives()
    by_stream: Dict[Tuple[Any, Any], List[int]] = {}
    for e in scan.events:
        if e.kind != "gpu" or e.nccl_p2p:  # a send/recv's end is not a group's (align/ends.py)
            continue
        if out.count >= cap:
            out.cap_hit = True
            break
        out.count += 1
        end = scan.base_ns + e.ts_ns + e.dur_ns
        if e.key[0] == "seq":
            prev = out.ends.get(e.key)
            out.ends[e.key] = end if prev is None else max(prev, end)
        else:
            by_stream.setdefault((e.key[2], e.key[3]), []).append(end)
    for (name, stream), values in by_stream.items():
        values.sort()
        for i, end in enumerate(values):
            out.ends[("order", name, stream, i)] = end
    out.error = scan.error
    return out


__all__ = ["FileScan", "INFO_SELECTION", "SECTIONS", "collective_ends", "scan_file", "scan_files", "steps_us"]
