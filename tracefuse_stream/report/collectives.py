"""``info --collectives``: per rank, how often it arrived last and how long it waited.

Why: the straggler of a job is the rank that arrives last at its collectives while
everybody else waits for it. For each instance matched across its ranks
(:mod:`tracefuse_stream.align.collectives`) a rank's *wait* is the instance's last
arrival minus its own arrival; summed per rank, the straggler is the rank that is
most often last (ties: the one that waited least) -- it waits for nobody.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import (
    CollectiveTable,
    RankScan,
    match_instances,
    pg_config_of,
    scan_collectives,
)
from tracefuse_stream.plan.planner import RankPlan

WORST_PER_RANK = 3
INSTANCES_SHOWN = 10


@dataclass
class RankStats:
    rank: int
    instances: int = 0
    last_arrivals: int = 0
    wait_ns: int = 0
    worst: List[Tuple[int, int]] = field(default_factory=list)  # (wait_ns, instance id), largest first

    def to_json(self) -> Dict[str, Any]:
        return {"rank": self.rank, "instances": self.instances, "last_arrivals": self.last_arrivals,
                "wait_us": _us(self.wait_ns)}  # fmt: skip


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def _scan(path: str, rank: int, base: Optional[int]) -> RankScan:
    return scan_collectives(path, rank, base)


def collect_table(plans: Sequence[RankPlan], jobs: int = 1) -> CollectiveTable:
    """The instance table of ``plans`` (one collective-only pass per rank, in workers
    when ``jobs`` > 1), on the ranks' own clocks (no alignment)."""
    from tracefuse_stream.pipeline.workers import parallel_map

    scans = parallel_map(_scan, [(p.path, p.rank, p.base_time_ns) for p in plans], jobs)
    return match_instances(
        {p.rank: s for p, s in zip(plans, scans)},
        {p.rank: pg_config_of(p.header) for p in plans},
        {p.rank: p.host_name for p in plans},
        {p.rank: p.align_offset_ns for p in plans},
    )


def rank_stats(table: CollectiveTable) -> List[RankStats]:
    """One :class:`RankStats` per merged rank, in rank order."""
    stats = {r: RankStats(r) for r in table.ranks}
    for inst in table.instances:
        last = inst.last_rank
        for r in inst.entries:
            s = stats[r]
            s.instances += 1
            w = inst.wait_ns(r)
            s.wait_ns += w
            s.worst.append((w, inst.id))
        stats[last].last_arrivals += 1
    for s in stats.values():
        s.worst = sorted(s.worst, key=lambda x: (-x[0], x[1]))[:WORST_PER_RANK]
    return [stats[r] for r in sorted(stats)]


def straggler(stats: Sequence[RankStats]) -> Optional[RankStats]:
    """Most often last, then least total wait; None when no rank was ever last."""
    cands = [s for s in stats if s.last_arrivals > 0]
    if not cands:
        return None
    return min(cands, key=lambda s: (-s.last_arrivals, s.wait_ns, s.rank))


def to_json(table: CollectiveTable) -> Dict[str, Any]:
    """``{"collectives": {"ranks": [...], "instances": [...], ...}}`` for ``--json``."""
    stats = rank_stats(table)
    st = straggler(stats)
    instances = []
    for inst in table.instances:
        instances.append(
            {
                "id": inst.id,
                "name": inst.name,
                "group": inst.group,
                "match": inst.match,
                "ranks": inst.ranks,
                "arrival_ns": {str(r): inst.entries[r].start_ns for r in inst.ranks},
                "end_ns": {str(r): inst.entries[r].end_ns for r in inst.ranks},
                "wait_us": {str(r): _us(inst.wait_ns(r)) for r in inst.ranks},
                "last_rank": inst.last_rank,
                "last_arrival_ns": inst.last_arrival_ns,
            }
        )
    unmatched = [
        {"kind": k, "name": n, "group": g, "reason": why, "instances": c}
        for (k, n, g, why), c in sorted(table.unmatched.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return {"collectives": {
        "ranks": [s.to_json() for s in stats],
        "instances": instances,
        "straggler": None if st is None else st.rank,
        "unmatched": {"total": table.unmatched_total, "by_reason": unmatched},
        "notes": list(table.notes),
    }}  # fmt: skip


def straggler_line(table: CollectiveTable, stats: Optional[Sequence[RankStats]] = None) -> str:
    stats = rank_stats(table) if stats is None else stats
    st = straggler(stats)
    if st is None:
        return "straggler: none (no collective instance matched across ranks)"
    others = [s.wait_ns for s in stats if s.rank != st.rank and s.instances]
    rest = f"; the others waited {_ms(min(others))}-{_ms(max(others))} ms" if others else ""
    return (f"straggler: rank {st.rank}, last to arrive in {st.last_arrivals} of {st.instances} instances, "
            f"waited {_ms(st.wait_ns)} ms in total{rest}")  # fmt: skip


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def format_text(table: CollectiveTable) -> str:
    """The human table: one line naming the straggler, ranks sorted by wait (least first)."""
    stats = rank_stats(table)
    lines = [
        f"collectives: {len(table.instances)} instance(s) matched across ranks "
        f"{_ranks(table.ranks)}, {table.unmatched_total} could not be matched",
        straggler_line(table, stats),
    ]
    header = ("rank", "instances", "last_arrivals", "wait_ms", "worst instances (#id wait_ms)")
    rows = [header]
    for s in sorted(stats, key=lambda s: (s.wait_ns, s.rank)):
        worst = ", ".join(f"#{i} {_ms(w)}" for w, i in s.worst)
        rows.append((str(s.rank), str(s.instances), str(s.last_arrivals), _ms(s.wait_ns), worst))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines += ["  ".join([r[i].rjust(widths[i]) for i in range(4)] + [r[4]]).rstrip() for r in rows]
    if table.instances:
        lines.append(f"instances, largest arrival spread first (up to {INSTANCES_SHOWN}):")
        by_spread = sorted(table.instances, key=lambda i: (-(i.last_arrival_ns - _first(i)), i.id))
        for inst in by_spread[:INSTANCES_SHOWN]:
            lines.append(
                f"  #{inst.id} {inst.name} (group {inst.group or '?'}, by {inst.match}) on ranks "
                f"{_ranks(inst.ranks)}: arrivals spread {_ms(inst.last_arrival_ns - _first(inst))} ms, "
                f"last rank {inst.last_rank}"
            )
    for (kind, name, group, why), n in sorted(table.unmatched.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"unmatched: {n} x {kind} {name} (group {group or '?'}): {why}")
    lines += [f"note: {n}" for n in table.notes]
    return "\n".join(lines)


def _first(inst: Any) -> int:
    return min(e.start_ns for e in inst.entries.values())


def _ranks(ranks: Sequence[int]) -> str:
    from tracefuse_stream.select.ranges import compress_ranges

    return compress_ranges(list(ranks))


def info_collectives(plans: Any, as_json: bool) -> int:
    """``info --collectives [--json]``: print the table (per profiling cycle when the
    inputs hold several: instances never span cycles); exit 1 when a file is broken."""
    import json

    from tracefuse_stream.errors import EXIT_INPUT, EXIT_OK

    cycles: Dict[Optional[int], List[RankPlan]] = {}
    for p in plans:
        cycles.setdefault(p.cycle, []).append(p)
    tables = {c: collect_table(ps) for c, ps in sorted(cycles.items(), key=lambda kv: kv[0] or 0)}
    broken = list(getattr(plans, "broken", []))
    if as_json:
        if len(tables) <= 1:
            out = (
                to_json(next(iter(tables.values())))
                if tables
                else to_json(CollectiveTable([], [], Counter(), []))
            )
        else:  # "collectives" is the latest cycle; every cycle under "cycles"
            per = {str(c): to_json(t)["collectives"] for c, t in tables.items()}
            out = {"collectives": dict(per[str(max(c for c in tables if c is not None))]), "cycles": per}
        if broken:
            out["broken"] = [{"path": str(path), "broken": str(why)} for path, why in broken]
        print(json.dumps(out, indent=2))
    else:
        parts = []
        for c, t in tables.items():
            parts.append((f"cycle {c}: " if len(tables) > 1 else "") + format_text(t))
        parts += [f"BROKEN {path}: {why}" for path, why in broken]
        print("\n".join(parts))
    return EXIT_INPUT if broken else EXIT_OK


__all__ = [
    "RankStats",
    "collect_table",
    "format_text",
    "info_collectives",
    "rank_stats",
    "straggler",
    "straggler_line",
    "to_json",
]
