"""Why a rank is late: where its extra time went, against the median rank of its group.

For a rank R and a step, the *stretch* is R's time from its step start to its arrival at
the collective where it is latest (for the step's breakdown of every rank: the collective
where the others waited longest for the step's most waited-for rank). The same stretch
is taken on every member of that collective's group. R's **lateness** is its stretch
minus the stretch of the **reference rank**: the other member whose stretch is the
median of the others' (so every figure is one rank's, found on its timeline). The
stretch of each is partitioned (analyze/timeline.py) into operators by self time, time
outside any operator by innermost annotation and, on GPU traces, kernels and idle time
of the collective's GPU (all its streams); the **contributors** are the per-part differences, R minus
the reference, largest first, the primary view's first (the GPU for a GPU collective:
its kernels, then the CPU side that launched them). The CPU parts add up to the
lateness exactly, and so do the GPU parts (each view partitions the same stretch); ``explained_us`` is what the
listed contributors of R's primary view (the GPU for a GPU collective, the main
thread for a CPU one) add up to, ``share`` its fraction of the lateness. In a step of
send/recv pairs alone (a pipeline without collectives) the step's end plays the
collective (analyze/p2p_steps.py): each stretch is the rank's whole step.

Cost: none of its own when the table comes from info's single pass (analyze/onepass.py):
that pass already cut each file's timeline into segments at every step start and
collective arrival (analyze/timeline.py), and each stretch here is a sum of segments.
A table from elsewhere (the merge's plan, the report page) gets the segments from one
such pass per file (:func:`segments_of`).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from tracefuse_stream.align.collectives import CollectiveTable
from tracefuse_stream.analyze.medians import kth_without
from tracefuse_stream.analyze.p2p_steps import STEP_END
from tracefuse_stream.analyze.stragglers import Verdict
from tracefuse_stream.analyze.stretch import KeyCache, breakdown, key_cache
from tracefuse_stream.analyze.timeline import Breakdown, Key, Segments
from tracefuse_stream.gcpause import cyclic_gc_paused
from tracefuse_stream.plan.rankplan import RankPlan

TOP = 8  # contributors listed per (rank, step) in ``why``
TOP_BREAKDOWN = 5  # ... and in ``breakdown`` (every rank and step)


def segments_of(plan: RankPlan) -> Tuple[Optional[Segments], Optional[List[Any]], Optional[str]]:
    """The why's partitions of one file from a pass of its own: for a table that did not
    come from info's single pass (the merge's plan, the report page's); with the
    step-time figures the same pass computes (analyze/step_time.py: the merge's
    per-rank counters), None when the file could not be read."""
    from tracefuse_stream.analyze.onepass import scan_file  # the pass itself is info's

    fs = scan_file(plan, ("collectives",))
    if fs.scan is None:
        return None, None, fs.broken
    return fs.scan.timeline, list(fs.scan.step_time or []), fs.broken


def _rel(table: CollectiveTable, plan: RankPlan, abs_ns: int) -> int:
    """An aligned absolute time of the table as the file's own relative ns."""
    return abs_ns - int(plan.base_time_ns or 0) - int(plan.align_offset_ns or 0)


def why_instance(row: Any, rank: int, suspects: Set[int]) -> int:
    """The instance a straggler's why is about (:meth:`StepRow.why_at`), unless none of
    its other members can be the reference (all named stragglers or delayed ranks: a
    pair group whose other member only waited): then the step's instance, among those
    with such a member, where the rank arrives latest against them (from each one's step
    start; ``suspects``: the step's named stragglers and delayed ranks); -1: none."""
    at = row.why_at(rank)
    g = row.graph
    if at < 0 or g is None or at not in g.by_id:
        return at
    if any(q not in suspects for q in g.by_id[at].entries if q != rank):
        return at
    best, best_late = at, None
    for i in g.order.get(rank, []):
        inst = g.by_id[i]
        clean = sorted(
            e.start_ns - g.start[q] for q, e in inst.entries.items() if q != rank and q not in suspects
        )
        if clean:
            late = inst.entries[rank].start_ns - g.start[rank] - clean[(len(clean) - 1) // 2]
            if best_late is None or late > best_late:
                best, best_late = i, late
    return best


def step_breakdowns(
    table: CollectiveTable,
    by_id: Dict[int, Any],
    step: int,
    ids: Sequence[int],
    plans: Sequence[RankPlan],
    segments: Sequence[Optional[Segments]],
    pieces: bool = True,
    keys: Optional[KeyCache] = None,
) -> Dict[Tuple[int, int], Breakdown]:
    """(rank, instance id) -> the breakdown of its stretch in ``step``, from the step's
    start to the rank's arrival at each instance of ``ids``, summed from the pass's
    segments: one step at a time, so only one step's breakdowns are ever held
    (``pieces``, ``keys``: analyze/stretch.py ``breakdown``'s)."""
    out: Dict[Tuple[int, int], Breakdown] = {}
    for p, segs in zip(plans, segments):
        span = table.steps.get(p.rank, {}).get(step)
        if segs is None or span is None:
            continue
        for i in ids:
            e = by_id[i].entries.get(p.rank)
            if e is None:
                continue
            tid = e.event.tid
            ok = isinstance(tid, (int, str)) and not isinstance(tid, bool)  # a stream id, hashable
            gpu = tid if e.event.kind == "gpu" and ok else None
            bd = breakdown(segs, step, _rel(table, p, span[0]), _rel(table, p, e.start_ns), gpu, pieces, keys)
            if bd is not None:
                out[(p.rank, i)] = bd
    return out


class _Reference:
    """One instance's members at one step, sorted once: each rank's reference (the
    median rank of the other members, named stragglers and delayed ranks left out while
    any other member remains) and the others' lower median of any part, each in
    O(log n) per rank (issue 38: a step's every-rank breakdown was quadratic in ranks).
    A part is looked up in the members' whole breakdowns: its kind is of the one view
    (CPU or GPU) it is asked for, and a view holds every part of its kinds."""

    def __init__(self, members: Dict[int, Breakdown], suspects: Set[int]) -> None:
        self.members = members
        self.all = sorted((b.stretch_ns, q) for q, b in members.items())
        self.clean = sorted((b.stretch_ns, q) for q, b in members.items() if q not in suspects)
        self.suspects = suspects
        self._parts: Dict[Tuple[bool, Key], List[int]] = {}

    def rank(self, r: int) -> Optional[int]:
        """The reference rank of ``r`` (None: ``r`` has no other member)."""
        mine = (self.members[r].stretch_ns, r)
        pool = self.clean
        n = len(pool) - (0 if r in self.suspects else 1)
        if n <= 0:
            pool, n = self.all, len(self.all) - 1
        if n <= 0:
            return None
        k = (n - 1) // 2
        if r in self.suspects and pool is self.clean:
            return int(pool[k][1])
        return int(kth_without(pool, mine, k)[1])

    def others_median(self, r: int, gpu: bool, key: Key) -> int:
        """The lower median of ``key``'s time over the other members (0 where absent)."""
        vals = self._parts.get((gpu, key))
        if vals is None:
            vals = self._parts[(gpu, key)] = sorted(
                p.ns if (p := b.parts.get(key)) is not None else 0 for b in self.members.values()
            )
        if len(vals) <= 1:
            return 0
        mine = self.members[r].parts.get(key)
        return int(kth_without(vals, mine.ns if mine is not None else 0, (len(vals) - 2) // 2))


def _contributors(mine: Breakdown, ref: Breakdown, others_median: Any, top: int) -> List[Dict[str, Any]]:
    mp, rp = mine.parts, ref.parts
    ranked = [(-(p.ns - (rp[k].ns if k in rp else 0)), k) for k, p in mp.items()]
    ranked = [x for x in ranked if x[0] < 0]  # only the rank's extras (a part only the reference has: none)
    ranked.sort()  # the extras first, largest first (ties by kind and name): only the top rows are built
    rows = []
    for neg, key in ranked[:top]:
        extra = -neg
        a, b = mp.get(key), rp.get(key)
        kind, name = key
        where = (mine.stream if kind in ("kernel", "gpu_idle") else mine.main_thread) or "?"
        row: Dict[str, Any] = {
            "kind": kind, "name": name, "where": where, "extra_us": _us(extra),
            "count": a.count if a else 0, "others_count": b.count if b else 0,
            "rank_us": _us(a.ns if a else 0), "others_us": _us(b.ns if b else 0),
            "others_median_us": _us(others_median(key)),
            "piece_ns": list(a.piece) if a else None, "span_ns": list(a.span) if a else None,
        }  # fmt: skip
        row["note"] = _note(row)
        rows.append(row)
    return rows


def _past_top(mine: Breakdown, ref: Breakdown, top: int) -> float:
    """µs the rank spent beyond the reference in the parts past the ``top`` largest (what
    a list of ``top`` contributors leaves out, each part smaller than the last listed)."""
    rp = ref.parts
    extras = sorted((p.ns - (rp[k].ns if k in rp else 0) for k, p in mine.parts.items()), reverse=True)
    return _us(sum(x for x in extras[top:] if x > 0))


def _suspects(verdict: Verdict) -> Tuple[Dict[int, Set[int]], Dict[Optional[int], Dict[int, int]]]:
    """(step -> its named stragglers and delayed ranks: never a why's reference; step ->
    rank -> the step-start skew that counts as lateness)."""
    suspects: Dict[int, Set[int]] = {
        row.step: set(row.stragglers) for row in verdict.by_step if row.step is not None
    }
    for d in verdict.delayed:
        if d.step is not None:
            suspects.setdefault(d.step, set()).add(d.rank)
    skew_of = {row.step: row.graph.late_skew for row in verdict.by_step if row.graph is not None}
    return suspects, skew_of


def _with_skew(
    contributors: List[Dict[str, Any]], skew_ns: int, where: str, tail: Optional[Dict[str, Any]] = None
) -> List[Dict[str, Any]]:
    """The contributors with the late entry into the step (lateness the stretch, from
    the rank's own step start, cannot show), most extra first."""
    if skew_ns <= 0:
        return contributors
    return sorted([_entered_late(skew_ns, where, tail)] + contributors, key=lambda c: -c["extra_us"])


class _EnteredWhere:
    """Where a late entry into a step comes from: before the profiled window (its first
    step), or the previous step's tail: the rank's own work after its last collective
    there, against the other ranks' median (analyze/graph.py's tail gaps). The steps
    and each step's sorted tails are looked up once, not per rank."""

    def __init__(
        self,
        verdict: Verdict,
        table: Optional[CollectiveTable] = None,
        plans: Sequence[RankPlan] = (),
        segments: Sequence[Optional[Segments]] = (),
    ) -> None:
        self.steps = [x for x in verdict.by_step if x.step is not None]
        self.by_step = {x.step: x for x in self.steps}
        self._tails: Dict[int, List[int]] = {}
        self.table, self.plans, self.segments = table, plans, segments
        self._tail_refs: Dict[int, _Reference] = {}  # one step's tails at a time

    def _prev(self, rank: int, step: Optional[int]) -> Any:
        prev = self.by_step.get(step - 1) if step is not None else None
        g = prev.graph if prev is not None else None
        if prev is None or prev.step is None or g is None or (rank, -1) not in g.offset:
            return None
        return prev

    def text(self, rank: int, step: Optional[int], skew_ns: int) -> str:
        if not self.steps or self.steps[0].step == step:
            return "before the profiled window"
        prev = self._prev(rank, step)
        if prev is None:
            return "before the step (its previous step is not profiled)"
        g = prev.graph
        tails = self._tails.get(prev.step)
        if tails is None:
            tails = self._tails[prev.step] = sorted(max(0, g.offset[(q, -1)]) for q in g.order)
        mine = max(0, g.offset[(rank, -1)])
        extra = mine - (kth_without(tails, mine, (len(tails) - 1) // 2) if len(tails) > 1 else 0)
        if 2 * extra < skew_ns:
            return f"between steps (its step {prev.step} ended on time: not in a profiled step)"
        return (f"before the step: after its last collective of step {prev.step} it worked "
                f"{extra / 1e6:.1f} ms more than the others' median")  # fmt: skip

    def tail(self, rank: int, step: Optional[int], ref_rank: int, top: int) -> Optional[Dict[str, Any]]:
        """What the rank did in the previous step's tail (from its last collective's
        departure, or last arrival, to its step end: analyze/graph.py's tail) beyond
        the reference rank's tail: operators by self time and gaps, most extra first.
        None when a tail was not cut by the pass (:func:`onepass._last_ends`)."""
        prev = self._prev(rank, step)
        if prev is None or self.table is None:
            return None
        at = self._tail_refs.get(prev.step)
        if at is None:  # the others' medians of one step's tails, sorted once for its ranks
            at = _Reference(self._tails_of(prev.step, prev.graph), set())
            self._tail_refs = {prev.step: at}
        mine, ref = at.members.get(rank), at.members.get(ref_rank)
        if mine is None or ref is None:
            return None
        rows = _contributors(
            _view(mine, False), _view(ref, False), lambda k: at.others_median(rank, False, k), top
        )
        for c in rows:
            del c["piece_ns"], c["span_ns"]
        return {
            "step": prev.step, "reference_rank": ref_rank, "rank_us": _us(mine.stretch_ns),
            "reference_us": _us(ref.stretch_ns), "contributors": rows,
        }  # fmt: skip

    def _tails_of(self, step: int, g: Any) -> Dict[int, Breakdown]:
        assert self.table is not None
        out: Dict[int, Breakdown] = {}
        for p, segs in zip(self.plans, self.segments):
            r = p.rank
            if segs is None or (r, -1) not in g.offset:
                continue
            hi = g.end[r]
            bd = breakdown(segs, step, _rel(self.table, p, hi - g.offset[(r, -1)]), _rel(self.table, p, hi))
            if bd is not None:
                out[r] = bd
        return out


def _entered_late(skew_ns: int, name: str, tail: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The contributor for a rank that entered the step late (analyze/graph.py's skew);
    ``tail``: the previous step's tail broken down (:meth:`_EnteredWhere.tail`), when
    that is where the late entry comes from."""
    return {
        "kind": "entered_late", "name": name, "where": "step start", "extra_us": _us(skew_ns),
        "count": 1, "others_count": 0, "rank_us": _us(skew_ns), "others_us": 0.0, "others_median_us": 0.0,
        "piece_ns": None, "span_ns": None, "note": "", "tail": tail,
    }  # fmt: skip


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


class Explain:
    """The why of each named straggler and the breakdown of every rank and step, each
    step's breakdowns computed, compared and dropped in turn (issue 38: every rank's
    breakdowns at once took ~0.3 MB a rank). :attr:`why` is a list; iterating
    :meth:`every_rank` computes the breakdown entries then, one step at a time (the
    ``--json`` writer takes them as they come, report/json_stream.py)."""

    def __init__(
        self,
        table: CollectiveTable,
        verdict: Verdict,
        plans: Sequence[RankPlan],
        segments: Sequence[Optional[Segments]],
    ) -> None:
        self.table, self.verdict, self.plans, self.segments = table, verdict, plans, segments
        self.by_id = {i.id: i for i in table.instances}
        # a pipeline step's end (analyze/p2p_steps.py): each rank's stretch is then its whole step
        for row in verdict.by_step:
            for end in row.graph.ends if row.graph is not None else []:
                self.by_id[end.id] = end
        self.suspects, self.skew_of = _suspects(verdict)
        self.own_of = {x.step: x.own for x in verdict.by_step}
        self.entered = _EnteredWhere(verdict, table, plans, segments)
        self.keys = key_cache()  # the parts' keys, one tuple each for every rank and step
        self.why = self._why()

    def _why(self) -> List[Dict[str, Any]]:
        at: Dict[int, List[Tuple[Tuple[int, int], int, int]]] = {}  # step -> (order, rank, instance)
        for n, s in enumerate(self.verdict.stragglers):
            for k, row in enumerate(self.verdict.by_step):
                if row.step is None or row.step not in s.steps:
                    continue
                inst_id = why_instance(row, s.rank, self.suspects.get(row.step, set()))
                if inst_id >= 0:
                    at.setdefault(row.step, []).append(((n, k), s.rank, inst_id))
        out: List[Tuple[Tuple[int, int], Dict[str, Any]]] = []
        for step, todo in at.items():
            step_ = _Step(self, step, sorted({i for _o, _r, i in todo}), pieces=True)
            for order, rank, inst_id in todo:
                e = step_.entry(rank, inst_id, TOP)
                if e is not None:
                    out.append((order, e))
        return [e for _o, e in sorted(out, key=lambda x: x[0])]

    def every_rank(self) -> Iterator[Dict[str, Any]]:
        """One entry per rank and step, at the step's worst instance. The cyclic
        collector is paused while a step's breakdowns and each entry are made (never
        across a ``yield``): they are ~40 parts a rank and make no cycles, and its walks
        over them were ~4% of ``--json`` at 1,024 ranks (gcpause.py)."""
        for row in self.verdict.by_step:
            if row.step is None or row.worst_instance is None:
                continue
            with cyclic_gc_paused():
                step_ = _Step(self, row.step, [row.worst_instance], pieces=False)  # the pieces: dropped below
            for r in sorted(self.by_id[row.worst_instance].entries):
                with cyclic_gc_paused():
                    e = step_.entry(r, row.worst_instance, TOP_BREAKDOWN)
                if e is not None:
                    for c in e["contributors"] + e["cpu_side"]:
                        c.pop("piece_ns", None)
                        c.pop("span_ns", None)
                    yield e


class EveryRank:
    """Every rank's breakdown, computed each time it is iterated (one step at a time)."""

    def __init__(self, explain: Optional[Explain]) -> None:
        self._explain = explain

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return self._explain.every_rank() if self._explain is not None else iter(())


class _Step:
    """One step's breakdowns at some instances, the references and views of them
    (``pieces``: each part's largest piece and span kept, for the why; the every-rank
    breakdown shows neither)."""

    def __init__(self, ex: Explain, step: int, ids: Sequence[int], pieces: bool) -> None:
        self.ex, self.step = ex, step
        self.bds = step_breakdowns(ex.table, ex.by_id, step, ids, ex.plans, ex.segments, pieces, ex.keys)
        # the references' views only (a few ranks): one of every member's took ~3.6 KB a rank
        self.views: Dict[Tuple[int, bool], Breakdown] = {}  # id() of this step's breakdowns: alive with it
        self.refs: Dict[int, _Reference] = {}

    def view(self, bd: Breakdown, gpu: bool) -> Breakdown:
        v = self.views.get((id(bd), gpu))
        if v is None:
            v = self.views[(id(bd), gpu)] = _view(bd, gpu)
        return v

    def reference(self, inst_id: int) -> _Reference:
        at = self.refs.get(inst_id)
        if at is None:
            members = {
                q: self.bds[(q, inst_id)] for q in self.ex.by_id[inst_id].entries if (q, inst_id) in self.bds
            }
            at = self.refs[inst_id] = _Reference(members, self.ex.suspects.get(self.step, set()))
        return at

    def entry(self, r: int, inst_id: int, top: int) -> Optional[Dict[str, Any]]:
        ex, step, view = self.ex, self.step, self.view  # ``view``: the reference's, kept
        inst = ex.by_id[inst_id]
        mine = self.bds.get((r, inst_id))
        if mine is None:
            return None
        at = self.reference(inst_id)
        ref_rank = at.rank(r)
        if ref_rank is None:
            return None
        ref = at.members[ref_rank]
        # a pipeline's step end reads the GPU where its pairs are NCCL kernels
        gpu = inst.match != "gloo order" and (
            inst.match != STEP_END or all(e.event.kind == "gpu" for e in inst.entries.values())
        )
        mine_views = (_view(mine, False), _view(mine, True))  # made once: read up to three times
        cpu_c = _contributors(mine_views[0], view(ref, False), lambda k: at.others_median(r, False, k), top)
        gpu_c = (
            _contributors(mine_views[1], view(ref, True), lambda k: at.others_median(r, True, k), top)
            if gpu
            else []
        )
        primary_gpu = gpu and bool(mine_views[1].parts)
        skew = ex.skew_of.get(step, {}).get(r, 0)
        where = ex.entered.text(r, step, skew) if skew > 0 else ""
        tail = ex.entered.tail(r, step, ref_rank, top) if where.startswith("before the step: ") else None
        primary = _with_skew(gpu_c if primary_gpu else cpu_c, skew, where, tail)
        past = _past_top(mine_views[primary_gpu], view(ref, primary_gpu), top)
        lateness = mine.stretch_ns - ref.stretch_ns + skew
        explained = round(sum(c["extra_us"] for c in primary), 3)
        own = ex.own_of.get(step, {}).get(r, 0)
        # a rank whose own extra time reached the others before this collective (through
        # send/recv or another group: a pipeline stage) is hardly later here; what its
        # parts explain is then that own extra time, never a multiple of a tiny lateness
        by_own = 2 * max(lateness, 0) < own
        target = own if by_own else lateness
        share = round(explained * 1000.0 / target, 3) if target > 0 else None
        cpu_side = cpu_c if primary_gpu else []
        return {
            "rank": r, "step": step, "collective": f"{inst.name} #{inst.id}", "instance": inst.id,
            "lateness_us": _us(lateness), "explained_us": explained, "share": share,
            "explains": "own_lateness" if by_own else "lateness",
            "unexplained_us": round(_us(target) - explained, 3),
            "past_top_us": past,  # of it, in the parts past the listed ones
            "reference_rank": ref_rank, "stretch_us": _us(mine.stretch_ns), "reference_stretch_us": _us(ref.stretch_ns),
            "entered_late_us": _us(skew),
            "own_lateness_us": _us(own),
            "view": "gpu" if primary_gpu else "cpu",
            "contributors": primary,  # the primary view only, most extra first, summing to explained_us
            "cpu_side": cpu_side,  # on GPU traces: the CPU side that launched them, most extra first
            "cpu_side_us": round(sum(c["extra_us"] for c in cpu_side), 3),  # what that list sums to
        }  # fmt: skip


def _view(bd: Breakdown, gpu: bool) -> Breakdown:
    kinds = ("kernel", "gpu_idle") if gpu else ("op", "outside_ops")
    return Breakdown(
        bd.stretch_ns, {k: p for k, p in bd.parts.items() if k[0] in kinds}, bd.main_thread, bd.stream
    )


__all__ = ["TOP", "EveryRank", "Explain", "segments_of", "step_breakdowns"]
