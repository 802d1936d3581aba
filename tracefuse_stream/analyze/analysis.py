"""One cycle's analysis: the matched table, the verdict, per-rank figures and the why.

Why a module of its own: report/ only presents (text, JSON, page, the merge's summary
track); everything it presents is computed here, from the instances align/ matched and
the segments info's single pass (analyze/onepass.py) kept, so the next analyses plug in
without touching the pages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import (
    CollectiveTable,
    RankScan,
    match_instances,
    pg_config_of,
    pg_count_of,
    scan_collectives,
)
from tracefuse_stream.align.instance_ends import MAX_CLOCK_OFFSET_S
from tracefuse_stream.analyze import step_time, why
from tracefuse_stream.analyze.name_cap import FOLDED
from tracefuse_stream.analyze.p2p_steps import pipeline_only
from tracefuse_stream.analyze.step_cap import StepCap, capped
from tracefuse_stream.analyze.step_pack import StepRows
from tracefuse_stream.analyze.step_time import StepTime
from tracefuse_stream.analyze.stragglers import Verdict, held_by_rank, judge, wait_by_rank
from tracefuse_stream.analyze.timeline import Segments
from tracefuse_stream.errors import UsageError
from tracefuse_stream.listing import inline
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.textout import printable
from tracefuse_stream.workers import parallel_map

WORST_PER_RANK = 3


@dataclass
class RankStats:
    rank: int
    instances: int = 0
    last_arrivals: int = 0
    wait_ns: int = 0
    held_ns: int = 0
    worst: List[Tuple[int, int]] = field(default_factory=list)  # (wait_ns, instance id), largest first

    def to_json(self) -> Dict[str, Any]:
        return {"rank": self.rank, "instances": self.instances, "last_arrivals": self.last_arrivals,
                "wait_us": _us(self.wait_ns), "held_us": _us(self.held_ns)}  # fmt: skip


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def _scan(path: str, rank: int, base: Optional[int]) -> RankScan:
    return scan_collectives(path, rank, base, positions=False)


def table_from_scans(
    plans: Sequence[RankPlan], scans: Sequence[RankScan], max_clock_offset_s: float = MAX_CLOCK_OFFSET_S
) -> CollectiveTable:
    """Match the scans of ``plans`` (same order) on the ranks' own clocks (the why's
    segments of the scans that have them kept with the table); hosts whose clocks seem
    further apart than ``max_clock_offset_s`` are refused (:func:`require_near_clocks`)."""
    table = match_instances(
        {p.rank: s for p, s in zip(plans, scans)},
        {p.rank: pg_config_of(p.header) for p in plans},
        {p.rank: p.host_name for p in plans},
        {p.rank: p.align_offset_ns for p in plans},
        {p.rank: pg_count_of(p.header) for p in plans},
    )
    table.timelines = {p.rank: s.timeline for p, s in zip(plans, scans) if s.timeline is not None}
    table.step_times = {p.rank: s.step_time for p, s in zip(plans, scans) if s.step_time}
    require_near_clocks(table, plans, max_clock_offset_s)
    return table


def require_near_clocks(table: CollectiveTable, plans: Sequence[RankPlan], max_clock_offset_s: float) -> None:
    """Refuse a table built on a host clock offset beyond ``max_clock_offset_s``.

    Why: the offset is estimated from the instances themselves, and within
    align/instance_ends.MAX_APART_NS hosts whose clocks disagree by seconds and two runs
    of one job written into one folder look alike: the matching "corrects" either away.
    Synced hosts agree to milliseconds, so an offset of seconds is an ambiguous input,
    and an answer built on it is wrong if it is two runs: the user says which
    (``--max-clock-offset``: the clocks do disagree; then the offset is a note)."""
    limit = max_clock_offset_s * 1e9
    far = [(h, off) for h, off in sorted(table.clock_offsets.items()) if abs(off) > limit]
    if not far:
        return
    paths = {p.rank: p.path for p in plans}
    label = {r: f"host {h}" if h else f"rank {r}" for r, h in table.hosts.items()}
    ref = next((label[r] for r in sorted(label) if table.clock_offsets.get(label[r]) == 0), "?")

    def files(host: Optional[str]) -> str:
        ranks = sorted(r for r, lab in label.items() if lab == host)
        return f"{'rank' if len(ranks) == 1 else 'ranks'} {compress_ranges(ranks)} " + (
            f"({inline([paths[r] for r in ranks if r in paths], limit=2)})"
        )

    lines = [
        f"the collectives analysis needs the hosts' clocks within {max_clock_offset_s:g} s of each other:"
    ]
    for host, off in far:
        lines.append(
            f"  {printable(host)}'s clock seems {abs(off) / 1e9:,.1f} s {'ahead of' if off > 0 else 'behind'} "
            f"{printable(ref)}'s, estimated from the collectives' ends: {printable(host)}: "
            f"{files(host)}; {printable(ref)}: {files(ref)}"
        )
    need = math.ceil(max(abs(off) for _h, off in far) / 1e9)
    lines.append(
        "synced hosts agree to milliseconds: these files may be two runs, not one. choose: one run's files "
        f"(--ranks), or, if the hosts' clocks do disagree by that much, --max-clock-offset SECONDS with SECONDS "
        f"of at least {need} (the offset is then corrected, and noted)"
    )
    raise UsageError("\n".join(lines))


def collect_table(
    plans: Sequence[RankPlan], jobs: int = 1, max_clock_offset_s: float = MAX_CLOCK_OFFSET_S
) -> CollectiveTable:
    """The instance table of ``plans`` (one collective-only pass per rank, in workers
    when ``jobs`` > 1), on the ranks' own clocks (no alignment)."""
    scans = parallel_map(_scan, [(p.path, p.rank, p.base_time_ns) for p in plans], jobs)
    return table_from_scans(plans, scans, max_clock_offset_s)


def rank_stats(table: CollectiveTable, verdict: Optional[Verdict] = None) -> List[RankStats]:
    """One :class:`RankStats` per merged rank, in rank order (wait and held: the per-step
    figures of the verdict, summed)."""
    v = verdict if verdict is not None else judge(table)
    stats = {r: RankStats(r) for r in table.ranks}
    for inst in table.instances:
        for r in inst.entries:
            s = stats[r]
            s.instances += 1
            s.worst.append((inst.wait_ns(r), inst.id))
        stats[inst.last_rank].last_arrivals += 1
    for r, h in held_by_rank(table, v).items():
        stats[r].held_ns = h
    for r, w in wait_by_rank(v).items():
        stats[r].wait_ns = w
    for s in stats.values():
        s.worst = sorted(s.worst, key=lambda x: (-x[0], x[1]))[:WORST_PER_RANK]
    return [stats[r] for r in sorted(stats)]


@dataclass
class Analysis:
    """One cycle's table with everything judged from it (and, with the plans, the why)."""

    table: CollectiveTable
    verdict: Verdict
    stats: List[RankStats]
    why: List[Dict[str, Any]] = field(default_factory=list)
    # every rank and step, computed one step at a time each time it is iterated
    breakdown: Iterable[Dict[str, Any]] = field(default_factory=list)
    why_notes: List[str] = field(default_factory=list)
    step_time: Sequence[StepTime] = field(default_factory=list)  # every rank and step (info's single pass)


def analyse(
    table: CollectiveTable, plans: Optional[Sequence[RankPlan]] = None, jobs: int = 1, every_rank: bool = True
) -> Analysis:
    """Judge ``table``; with ``plans`` (same ranks), also break the stretches down
    (analyze/why.py) from the timelines info's single pass kept (``table.timelines``);
    for a rank without one (the merge's link table), one more pass over its file, in
    ``jobs`` workers, whose step-time figures go into ``table.step_times`` too (every
    rank it read, an empty list for one without steps). ``every_rank=False``: the why only, not the ``breakdown`` of
    every rank and step (what only the JSON holds: the human report and the merge's why
    track skip its cost)."""
    v = judge(table)
    a = Analysis(table, v, rank_stats(table, v))
    if not table.instances and any(pipeline_only(row.graph) for row in v.by_step):
        a.why_notes.append(
            f"no collective in the steps: waits and holds read at the {len(table.p2p_pairs)} linked send/recv "
            "pair(s), lateness and own lateness at each step's end (a pipeline: docs/collectives.md)"
        )
    if plans and (table.instances or table.p2p_pairs):  # a pipeline without collectives: its step ends
        mine = [p for p in plans if p.rank in set(table.ranks)]
        segs = [table.timelines.get(p.rank) for p in mine]
        missing = [k for k, s in enumerate(segs) if s is None]
        if missing:  # a table not from info's single pass: one pass per file for the why
            got = parallel_map(why.segments_of, [(mine[k],) for k in missing], jobs)
            for k, (s, rows, err) in zip(missing, got):
                segs[k] = s
                if rows is not None:  # the same pass's step figures (the merge's counters)
                    table.step_times[mine[k].rank] = rows
                if err:
                    a.why_notes.append(f"rank {mine[k].rank}: why not read: {err}")
        a.why_notes.extend(cap_note(segs))
        ex = why.Explain(table, v, mine, segs)
        a.why, a.breakdown = ex.why, why.EveryRank(ex if every_rank else None)
    step_time.fill_blocked(table, table.step_times)
    # every rank's rows in rank order, each rank's by step (as they are made), decoded
    # as they are read: never every rank's at once (analyze/step_pack.py)
    a.step_time = StepRows([table.step_times[r] for r in sorted(table.step_times)])
    return a


def cap_note(segs: Sequence[Optional[Segments]]) -> List[str]:
    """The note that the why's names were capped (analyze/name_cap.py), when they were
    on any rank: never a silent cut."""
    hit = [s for s in segs if s is not None and s.folded]
    if not hit:
        return []
    cap = max(s.name_cap for s in hit)
    return [
        f"names capped at {cap} per rank and step (each kind, thread and GPU; --name-cap): "
        f"{sum(s.folded for s in hit)} name(s) on {len(hit)} rank(s) folded into '{FOLDED}' in the why"
    ]


def collect_analyses(
    plans: Sequence[RankPlan],
    scans: Optional[Sequence[Optional[RankScan]]] = None,
    jobs: int = 1,
    every_rank: bool = True,
    max_clock_offset_s: float = MAX_CLOCK_OFFSET_S,
    step_caps: Optional[Mapping[Optional[int], StepCap]] = None,
    step_window: Optional[Tuple[int, int]] = None,
) -> Dict[Optional[int], Analysis]:
    """cycle -> its :class:`Analysis` with the why (instances never span cycles;
    ``every_rank``: :func:`analyse`'s; ``max_clock_offset_s``: :func:`require_near_clocks`;
    ``step_caps``: cycle -> the step cap that applied, its table cut to it, else to
    ``step_window`` when given: analyze/step_cap.py)."""
    cycles: Dict[Optional[int], List[Tuple[RankPlan, Optional[RankScan]]]] = {}
    for i, p in enumerate(plans):
        cycles.setdefault(p.cycle, []).append((p, scans[i] if scans is not None else None))
    out = {}
    for c, pairs in sorted(cycles.items(), key=lambda kv: kv[0] or 0):
        ps = [p for p, _ in pairs]
        if all(sc is not None for _, sc in pairs):
            table = table_from_scans(ps, [sc for _, sc in pairs], max_clock_offset_s)  # type: ignore[misc]
        else:
            table = collect_table(ps, jobs, max_clock_offset_s)
        out[c] = analyse(capped(table, (step_caps or {}).get(c), step_window), ps, jobs, every_rank)
    return out


__all__ = [
    "Analysis",
    "RankStats",
    "analyse",
    "cap_note",
    "collect_analyses",
    "collect_table",
    "rank_stats",
    "require_near_clocks",
    "table_from_scans",
]
