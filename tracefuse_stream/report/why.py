"""Why a rank is late: where its extra time went, against the median rank of its group.

For a rank R and a step, the *stretch* is R's time from its step start to its arrival at
the collective where it is latest (for the step's breakdown of every rank: the collective
where the others waited longest for the step's most waited-for rank). The same stretch
is taken on every member of that collective's group. R's **lateness** is its stretch
minus the stretch of the **reference rank**: the other member whose stretch is the
median of the others' (so every figure is one rank's, found on its timeline). The
stretch of each is partitioned (report/timeline.py) into operators by self time, time
outside any operator by innermost annotation and, on GPU traces, kernels and idle time
of the collective's GPU (all its streams); the **contributors** are the per-part differences, R minus
the reference, largest first, the primary view's first (the GPU for a GPU collective:
its kernels, then the CPU side that launched them). The CPU parts add up to the
lateness exactly, and so do the GPU parts (each view partitions the same stretch); ``explained_us`` is what the
listed contributors of R's primary view (the GPU for a GPU collective, the main
thread for a CPU one) add up to, ``share`` its fraction of the lateness.

Cost: a second pass over each file (in ``jobs`` workers) with the compiled kernel's
scan handing over only ``ph`` X events, holding only those inside the asked stretches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import CollectiveTable
from tracefuse_stream.errors import TraceFuseError
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.read.events import StepFields, iter_event_batches
from tracefuse_stream.read.scan import ScanSelection, Tally
from tracefuse_stream.report.stragglers import Verdict
from tracefuse_stream.report.timeline import (
    GPU_CATS,
    OP_CATS,
    OUTSIDE_ALL,
    Breakdown,
    Stretch,
    TimelineCollector,
)

#: the events a breakdown needs (python_function, cuda_runtime and the like are counted in C)
WHY_SELECTION = ScanSelection(ph="X", cat=tuple(sorted(OP_CATS | GPU_CATS)), extremes=True, validate=False)
TOP = 8  # contributors listed per (rank, step) in ``why``
TOP_BREAKDOWN = 5  # ... and in ``breakdown`` (every rank and step)


class WhyFields(StepFields, total=False):
    """What a breakdown reads of an event (no args: decoded several times faster)."""

    cat: Any
    pid: Any
    tid: Any


@dataclass(frozen=True)
class Request:
    """What one rank's pass must break down."""

    path: str
    compression: Optional[str]
    layout: Optional[str]
    stretches: Tuple[Stretch, ...]


def scan_breakdowns(req: Request) -> Tuple[Dict[Hashable, Breakdown], Optional[str]]:
    """One pass over the file: its breakdowns, and why it could not be read to the end."""
    collector = TimelineCollector(req.stretches)
    error = None
    try:
        for batch in iter_event_batches(
            req.path, compression=req.compression, layout=req.layout, what="breaking down steps",
            fields=WhyFields, select=WHY_SELECTION, tally=Tally(),
        ):  # fmt: skip
            for ev in batch:
                collector.feed(ev)
    except TraceFuseError as e:
        error = str(e)
    return collector.result(), error


def _rel(table: CollectiveTable, plan: RankPlan, abs_ns: int) -> int:
    """An aligned absolute time of the table as the file's own relative ns."""
    return abs_ns - int(plan.base_time_ns or 0) - int(plan.align_offset_ns or 0)


def wanted(verdict: Verdict) -> Dict[Optional[int], List[int]]:
    """step -> the instance ids to break down there: the step's worst instance and each
    named straggler's latest one."""
    named = {s.rank for s in verdict.stragglers}
    out: Dict[Optional[int], List[int]] = {}
    for row in verdict.by_step:
        if row.step is None:
            continue
        ids = [] if row.worst_instance is None else [row.worst_instance]
        for r in sorted(named & set(row.stragglers)):
            i = row.late_at.get(r, -1)
            if i >= 0 and i not in ids:
                ids.append(i)
        out[row.step] = ids
    return out


def requests(table: CollectiveTable, verdict: Verdict, plans: Sequence[RankPlan]) -> List[Request]:
    """Per plan (same order): the stretches of its rank to break down."""
    by_id = {i.id: i for i in table.instances}
    todo = wanted(verdict)
    out = []
    for p in plans:
        stretches = []
        for step, ids in todo.items():
            span = table.steps.get(p.rank, {}).get(step) if step is not None else None
            if span is None or step is None:
                continue
            for i in ids:
                e = by_id[i].entries.get(p.rank)
                if e is None:
                    continue
                tid = e.event.tid
                ok = isinstance(tid, (int, str)) and not isinstance(tid, bool)  # a stream id, hashable
                gpu = tid if e.event.kind == "gpu" and ok else None
                lo, hi = _rel(table, p, span[0]), _rel(table, p, e.start_ns)
                stretches.append(Stretch((step, i), step, lo, max(lo, hi), gpu))
        out.append(Request(p.path, p.compression, p.layout, tuple(stretches)))
    return out


def _median_rank(values: Dict[int, int]) -> Optional[int]:
    if not values:
        return None
    order = sorted(values, key=lambda r: (values[r], r))
    return order[(len(order) - 1) // 2]


def _contributors(
    mine: Breakdown, ref: Breakdown, others: Sequence[Breakdown], top: int
) -> List[Dict[str, Any]]:
    keys = set(mine.parts) | set(ref.parts)
    rows = []
    for key in keys:
        a, b = mine.parts.get(key), ref.parts.get(key)
        extra = (a.ns if a else 0) - (b.ns if b else 0)
        vals = sorted(o.parts[key].ns if key in o.parts else 0 for o in others)
        kind, name = key
        where = (mine.stream if kind in ("kernel", "gpu_idle") else mine.main_thread) or "?"
        row: Dict[str, Any] = {
            "kind": kind, "name": name, "where": where, "extra_us": _us(extra),
            "count": a.count if a else 0, "others_count": b.count if b else 0,
            "rank_us": _us(a.ns if a else 0), "others_us": _us(b.ns if b else 0),
            "others_median_us": _us(vals[(len(vals) - 1) // 2]) if vals else 0.0,
            "piece_ns": list(a.piece) if a else None, "span_ns": list(a.span) if a else None,
        }  # fmt: skip
        row["note"] = _note(row)
        rows.append((extra, row))
    rows.sort(key=lambda x: (-x[0], x[1]["kind"], x[1]["name"]))
    return [r for extra, r in rows[:top] if extra > 0]


def _note(c: Dict[str, Any]) -> str:
    """How the part differs: more calls, longer calls, or only on this rank."""
    n, m = c["count"], c["others_count"]
    if c["kind"] in ("outside_ops", "gpu_idle"):
        return ""
    if m == 0 and n > 0:
        return "only on this rank"
    if n > m:
        return f"{n - m} more call(s)"
    if n == m and c["others_us"] > 0:
        return f"same count, {c['rank_us'] / c['others_us']:.1f}x as long"
    return ""


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def compare(
    table: CollectiveTable,
    verdict: Verdict,
    plans: Sequence[RankPlan],
    results: Sequence[Tuple[Dict[Hashable, Breakdown], Optional[str]]],
) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(``why``: one entry per named straggler and step it stands out in, ``breakdown``:
    one entry per rank and step, at the step's worst instance)."""
    by_id = {i.id: i for i in table.instances}
    rank_of = {i: p.rank for i, p in enumerate(plans)}
    bds: Dict[Tuple[int, Hashable], Breakdown] = {}
    for i, (res, _err) in enumerate(results):
        for key, bd in res.items():
            bds[(rank_of[i], key)] = bd

    def entry(r: int, step: int, inst_id: int, top: int) -> Optional[Dict[str, Any]]:
        inst = by_id[inst_id]
        mine = bds.get((r, (step, inst_id)))
        if mine is None:
            return None
        others = {
            q: bds[(q, (step, inst_id))] for q in inst.entries if q != r and (q, (step, inst_id)) in bds
        }
        ref_rank = _median_rank({q: b.stretch_ns for q, b in others.items()})
        if ref_rank is None:
            return None
        ref = others[ref_rank]
        gpu = inst.match != "gloo order"
        cpu_c = _contributors(
            _view(mine, False), _view(ref, False), [_view(b, False) for b in others.values()], top
        )
        gpu_c = (
            _contributors(_view(mine, True), _view(ref, True), [_view(b, True) for b in others.values()], top)
            if gpu
            else []
        )
        primary = gpu_c if gpu and any(k[0] in ("kernel", "gpu_idle") for k in mine.parts) else cpu_c
        lateness = mine.stretch_ns - ref.stretch_ns
        explained = sum(c["extra_us"] for c in primary)
        other = cpu_c if primary is gpu_c else gpu_c
        contributors = primary + other  # the primary view first (the GPU, for a GPU collective)
        return {
            "rank": r, "step": step, "collective": f"{inst.name} #{inst.id}", "instance": inst.id,
            "lateness_us": _us(lateness), "explained_us": round(explained, 3),
            "share": round(explained * 1000.0 / lateness, 3) if lateness > 0 else None,
            "reference_rank": ref_rank, "stretch_us": _us(mine.stretch_ns), "reference_stretch_us": _us(ref.stretch_ns),
            "view": "gpu" if primary is gpu_c and gpu_c else "cpu",
            "contributors": contributors,
        }  # fmt: skip

    why = []
    for s in verdict.stragglers:
        for row in verdict.by_step:
            if row.step is None or row.step not in s.steps:
                continue
            inst_id = row.late_at.get(s.rank, -1)
            if inst_id >= 0:
                e = entry(s.rank, row.step, inst_id, TOP)
                if e is not None:
                    why.append(e)
    breakdown = []
    for row in verdict.by_step:
        if row.step is None or row.worst_instance is None:
            continue
        for r in sorted(by_id[row.worst_instance].entries):
            e = entry(r, row.step, row.worst_instance, TOP_BREAKDOWN)
            if e is not None:
                for c in e["contributors"]:
                    c.pop("piece_ns", None)
                    c.pop("span_ns", None)
                breakdown.append(e)
    return why, breakdown


def _view(bd: Breakdown, gpu: bool) -> Breakdown:
    kinds = ("kernel", "gpu_idle") if gpu else ("op", "outside_ops")
    return Breakdown(
        bd.stretch_ns, {k: p for k, p in bd.parts.items() if k[0] in kinds}, bd.main_thread, bd.stream
    )


def headline(c: Dict[str, Any]) -> str:
    """``+120.3 ms outside any operator in train_step`` and the like."""
    ms = c["extra_us"] / 1000.0
    if c["kind"] == "outside_ops":
        if c["name"] == OUTSIDE_ALL:
            return f"+{ms:.1f} ms outside any operator and annotation"
        return f"+{ms:.1f} ms outside any operator in {c['name']}"
    if c["kind"] == "gpu_idle":
        return f"+{ms:.1f} ms GPU idle on {c['where']} (waiting for launches)"
    what = "in kernel" if c["kind"] == "kernel" else "in"
    note = f" ({c['note']})" if c.get("note") else ""
    return f"+{ms:.1f} ms {what} {c['name']}{note}"


__all__ = ["Request", "TOP", "WHY_SELECTION", "compare", "headline", "requests", "scan_breakdowns", "wanted"]
