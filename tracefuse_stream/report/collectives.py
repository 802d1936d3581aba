"""``info --collectives``: the straggler, per step, as a table and as JSON.

Why: finding the rank that holds the others back is the reason people fuse traces.
The instances come from :mod:`tracefuse_stream.align.collectives`, the judgement
(waits, how long the others waited for each rank, the noise-derived threshold) from
:mod:`tracefuse_stream.report.stragglers`. The human report is a rank x step table
of wait (ms) with the last-arriving rank of each step marked, the verdict, and ends
with the one ``merge`` command that shows the worst step with the straggler and a
reference rank. The ``--json`` schema is documented in docs/collectives.md and kept
stable: fields are only ever added.
"""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import (
    CollectiveTable,
    RankScan,
    match_instances,
    pg_config_of,
    pg_count_of,
    scan_collectives,
)
from tracefuse_stream.errors import EXIT_INPUT, EXIT_OK
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.report import stragglers as S
from tracefuse_stream.report.stragglers import Verdict, held_by_rank, judge, rule_text
from tracefuse_stream.workers import parallel_map

WORST_PER_RANK = 3
INSTANCES_SHOWN = 10
STEP_COLUMNS = 12  # rank x step table: at most this many step columns (the worst ones beyond)


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


def table_from_scans(plans: Sequence[RankPlan], scans: Sequence[RankScan]) -> CollectiveTable:
    """Match the scans of ``plans`` (same order) on the ranks' own clocks."""
    return match_instances(
        {p.rank: s for p, s in zip(plans, scans)},
        {p.rank: pg_config_of(p.header) for p in plans},
        {p.rank: p.host_name for p in plans},
        {p.rank: p.align_offset_ns for p in plans},
        {p.rank: pg_count_of(p.header) for p in plans},
    )


def collect_table(plans: Sequence[RankPlan], jobs: int = 1) -> CollectiveTable:
    """The instance table of ``plans`` (one collective-only pass per rank, in workers
    when ``jobs`` > 1), on the ranks' own clocks (no alignment)."""
    scans = parallel_map(_scan, [(p.path, p.rank, p.base_time_ns) for p in plans], jobs)
    return table_from_scans(plans, scans)


def rank_stats(table: CollectiveTable) -> List[RankStats]:
    """One :class:`RankStats` per merged rank, in rank order."""
    stats = {r: RankStats(r) for r in table.ranks}
    for inst in table.instances:
        for r in inst.entries:
            s = stats[r]
            s.instances += 1
            w = inst.wait_ns(r)
            s.wait_ns += w
            s.worst.append((w, inst.id))
        stats[inst.last_rank].last_arrivals += 1
    for r, h in held_by_rank(table).items():
        stats[r].held_ns = h
    for s in stats.values():
        s.worst = sorted(s.worst, key=lambda x: (-x[0], x[1]))[:WORST_PER_RANK]
    return [stats[r] for r in sorted(stats)]


def _instance_json(inst: Any) -> Dict[str, Any]:
    return {
        "id": inst.id,
        "name": inst.name,
        "group": inst.group,
        "match": inst.match,
        "ranks": inst.ranks,
        "step": inst.step,
        "spread_us": _us(inst.spread_ns),
        "arrival_ns": {str(r): inst.entries[r].start_ns for r in inst.ranks},
        "end_ns": {str(r): inst.entries[r].end_ns for r in inst.ranks},
        "wait_us": {str(r): _us(inst.wait_ns(r)) for r in inst.ranks},
        "last_rank": inst.last_rank,
        "last_arrival_ns": inst.last_arrival_ns,
    }


def _by_step_json(v: Verdict) -> List[Dict[str, Any]]:
    out = []
    for row in v.by_step:
        out.append({
            "step": row.step,
            "instances": row.instances,
            "duration_us": None if row.duration_ns is None else _us(row.duration_ns),
            "last_rank": row.last_rank,
            "straggler": row.stragglers[0] if row.stragglers else None,
            "stragglers": list(row.stragglers),
            "wait_us": {str(r): _us(w) for r, w in sorted(row.wait.items())},
            "held_us": {str(r): _us(h) for r, h in sorted(row.held.items())},
            "threshold_us": {str(r): _us(t) for r, t in sorted(row.threshold.items())},
        })  # fmt: skip
    return out


def to_json(table: CollectiveTable) -> Dict[str, Any]:
    """``{"collectives": {...}}`` for ``--json`` (schema: docs/collectives.md)."""
    stats = rank_stats(table)
    v = judge(table)
    unmatched = [
        {"kind": k, "name": n, "group": g, "reason": why, "instances": c}
        for (k, n, g, why), c in sorted(table.unmatched.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return {"collectives": {
        "ranks": [s.to_json() for s in stats],
        "instances": [_instance_json(i) for i in table.instances],
        "straggler": v.straggler,
        "stragglers": [{"rank": s.rank, "held_us": _us(s.held_ns), "steps": s.steps,
                        "last_arrivals": s.last_arrivals, "instances": s.instances} for s in v.stragglers],
        "by_step": _by_step_json(v),
        "threshold": {
            "noise_us": _us(v.noise_ns),
            "busy_step_us": None if v.busy_step_ns is None else _us(v.busy_step_ns),
            "typical_step_us": None if v.typical_step_ns is None else _us(v.typical_step_ns),
            "noise_factor": S.NOISE_FACTOR, "step_fraction": S.STEP_FRACTION,
            "min_us": _us(S.MIN_THRESHOLD_NS), "rule": rule_text(v),
        },
        "unmatched": {"total": table.unmatched_total, "by_reason": unmatched},
        "notes": list(table.notes),
    }}  # fmt: skip


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def verdict_lines(table: CollectiveTable, v: Verdict, stats: Sequence[RankStats]) -> List[str]:
    """The straggler(s), or why none is named."""
    if not table.instances:
        return ["straggler: none (no collective instance matched across ranks)"]
    by_rank = {s.rank: s for s in stats}
    if not v.stragglers:
        worst = max(stats, key=lambda s: (s.held_ns, -s.rank))
        return [f"straggler: none -- no rank stands out (most waited for: rank {worst.rank}, "
                f"{_ms(worst.held_ns)} ms in total, below the threshold)"]  # fmt: skip
    lines = []
    for i, s in enumerate(v.stragglers):
        where = (
            "every step"
            if len(s.steps) == len(v.by_step)
            else "step(s) " + ", ".join(_step(x) for x in s.steps)
        )
        lines.append(
            f"{'straggler' if i == 0 else 'also     '}: rank {s.rank} -- the others waited {_ms(s.held_ns)} ms for it "
            f"(in {where}); last to arrive in {s.last_arrivals} of {s.instances} instances, "
            f"waited {_ms(by_rank[s.rank].wait_ns)} ms itself"
        )
    return lines


def _step(step: Optional[int]) -> str:
    return "outside steps" if step is None else f"#{step}"


def step_table(v: Verdict, ranks: Sequence[int]) -> List[str]:
    """Rank x step wait (ms); ``*`` marks the step's last-arriving rank, ``!`` a
    straggler of that step."""
    rows = v.by_step
    if len(rows) > STEP_COLUMNS:
        keep = sorted(rows, key=lambda r: -sum(r.wait.values()))[:STEP_COLUMNS]
        rows = [r for r in rows if r in keep]
    head = ["rank"] + [("step " + str(r.step)) if r.step is not None else "outside" for r in rows] + ["total"]
    body = []
    for rank in ranks:
        cells = [str(rank)]
        for r in rows:
            if rank not in r.wait:
                cells.append("-")
                continue
            mark = ("*" if r.last_rank == rank else "") + ("!" if rank in r.stragglers else "")
            cells.append(f"{r.wait[rank] / 1e6:.1f}{mark}")
        cells.append(f"{sum(r.wait.get(rank, 0) for r in v.by_step) / 1e6:.1f}")
        body.append(cells)
    widths = [max(len(c[i]) for c in [head] + body) for i in range(len(head))]
    lines = ["wait in collectives per step (ms; * last to arrive in the step, ! straggler of the step):"]
    lines += ["  " + "  ".join(c[i].rjust(widths[i]) for i in range(len(c))) for c in [head] + body]
    if len(rows) < len(v.by_step):
        lines.append(f"  ({len(v.by_step) - len(rows)} step(s) with less waiting not shown; --json has all)")
    return lines


def merge_command(v: Verdict, inputs: Sequence[str], cycle: Optional[int] = None) -> Optional[str]:
    """The one ``merge`` command that shows the worst step with the straggler and a
    reference rank (the rank that waited longest for it there)."""
    row = v.worst_step()
    if row is None or row.step is None:
        return None
    target = v.straggler if v.straggler is not None else row.last_rank
    if target is None:
        return None
    others = [r for r in row.wait if r != target]
    if not others:
        return None
    ref = max(others, key=lambda r: (row.wait[r], -r))
    ranks = ",".join(str(r) for r in sorted({target, ref}))
    name = f"straggler_step{row.step}.json.gz"
    parts = ["tracefuse", "merge", *inputs, "--steps", f"{row.step}:{row.step}", "--step-rank", str(ref),
             "--ranks", ranks, "--link-collectives"]  # fmt: skip
    if cycle is not None:
        parts += ["--cycle", str(cycle)]
    return " ".join(shlex.quote(p) for p in parts + ["-o", name])


def format_text(table: CollectiveTable, inputs: Sequence[str] = (), cycle: Optional[int] = None) -> str:
    """The human report (see the module docstring)."""
    stats = rank_stats(table)
    v = judge(table)
    groups = len({i.group for i in table.instances})
    lines = [
        f"collectives: {len(table.instances)} instance(s) of {groups} process group(s) matched across ranks "
        f"{_ranks(table.ranks)}, {table.unmatched_total} could not be matched",
        *verdict_lines(table, v, stats),
    ]
    if table.instances:
        lines += step_table(v, table.ranks)
        lines.append("threshold: " + rule_text(v))
        lines.append(f"instances, largest arrival spread first (up to {INSTANCES_SHOWN}):")
        by_spread = sorted(table.instances, key=lambda i: (-i.spread_ns, i.id))
        for inst in by_spread[:INSTANCES_SHOWN]:
            lines.append(
                f"  #{inst.id} {inst.name} (group {inst.group or '?'}, step {inst.step if inst.step is not None else '-'}, "
                f"by {inst.match}) on ranks {_ranks(inst.ranks)}: arrivals spread {_ms(inst.spread_ns)} ms, "
                f"last rank {inst.last_rank}"
            )
    for (kind, name, group, why), n in sorted(table.unmatched.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"unmatched: {n} x {kind} {name} (group {group or '?'}): {why}")
    lines += [f"note: {n}" for n in table.notes]
    cmd = merge_command(v, inputs, cycle) if inputs else None
    if cmd is not None:
        what = "the straggler" if v.straggler is not None else "its last-arriving rank"
        lines.append(f"to see the worst step with {what} and a reference rank:\n  {cmd}")
    return "\n".join(lines)


def _ranks(ranks: Sequence[int]) -> str:
    return compress_ranges(list(ranks))


def collectives_json(
    tables: Dict[Optional[int], CollectiveTable],
) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """(``collectives``, ``collectives_by_cycle`` or None) for per-cycle tables:
    ``collectives`` is the latest cycle's."""
    if len(tables) <= 1:
        table = next(iter(tables.values())) if tables else CollectiveTable([], [], Counter(), [])
        return to_json(table)["collectives"], None
    per = {str(c): to_json(t)["collectives"] for c, t in tables.items()}
    return per[str(max(c for c in tables if c is not None))], per


def collectives_text(tables: Dict[Optional[int], CollectiveTable], inputs: Sequence[str]) -> List[str]:
    """The human report, one part per cycle."""
    if len(tables) <= 1:
        table = next(iter(tables.values())) if tables else CollectiveTable([], [], Counter(), [])
        return [format_text(table, inputs)]
    return [f"cycle {c}: " + format_text(t, inputs, c) for c, t in tables.items()]


def info_collectives(
    plans: Any,
    as_json: bool,
    into: Optional[Dict[str, Any]] = None,
    inputs: Sequence[str] = (),
    scans: Optional[Sequence[RankScan]] = None,
    jobs: int = 1,
    extra: Sequence[str] = (),
) -> int:
    """``info --collectives [--json]``: print the report (per profiling cycle when the
    inputs hold several: instances never span cycles); exit 1 when a file is broken.

    ``scans``: the plans' collective scans from info's single pass (report/onepass.py),
    else each file is read here. ``into``: the ``info --json`` object to fill
    (``collectives``, ``collectives_by_cycle``) and print; without it the JSON is
    ``{"collectives": ..., "cycles": ..., "broken": ...}``. ``extra``: text lines of the
    other sections asked for (``--steps``, ``--align``), printed before the report (which
    ends with its merge command).
    """
    import json

    cycles: Dict[Optional[int], List[Tuple[RankPlan, Optional[RankScan]]]] = {}
    for i, p in enumerate(plans):
        cycles.setdefault(p.cycle, []).append((p, scans[i] if scans is not None else None))
    tables = {}
    for c, pairs in sorted(cycles.items(), key=lambda kv: kv[0] or 0):
        ps = [p for p, _ in pairs]
        if all(sc is not None for _, sc in pairs):
            tables[c] = table_from_scans(ps, [sc for _, sc in pairs])  # type: ignore[misc]
        else:
            tables[c] = collect_table(ps, jobs)
    broken = list(getattr(plans, "broken", []))
    if not as_json:
        text = list(extra) + collectives_text(tables, inputs)
        print("\n".join(text + [f"BROKEN {path}: {why}" for path, why in broken]))
        return EXIT_INPUT if broken else EXIT_OK
    latest, by_cycle = collectives_json(tables)
    if into is not None:
        out = into
        out["collectives"], out["collectives_by_cycle"] = latest, by_cycle
    else:
        out = {"collectives": latest}
        if by_cycle is not None:
            out["cycles"] = by_cycle
        if broken:
            out["broken"] = [{"path": str(path), "broken": str(why)} for path, why in broken]
    print(json.dumps(out, indent=2, default=str))
    return EXIT_INPUT if broken else EXIT_OK


__all__ = [
    "RankStats",
    "collect_table",
    "collectives_json",
    "collectives_text",
    "format_text",
    "info_collectives",
    "merge_command",
    "rank_stats",
    "table_from_scans",
    "to_json",
]
