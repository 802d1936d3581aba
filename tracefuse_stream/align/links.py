"""``merge --link-collectives``: flow arrows joining each collective instance across ranks.

Why: clicking a collective in Perfetto should walk to the same collective on the
other ranks, in order of arrival, and show how long this rank waited and who came
last. The instances come from :mod:`tracefuse_stream.align.collectives` (one pass over
collective events only, before streaming); the links are added while each rank
streams, without touching the rewrite rules' hot loop: :class:`CollectiveLinker` wraps
``RankRewriter.feed_batch`` and does work only for batches that hold a linked slice.

The links (see docs/OUTPUT_FORMAT.md):

* an instance on k ranks gets k-1 flows, earliest arrival -> next -> ... -> last;
  each flow is an ``s`` on the earlier rank's slice and an ``f`` with ``bp: "e"`` on
  the later rank's slice, both at the slice start + min(1 µs, dur/2) (strictly inside
  the slice, so Perfetto binds them to it);
* ``cat`` and ``name`` are both ``"collective"`` (:data:`LINK_CAT`), and the ids are
  ``(max merged rank + 1) * 2**32 + j``, j = 1, 2, ...: above every rank's own id space
  (``r * 2**32 + id``), so they cannot meet any rank's flow, whatever its cat/name;
* every linked slice gets ``args.collective_wait_us`` (last arrival - own arrival, µs),
  ``args.collective_last_rank`` and ``args.collective_instance`` (the ``info
  --collectives`` instance id);
* each linked send/recv pair (align/p2p.py: recorded with shapes) gets one arrow, from
  the ``gloo:send`` slice to the ``gloo:recv`` slice it delivered to: ``cat``
  ``"collective"``, ``name`` ``"send/recv"`` (:data:`PAIR_NAME`), ids from the same
  counter after the instances' (never one of theirs), the ``s`` at the send's start +
  min(1 µs, dur/2) and the ``f`` at the recv's *end* - min(1 µs, dur/2) (the data
  arrives when the recv ends; a recv may be posted long before the send: the arrow
  still points forward in time). Their slices get the same three args (the instance
  id is the pair's).

Instances are linked only when all their slices are kept by the merge's filters and
window and land in one output file (``--split-ranks``); the rest are counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from tracefuse_stream.align.collectives import (
    CollectiveTable,
    Instance,
    RankScan,
    match_instances,
    pg_config_of,
    pg_count_of,
    scan_collectives,
)
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.timeunits import us_to_ns_or_none
from tracefuse_stream.workers import parallel_map

LINK_CAT = "collective"
LINK_NAME = "collective"
PAIR_NAME = "send/recv"  # a linked send/recv pair's arrow (same cat and id space)
WAIT_ARG = "collective_wait_us"
LAST_ARG = "collective_last_rank"
INSTANCE_ARG = "collective_instance"
ID_BITS = 32
INSIDE_NS = 1000  # flow ts = slice start + min(this, dur / 2)


def is_collective_link(cat: Any, name: Any, flow_id: Any, rank: Any) -> bool:
    """True for a flow event this tool wrote for ``--link-collectives`` (the verifier
    accepts these across ranks and nothing else): its cat/name and an id above the
    id space of the rank it sits on."""
    return (cat == LINK_CAT and name in (LINK_NAME, PAIR_NAME) and type(flow_id) is int
            and type(rank) is int and flow_id >> ID_BITS > rank)  # fmt: skip


class LinkSpec(NamedTuple):
    """What to do to one slice of one rank."""

    pos: int  # position in the file's event array
    name: str
    ts_ns: int  # the slice's own ts, in ns (to recognise it)
    dur_ns: int
    args: Tuple[Tuple[str, Any], ...]
    flows: Tuple[Tuple[str, int], ...]  # ("s" | "f", id)
    pair: bool = False  # a send/recv pair's slice: its flow is named PAIR_NAME, an "f" sits at the end


@dataclass
class LinkPlan:
    """Per-rank link specs (by file position) and what could not be linked."""

    by_rank: Dict[int, List[LinkSpec]] = field(default_factory=dict)
    instances: int = 0
    flows: int = 0
    pairs: int = 0  # send/recv pairs linked (one arrow each)
    filtered: int = 0
    across_files: int = 0
    table: Optional[CollectiveTable] = None
    linked: Dict[int, List[Instance]] = field(default_factory=dict)  # output file -> linked instances
    #: output file -> linked send/recv pairs: what the summary stands on in a pure pipeline
    #: (no instance linked: report/summary_track.py)
    linked_pairs: Dict[int, List[Instance]] = field(default_factory=dict)
    summary_notes: List[str] = field(default_factory=list)  # what align/summary_track.py wrote
    summary_events: int = 0  # events of the Collectives process written (slices, labels, why tracks)
    analysis: Any = None  # the summary's analysis, made once (report/summary_track.link_analysis)
    counters: Dict[int, Any] = field(
        default_factory=dict
    )  # rank -> its step counters (report/step_counters.py)

    def notes(self) -> List[str]:
        t = self.table
        # one unit with the summary's totals: flow events (an arrow is two: its start and its end)
        text = (
            f"collective links: {self.instances} instance(s) linked by {2 * self.flows} flow events "
            f"({self.flows} arrow(s), a start and an end event each)"
        )
        skipped = []
        if self.filtered:
            skipped.append(f"{self.filtered} with a slice dropped by the filters or window")
        if self.across_files:
            skipped.append(f"{self.across_files} spanning several --split-ranks files")
        if t is not None and t.unmatched_total:
            skipped.append(f"{t.unmatched_total} not matched across all their ranks (see info --collectives)")
        if self.pairs:
            text += f"; {self.pairs} send/recv pair(s) linked by {self.pairs} arrow(s) named {PAIR_NAME!r}, send -> recv"
        if skipped:
            text += "; not linked: " + ", ".join(skipped)
        if self.instances:
            text += ("; JSON outputs get a 'Collectives' process (sorted first): one slice per linked "
                     "instance, each rank's wait per step")  # fmt: skip
        elif self.pairs:
            text += ("; JSON outputs get a 'Collectives' process (sorted first): each rank's wait in "
                     "its send/recv pairs per step")  # fmt: skip
        return [text] + ([f"collective links: {n}" for n in t.notes] if t is not None else [])


def _scan_kept(path: str, rank: int, base: Optional[int], offset: int, flt: EventFilter) -> RankScan:
    def keep(event: Dict[str, Any], start_ns: int, dur_ns: int) -> bool:
        return flt.keep(event) and flt.in_window(start_ns + offset, dur_ns)

    return scan_collectives(path, rank, base, keep)


def plan_links(
    plans: Sequence[RankPlan], flt: EventFilter, groups: Sequence[Sequence[RankPlan]], jobs: int
) -> LinkPlan:
    """Match the instances of ``plans`` (aligned times) and decide every link."""
    scans = parallel_map(
        _scan_kept, [(p.path, p.rank, p.base_time_ns, p.align_offset_ns, flt) for p in plans], jobs
    )
    table = match_instances(
        {p.rank: s for p, s in zip(plans, scans)},
        {p.rank: pg_config_of(p.header) for p in plans},
        {p.rank: p.host_name for p in plans},
        {p.rank: p.align_offset_ns for p in plans},
        {p.rank: pg_count_of(p.header) for p in plans},
    )
    file_of = {p.rank: gi for gi, g in enumerate(groups) for p in g}
    out = LinkPlan(by_rank={p.rank: [] for p in plans}, table=table)
    next_id = (max((p.rank for p in plans), default=-1) + 1) << ID_BITS
    for inst in table.instances:
        if not _linkable(inst, file_of, out):
            continue
        order = inst.arrival_order
        flows: Dict[int, List[Tuple[str, int]]] = {r: [] for r in order}
        for a, b in zip(order, order[1:]):
            next_id += 1
            flows[a].append(("s", next_id))
            flows[b].append(("f", next_id))
        out.instances += 1
        out.flows += len(order) - 1
        out.linked.setdefault(file_of[order[0]], []).append(inst)
        for r in order:
            e = inst.entries[r].event
            out.by_rank[r].append(
                LinkSpec(e.pos, e.name, e.ts_ns, e.dur_ns, _slice_args(inst, r), tuple(flows[r]))
            )
    _link_pairs(table, file_of, out, next_id)
    for specs in out.by_rank.values():
        specs.sort()
    return out


def _linkable(inst: Any, file_of: Dict[int, int], out: LinkPlan) -> bool:
    """All of the instance's (or pair's) slices kept, in one output file; else counted
    in ``out`` as not linked, and why."""
    if not all(e.event.kept for e in inst.entries.values()):
        out.filtered += 1
        return False
    if len({file_of.get(r) for r in inst.entries}) != 1:
        out.across_files += 1
        return False
    return True


def _slice_args(inst: Any, r: int) -> Tuple[Tuple[str, Any], ...]:
    """The args a linked slice of rank ``r`` gets (the module docstring)."""
    return (
        (WAIT_ARG, round(inst.wait_ns(r) / 1000.0, 3)),
        (LAST_ARG, inst.last_rank),
        (INSTANCE_ARG, inst.id),
    )


def _link_pairs(table: CollectiveTable, file_of: Dict[int, int], out: LinkPlan, next_id: int) -> None:
    """One arrow per linked send/recv pair, send -> recv (ids go on from ``next_id``);
    a pair with a slice dropped or in two files is counted as an instance's would be.
    A batched SendRecv kernel (align/coalesced.py) is a side of several pairs: one spec
    for its slice with every pair's flow (its args the first pair's), since the
    streaming linker finds each slice once."""
    at: Dict[Tuple[int, int], int] = {}  # (rank, pos) -> its spec's index in by_rank[rank]
    for inst in table.p2p_pairs:
        if not _linkable(inst, file_of, out):
            continue
        if inst.sender is None:  # no side to start the arrow from: counted with the file splits
            out.across_files += 1
            continue
        next_id += 1
        out.pairs += 1
        out.linked_pairs.setdefault(file_of[inst.sender], []).append(inst)
        for r, e in inst.entries.items():
            ph = "s" if r == inst.sender else "f"
            ev = e.event
            k = at.get((r, ev.pos))
            if k is not None:
                old = out.by_rank[r][k]
                out.by_rank[r][k] = old._replace(flows=old.flows + ((ph, next_id),))
                continue
            at[(r, ev.pos)] = len(out.by_rank[r])
            out.by_rank[r].append(
                LinkSpec(ev.pos, ev.name, ev.ts_ns, ev.dur_ns, _slice_args(inst, r), ((ph, next_id),), True)
            )


class CollectiveLinker:
    """Wraps a rank's ``feed_batch``: adds the args to the linked slices and puts their
    flow events right after them, on the slice's (rewritten) pid and tid."""

    def __init__(self, rewriter: Any, specs: Sequence[LinkSpec], shift_ns: int) -> None:
        self.rw = rewriter
        self.feed = rewriter.feed_batch
        self.specs = list(specs)
        self.pos = 0
        self.shift_ns = shift_ns
        self.not_found = 0
        self.flows_added = 0  # the flow events this linker wrote (the summary counts them apart)

    def feed_batch(self, batch: Sequence[Any]) -> List[Any]:
        specs, pos = self.specs, self.pos
        start = self.rw.index + 1
        end = start + len(batch)
        if pos >= len(specs) or specs[pos].pos >= end:
            return self.feed(batch)
        hits: List[Tuple[LinkSpec, Any]] = []
        while pos < len(specs) and specs[pos].pos < end:
            spec = specs[pos]
            pos += 1
            ev = batch[spec.pos - start] if spec.pos >= start else None
            if (
                type(ev) is dict
                and ev.get("name") == spec.name
                and us_to_ns_or_none(ev.get("ts")) == spec.ts_ns
            ):
                hits.append((spec, ev))
            else:
                self.not_found += 1
        self.pos = pos
        kept = self.feed(batch)
        return self._link(kept, hits) if hits else kept

    def _link(self, kept: List[Any], hits: List[Tuple[LinkSpec, Any]]) -> List[Any]:
        where = {id(ev): spec for spec, ev in hits}
        out: List[Any] = []
        added = 0
        for ev in kept:
            out.append(ev)
            spec = where.pop(id(ev), None)
            if spec is None:
                continue
            args = ev.get("args")
            if type(args) is dict:
                args.update(spec.args)
            inside = min(INSIDE_NS, spec.dur_ns // 2)
            ts = _us(spec.ts_ns + self.shift_ns + inside)
            for ph, fid in spec.flows:
                at = _us(spec.ts_ns + self.shift_ns + spec.dur_ns - inside) if spec.pair and ph == "f" else ts
                flow = {"ph": ph, "cat": LINK_CAT, "name": PAIR_NAME if spec.pair else LINK_NAME, "id": fid,
                        "pid": ev["pid"], "tid": ev["tid"], "ts": at, "args": {"rank": self.rw.rank}}  # fmt: skip
                if ph == "f":
                    flow["bp"] = "e"
                out.append(flow)
                added += 1
        self.not_found += len(where)
        self.rw.events_out += added
        self.flows_added += added
        return out

    def warnings(self, path: str) -> List[str]:
        if not self.not_found:
            return []
        return [f"{path}: --link-collectives: {self.not_found} collective slice(s) not found again while "
                "streaming; their flows are incomplete"]  # fmt: skip


def _us(ns: int) -> Any:
    """Exact µs for a ts: an int when whole, else a Decimal with its ns digits."""
    return ns // 1000 if ns % 1000 == 0 else Decimal(ns).scaleb(-3)


def links_for(plan: Optional[LinkPlan], rank: int) -> Optional[Tuple[LinkSpec, ...]]:
    if plan is None:
        return None
    return tuple(plan.by_rank.get(rank, ()))


__all__ = [
    "CollectiveLinker",
    "INSTANCE_ARG",
    "LAST_ARG",
    "LINK_CAT",
    "LINK_NAME",
    "LinkPlan",
    "LinkSpec",
    "PAIR_NAME",
    "WAIT_ARG",
    "is_collective_link",
    "links_for",
    "plan_links",
]
