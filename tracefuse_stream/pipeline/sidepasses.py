"""The passes a merge may need before streaming: clock alignment, time windows and
(``--link-collectives``) the step figures of the ranks the summary's analysis did not read.

Each returns values; none changes the plans it is given (alignment returns new plans
with the corrected shifts). Both read only what they need — collective kernel ends,
the reference rank's ProfilerStep events, each rank's first event — with the shared
event reader, in worker processes when there are several.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.align.clock import (
    collect_collective_ends,
    estimate_offsets,
    format_alignment_table,
    load_clock_offsets,
    offsets_from_file,
)
from tracefuse_stream.analyze.onepass import scan_file
from tracefuse_stream.errors import UsageError
from tracefuse_stream.options import Alignment, TimeWindow
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.plan.starts import first_event_ns
from tracefuse_stream.select.window import find_step_window, window_from_ms
from tracefuse_stream.workers import parallel_map

Window = Tuple[int, int]


def _collect_ends(path: str, base: Optional[int], validate: bool) -> Any:
    return collect_collective_ends(path, base, validate=validate)


def apply_alignment(
    plans: Sequence[RankPlan], alignment: Alignment, jobs: int, salvage: bool = False
) -> Tuple[List[RankPlan], List[str]]:
    """Estimate (or load) per-host clock offsets and fold them into the rank shifts.

    Without ``salvage`` the merge validates every input right after this pass (and
    fails on invalid JSON), so the collective scan need not validate; with it, the
    scan stops where the merge's salvage will, as in the Python path.

    Returns the new plans and notes for the summary; the output base and the shifts
    that include the offsets are chosen afterwards (plan/starts.output_base).
    """
    if alignment.clock_offsets is None and alignment.mode == "base":
        return list(plans), []
    hosts = {p.rank: p.host_name for p in plans}
    if alignment.clock_offsets is not None:
        alignments = offsets_from_file(load_clock_offsets(alignment.clock_offsets), hosts)
    else:
        collected = parallel_map(_collect_ends, [(p.path, p.base_time_ns, salvage) for p in plans], jobs)
        alignments = estimate_offsets({p.rank: c for p, c in zip(plans, collected)}, hosts)
    out: List[RankPlan] = []
    for p in plans:
        a = alignments.get(p.rank)
        if a is None:
            out.append(p)
            continue
        offset = a.offset_ns if a.applied else 0
        out.append(p.replaced(align=a.to_header(), align_offset_ns=offset, shift_ns=p.shift_ns + offset))
    notes = []  # the output base and every shift follow from the offsets (plan/starts.output_base)
    notes.append("clock alignment:\n" + format_alignment_table(alignments))
    return out, notes


def _first_event_ns(plan: RankPlan, salvage: bool) -> Optional[int]:
    return first_event_ns(plan, salvage)  # a damaged rank (--salvage): where its salvaged merge starts


def resolve_window(
    plans: Sequence[RankPlan], window: TimeWindow, jobs: int, salvage: bool = False
) -> Optional[Window]:
    """The absolute (aligned) ns window to keep, from ``--steps`` or ``--window``."""
    if window.steps is not None:
        ref_rank = plans[0].rank if window.step_rank is None else window.step_rank
        ref = next((p for p in plans if p.rank == ref_rank), None)
        if ref is None:
            shown = ", ".join(str(p.rank) for p in plans[:10])
            raise UsageError(
                f"--step-rank {ref_rank} is not among the merged ranks ({shown}{'...' if len(plans) > 10 else ''})"
            )
        first, last = window.steps
        lo, hi = find_step_window(
            ref.path, ref.base_time_ns, first, last, rank=ref.rank, salvage=salvage or ref.needs_salvage
        )
        return lo + ref.align_offset_ns, hi + ref.align_offset_ns
    if window.window_ms is not None:
        firsts = parallel_map(_first_event_ns, [(p, salvage) for p in plans], jobs)
        known = [f + p.align_offset_ns for f, p in zip(firsts, plans) if f is not None]
        if not known:
            raise UsageError("--window: the inputs have no timed events")
        return window_from_ms(min(known), window.window_ms[0], window.window_ms[1])
    return None


def _step_rows(plan: RankPlan) -> Tuple[Optional[List[Any]], Optional[str]]:
    fs = scan_file(plan, ("collectives",))  # info --collectives' own pass: its figures, not a copy
    return (None if fs.scan is None else list(fs.scan.step_time or [])), fs.broken


def step_figures(
    plans: Sequence[RankPlan], known: Dict[int, List[Any]], jobs: int
) -> Tuple[Dict[int, List[Any]], Dict[int, str]]:
    """Every rank's step-time figures (analyze/step_time.py) for the per-rank counters of
    ``--link-collectives``: ``known`` (the summary's analysis read those ranks already:
    report/summary_track.link_analysis), the others from info's single pass over their
    files, in ``jobs`` workers; with the ranks that could not be read and why. The figures
    read here go into ``known`` too, so a second write of the merge reads nothing again."""
    missing = [p for p in plans if p.rank not in known]
    unread: Dict[int, str] = {}
    for p, (rows, broken) in zip(missing, parallel_map(_step_rows, [(p,) for p in missing], jobs)):
        if rows is None:
            unread[p.rank] = broken or "unreadable"
        else:
            known[p.rank] = rows
    return {p.rank: known[p.rank] for p in plans if p.rank in known}, unread
