"""The verdict's root-cause figures: delayed ranks and what fixing each straggler saves.

Why apart from analyze/stragglers.py: the verdict names ranks from how long the others
waited for each (held, capped by own lateness); this reads the steps' dependency graphs
(analyze/graph.py) once the stragglers are named, for the ranks that are late only
because they waited and for the re-timed what-if.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from tracefuse_stream.analyze import graph as G
from tracefuse_stream.analyze.intervals import union_ns
from tracefuse_stream.analyze.medians import median
from tracefuse_stream.analyze.others import Members, OthersOutlier


def root_cause(
    rows: Sequence[Any],
    stragglers: Sequence[Any],
    late_thresholds: Optional[Dict[Optional[int], Dict[int, int]]] = None,
) -> Tuple[List[G.Delay], Dict[Tuple[int, Optional[int]], int], Dict[Optional[int], int]]:
    """(the delayed ranks: late past their threshold with no own lateness past it, with
    whom they waited for, the origin of their cascade a named straggler of the step;
    (straggler, step) -> what fixing it saves in each step it stands out in; step -> what
    fixing every named straggler of the step saves, where there are several).

    ``late_thresholds`` (step -> rank -> ns; default: each row's ``threshold``): what
    lateness must pass, the named stragglers' held left out of the others' spread (two
    stragglers in two groups lift it past the very lateness they cause)."""
    delayed: List[G.Delay] = []
    for row in rows:
        if row.graph is None:
            continue
        thr = row.threshold if late_thresholds is None else late_thresholds.get(row.step, row.threshold)
        late = {
            r: (t, row.late_at.get(r, -1))
            for r, t in row.lateness.items()
            if t > thr.get(r, 0) and row.held.get(r, 0) <= row.threshold.get(r, 0)
        }
        # a pipeline's step end is no instance of its graph: its delays are the pairs' (below)
        found = collective_delays(row.graph, late) if not row.graph.ends else []
        named = {d.rank for d in found}
        found += [d for d in p2p_delays(row, thr) if d.rank not in named]
        # a delay is told of a root cause: a wait of a few ms for a rank nobody names is noise
        delayed += [d for d in found if d.origin in row.stragglers]
    saves: Dict[Tuple[int, Optional[int]], int] = {}
    for s in stragglers:
        for row in rows:
            if row.graph is not None and row.step in s.steps:
                saves[(s.rank, row.step)] = G.saves_ns(row.graph, [s.rank])
    together: Dict[Optional[int], int] = {}
    for row in rows:
        if row.graph is not None and len(row.stragglers) > 1:
            together[row.step] = G.saves_ns(row.graph, list(row.stragglers))
    return delayed, saves, together


def late_thresholds(
    rows: Sequence[Any], base_ns: int, factor: float, mad_scale: float
) -> Dict[Optional[int], Dict[int, int]]:
    """step -> rank -> what a rank's lateness must pass to be delayed, in a step with
    several named stragglers: its threshold with them left out of the others' held (two
    stragglers in two groups lift the others' spread past the very lateness they cause:
    a partner's 62 ms against 234 ms). One straggler is an outlier the spread (a median
    absolute deviation) already ignores: its steps keep their thresholds."""
    out: Dict[Optional[int], Dict[int, int]] = {}
    for row in rows:
        if len(row.stragglers) < 2:
            continue
        rest = OthersOutlier([h for r, h in row.held.items() if r not in row.stragglers], factor, mad_scale)
        out[row.step] = {r: max(base_ns, rest.of(h)) for r, h in row.held.items() if r not in row.stragglers}
    return out


def not_estimated(stragglers: Sequence[Any], saves: Dict[Tuple[int, Optional[int]], int]) -> List[int]:
    """The stragglers whose what-if the graph cannot estimate: fixing one would save
    under a tenth of how long the others waited for it per step, and no other named
    straggler holds the same collectives (that would be a real ~0), so the others waited
    for it where the re-timing cannot follow: send/recv not linked to a peer. Their
    ``saves`` are no estimate (the JSON says ``estimated: false``, the text why)."""
    out = []
    for s in stragglers:
        mine = [ns for (r, _step), ns in saves.items() if r == s.rank]
        if mine and len(stragglers) == 1 and max(mine) * 10 < s.held_ns / max(len(s.steps), 1):
            out.append(s.rank)
    return out


def saves_nothing_alone(stragglers: Sequence[Any], saves: Dict[Tuple[int, Optional[int]], int]) -> List[int]:
    """The named stragglers fixing one of which alone would save under a tenth of how
    long the others waited for it per step, because another named straggler still holds
    up the step (the what-if says so): two of two sizes (the smaller one hidden), or two
    alike (each hides the other)."""
    if len(stragglers) < 2:
        return []
    unknown = set(not_estimated(stragglers, saves))
    out = []
    for s in stragglers:
        mine = [ns for (r, _step), ns in saves.items() if r == s.rank]
        if mine and s.rank not in unknown and max(mine) * 10 < s.held_ns / max(len(s.steps), 1):
            out.append(s.rank)
    return out


def off_path(stragglers: Sequence[Any], saves: Dict[Tuple[int, Optional[int]], int]) -> List[int]:
    """The named stragglers whose own extra time is off the critical path (issue 35, item
    2): they save nothing alone while another named straggler does (it sets the step: two
    stragglers in two groups, or of two sizes in one). Named all the same: each is a cause
    the other hides, and what fixing both saves is said. Stragglers alike (each saving
    nothing alone) are all on it: the step has as many critical paths."""
    alone = saves_nothing_alone(stragglers, saves)
    return alone if len(alone) < len(stragglers) else []


def p2p_delays(row: Any, thresholds: Optional[Dict[int, int]] = None) -> List[G.Delay]:
    """A step whose graph links send/recv pairs (a pipeline): the ranks its stragglers
    hold up through them. Arrival lateness means nothing at a pair (a pipeline's stages
    are staggered by design, and a slow stage's neighbours arrive on time and wait), so
    a rank counts as late by how much earlier it would end the step with the step's
    stragglers fixed (their extra own time cut, the graph re-timed: its own work is
    untouched, so all of that is waiting); past its threshold, it is delayed by the
    rank it waited for longest in the step (summed over its waits), the cascade
    followed to a straggler."""
    g, thr = row.graph, row.threshold if thresholds is None else thresholds
    if g is None or not row.stragglers or all(i.sender is None for i in g.by_id.values()):
        return []
    cut: Dict[Tuple[int, int], int] = {}
    for s in row.stragglers:
        cut.update(G.extra_cut(g, s))
    now, fixed = G.retime_ends(g), G.retime_ends(g, cut)
    tied = _pair_linked(g, row.stragglers)
    waits: Dict[int, Dict[int, List[int]]] = {}  # rank -> whom -> [total, count, longest, where]
    for inst in g.by_id.values():
        for q, e in inst.entries.items():
            w = inst.last_arrival_ns - e.start_ns
            if inst.sender is None and inst.id == g.order[q][-1]:
                continue  # its wait at the step's last collective is the stragglers' held, not a delay
            if inst.sender is not None and q not in tied:
                continue  # another pipeline's bubble: its ranks wait for the stragglers at collectives only
            if q != inst.last_rank and w > 0:
                acc = waits.setdefault(q, {}).setdefault(inst.last_rank, [0, 0, 0, -1])
                acc[0], acc[1] = acc[0] + w, acc[1] + 1
                if w > acc[2]:
                    acc[2], acc[3] = w, inst.id
    found: Dict[int, Tuple[int, List[int]]] = {}
    for q in sorted(now):
        late = now[q] - fixed[q]
        if q in row.stragglers or late <= thr.get(q, 0) or not waits.get(q):
            continue
        by, acc = max(waits[q].items(), key=lambda kv: (kv[1][0], -kv[0]))
        if 2 * acc[0] >= late:  # the waiting explains it
            found[q] = (by, acc)
    out = []
    for q, (by, acc) in sorted(found.items()):
        origin, hops = by, 0
        while origin in found and hops < len(found):
            origin, hops = found[origin][0], hops + 1
        out.append(G.Delay(q, row.step, g.order[q][-1], acc[3], by, origin, acc[0], acc[1]))
    return out


def _pair_linked(g: G.StepGraph, stragglers: Any) -> Set[int]:
    """The ranks the step's send/recv pairs connect to a straggler (its pipeline); a
    pipeline beside it waits for it only where they meet, at a collective."""
    links: Dict[int, Set[int]] = {}
    for inst in g.by_id.values():
        if inst.sender is not None:
            a, b = inst.ranks[0], inst.ranks[-1]
            links.setdefault(a, set()).add(b)
            links.setdefault(b, set()).add(a)
    seen = set(stragglers)
    todo = list(seen)
    while todo:
        for q in links.get(todo.pop(), ()):
            if q not in seen:
                seen.add(q)
                todo.append(q)
    return seen


def collective_delays(g: G.StepGraph, late: Dict[int, Tuple[int, int]]) -> List[G.Delay]:
    """For each rank in ``late`` (rank -> (lateness, instance id where it is latest))
    whose own lateness explains less than half of it, a wait before it at least half, and
    its waiting before it at least half more than the other members' there (everyone
    waited for the same world straggler: that makes nobody late against the others):
    where it waited, for whom, and the origin of the cascade."""
    out: List[G.Delay] = []
    by_id = g.by_id
    waited: Dict[int, Tuple[int, int, int]] = {}  # rank -> (wait, instance, last arriver)
    for r, (lateness, at_id) in late.items():
        if at_id < 0 or lateness <= 0 or 2 * g.own_late.get(r, 0) > lateness:
            continue
        a = by_id[at_id].entries[r].start_ns
        best = (0, -1, -1)
        for j in g.order.get(r, []):
            e = by_id[j].entries[r]
            if e.start_ns >= a or by_id[j].sender is not None:
                continue  # a wait in a send/recv is a pipeline's bubble unless a straggler is behind it (p2p_delays)
            w = min(by_id[j].last_arrival_ns, a) - e.start_ns
            if w > best[0]:
                best = (w, j, by_id[j].last_rank)
        if best[1] >= 0 and 2 * best[0] >= lateness and 2 * _waited_more(g, r, at_id) >= lateness:
            waited[r] = best  # the waiting explains the lateness, and the others did not wait as long
    for r, (w, j, by) in sorted(waited.items()):
        origin, hops = by, 0
        while origin in waited and hops < len(waited):
            origin, hops = waited[origin][2], hops + 1
        out.append(G.Delay(r, g.step, late[r][1], j, by, origin, w))
    return out


WAIT_SAMPLE = 32  # the other members whose waiting a delayed rank's is compared with (evenly spread)


def _waited_more(g: G.StepGraph, r: int, at_id: int) -> int:
    """How much longer ``r`` waited in the step's collectives before it arrived at
    ``at_id`` than the median of the instance's other members before they arrived."""
    entries = g.by_id[at_id].entries
    theirs = [
        _waited_before(g, q, entries[q].start_ns) for q in Members(WAIT_SAMPLE).sample(r, [g.by_id[at_id]])
    ]
    return _waited_before(g, r, entries[r].start_ns) - (median(theirs) if theirs else 0)


def _waited_before(g: G.StepGraph, q: int, until_ns: int) -> int:
    """The union of ``q``'s waits at the step's collectives (arrival to last arrival)
    before ``until_ns``."""
    spans = []
    for j in g.order.get(q, []):
        inst = g.by_id[j]
        if inst.sender is None:
            spans.append((inst.entries[q].start_ns, min(inst.last_arrival_ns, until_ns)))
    return union_ns(spans)


__all__ = [
    "collective_delays",
    "late_thresholds",
    "off_path",
    "p2p_delays",
    "root_cause",
    "saves_nothing_alone",
]
