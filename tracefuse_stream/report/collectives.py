"""``info --collectives``: the straggler, per step, as a table and as JSON.

Why: finding the rank that holds the others back is the reason people fuse traces.
The instances come from :mod:`tracefuse_stream.align.collectives`, the judgement
(waits, how long the others waited for each rank, the noise-derived threshold) from
:mod:`tracefuse_stream.analyze.stragglers`. The human report is a rank x step table
of wait (ms) with the last-arriving rank of each step marked, the verdict, and ends
with the one ``merge`` command that shows the worst step with the straggler and a
reference rank. The ``--json`` schema is documented in docs/collectives.md and kept
stable: fields are only ever added.
"""

from __future__ import annotations

import shlex
import sys
from collections import Counter
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import CollectiveTable, RankScan
from tracefuse_stream.align.instance_ends import MAX_CLOCK_OFFSET_S
from tracefuse_stream.analyze import p2p_steps, per_collective
from tracefuse_stream.analyze import stragglers as S
from tracefuse_stream.analyze.analysis import (
    Analysis,
    RankStats,
    analyse,
    collect_analyses,
    collect_table,
    rank_stats,
    table_from_scans,
)
from tracefuse_stream.analyze.assessment import not_assessed
from tracefuse_stream.analyze.p2p_steps import pipeline_only
from tracefuse_stream.analyze.stragglers import DEFINITIONS, Verdict, rule_text
from tracefuse_stream.errors import EXIT_INPUT, EXIT_OK
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.report import per_collective_text, rootcause, step_time_text, why_text
from tracefuse_stream.report.json_stream import LazyArray, PlainLazyArray, write_json
from tracefuse_stream.textout import p_round, p_text, printable, terminal

INSTANCES_SHOWN = 10
STEP_COLUMNS = 12  # rank x step table: at most this many step columns (the worst ones beyond)


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


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


def _by_step_json(v: Verdict) -> Iterator[Dict[str, Any]]:
    for row in v.by_step:
        yield {
            "step": row.step,
            "instances": row.instances,
            "duration_us": None if row.duration_ns is None else _us(row.duration_ns),
            "last_rank": row.last_rank,
            "straggler": row.stragglers[0] if row.stragglers else None,
            "stragglers": list(row.stragglers),
            "wait_us": {str(r): _us(w) for r, w in sorted(row.wait.items())},
            "held_us": {str(r): _us(h) for r, h in sorted(row.held.items())},
            "threshold_us": {str(r): _us(t) for r, t in sorted(row.threshold.items())},
            "lateness_us": {str(r): _us(t) for r, t in sorted(row.lateness.items())},
            "busy_us": {str(r): _us(t) for r, t in sorted(row.busy.items())},
            "own_lateness_us": {str(r): _us(t) for r, t in sorted(row.own.items())},
            "start_skew_us": {str(r): _us(t) for r, t in sorted(row.skew.items())},
            "worst_instance": row.worst_instance,
        }  # fmt: skip


def _array(make: Callable[[], Iterable[Any]], stream: bool) -> Any:
    """``make()``'s items as a list, or (``stream``) written one at a time as made."""
    return PlainLazyArray(make) if stream else list(make())


def _as_analysis(x: Any) -> Analysis:
    return x if isinstance(x, Analysis) else analyse(x)


def to_json(table: Any, stream: bool = False) -> Dict[str, Any]:
    """``{"collectives": {...}}`` for ``--json`` (schema: docs/collectives.md); ``table``:
    a :class:`CollectiveTable` or an :class:`Analysis`. ``stream``: ``breakdown`` is a
    :class:`~tracefuse_stream.report.json_stream.LazyArray` that computes every rank's
    entries one step at a time as it is written, not a list, and the other arrays of
    every rank per step or instance (``instances``, ``by_step``, ``step_skew``) are
    made item by item as they are written (``PlainLazyArray``: the same text)."""
    a = _as_analysis(table)
    table, v, stats = a.table, a.verdict, a.stats
    p = v.stragglers[0].p_chance if v.stragglers else (v.candidates[0].p_chance if v.candidates else None)
    off = v.off_path
    unmatched = [
        {"kind": k, "name": n, "group": g, "reason": why_, "instances": c}
        for (k, n, g, why_), c in sorted(table.unmatched.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return {"collectives": {
        "ranks": [s.to_json() for s in stats],
        "instances": _array(lambda: map(_instance_json, table.instances), stream),
        "straggler": v.straggler,
        "stragglers": [{"rank": s.rank, "held_us": _us(s.held_ns), "steps": s.steps,
                        "last_arrivals": s.last_arrivals, "instances": s.instances,
                        "p_chance": p_round(s.p_chance), "margin": round(s.margin, 3),
                        "noise_margin": round(s.noise_margin, 3), "evidence": s.evidence,
                        "by_size_only": s.by_size_only, "on_critical_path": s.rank not in off,
                        "held_all_steps_us": _us(s.held_all_ns)} for s in v.stragglers],
        "candidates": [{"rank": s.rank, "held_us": _us(s.held_ns), "steps": s.steps,
                        "p_chance": p_round(s.p_chance), "margin": round(s.margin, 3),
                        "held_all_steps_us": _us(s.held_all_ns)} for s in v.candidates],
        "verdict": {
            "text": verdict_sentence(table, v, stats),
            "evidence": v.stragglers[0].evidence if v.stragglers else "none",
            "p_chance": None if p is None else p_round(p),
            "p_chance_text": None if p is None else p_text(p),
            "one_step": v.steps_profiled == 1,
            "steps_profiled": v.steps_profiled,
        },
        **({"step_cap": table.step_cap.to_json()} if table.step_cap is not None else {}),  # only when it applied
        "definitions": DEFINITIONS if table.instances or not judged(table, v) else p2p_steps.DEFINITIONS,
        "by_step": _array(lambda: _by_step_json(v), stream),
        "threshold": {
            "noise_us": _us(v.noise_ns),
            "busy_step_us": None if v.busy_step_ns is None else _us(v.busy_step_ns),
            "typical_step_us": None if v.typical_step_ns is None else _us(v.typical_step_ns),
            "noise_factor": S.NOISE_FACTOR, "step_fraction": S.STEP_FRACTION,
            "min_us": _us(S.MIN_THRESHOLD_NS), "rule": rule_text(v),
        },
        "why": a.why,
        "breakdown": LazyArray(lambda: a.breakdown) if stream else list(a.breakdown),
        "per_collective": per_collective.rows(table),
        "hosts": {str(r): h for r, h in sorted(table.hosts.items())},
        "unmatched": {"total": table.unmatched_total, "by_reason": unmatched},
        "point_to_point": rootcause.p2p_json(table),
        "notes": list(table.notes) + a.why_notes,
        **rootcause.to_json(table, v, stream),
        **step_time_text.json_entries(a.step_time, stream),
    }}  # fmt: skip


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def _one_step(table: CollectiveTable) -> str:
    """``one step profiled``, or ``one step selected`` when ``--steps`` chose it among more."""
    return "one step selected" if getattr(table, "steps_selected", None) is not None else "one step profiled"


def _where(v: Verdict, steps: Sequence[Optional[int]], table: CollectiveTable) -> str:
    if v.steps_profiled == 1 and len(v.by_step) == 1:
        return "the " + _one_step(table)
    if len(steps) == len(v.by_step):
        return f"every step, {len(steps)} of {len(v.by_step)}"
    return "step(s) " + ", ".join(_step(x) for x in steps)


def judged(table: CollectiveTable, v: Verdict) -> bool:
    """Whether anything was judged: matched collectives, or a pipeline's steps of linked
    send/recv pairs alone (read at each step's end: analyze/p2p_steps.py)."""
    return bool(table.instances) or any(pipeline_only(row.graph) for row in v.by_step)


def verdict_sentence(table: CollectiveTable, v: Verdict, stats: Sequence[RankStats]) -> str:
    """The verdict in one sentence, with the strength of the evidence."""
    one = _one_step(table) + ": " if v.steps_profiled == 1 else ""
    if not judged(table, v):
        return "no collective instance matched across ranks"
    if not v.stragglers:
        if v.candidates:
            c = v.candidates[0]
            return (f"{one}no rank stands out (closest: rank {c.rank}, most waited for in a pattern "
                    f"with p_chance {p_text(c.p_chance)}: as likely as that by chance, no evidence)")  # fmt: skip
        worst = max(stats, key=lambda s: (s.held_ns, -s.rank))
        return (f"{one}no rank stands out (most waited for: rank {worst.rank}, "
                f"{_ms(worst.held_ns)} ms in total, below the threshold)")  # fmt: skip
    same: Dict[Tuple[Any, ...], List[int]] = {}  # stragglers of the same steps: one clause
    for st in v.stragglers:
        same.setdefault(tuple(st.steps), []).append(st.rank)
    parts = [
        f"{'rank' if len(rs) == 1 else 'ranks'} {_ranks(sorted(rs))} held the others back in {_where(v, list(steps), table)}"
        for steps, rs in same.items()
    ]
    s0 = v.stragglers[0]
    return (f"{one}{'; '.join(parts)} ({evidence_text(s0)}: the others waited "
            f"{_ms(s0.held_ns)} ms for rank {s0.rank}, p_chance {p_text(s0.p_chance)}, "
            f"{s0.noise_margin:.1f} x the noise bound)")  # fmt: skip


def evidence_text(s: Any) -> str:
    """``strong evidence``, or, where p_chance says nothing, ``strong evidence by size
    only`` (analyze/stragglers.py ``Straggler.by_size_only``)."""
    return f"{s.evidence} evidence" + (" by size only" if s.by_size_only else "")


def verdict_lines(table: CollectiveTable, v: Verdict, stats: Sequence[RankStats]) -> List[str]:
    """The straggler(s), or why none is named."""
    if not judged(table, v):
        return ["straggler: none (no collective instance matched across ranks)"]
    by_rank = {s.rank: s for s in stats}
    if not v.stragglers:
        return [
            "straggler: none -- " + verdict_sentence(table, v, stats).replace(_one_step(table) + ": ", "")
        ]
    lines = []
    unit = "instances" if table.instances else "send/recv pairs"  # a pipeline without collectives
    off = v.off_path
    for i, s in enumerate(v.stragglers):
        # held covers the steps named; its arrivals and own wait are over every step: said so
        every = "" if len(s.steps) == len(v.by_step) else "over every step: "
        lines.append(
            f"{'straggler' if i == 0 else 'also     '}: rank {s.rank} -- the others waited {_ms(s.held_ns)} ms for it "
            f"(in {_where(v, s.steps, table)}); {every}last to arrive in {s.last_arrivals} of {s.instances} {unit}, "
            f"waited {_ms(by_rank[s.rank].wait_ns)} ms itself; {evidence_text(s)} (p_chance "
            f"{p_text(s.p_chance)}, {s.noise_margin:.1f} x the noise bound)"
            + (
                "; off the critical path: another straggler sets the step (what if, below)"
                if s.rank in off
                else ""
            )
        )
    if v.steps_profiled == 1:
        lines.insert(0, f"{_one_step(table)}: what follows is that step's, not a pattern over steps")
    return lines


def _step(step: Optional[int]) -> str:
    return "outside steps" if step is None else f"#{step}"


def step_table(v: Verdict, ranks: Sequence[int], where: str = "collectives") -> List[str]:
    """Rank x step wait (ms) in ``where``; ``*`` marks the step's last-arriving rank,
    ``!`` a straggler of that step."""
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
    lines = [f"wait in {where} per step (ms; * last to arrive in the step, ! straggler of the step):"]
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


def format_text(table: Any, inputs: Sequence[str] = (), cycle: Optional[int] = None) -> str:
    """The human report (see the module docstring); ``table``: a table or an analysis."""
    a = _as_analysis(table)
    table, v, stats = a.table, a.verdict, a.stats
    groups = len({i.group for i in table.instances})
    lines = [
        f"collectives: {len(table.instances)} instance(s) of {groups} process group(s) matched across "
        f"{('ranks ' + _ranks(table.ranks)) if table.ranks else 'no readable rank'}, "
        f"{table.unmatched_total} could not be matched",
        *([table.step_cap.text()] if table.step_cap is not None else []),  # never a silent cut
        *verdict_lines(table, v, stats),
    ]
    if table.instances:
        lines += why_text.why_lines(a.why)
        lines += rootcause.lines(table, v)
        lines += step_table(v, table.ranks)
        lines.append("figures: " + DEFINITIONS)
        lines.append("threshold: " + rule_text(v))
        lines += per_collective_text.table_lines(per_collective.rows(table))
        lines.append(f"instances, largest arrival spread first (up to {INSTANCES_SHOWN}):")
        by_spread = sorted(table.instances, key=lambda i: (-i.spread_ns, i.id))
        for inst in by_spread[:INSTANCES_SHOWN]:
            lines.append(
                f"  #{inst.id} {printable(inst.name)} (group {printable(inst.group or '?')}, step {inst.step if inst.step is not None else '-'}, "
                f"by {inst.match}) on ranks {_ranks(inst.ranks)}: arrivals spread {_ms(inst.spread_ns)} ms, "
                f"last rank {inst.last_rank}"
            )
    elif table.p2p_pairs:  # a pipeline without collectives: its graph is its send/recv pairs alone
        lines += why_text.why_lines(a.why)
        lines += rootcause.lines(table, v)
        if judged(table, v):
            lines += step_table(v, table.ranks, "send/recv pairs")
            lines.append("figures: " + p2p_steps.DEFINITIONS)
            lines.append("threshold: " + rule_text(v))
    lines += step_time_text.lines(a.step_time)
    for (kind, name, group, why_), n in sorted(table.unmatched.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(
            f"unmatched: {n} x {printable(kind)} {printable(name)} (group {printable(group or '?')}): {printable(why_)}"
        )
    lines += rootcause.p2p_line(table)
    lines += [f"note: {printable(n)}" for n in list(table.notes) + a.why_notes]
    cmd = merge_command(v, inputs, cycle) if inputs else None
    if cmd is not None:
        what = "the straggler" if v.straggler is not None else "its last-arriving rank"
        lines.append(f"to see the worst step with {what} and a reference rank:\n  {printable(cmd)}")
    return "\n".join(lines)


def _ranks(ranks: Sequence[int]) -> str:
    return compress_ranges(list(ranks))


def collectives_json(
    tables: Dict[Optional[int], Any], stream: bool = False
) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """(``collectives``, ``collectives_by_cycle`` or None) for per-cycle tables:
    ``collectives`` is the latest cycle's (``stream``: :func:`to_json`'s)."""
    if len(tables) <= 1:
        table = next(iter(tables.values())) if tables else CollectiveTable([], [], Counter(), [])
        return to_json(table, stream)["collectives"], None
    per = {str(c): to_json(t, stream)["collectives"] for c, t in tables.items()}
    return per[str(max(c for c in tables if c is not None))], per


def collectives_text(tables: Dict[Optional[int], Any], inputs: Sequence[str]) -> List[str]:
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
    warnings: Sequence[str] = (),
    checks: Sequence[Any] = (),
    max_clock_offset_s: float = MAX_CLOCK_OFFSET_S,
    step_window: Optional[Tuple[int, int]] = None,
) -> int:
    """``info --collectives [--json]``: print the report (per profiling cycle when the
    inputs hold several: instances never span cycles); exit 1 when a file is broken.

    ``scans``: the plans' collective scans from info's single pass (analyze/onepass.py),
    else each file is read here. ``into``: the ``info --json`` object to fill
    (``collectives``, ``collectives_by_cycle``) and print; without it the JSON is
    ``{"collectives": ..., "cycles": ..., "broken": ...}``. ``extra``: text lines of the
    other sections asked for (``--steps``, ``--align``), printed before the report (which
    ends with its merge command). ``warnings``: the input warnings every command prints
    (plan/planner.py ``PlanList.warnings``); ``checks``: the run checks of the cycles
    (plan/runcheck.py): a cycle the analysis could not assess says so first
    (analyze/assessment.py), in the text and as ``not_assessed`` in the JSON.
    ``max_clock_offset_s``: host clocks further apart are refused (analyze/analysis.py
    require_near_clocks). ``step_window``: ``--step-window A:B``, the steps analysed
    (the step cap of ``plans.step_caps`` bounds it: analyze/step_cap.py).
    """
    tables = collect_analyses(  # the text shows no breakdown; each cycle cut to its step cap
        plans, scans, jobs, every_rank=as_json, max_clock_offset_s=max_clock_offset_s,
        step_caps=getattr(plans, "step_caps", None), step_window=step_window,
    )  # fmt: skip
    broken = list(getattr(plans, "broken", []))
    several = len(tables) > 1
    unassessed = {
        c: not_assessed(a.table, [rc for rc in checks if rc.cycle == (c if several else None)])
        for c, a in tables.items()
    } or {None: not_assessed(CollectiveTable([], [], Counter(), []))}  # no file read: said first too
    if not as_json:
        first = [(f"cycle {c}: " if several else "") + u for c, u in unassessed.items() if u]
        text = first + [f"warning: {w}" for w in warnings] + list(extra) + collectives_text(tables, inputs)
        print(
            terminal(
                "\n".join(text + [f"BROKEN {printable(path)}: {printable(err)}" for path, err in broken])
            )
        )
        return EXIT_INPUT if broken else EXIT_OK
    latest, by_cycle = collectives_json(tables, stream=True)
    per = {c: by_cycle[str(c)] for c in tables} if by_cycle is not None else {c: latest for c in tables}
    latest["warnings"] = list(warnings)
    latest["not_assessed"] = not_assessed(CollectiveTable([], [], Counter(), []))  # replaced below if a table
    for c, obj in per.items():  # ``latest`` is one of them
        obj["warnings"], obj["not_assessed"] = list(warnings), unassessed[c]
    if into is not None:
        out = into
        out["collectives"], out["collectives_by_cycle"] = latest, by_cycle
    else:
        out = {"collectives": latest}
        if by_cycle is not None:
            out["cycles"] = by_cycle
        if broken:
            out["broken"] = [{"path": str(path), "broken": str(err)} for path, err in broken]
    write_json(out, sys.stdout)  # as it is encoded: never the whole text at once
    return EXIT_INPUT if broken else EXIT_OK


__all__ = [
    "Analysis",
    "RankStats",
    "analyse",
    "collect_analyses",
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
