"""``merge --link-collectives``: the "Collectives" summary process at the top of the trace.

Why: the flows show one instance at a time; the question "who holds the job back, and
when" needs one glance. So the merged trace gets one extra process, sorted first (also
for a pure pipeline, whose steps hold no collective: it stands on the linked send/recv
pairs there, :func:`summary_marks`; the pairs get no slice of their own, their arrows
show them):

* ``process_name`` "Collectives", ``process_sort_index`` -1 (every rank's is >= 0);
* one thread (track) per process group, named ``group <name> (ranks ...)``: one slice per
  linked instance, from its first to its last arrival, named
  ``all_reduce #12 · last: rank 5 (+201.0 ms)`` -- the collective (``gloo:`` and the
  like dropped), the instance id of ``info --collectives``, the last rank to arrive and
  how long the other ranks (median) waited for it. Instances of one group whose spans
  overlap go to a second track of the group (``group <name> (ranks ...) #2``), so that
  no slices overlap without nesting;
* one counter track per rank, ``collective wait (ms) rank R``: the time the rank spent
  waiting in collectives (a pure pipeline: in its send/recv pairs) in each step (the
  union of its waits, concurrent ones once, as ``info --collectives`` gives it), set at
  the step's start on the lowest rank, back to 0 at the end of the last step;
* one "why rank R" track per straggler (analyze/why.py): one slice per step it stands out
  in, on the stretch that holds its largest contributor (time outside operators: the gap
  itself), named with the finding (``rank 5 step 3: +200.3 ms outside any operator and
  annotation``), args with the top contributors.

The events carry ``args.collectives_summary: true`` (the counters, whose args are
their values, are known by pid and name) and no ``rank``: they belong to no
rank, and the verifier (verify/events.py) counts them apart from the ranks' events, so
every rank's slices and flows stay exactly as without the summary (``verify --against``
still passes). Pid :data:`SUMMARY_PID` is below every rank's pid space
(``(rank + 1) * 10000 + ...``). Only JSON outputs get it (a Perfetto archive has one
member per rank; the note says so).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import Instance
from tracefuse_stream.align.links import _us as exact_us
from tracefuse_stream.analyze.analysis import Analysis, analyse
from tracefuse_stream.analyze.stragglers import held_ns
from tracefuse_stream.exactjson import dumps_exact
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.report.why_text import headline
from tracefuse_stream.write.codecs import PieceWriter
from tracefuse_stream.write.sinks import JsonSink

SUMMARY_PID = 1
SUMMARY_ARG = "collectives_summary"
SUMMARY_CAT = "collective_summary"
COUNTER_NAME = "collective wait (ms)"
_PREFIXES = ("gloo:", "c10d::", "nccl:")


def is_summary_event(ev: Dict[str, Any]) -> bool:
    """True for an event of the summary process (the verifier's test)."""
    if ev.get("pid") != SUMMARY_PID:
        return False
    if ev.get("ph") == "C":  # counter args are the values, so no marker there
        return ev.get("name") == COUNTER_NAME
    args = ev.get("args")
    return type(args) is dict and args.get(SUMMARY_ARG) is True


def slice_name(inst: Instance) -> str:
    """``all_reduce #12 · last: rank 5 (+201.0 ms)``."""
    name = inst.name
    for p in _PREFIXES:
        if name.startswith(p):
            name = name[len(p) :]
    late = held_ns(inst)[inst.last_rank]
    return f"{name} #{inst.id} \u00b7 last: rank {inst.last_rank} (+{late / 1e6:.1f} ms)"


def _us(ns: int) -> Any:
    return exact_us(ns)


def _meta(name: str, tid: int, args: Dict[str, Any], ts: Any) -> Dict[str, Any]:
    return {"ph": "M", "name": name, "pid": SUMMARY_PID, "tid": tid, "ts": ts,
            "args": {**args, SUMMARY_ARG: True}}  # fmt: skip


def _ranks_text(ranks: Sequence[int]) -> str:
    return compress_ranges(sorted(ranks))


def encode(events: Sequence[Dict[str, Any]]) -> bytes:
    """The events as the merged file's ``,\n``-separated JSON."""
    return b",\n".join(dumps_exact(e) for e in events)


def summary_marks(plan: Any, gi: int) -> List[Instance]:
    """What output file ``gi``'s summary stands on: the collective instances ``plan``
    linked in it, or, with none (a pure pipeline), its linked send/recv pairs."""
    return plan.linked.get(gi) or plan.linked_pairs.get(gi, [])


def summary_events(
    instances: Sequence[Instance],
    steps: Dict[int, Dict[int, Tuple[int, int]]],
    base_ns: int,
    waits: Optional[Dict[Optional[int], Dict[int, int]]] = None,
) -> List[Dict[str, Any]]:
    """The summary process's events for ``instances`` (:func:`summary_marks`; aligned
    absolute ns; the output's ts are relative to ``base_ns``); empty when there are
    none. A send/recv pair among them gets no slice (its arrow shows it), only its
    step's wait counter."""
    if not instances:
        return []
    out: List[Dict[str, Any]] = []
    t0 = _us(min(i.first_arrival_ns for i in instances) - base_ns)
    out.append(_meta("process_name", 0, {"name": "Collectives"}, t0))
    out.append(_meta("process_sort_index", 0, {"sort_index": -1}, t0))
    order: Dict[str, List[Instance]] = {}
    for inst in sorted(instances, key=lambda i: (i.first_arrival_ns, i.id)):
        if inst.sender is None:
            order.setdefault(inst.group, []).append(inst)
    tid = 0
    for group, insts in order.items():
        ends: List[Tuple[int, int]] = []  # (tid, end_ns) of the group's tracks
        label = f"group {group or '?'} (ranks {_ranks_text(insts[0].ranks)})"
        for inst in insts:
            free = next((k for k, (_, end) in enumerate(ends) if end <= inst.first_arrival_ns), None)
            if free is None:
                tid += 1
                name = label if not ends else f"{label} #{len(ends) + 1}"
                out.append(_meta("thread_name", tid, {"name": name}, t0))
                out.append(_meta("thread_sort_index", tid, {"sort_index": tid}, t0))
                ends.append((tid, 0))
                free = len(ends) - 1
            ends[free] = (ends[free][0], inst.last_arrival_ns)
            out.append(_slice(inst, ends[free][0], base_ns))
    out += _counters(instances, steps, base_ns, waits)
    return out


def _slice(inst: Instance, tid: int, base_ns: int) -> Dict[str, Any]:
    args = {
        SUMMARY_ARG: True,
        "instance": inst.id,
        "group": inst.group,
        "step": inst.step,
        "last_rank": inst.last_rank,
        "spread_us": round(inst.spread_ns / 1000, 3),
        "ranks": _ranks_text(inst.ranks),
    }
    return {"ph": "X", "cat": SUMMARY_CAT, "name": slice_name(inst), "pid": SUMMARY_PID, "tid": tid,
            "ts": _us(inst.first_arrival_ns - base_ns), "dur": _us(inst.spread_ns), "args": args}  # fmt: skip


def why_events(
    why: Sequence[Dict[str, Any]],
    plans: Sequence[Any],
    base_ns: int,
    tid0: int,
    saves: Optional[Dict[Tuple[int, Optional[int]], int]] = None,
) -> List[Dict[str, Any]]:
    """One "why rank R" track per straggler: a slice per step it stands out in, on the
    stretch that holds its largest contributor (time outside operators: the gap itself;
    an operator: from its first to its last call in the stretch), named with the finding.
    ``saves``: the verdict's what-if, (rank, step) -> ns the step would end earlier without
    the rank's extra time; a slice whose step has one carries it as ``saves_us``, so the
    trace answers "what would fixing it save" where the finding is drawn."""
    by_rank = {p.rank: p for p in plans}
    out: List[Dict[str, Any]] = []
    tids: Dict[int, int] = {}
    for w in why:
        top = next((c for c in w["contributors"] if c.get("piece_ns")), None)
        p = by_rank.get(w["rank"])
        if top is None or p is None:
            continue
        lo, hi = top["piece_ns"] if top["kind"] in ("outside_ops", "gpu_idle") else top["span_ns"]
        shift = int(p.base_time_ns or 0) + int(p.align_offset_ns or 0) - base_ns
        if w["rank"] not in tids:
            tids[w["rank"]] = tid0 + len(tids)
            t = tids[w["rank"]]
            out.append(_meta("thread_name", t, {"name": f"why rank {w['rank']}"}, _us(lo + shift)))
            out.append(_meta("thread_sort_index", t, {"sort_index": t}, _us(lo + shift)))
        name = f"rank {w['rank']} step {w['step']}: " + headline(top)
        args = {SUMMARY_ARG: True, "straggler_rank": w["rank"], "step": w["step"], "lateness_us": w["lateness_us"],
                "explained_us": w["explained_us"], "reference_rank": w["reference_rank"],
                "collective": w["collective"],
                "contributors": [headline(c) for c in w["contributors"][:5]]}  # fmt: skip
        saved = (saves or {}).get((w["rank"], w["step"]))
        if saved is not None:
            args["saves_us"] = round(saved / 1000, 3)
        out.append({"ph": "X", "cat": SUMMARY_CAT, "name": name, "pid": SUMMARY_PID, "tid": tids[w["rank"]],
                    "ts": _us(lo + shift), "dur": _us(max(hi - lo, 0)), "args": args})  # fmt: skip
    return out


PATH_CAT = "critical_path"  # the critical path's flows: their own (id, cat, name) key space


def critical_path_events(
    rows: Sequence[Any], base_ns: int, tid0: int, steps_here: Any
) -> List[Dict[str, Any]]:
    """The step's critical path (analyze/graph.py): one "critical path: rank R" track per
    rank it runs through, one slice per segment (own work before a collective, or
    communication once all members arrived), and a flow where it crosses to another rank."""
    out: List[Dict[str, Any]] = []
    tracks: Dict[int, List[List[int]]] = {}  # rank -> [[tid, end_ns], ...]: slices never overlap on one
    next_tid = [tid0]
    flow_id = 0

    def track(rank: int, start: int, end: int) -> int:
        mine = tracks.setdefault(rank, [])
        for t in mine:
            if t[1] <= start:
                t[1] = end
                return t[0]
        tid = next_tid[0]
        next_tid[0] += 1
        mine.append([tid, end])
        label = f"critical path: rank {rank}" + (f" #{len(mine)}" if len(mine) > 1 else "")
        out.append(_meta("thread_name", tid, {"name": label}, _us(start - base_ns)))
        out.append(_meta("thread_sort_index", tid, {"sort_index": tid}, _us(start - base_ns)))
        return tid

    for row in rows:
        g = getattr(row, "graph", None)
        if g is None or row.step not in steps_here or not g.path:
            continue
        prev: Optional[Dict[str, Any]] = None
        for seg in g.path:
            if seg.dur_ns <= 0:
                continue
            what = {"own": "own work before", "entered_late": "entered late: before its"}.get(
                seg.kind, seg.kind
            )
            name = f"step {row.step}: rank {seg.rank} {what} {seg.name}"
            args = {SUMMARY_ARG: True, "step": row.step, "path_rank": seg.rank, "kind": seg.kind,
                    "dur_us": round(seg.dur_ns / 1000, 3), "leads_to": seg.name}  # fmt: skip
            ev = {"ph": "X", "cat": SUMMARY_CAT, "name": name, "pid": SUMMARY_PID,
                  "tid": track(seg.rank, seg.start_ns, seg.start_ns + seg.dur_ns), "ts": _us(seg.start_ns - base_ns), "dur": _us(seg.dur_ns), "args": args, "_ns": seg}  # fmt: skip
            if prev is not None and prev["_ns"].rank != seg.rank:
                flow_id += 1
                a, b = prev["_ns"], seg
                inside_a = a.start_ns + a.dur_ns - min(1000, a.dur_ns // 2)
                inside_b = b.start_ns + min(1000, b.dur_ns // 2)
                for ph, tid, t in (("s", prev["tid"], inside_a), ("f", ev["tid"], inside_b)):
                    flow = {"ph": ph, "cat": PATH_CAT, "name": PATH_CAT, "id": flow_id, "pid": SUMMARY_PID,
                            "tid": tid, "ts": _us(t - base_ns), "args": {SUMMARY_ARG: True}}  # fmt: skip
                    if ph == "f":
                        flow["bp"] = "e"
                    out.append(flow)
            out.append(ev)
            prev = ev
    for ev in out:
        ev.pop("_ns", None)
    return out


def link_analysis(plan: Any, plans: Sequence[Any] = (), jobs: int = 1) -> Optional[Analysis]:
    """The analysis behind the summary (the why tracks, the waits) for ``plan``'s table,
    made once per merge and kept on ``plan``: its one pass per file for the why
    (analyze/why.py) also gives every rank's step figures (``plan.table.step_times``,
    the per-rank counters: report/step_counters.py). None without instances or linked
    send/recv pairs (a pure pipeline is judged from its pairs)."""
    table = plan.table
    if plan.analysis is None and table is not None and (table.instances or table.p2p_pairs):
        plan.analysis = analyse(table, list(plans) or None, jobs, every_rank=False)  # the why only
    return plan.analysis


def write_summaries(
    sinks: Sequence[Any], plan: Any, base_ns: int, plans: Sequence[Any] = (), jobs: int = 1
) -> List[str]:
    """Put each output file's summary process first in it (right after the head), for
    the instances ``plan`` (a :class:`~tracefuse_stream.align.links.LinkPlan`) linked
    in that file (a pure pipeline: its pairs, :func:`summary_marks`), with the why tracks
    of the stragglers (``plans``: the merged ranks' plans, read once more for the why:
    analyze/why.py) and the critical paths; notes for the merge summary."""
    notes = []
    steps = plan.table.steps if plan.table is not None else {}
    waits: Dict[Optional[int], Dict[int, int]] = {}
    why: List[Dict[str, Any]] = []
    rows: List[Any] = []
    saves: Dict[Tuple[int, Optional[int]], int] = {}
    a = link_analysis(plan, plans, jobs)
    if a is not None:
        waits = {row.step: dict(row.wait) for row in a.verdict.by_step}
        why = a.why
        rows = a.verdict.by_step
        unknown = a.verdict.not_estimated  # no estimate: no saves_us
        saves = {k: ns for k, ns in a.verdict.saves.items() if k[0] not in unknown}
    for gi, sink in enumerate(sinks):
        here = summary_marks(plan, gi)
        events = summary_events(here, steps, base_ns, waits)
        if not events:
            continue
        ranks_here = {r for inst in here for r in inst.entries}
        steps_here = {inst.step for inst in here}  # a --steps window: only its steps' findings
        tid0 = 1 + max((e["tid"] for e in events if e["ph"] == "M"), default=0)
        mine = [w for w in why if w["rank"] in ranks_here and w["step"] in steps_here]
        events += why_events(mine, plans, base_ns, tid0, saves)
        tid1 = 1 + max((e["tid"] for e in events if e["ph"] == "M"), default=0)
        events += critical_path_events(rows, base_ns, tid1, steps_here)
        if not isinstance(sink, JsonSink):
            notes.append("collective summary: not written into a Perfetto archive (one member per rank)")
            continue
        w = PieceWriter(sink.fragment_codec)
        w.write(encode(events))
        sink.add_rank(-1, w.finish())
        plan.summary_events += len(events)  # the merge's totals count them (issue 28, item 6)
        n = sum(1 for inst in here if inst.sender is None)
        drawn = sum(1 for e in events if e["ph"] == "X") - n
        notes.append(
            f"collective summary: process 'Collectives' (sorted first) with {n} instance slice(s) "
            f"and {drawn} why / critical path slice(s)"
        )
    return notes


def _counters(
    instances: Sequence[Instance],
    steps: Dict[int, Dict[int, Tuple[int, int]]],
    base_ns: int,
    step_waits: Optional[Dict[Optional[int], Dict[int, int]]] = None,
) -> List[Dict[str, Any]]:
    """Per step, one counter event with each rank's wait in that step (ms): the union of
    its waits (analyze/stragglers.py), as ``info --collectives`` reports it."""
    waits: Dict[int, Dict[int, int]] = {}
    for inst in instances:
        if inst.step is None:
            continue
        w = waits.setdefault(inst.step, {})
        for r in inst.entries:
            if step_waits is not None and inst.step in step_waits:
                w[r] = step_waits[inst.step].get(r, 0)
            else:
                w[r] = w.get(r, 0) + inst.wait_ns(r)
    ranks = sorted({r for inst in instances for r in inst.entries})
    out: List[Dict[str, Any]] = []
    last_end: Optional[int] = None
    for step in sorted(waits):
        span = _step_span(step, steps, min(r for r in waits[step]))
        if span is None:
            continue
        args: Dict[str, Any] = {f"rank {r}": round(waits[step].get(r, 0) / 1e6, 3) for r in ranks}
        out.append({"ph": "C", "name": COUNTER_NAME, "pid": SUMMARY_PID, "tid": 0,
                    "ts": _us(span[0] - base_ns), "args": args})  # fmt: skip
        last_end = span[1] if last_end is None else max(last_end, span[1])
    if last_end is not None:
        zero: Dict[str, Any] = {f"rank {r}": 0 for r in ranks}
        out.append({"ph": "C", "name": COUNTER_NAME, "pid": SUMMARY_PID, "tid": 0,
                    "ts": _us(last_end - base_ns), "args": zero})  # fmt: skip
    return out


def _step_span(
    step: int, steps: Dict[int, Dict[int, Tuple[int, int]]], rank: int
) -> Optional[Tuple[int, int]]:
    """The step's (start, end) on ``rank``, else on the lowest rank that has it."""
    if step in steps.get(rank, {}):
        return steps[rank][step]
    for r in sorted(steps):
        if step in steps[r]:
            return steps[r][step]
    return None


__all__ = ["link_analysis", "summary_marks", "write_summaries", "COUNTER_NAME", "SUMMARY_ARG", "SUMMARY_CAT", "SUMMARY_PID", "is_summary_event", "slice_name",
           "summary_events"]  # fmt: skip
