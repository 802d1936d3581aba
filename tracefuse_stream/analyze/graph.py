"""The cross-rank dependency graph of a step: own work, waiting, the critical path and
what fixing a rank would save.

Why: on a job of several process groups (tensor-, pipeline- and data-parallel) a delay
on one rank propagates. Rank 3 stalls before a pair all-reduce, its partner rank 2 waits
for it there and so reaches the world all-reduce late too: "the others waited for rank
2" is true and says nothing about the cause. Arrival times alone cannot tell the two
apart; the order of each rank's collectives and who each of them waited for can.

**The graph** (per step, from the matched instances of every group, NCCL and gloo, CPU
and GPU side). Each rank's instances of the step are put in order of arrival. A rank's
*arrival* ``A[r,k]`` at its k-th instance follows its *predecessor*, the latest of: its
step start ``S[r]``, the *departure* ``D[r,j]`` (the end of its collective) of an
earlier instance that ended before it arrived, and its previous arrival ``A[r,k-1]``
(collectives issued back to back, DDP's buckets on gloo's runloop threads): the
*gap* ``A[r,k] - predecessor`` is the rank's **own work** there. A departure follows the
instance's last arrival ``L``: ``D[r,i] = L_i + c[r,i]`` (``c``: the communication after
the last member arrived, at least 0); ``[A[r,i], L_i]`` is **waiting**. The step ends
``tail`` after the rank's last arrival or departure before its step end.

**Own time vs waiting.** A rank's own time to an arrival is the sum of the gaps along
its predecessor chain (waiting and communication left out); its **own lateness** at an
instance is that minus the median of the other members' own time to the same instance,
plus the rank's **step-start skew** (how late it entered the step against the median
of the other ranks on its host, i.e. on the same clock; 0 for a rank alone on its host:
a clock offset is not lateness). A rank whose arrival is late but whose own lateness is
not is **delayed**: the time went in waiting, for the last arriver of the instance where
it waited longest (followed to the origin of a cascade).

**The critical path**: from the end of the step on the rank that ends it last, back
along predecessors: a departure goes to the instance's last arriver (a cross-rank edge
when that is another rank), an arrival to its predecessor, down to a step start.
Segments: ``own`` (a gap), ``communication`` (``[L, D]``) and, when the rank the path
starts on entered the step after the earliest rank, ``entered_late`` (from the earliest
step start to its own), so the segments add up to the step; the skew itself is reported
per rank (``step_skew``).

**What fixing a rank saves**: its gaps are cut to the median of the other members'
gaps at the same instance (its tail to the median tail) and every arrival and departure
of the step is re-timed through the graph; ``saves`` is how much earlier the step's
last rank ends. Two equal stragglers each save ~0 (the other one's path is as long),
which is the point.

Model limits (docs/collectives.md): an arrival that follows the end of the rank's
previous collective is taken to depend on it (true of a blocking collective and of a
runloop thread's queue; an overlapped compute stream that never waited makes saves an
upper bound). A linked send/recv pair (align/p2p.py, recorded with shapes) is a
two-member instance whose departures follow its later arrival: gloo's recv waits for
the data and its send for the posted recv. Its two ranks do different work, so own
lateness and skews are read at collectives only, and a pair's gap is cut against the
other ranks' gaps before their own sends (recvs). Point-to-point ops not linked (no
peer recorded): the time a rank sits in one (``table.p2p_spans``) is waiting, left out
of its own work.
Cost: O(instances x members) per step, memory the instances' arrivals.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import CollectiveTable, Instance
from tracefuse_stream.analyze.medians import median, median_without
from tracefuse_stream.analyze.pair_roles import alike, pair_role, pair_roles

Node = Tuple[str, int, int]  # ("S" | "A" | "D" | "E", rank, instance id or -1)
START = -2  # a cut's key (rank, START): how much earlier the rank starts the step


@dataclass
class Segment:
    """One stretch of the critical path (absolute ns)."""

    rank: int
    kind: str  # "own" | "communication" | "entered_late" (before its step start, the path's first)
    name: str  # what it leads to: "all_reduce #3" or "step end"
    start_ns: int
    dur_ns: int
    instance: int = -1  # the instance it leads to or belongs to (-1: the step's end)


@dataclass
class Delay:
    """A rank that is late only because it waited."""

    rank: int
    step: Optional[int]
    late_at: int  # instance id where it is latest
    waited_at: int  # instance id where it waited longest
    by_rank: int  # the last arriver there
    origin: int  # the end of the cascade (a rank whose own lateness it is)
    wait_ns: int
    waits: int = 1  # > 1: wait_ns is the sum of that many waits for by_rank (send/recv, analyze/rootcause.py)


@dataclass
class StepGraph:
    """One step's graph and everything read off it."""

    step: Optional[int]
    start: Dict[int, int]  # rank -> S
    end: Dict[int, int]  # rank -> E
    order: Dict[int, List[int]]  # rank -> instance ids by arrival
    pred: Dict[Tuple[int, int], Node]  # (rank, instance) -> the predecessor of its arrival
    tail_pred: Dict[int, Node]  # rank -> the predecessor of its step end
    own: Dict[Tuple[int, int], int]  # (rank, instance) -> own time to the arrival
    skew: Dict[int, int]  # rank -> step-start skew (same-host median; 0 alone)
    late_skew: Dict[int, int] = field(default_factory=dict)  # rank -> the skew that counts as lateness
    offset: Dict[Tuple[int, int], int] = field(
        default_factory=dict
    )  # (rank, instance or -1: the end) -> time after its predecessor (< 0: a departure it overlaps)
    own_late: Dict[int, int] = field(default_factory=dict)  # rank -> max own lateness
    own_late_at: Dict[int, int] = field(default_factory=dict)  # rank -> where
    path: List[Segment] = field(default_factory=list)
    by_id: Dict[int, Instance] = field(default_factory=dict)  # the step's instances
    floor_ns: int = 0  # the noise floor the skews were settled with
    p2p: Dict[int, List[Tuple[int, int]]] = field(default_factory=dict)  # rank -> its send/recv spans
    # a step of send/recv pairs alone (a pipeline): its end, met by every rank of a set the
    # pairs connect (one per pipeline), read as a collective (analyze/p2p_steps.py);
    # own[(rank, its id)] is the rank's own time to it
    ends: List[Instance] = field(default_factory=list)

    def end_of(self, rank: int) -> Optional[Instance]:
        """The step end ``rank`` meets (None: a step with collectives)."""
        return next((e for e in self.ends if rank in e.entries), None)

    def peers(self, rank: int) -> List[int]:
        """The ranks ``rank`` is compared with and can hold up: its pipeline's, in a step
        of pairs alone (two pipelines never wait for each other), else every rank."""
        e = self.end_of(rank)
        return list(e.entries) if e is not None else list(self.order)

    @property
    def end_ns(self) -> int:
        return max(self.end.values()) if self.end else 0

    @property
    def start_ns(self) -> int:
        return min(self.start.values()) if self.start else 0


def _time(node: Node, g: StepGraph, by_id: Dict[int, Instance]) -> int:
    kind, r, i = node
    if kind == "S":
        return g.start[r]
    if kind == "E":
        return g.end[r]
    e = by_id[i].entries[r]
    return e.start_ns if kind == "A" else e.end_ns


def build(
    table: CollectiveTable, step: Optional[int], insts: Sequence[Instance], floor_ns: int = 0
) -> StepGraph:
    """The graph of one step's instances (see the module docstring); a step-start skew
    counts as lateness only past ``floor_ns`` (the run's arrival-noise bound) and
    :func:`_late_skews`' bounds."""
    by_id = {i.id: i for i in insts}
    mine: Dict[int, List[Instance]] = {}
    for inst in insts:
        for r in inst.entries:
            mine.setdefault(r, []).append(inst)
    start: Dict[int, int] = {}
    end: Dict[int, int] = {}
    order: Dict[int, List[int]] = {}
    for r, lst in mine.items():
        lst.sort(key=lambda i: (i.entries[r].start_ns, i.id))
        order[r] = [i.id for i in lst]
        span = table.steps.get(r, {}).get(step) if step is not None else None
        first = lst[0].entries[r].start_ns
        last = max(i.entries[r].end_ns for i in lst)
        start[r] = min(span[0], first) if span else first
        end[r] = max(span[1], last) if span else last
    g = StepGraph(step, start, end, order, {}, {}, {}, {})
    g.by_id = by_id
    p2p = g.p2p = table.p2p_spans
    for r, ids in order.items():
        pending: List[Tuple[int, int, int]] = []  # (last arrival, departure, instance), a heap
        released: Tuple[int, int] = (start[r], -1)  # latest departure of an instance all have reached
        prev: Optional[int] = None
        for i in ids:
            a = by_id[i].entries[r].start_ns
            p, released = _pred(r, a, prev, pending, released, g, by_id)
            k = (r, i)  # one key tuple for the three maps
            g.pred[k] = p
            gap = a - _time(p, g, by_id)
            g.offset[k] = gap
            blocked = _blocked(p2p.get(r, ()), a - gap, a)
            g.own[k] = (0 if p[0] == "S" else g.own[(r, p[2])]) + max(0, gap - blocked)
            heapq.heappush(pending, (by_id[i].last_arrival_ns, by_id[i].entries[r].end_ns, i))
            prev = i
        g.tail_pred[r] = p = _pred(r, end[r], prev, pending, released, g, by_id)[0]
        g.offset[(r, -1)] = end[r] - _time(p, g, by_id)
    g.skew = _skews(table, start)
    g.path = _critical_path(g, by_id)
    settle(g, floor_ns)
    return g


def settle(g: StepGraph, floor_ns: int) -> None:
    """The part of each rank's step-start skew that counts (past ``floor_ns`` and
    :func:`_late_skews`' bounds) and its own lateness: done apart from :func:`build`
    because the noise floor comes from the graphs' own times (:func:`own_spreads`)."""
    insts = [i for i in g.by_id.values() if i.sender is None]  # a send/recv pair's ends differ by design
    g.floor_ns = floor_ns
    g.late_skew = _late_skews(g.skew, insts, floor_ns)
    end = g.ends  # a pipeline's step end: own time compared there
    owns = {i.id: sorted(g.own[(q, i.id)] for q in i.entries) for i in insts + end}  # the others' medians
    for r, ids in g.order.items():
        best_late, best_at = 0, -1
        for i in ids + [e.id for e in end if r in e.entries]:
            if len(owns.get(i, ())) < 2:  # a pair's two ranks do different work: not compared
                continue
            late = g.late_skew.get(r, 0) + g.own[(r, i)] - median_without(owns[i], g.own[(r, i)])
            if late > best_late or best_at < 0:
                best_late, best_at = max(0, late), i
        g.own_late[r], g.own_late_at[r] = best_late, best_at


def compact(g: StepGraph) -> None:
    """Drop what only the judgement reads (each arrival's predecessor, own time and
    offset: ~10 KB a rank over 10 steps, kept for every step; issue 38), once the
    verdict is made; the step-end offsets (the why's tails), the order, the times and
    the critical path stay. :func:`retime` and what calls it need a graph not compacted."""
    g.pred, g.own = {}, {}
    g.offset = {k: v for k, v in g.offset.items() if k[1] == -1}


def own_spreads(g: StepGraph) -> List[int]:
    """Per instance of 3 members or more: the spread of the earliest half of the members'
    own times to it (waiting left out): how far apart ranks that are not held up arrive,
    which a cascade (most ranks late only because they waited) does not inflate."""
    out = []
    for i in [*g.by_id.values(), *g.ends]:
        if len(i.entries) > 2:
            v = sorted(g.own[(q, i.id)] for q in i.entries)
            out.append(v[(len(v) + 1) // 2 - 1] - v[0])
    return out


def own_to_end(g: StepGraph, r: int) -> int:
    """The rank's own time from its step start to its step end: the gaps along its
    predecessor chain and its tail, waiting and communication left out (a pipeline's
    step end is compared like a collective: analyze/p2p_steps.py)."""
    p, gap = g.tail_pred[r], g.offset[(r, -1)]
    base = 0 if p[0] == "S" else g.own[(r, p[2])]
    return base + max(0, gap - _blocked(g.p2p.get(r, ()), g.end[r] - gap, g.end[r]))


def _blocked(spans: Sequence[Tuple[int, int]], lo: int, hi: int) -> int:
    """How long the rank sat in point-to-point ops (sorted spans) within ``[lo, hi]``:
    blocked on a peer (a pipeline stage receiving from the one before), not own work."""
    total, reach = 0, lo
    for a, b in spans[max(0, bisect.bisect_left(spans, (lo, lo)) - 1) :]:
        if a >= hi:
            break
        a, b = max(a, reach), min(b, hi)
        if b > a:
            total += b - a
            reach = b
    return total


def _pred(
    r: int,
    a: int,
    prev: Optional[int],
    pending: List[Tuple[int, int, int]],
    released: Tuple[int, int],
    g: StepGraph,
    by_id: Dict[int, Instance],
) -> Tuple[Node, Tuple[int, int]]:
    """The predecessor of the time ``a`` on rank ``r``: the latest (in effect) of the step
    start, the previous arrival and the departure of an earlier instance that every
    member had reached by ``a`` (taken at ``a`` when the rank is still in it: its
    communication overlaps; the arrival is then timed from that departure), and the
    latest such departure so far (``released``, updated from ``pending``)."""
    while pending and pending[0][0] <= a:
        _l, d, j = heapq.heappop(pending)
        if d >= released[0]:
            released = (d, j)
    best: Node = ("S", r, -1)
    best_t = g.start[r]
    if prev is not None and by_id[prev].entries[r].start_ns >= best_t:
        best, best_t = ("A", r, prev), by_id[prev].entries[r].start_ns
    if released[1] >= 0 and min(released[0], a) >= best_t:
        best = ("D", r, released[1])
    return best, released


def _skews(table: CollectiveTable, start: Dict[int, int]) -> Dict[int, int]:
    """rank -> its step start minus the median of the other ranks' on its host (one
    clock); 0 for a rank alone on its host."""
    by_host: Dict[str, List[int]] = {}
    for r in start:
        h = table.hosts.get(r)
        by_host.setdefault(str(h) if h else "", []).append(r)
    out: Dict[int, int] = {}
    for ranks in by_host.values():
        values = sorted(start[q] for q in ranks)
        for r in ranks:
            out[r] = start[r] - median_without(values, start[r]) if len(ranks) > 1 else 0
    return out


def skews_within(table: CollectiveTable, g: StepGraph, ranks: Sequence[int]) -> None:
    """Re-read the step-start skews of ``ranks`` against each other only (a pipeline of
    a step of pairs alone: pipelines side by side drift apart, and one's start is not
    another's lateness)."""
    g.skew.update(_skews(table, {r: g.start[r] for r in ranks}))


def _late_skews(skew: Dict[int, int], insts: Sequence[Instance], floor_ns: int) -> Dict[int, int]:
    """rank -> the part of its step-start skew that is lateness: only a skew past the
    noise floor, past twice the step's typical spread of collective ends (ranks leave
    a collective that far apart, and so start the next step that far apart) and, with
    3 ranks or more, an outlier among the ranks' skews (median + 4 x scaled MAD)."""
    ends = sorted(
        max(e.end_ns for e in i.entries.values()) - min(e.end_ns for e in i.entries.values()) for i in insts
    )
    bound = max(floor_ns, 2 * (ends[len(ends) // 2] if ends else 0))
    values = list(skew.values())
    if len(values) >= 3:
        m = median(values)
        bound = max(bound, m + int(4 * 1.4826 * median([abs(v - m) for v in values])))
    return {r: v for r, v in skew.items() if v > bound}


def _critical_path(g: StepGraph, by_id: Dict[int, Instance]) -> List[Segment]:
    """Back from the step's last end along predecessors (see the module docstring);
    each segment ends where the next one starts (a departure the next arrival overlaps
    is cut at that arrival)."""
    if not g.end:
        return []
    r0 = max(sorted(g.end), key=lambda r: g.end[r])
    node: Node = ("E", r0, -1)
    limit = g.end[r0]
    out: List[Segment] = []
    seen = set()
    while node[0] != "S" and node not in seen:
        seen.add(node)
        kind, r, i = node
        t = min(_time(node, g, by_id), limit)
        if kind == "D":
            inst = by_id[i]
            last = inst.last_rank
            lt = min(inst.entries[last].start_ns, t)
            out.append(Segment(r, "communication", f"{inst.name} #{inst.id}", lt, t - lt, i))
            node, limit = ("A", last, i), lt
            continue
        p = g.tail_pred[r] if kind == "E" else g.pred[(r, i)]
        pt = min(_time(p, g, by_id), t)
        name = "step end" if kind == "E" else f"{by_id[i].name} #{i}"
        out.append(Segment(r, "own", name, pt, t - pt, i))
        node, limit = p, pt
    if node[0] == "S" and limit > g.start_ns:  # the path's rank entered the step after the earliest
        out.append(Segment(node[1], "entered_late", "step start", g.start_ns, limit - g.start_ns))
    out.reverse()
    return out


def gaps(g: StepGraph) -> Dict[Tuple[int, int], int]:
    """(rank, instance) -> the own work before its arrival (instance -1: before the
    step end): the time after its predecessor, 0 where it overlaps a departure."""
    return {k: max(0, v) for k, v in g.offset.items()}


def retime(g: StepGraph, cut: Optional[Dict[Tuple[int, int], int]] = None) -> int:
    """The step's last end with the own work of ``cut``'s keys shortened by its values
    (step starts fixed; every arrival and departure re-timed through the graph)."""
    ends = retime_ends(g, cut)
    return max(ends.values()) if ends else 0


def retime_ends(
    g: StepGraph,
    cut: Optional[Dict[Tuple[int, int], int]] = None,
    arrivals: Optional[Dict[Tuple[int, int], int]] = None,
) -> Dict[int, int]:
    """rank -> its step end, re-timed as :func:`retime` says; ``arrivals`` (given): filled
    with every (rank, instance) -> its re-timed arrival."""
    cut = cut or {}
    by_id = g.by_id
    arr: Dict[Tuple[int, int], int] = {}
    dep: Dict[Tuple[int, int], int] = {}
    pos = {r: 0 for r in g.order}

    def at(node: Node) -> int:
        kind, r, i = node
        if kind == "S":
            return g.start[r] - cut.get((r, START), 0)
        if kind == "A":
            return advance(r, i)
        if (r, i) in dep:
            return dep[(r, i)]
        return by_id[i].entries[r].end_ns  # a departure not yet re-timed (a tie): as recorded

    def advance(r: int, upto: int) -> int:
        ids = g.order[r]
        while (r, upto) not in arr and pos[r] < len(ids):
            k = ids[pos[r]]
            arr[(r, k)] = at(g.pred[(r, k)]) + g.offset[(r, k)] - cut.get((r, k), 0)
            pos[r] += 1
        return arr[(r, upto)]

    for inst in sorted(by_id.values(), key=lambda i: (i.last_arrival_ns, i.id)):
        last = max(advance(q, inst.id) for q in inst.entries)
        old_last = inst.last_arrival_ns
        for q, e in inst.entries.items():
            dep[(q, inst.id)] = last + max(0, e.end_ns - old_last)
    ends = {r: at(g.tail_pred[r]) + g.offset[(r, -1)] - cut.get((r, -1), 0) for r in g.order}
    if arrivals is not None:
        arrivals.update(arr)
    return ends


def extra_cut(g: StepGraph, rank: int, together: Sequence[int] = ()) -> Dict[Tuple[int, int], int]:
    """``rank``'s own work beyond the other members' median at each of its arrivals (and
    beyond the other ranks' median before the step end), and the step-start skew that
    counts as its lateness: what fixing it removes (``together``: the ranks fixed with
    it, left out of the others; none left: the same collective of other groups alike)."""
    own, by_id, skip = gaps(g), g.by_id, {rank, *together}
    cut: Dict[Tuple[int, int], int] = {}
    roles = pair_roles(g.order, g.by_id, rank, own)
    seen: Dict[Tuple[bool, bool], int] = {}
    for i in g.order.get(rank, []):
        if by_id[i].sender is not None:
            role = pair_role(by_id[i], rank)
            k = seen[role] = seen.get(role, -1) + 1
            others = (
                roles.get((role, k)) or roles.get(role) or roles.get(pair_role(by_id[i], rank, True)) or []
            )
        else:
            others = [own[(q, i)] for q in by_id[i].entries if q not in skip]
            others = others or alike(g.order, by_id, rank, i, own, skip)
        if others:
            cut[(rank, i)] = max(0, own[(rank, i)] - median(others))
    if g.late_skew.get(rank, 0) > 0:  # it entered the step late: it starts on time
        cut[(rank, START)] = g.late_skew[rank]
    tails = [own[(q, -1)] for q in g.order if q not in skip]
    if tails and (rank, -1) in own:
        cut[(rank, -1)] = max(0, own[(rank, -1)] - median(tails))
    return cut


def saves_ns(g: StepGraph, ranks: Sequence[int]) -> int:
    """How much earlier the step's last rank ends when the extra own work of ``ranks``
    (:func:`extra_cut`, each against the others as recorded) is removed."""
    cut: Dict[Tuple[int, int], int] = {}
    for r in ranks:
        cut.update(extra_cut(g, r, ranks))
    return max(0, retime(g) - retime(g, cut))


def held_through(
    g: StepGraph, rank: int, now: Optional[Dict[int, int]] = None, fixed: Optional[Dict[int, int]] = None
) -> int:
    """How long the other ranks were held up by ``rank``, through every group and
    cascade: the median over them of how much earlier each would end its step without
    ``rank``'s extra own work (:func:`extra_cut`); ``now``, ``fixed``: those step ends,
    when the caller has them (:func:`retime_ends` as recorded, once a step, and cut)."""
    now = retime_ends(g) if now is None else now
    fixed = retime_ends(g, extra_cut(g, rank)) if fixed is None else fixed
    return median([now[q] - fixed[q] for q in g.peers(rank) if q != rank])


def held_in_p2p(g: StepGraph, rank: int) -> int:
    """How much longer the other ranks sat in point-to-point ops in the step than
    ``rank`` (the median over them): a pipeline's stages wait for a slow stage in their
    send/recv, and Kineto writes no peer to say for whom; asked only of a rank whose own
    lateness stands out, and capped by it (the caller)."""
    blocked = {q: _blocked(g.p2p.get(q, ()), g.start[q], g.end[q]) for q in g.peers(rank)}
    others = [blocked[q] for q in blocked if q != rank]
    return max(0, median(others) - blocked.get(rank, 0)) if others else 0


__all__ = [
    "Delay",
    "Segment",
    "StepGraph",
    "build",
    "compact",
    "extra_cut",
    "gaps",
    "held_in_p2p",
    "held_through",
    "own_spreads",
    "own_to_end",
    "retime",
    "retime_ends",
    "saves_ns",
    "settle",
]
