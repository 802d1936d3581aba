"""When each rank starts, read cheaply: its first timed event.

Three decisions need a rank's time before the merge: the order of profiling cycles,
whether a rank is *empty* (no timed event at all: it must not decide the output base,
where a missing ``baseTimeNanoseconds`` would otherwise force B = 0 and move every
real rank to epoch microseconds, where a double has 0.25 us steps), and whether the
ranks come from one run at all (spans days apart). The first timed event is enough
for all three and costs only the start of each file: the read stops there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple

import ijson

from tracefuse_stream.errors import OutputError, TraceFuseError
from tracefuse_stream.plan.extent import scan_rank
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.read.batches import EventBatches, NotBatchable
from tracefuse_stream.read.depthgate import DepthGate
from tracefuse_stream.read.head import Head, timed_ts
from tracefuse_stream.read.readers import SalvageReader
from tracefuse_stream.read.sources import TraceReader
from tracefuse_stream.read.toplevel import IJSON_BUF
from tracefuse_stream.timeunits import TimeCheck, iso_utc, time_problem, us_to_ns

if TYPE_CHECKING:  # pragma: no cover
    from tracefuse_stream.plan.rankplan import RankPlan

#: The output base B: every written ``ts`` is ``(abs_ns - B) / 1000`` us. Perfetto reads
#: ``ts`` as a double, which resolves 0.25 us at epoch scale (abutting slices turn into
#: overlaps) and every nanosecond below ~2**39 us: B must sit just before the earliest
#: event. The ranks' first events in file order are known from the planning pass; the
#: earliest event is not (Kineto writes the profiler's own span, which starts first, at
#: the end), so B leaves this lead before the earliest first event, floored to a whole
#: millisecond. A rank whose events reach further back is found while writing (its
#: ``ts`` would be negative, which Perfetto drops) and the merge is written again from
#: the earliest written event (pipeline/orchestrate).
BASE_LEAD_NS = 10 * 10**9
BASE_FLOOR_NS = 10**6
#: ranks whose base already puts their first events below this keep it as B (``ts``
#: exactly as in the inputs): every nanosecond survives a double there
SMALL_TS_NS = 2**32 * 1000

#: ranks whose first events lie further apart than this are named in a warning: one
#: job's ranks start within minutes (the profiler schedule is per rank, but the steps
#: are shared); a day apart means two runs merged by mistake.
FAR_APART_NS = 24 * 3600 * 10**9


def peek_first_ts(plan: RankPlan, head: Optional[Head] = None) -> None:
    """Set ``plan.first_ts`` (relative us of the first timed non-metadata event) and
    ``plan.empty`` (the event array has none). A read problem leaves both unknown:
    the streaming pass reports it (or salvages). ``head``: discovery's parse of the
    file's start (read/head.py), which found them already when ``first_known``."""
    if plan.needs_salvage:
        plan.empty = plan.first_ts is None
        return
    if head is not None and head.ok and head.first_known:
        plan.first_ts, plan.empty = head.first_ts, head.empty
        return
    try:
        found = _first_ts_batched(plan)  # msgspec: linear in an event's size
    except NotBatchable:
        found = _first_ts_exact(plan)  # ijson: whatever msgspec refuses
    except (TraceFuseError, OSError, ValueError):
        return
    if found is not None:
        plan.first_ts, plan.empty = found


def _first_ts_batched(plan: RankPlan) -> Optional[Tuple[Any, bool]]:
    """``(first ts, empty)`` read with the batch decoder (exact numbers, as ijson gives)."""
    reader = TraceReader(plan.path, plan.compression)
    try:
        for batch in EventBatches(reader, plan.layout):
            for ev in batch:
                ts = timed_ts(ev)
                if ts is not None:
                    return ts, False
        return None, True
    finally:
        reader.close()


def _first_ts_exact(plan: RankPlan) -> Optional[Tuple[Any, bool]]:
    """The same with ijson; None when the file cannot be read that far (the streaming
    pass reports it, or salvages)."""
    prefix = "traceEvents.item" if plan.layout == "object" else "item"
    reader = TraceReader(plan.path, plan.compression)
    try:
        for ev in ijson.items(DepthGate(reader), prefix, use_float=False, buf_size=IJSON_BUF):
            ts = timed_ts(ev)
            if ts is not None:
                return ts, False
        return None, True
    except (ijson.JSONError, UnicodeDecodeError, TraceFuseError, OSError, ValueError):
        return None
    finally:
        reader.close()


def set_start(plan: RankPlan) -> None:
    """``plan.start_ns``: absolute epoch ns of the first timed event (base known)."""
    base = plan.base_time_ns or 0
    usable = plan.first_ts is not None and time_problem(plan.first_ts, "ts", base) is None
    plan.start_ns = base + us_to_ns(plan.first_ts) if usable else None


def far_apart_warning(
    plans: Sequence[RankPlan], limit_ns: int = FAR_APART_NS, known: Optional[Dict[str, Optional[int]]] = None
) -> List[str]:
    """One line naming the ranks that start more than ``limit_ns`` after the others;
    ``known``: path -> earliest event, when a pass found it (else read here, on this
    path only: the cheap estimate said days apart)."""
    timed = sorted((p.start_ns, p.rank) for p in plans if p.start_ns is not None)
    if len(timed) < 2 or timed[-1][0] - timed[0][0] <= limit_ns:
        return []
    # the estimate (first event in file order) says days apart: judge by the starts the
    # line prints, the earliest events (a rank whose first-written event lies 40 days on
    # while its earliest is with the others' was "40.0 days apart", printed at one instant)
    firsts = [(earliest_ns([p], known), p.rank) for p in plans if p.start_ns is not None]
    timed = sorted((ns, r) for ns, r in firsts if ns is not None)
    if len(timed) < 2 or timed[-1][0] - timed[0][0] <= limit_ns:
        return []
    clusters: List[List[tuple]] = [[timed[0]]]
    for t in timed[1:]:
        if t[0] - clusters[-1][-1][0] > limit_ns:
            clusters.append([])
        clusters[-1].append(t)

    desc = "; ".join(  # the start shown: the earliest event, as everywhere (earliest_ns)
        f"rank(s) {compress_ranges(sorted(r for _, r in c))} start {iso_utc(c[0][0])}" for c in clusters
    )
    days = (timed[-1][0] - timed[0][0]) / 86400e9
    return [
        f"ranks start {days:,.1f} days apart (more than {limit_ns / 86400e9:g} day): {desc}; "
        "are these traces from one run?"
    ]


def empty_rank_note(plans: Sequence[RankPlan]) -> List[str]:
    """Name the ranks without any timed event (they do not decide the output base)."""
    empty = sorted(p.rank for p in plans if p.empty)
    if not empty:
        return []

    return [f"rank(s) {compress_ranges(empty)} have no timed events (ignored for the output base)"]


def first_event_ns(plan: RankPlan, salvage: bool = False) -> Optional[int]:
    """Absolute ns of the rank's earliest timed event (not just its first in the file),
    from a full pass: the fast counting scan, or -- with ``--salvage`` (``salvage``),
    when that cannot read the file and salvage could -- the salvage reader, keeping
    only usable times (timeunits' malformed-number rule), so a damaged rank starts where
    its salvaged merge does. Without ``--salvage`` the scan's error is the answer: the
    merge would stop at the same problem (issue 28: it used to find "no timed events")."""
    if not plan.needs_salvage:
        try:
            return scan_rank(plan).first_ns
        except TraceFuseError as e:
            if not (salvage and e.salvageable):
                raise
    return _salvaged_first_ns(plan)


def earliest_ns(plans: Iterable[RankPlan], known: Optional[Dict[str, Optional[int]]] = None) -> Optional[int]:
    """The start of a cycle or a run as every message shows it: the earliest timed
    event of ``plans`` (absolute ns), None without any.

    Planning orders files by a cheap estimate, the first timed event *in file order*
    (``RankPlan.start_ns``, from the head of each file); Kineto does not write events in
    time order, so that can be later than the earliest event by a large part of a second
    (a recorded cycle "started" 06:07:13.058 while ``info`` listed first events from
    06:07:12.915, and the merge began there). Ordering does not mind; a printed start
    does: ``info``'s table and cycle list, the merge's errors and warnings show this,
    which is what ``info`` reports per file and where the merged trace begins. Finding it
    reads the files, so it is done only for what is about to be printed.

    ``known``: path -> earliest event already found (``info`` scanned every file);
    other files are read. A file that cannot be read for it keeps its estimate (the
    error that matters is reported where that file is merged)."""
    found = []
    for p in plans:
        if known is not None and p.path in known:
            ns = known[p.path]
        else:
            try:
                ns = first_event_ns(p)
            except (TraceFuseError, OSError):
                ns = p.start_ns
        if ns is not None:
            found.append(ns)
    return min(found, default=None)


def _salvaged_first_ns(plan: RankPlan) -> Optional[int]:
    base = plan.base_time_ns or 0
    check = TimeCheck(base)
    reader = SalvageReader(plan.path, plan.size_bytes, exact=True)
    lo: Any = None
    try:
        for batch in reader.batches():
            for ev in batch:
                if type(ev) is dict and ev.get("ph") != "M" and "ts" in ev and check(ev) is None:
                    if lo is None or ev["ts"] < lo:
                        lo = ev["ts"]
    finally:
        reader.close()
    return None if lo is None else base + us_to_ns(lo)


def rank_zero_ns(plan: RankPlan) -> int:
    """The absolute ns the rank's ``ts`` 0 stands for: its base plus any clock correction."""
    return (plan.base_time_ns or 0) + plan.align_offset_ns


def output_base(plans: Sequence[RankPlan], earliest_ns: Optional[int] = None) -> Tuple[List[RankPlan], int]:
    """Choose the output base B and give every rank its exact shift ``zero_r - B``.

    B is the smallest base of the ranks that have events (a rank without events and
    without a base -- a killed rank salvaged -- has nothing to place and never moves
    the others) when that keeps the first events' ``ts`` small (< 2**32 us); otherwise
    (epoch-``ts`` traces without a base, Kineto's bases up to 91 days back) the earliest
    first event minus :data:`BASE_LEAD_NS`, floored to a whole millisecond.
    ``earliest_ns``: the earliest event the writing found (a second pass), floored
    alone. B is never negative. Returns the new plans and B.
    """
    zeros = [rank_zero_ns(p) for p in plans if p.base_time_ns is not None or not p.empty]
    starts = [p.start_ns + p.align_offset_ns for p in plans if p.start_ns is not None and not p.empty]
    base = min(zeros, default=0)
    if earliest_ns is not None:  # every event at or after it: nothing else is earlier
        base = earliest_ns - earliest_ns % BASE_FLOOR_NS
    elif starts and not 0 <= min(starts) - base < SMALL_TS_NS:
        lead = min(starts) - BASE_LEAD_NS
        base = lead - lead % BASE_FLOOR_NS
    base = max(base, 0)
    return [p.replaced(shift_ns=rank_zero_ns(p) - base) for p in plans], base


class EarlyEvents(Exception):
    """Events were written before the output base (negative ``ts``, which Perfetto
    drops): the merge is written again with B at ``earliest_ns``. Never reaches users."""

    def __init__(self, earliest_ns: int) -> None:
        super().__init__(f"an event at {earliest_ns} ns precedes the output base")
        self.earliest_ns = earliest_ns


def check_early(results: Sequence[Any], base_ns: int, *, retry: bool) -> None:
    """After every rank was written: did any event land before the base B (see
    :data:`BASE_LEAD_NS`)? Then :class:`EarlyEvents` (the merge writes again), or, for
    an output that cannot be written twice (stdout, a FIFO), an error that says what to
    do. A base of 0 cannot move: negative epoch times stay as they are."""
    early = [base_ns + us_to_ns(r.early_ts) for r in results if r.early_ts is not None]
    if not early or base_ns <= 0:
        return
    if retry:
        raise EarlyEvents(min(early))

    raise OutputError(
        f"an event at {iso_utc(min(early))} lies more than {BASE_LEAD_NS // 10**9} s before its rank's first "
        f"event, before the output base chosen from those ({iso_utc(base_ns)}): this output cannot be "
        "rewritten with an earlier base; merge into a regular file (-o FILE)"
    )
