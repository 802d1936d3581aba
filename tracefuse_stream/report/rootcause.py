"""The root cause across ranks, presented: delayed ranks, step-start skew, the critical
path and what fixing a straggler saves, as JSON (docs/collectives.md) and as the human
report's lines.

Why a module of its own: analyze/graph.py and analyze/stragglers.py compute these;
report/collectives.py stays the straggler report it was, calling in here for the parts
the graph adds.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional

from tracefuse_stream.align.collectives import CollectiveTable, Instance
from tracefuse_stream.align.p2p import NO_PEER, SHAPES_HINT
from tracefuse_stream.analyze.stragglers import Verdict
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.report.json_stream import PlainLazyArray
from tracefuse_stream.textout import printable

PATH_HOPS = 8  # the text's critical path: at most this many ranks' stretches


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f}"


def group_text(inst: Instance) -> str:
    """``group 3 (ranks 2-3)``: the process group's name and members."""
    return f"group {printable(inst.group or '?')} (ranks {compress_ranges(inst.ranks)})"


def _skews(v: Verdict) -> Iterator[Dict[str, Any]]:
    for row in v.by_step:
        g = row.graph
        if g is not None:
            for r in sorted(g.skew):
                yield {"rank": r, "step": row.step, "start_skew_us": _us(g.skew[r]),
                       "counted_us": _us(g.late_skew.get(r, 0))}  # fmt: skip


def to_json(table: CollectiveTable, v: Verdict, stream: bool = False) -> Dict[str, Any]:
    """``delayed``, ``step_skew``, ``critical_path`` and ``what_if`` (docs/collectives.md);
    ``stream``: ``step_skew`` (every rank and step) made as it is written
    (report/json_stream.py ``PlainLazyArray``: the same text), not a list."""
    by_id = {i.id: i for i in [*table.instances, *table.p2p_pairs]}
    lengths = _step_lengths(v)
    delayed = []
    for d in v.delayed:
        late, waited = by_id[d.late_at], by_id[d.waited_at]
        delayed.append({
            "rank": d.rank, "step": d.step, "by_rank": d.by_rank, "origin": d.origin,
            "collective": f"{waited.name} #{waited.id}", "group": waited.group, "group_ranks": waited.ranks,
            "wait_us": _us(d.wait_ns), "waits": d.waits,
            "late_at": f"{late.name} #{late.id}", "late_group": late.group, "late_group_ranks": late.ranks,
        })  # fmt: skip
    paths = []
    for row in v.by_step:
        g = row.graph
        if g is None:
            continue
        t0 = g.start_ns
        paths.append({
            "step": row.step, "step_us": _us(g.end_ns - t0), "start_ns": t0,
            "segments": [{"rank": s.rank, "kind": s.kind, "name": s.name, "start_us": _us(s.start_ns - t0),
                          "dur_us": _us(s.dur_ns), "instance": s.instance if s.instance >= 0 else None}
                         for s in g.path],
        })  # fmt: skip
    unknown = v.not_estimated
    what_if = [
        {
            "rank": r,
            "step": step,
            "saves_us": _us(ns),
            "step_us": lengths.get(step),
            "estimated": r not in unknown,
        }
        for (r, step), ns in sorted(v.saves.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))
    ]
    together: List[Dict[str, Any]] = [
        {"ranks": sorted(row.stragglers), "step": row.step, "saves_us": _us(v.saves_all[row.step]),
         "step_us": lengths.get(row.step)}
        for row in v.by_step
        if row.step in v.saves_all
    ]  # fmt: skip
    skew = PlainLazyArray(lambda: _skews(v)) if stream else list(_skews(v))
    return {"delayed": delayed, "step_skew": skew, "critical_path": paths, "what_if": what_if,
            "what_if_together": together}  # fmt: skip


def p2p_json(table: CollectiveTable) -> Dict[str, Any]:
    """``point_to_point``: the gloo send/recv counted, the pairs linked (align/p2p.py) and
    why the others are not."""
    pairs = [
        {"id": p.id, "step": p.step, "src": p.sender, "dst": next(q for q in p.ranks if q != p.sender),
         "group": p.group, "last": p.last_rank, "wait_us": _us(p.spread_ns)}
        for p in table.p2p_pairs
    ]  # fmt: skip
    return {
        "total": sum(table.point_to_point.values()),
        "by_name": dict(sorted(table.point_to_point.items())),
        "linked": len(pairs),
        "pairs": pairs,
        "not_linked": {
            "total": sum(table.p2p_unlinked.values()),
            "by_reason": dict(sorted(table.p2p_unlinked.items())),
        },
    }


def p2p_line(table: CollectiveTable) -> List[str]:
    """The text's point-to-point line: what was counted, linked, and why not."""
    if not table.point_to_point:
        return []
    ops = ", ".join(f"{n} x {printable(name)}" for name, n in sorted(table.point_to_point.items()))
    line = f"point-to-point: {ops} (not collectives: not matched, no wait counted)"
    if table.p2p_pairs:
        line = (f"point-to-point: {ops} (not collectives: no wait counted above): {len(table.p2p_pairs)} send/recv "
                "pair(s) linked by peer and tag, followed by the delays, the critical path and the what-if")  # fmt: skip
    why = "; ".join(f"{n} op(s), {printable(r)}" for r, n in sorted(table.p2p_unlinked.items()))
    return [line + (f"; not linked: {why}" if why else "")]


def _step_lengths(v: Verdict) -> Dict[Optional[int], float]:
    """step -> its length on the graph (its earliest start to its last end), µs."""
    return {
        row.step: _us(row.graph.end_ns - row.graph.start_ns) for row in v.by_step if row.graph is not None
    }


def lines(table: CollectiveTable, v: Verdict) -> List[str]:
    """The human report's lines: what fixing each straggler saves, who is only delayed
    (and by whom), who entered a step late, and the worst step's critical path."""
    by_id = {i.id: i for i in [*table.instances, *table.p2p_pairs]}
    out = _what_if_lines(table, v)
    per_rank: Dict[int, List[Any]] = {}
    for d in v.delayed:
        per_rank.setdefault(d.rank, []).append(d)
    for r, ds in sorted(per_rank.items()):
        d = max(ds, key=lambda x: x.wait_ns)
        late, waited = by_id[d.late_at], by_id[d.waited_at]
        origin = f"; the cascade starts at rank {d.origin}" if d.origin != d.by_rank else ""
        steps = ", ".join(f"#{x.step}" for x in sorted(ds, key=lambda x: x.step or 0)[:6])
        at = f"at {printable(waited.name)} #{waited.id} ({group_text(waited)})"
        if d.waits > 1:  # summed over a pipeline's send/recv (analyze/rootcause.py p2p_delays)
            at = f"in {d.waits} waits, the longest {at}"
        out.append(
            f"delayed: rank {r} is late at {printable(late.name)} #{late.id} ({group_text(late)}) because it waited "
            f"{_ms(d.wait_ns)} ms for rank {d.by_rank} {at} in step {d.step}{origin}; not a straggler (step(s) {steps})"
        )
    first = min((row.step for row in v.by_step if row.step is not None), default=None)
    for row in v.by_step:
        g = row.graph
        if g is None:
            continue
        for r, ns in sorted(g.late_skew.items()):
            where = " (before the profiled window)" if row.step == first else ""
            out.append(
                f"entered late: rank {r} entered step {row.step} {_ms(ns)} ms after the others' median{where}"
            )
    worst = v.worst_step()
    if worst is None:  # no collective (a pipeline's pairs alone): the longest step's path
        paths = [(g.end_ns - g.start_ns, -(row.step or 0), k) for k, row in enumerate(v.by_step)
                 if (g := row.graph) is not None and g.path]  # fmt: skip
        worst = v.by_step[max(paths)[2]] if paths else None
    if worst is not None and worst.graph is not None and worst.graph.path:
        out.append(path_line(worst.step, worst.graph))
    return out


def _what_if_lines(table: CollectiveTable, v: Verdict) -> List[str]:
    """What fixing each straggler saves, or why it is not estimated."""
    lengths = _step_lengths(v)
    out: List[str] = []
    through = ("every collective" + (" and send/recv pair" if table.p2p_pairs else "")
               if table.instances else "every send/recv pair")  # fmt: skip
    unknown, off = v.not_estimated, v.saves_nothing_alone
    for s in v.stragglers:
        saves = [(step, ns) for (r, step), ns in v.saves.items() if r == s.rank]
        if not saves:
            continue
        step, ns = max(saves, key=lambda x: (x[1], -(x[0] or 0)))
        if s.rank in unknown:
            how = (
                "recorded without their peer"
                if table.p2p_unlinked.get(NO_PEER)
                else "not linked to their peer"
            )
            hint = f" ({SHAPES_HINT})" if table.p2p_unlinked.get(NO_PEER) else ""
            out.append(f"what if: not estimated for rank {s.rank}: the others waited for it in point-to-point "
                       f"ops (send/recv) {how}, so the re-timing cannot follow them{hint}")  # fmt: skip
            continue
        if s.rank in off:  # another straggler still holds up the step
            both = max(v.saves_all.items(), key=lambda kv: kv[1], default=(None, 0))
            others = [o.rank for o in v.stragglers if o.rank != s.rank]
            also = (
                f"; fixing ranks {compress_ranges(sorted([s.rank] + others))} together: ~{_ms(both[1])} ms in step {both[0]}"
                if both[0] is not None
                else ""
            )
            out.append(f"what if: fixing rank {s.rank} alone would save ~{_ms(ns)} ms: rank(s) "
                       f"{compress_ranges(others) or '-'} would still hold up the step{also}")  # fmt: skip
            continue
        total = lengths.get(step)
        of = f" of the {total / 1000:.1f} ms step" if total else ""
        out.append(
            f"what if: fixing rank {s.rank} would save ~{_ms(ns)} ms{of} in step {step}"
            + (f" ({len(saves)} step(s): " + ", ".join(f"#{st} {_ms(n)}" for st, n in sorted(saves, key=lambda x: x[0] or 0)[:6]) + ")" if len(saves) > 1 else "")
            + f" (its extra own time removed, the step re-timed through {through})"
        )  # fmt: skip
    return out


def path_line(step: Optional[int], g: Any) -> str:
    """``critical path of step 3 (240.1 ms): rank 3 own 101.9 ms -> gloo:all_reduce #4 ->
    rank 2 own 3.0 ms, communication 5.1 ms -> ...``"""
    hops: List[List[Any]] = []
    for s in g.path:
        if not hops or hops[-1][0] != s.rank:
            hops.append([s.rank, 0, 0, s.name, 0])
        hops[-1][{"own": 1, "entered_late": 4}.get(s.kind, 2)] += s.dur_ns
        hops[-1][3] = s.name
    parts = [f"rank {r} " + (f"started {_ms(late)} ms after the first rank, " if _ms(late) != _ms(0) else "") + f"own {_ms(own)} ms"
             + (f", communication {_ms(comm)} ms" if comm else "") + f" -> {printable(name)}"
             for r, own, comm, name, late in hops[:PATH_HOPS]]  # fmt: skip
    more = f" (+{len(hops) - PATH_HOPS} more)" if len(hops) > PATH_HOPS else ""
    return f"critical path of step {step} ({_ms(g.end_ns - g.start_ns)} ms): " + " | ".join(parts) + more


__all__ = ["group_text", "lines", "p2p_json", "p2p_line", "path_line", "to_json"]
