"""Collective instances matched across ranks: who arrived when, who arrived last.

Why: the rank that holds a job back is the one that arrives last at its collectives;
everybody else waits inside the collective for it. A merged timeline shows this only
to a patient eye. This module finds each collective *instance* (one all-reduce of one
step, say) on every rank that took part, from one streaming pass per rank that keeps
collective events only (memory grows with the number of collectives, never with the
trace), and gives each rank's arrival (start), end and the instance's last arrival.

What counts as the collective, and how an instance is recognised on every rank:

* **GPU (NCCL/RCCL kernels)**, as :mod:`tracefuse_stream.align.clock` reads them: with a
  ``Seq`` / ``Comms Id`` arg the key is (process group, collective, seq): the same on
  every participant; coalesced kernels under one seq are one instance (first start,
  last end). Without them, the i-th kernel of one name on one stream of one process
  group, in start order. Participants: ``Process Group Ranks``, else the group's
  ``ranks`` in ``distributedInfo.pg_config``, else every merged rank.
* **CPU-only gloo jobs**: the ``gloo:*`` ``user_annotation`` ops on gloo's runloop
  threads (``gloo:all_reduce`` lasts the real collective; the ``c10d::*`` op on the
  main thread only enqueues it). Kineto writes no process group, collective name or
  sequence number for them: each op is first attributed to one of the rank's process
  groups (:mod:`tracefuse_stream.align.gloo_groups`: thread blocks in creation order,
  decided by the other ranks), then each group's ops are matched across its ranks in
  the group's order of issue (:mod:`tracefuse_stream.align.sequences`), with or without
  recorded shapes. An instance is never made of ops of two groups.

An instance is *matched* only when every participant among the merged ranks has it,
and when on each host (one clock) no participant's collective ends before another
participant arrives -- which an order-based match that is off by one (a profiling
window that starts inside a step) violates. Everything else is counted and
reported with a reason, never guessed.

Each instance also carries the ``ProfilerStep#N`` its lowest rank was in when it
arrived (the scan keeps those few step events too), for the per-step report.

Times are absolute epoch ns; ``offsets`` (the ``--align collectives`` corrections)
are added before anything is compared.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from tracefuse_stream.align import gloo_groups
from tracefuse_stream.align.clock import is_collective_kernel
from tracefuse_stream.align.coalesced import (
    COALESCED,
    COMMS_OP,
    CoalescedMark,
    CommsCall,
    keep_batch_event,
    read_batches,
)
from tracefuse_stream.align.collective_event import STEP_PREFIX, CollectiveEvent, Entry, _describe, _step_of
from tracefuse_stream.align.gpu_match import match_gpu
from tracefuse_stream.align.instance_ends import FAR_CLOCK_NS, check_ends, drop_apart, far_clock_note
from tracefuse_stream.align.p2p import (
    ANY_SOURCE,
    GLOO_P2P,
    P2P_CALLS,
    P2pCall,
    match_pairs,
    p2p_call,
    p2p_ops,
)
from tracefuse_stream.align.p2p import link_notes as p2p_link_notes
from tracefuse_stream.align.pg_config import PgConfig, pg_config_of, pg_count_of
from tracefuse_stream.align.sequences import match_group
from tracefuse_stream.align.step_spans import step_spans
from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.read.events import decode_args, iter_event_batches
from tracefuse_stream.read.scan import ScanSelection, Tally
from tracefuse_stream.read.sources import PathLike
from tracefuse_stream.timeunits import analysable, us_to_ns_or_none

GLOO_PREFIX = "gloo:"
#: point-to-point gloo ops: not collectives (no group-wide instance), linked apart (align/p2p.py)
P2P_GLOO = frozenset(GLOO_P2P) | ANY_SOURCE
GLOO_CAT = "user_annotation"
#: what the compiled kernel hands over for a collective scan (a superset: checked again);
#: the c10d send/recv ops for their peer and tag (few: one per point-to-point op)
COLLECTIVE_SELECTION = ScanSelection(
    ph="X",
    name_contains=("gloo:", STEP_PREFIX, "nccl", "rccl", *P2P_CALLS),
    text_contains='"Collective name"',
)


@dataclass
class RankScan:
    """The collective events and ``ProfilerStep`` spans of one rank."""

    rank: int
    base_ns: int
    events: List[CollectiveEvent] = field(default_factory=list)
    steps: Dict[int, Tuple[int, int]] = field(default_factory=dict)  # step -> (ts_ns, end_ns), file-relative
    error: Optional[str] = None
    timeline: Any = None  # the why's partitions from the same pass (report/timeline.Segments), if made
    far: int = 0  # collective and step events left out: times beyond the analysis' range (analysable)
    step_time: List[Any] = field(default_factory=list)  # analyze/step_time.StepTime per step, if made
    p2p_calls: List[P2pCall] = field(default_factory=list)  # c10d::send / c10d::recv_ (peer, tag)
    comms_calls: List[CommsCall] = field(default_factory=list)  # send/recv record_param_comms
    coalesced: List[CoalescedMark] = field(default_factory=list)  # nccl:coalesced, CPU and GPU
    #: the External ids of the plain NCCL send/recv kernels: their record_param_comms
    #: are no batch's ops (align/coalesced.py)
    plain_p2p_ids: Set[Any] = field(default_factory=set)


def is_gloo_op(event: Mapping[str, Any]) -> bool:
    """A gloo collective as Kineto records it: ``gloo:<op>`` on a runloop thread."""
    name = event.get("name")
    return event.get("cat") == GLOO_CAT and isinstance(name, str) and name.startswith(GLOO_PREFIX)


class CollectiveCollector:
    """Feeds on a rank's events (whole or as the kernel selected them) and keeps its
    collective events and ``ProfilerStep`` spans: the per-event work of a collective
    scan, shared with ``info``'s single pass (report/scan_all.py)."""

    def __init__(self, scan: RankScan, keep: Optional[Callable[[Dict[str, Any], int, int], bool]]) -> None:
        self.scan = scan
        self.keep = keep

    def feed(self, event: Any, index: int) -> None:
        if type(event) is not dict:
            return
        name = event.get("name")
        if type(name) is not str:
            return
        if name.startswith(STEP_PREFIX):
            step = _step_of(event, self.scan.base_ns)
            if step is None:
                self._count_far(event)
            else:
                old = self.scan.steps.get(step[0])
                lo, hi = step[1:] if old is None else (min(old[0], step[1]), max(old[1], step[2]))
                self.scan.steps[step[0]] = (lo, hi)
            return
        cat = event.get("cat")
        if cat == "cpu_op":
            call = p2p_call(event, self.scan.base_ns) if name in P2P_CALLS else None
            if call is not None:
                self.scan.p2p_calls.append(call)
            if name == COMMS_OP:  # a batched kernel's op (align/coalesced.py)
                keep_batch_event(self.scan, event)
            return
        if name == COALESCED:  # a batch's annotation (align/coalesced.py), CPU or GPU side
            keep_batch_event(self.scan, event)
            return
        if cat == "kernel":  # args may still be raw JSON (projected events): decoded to judge
            event["args"] = decode_args(event)
            if not is_collective_kernel(event):
                return
        elif cat != GLOO_CAT or not name.startswith(GLOO_PREFIX):
            return
        else:
            event["args"] = decode_args(event)
        ce = _describe(event, index, True, self.scan.base_ns)
        if ce is None:
            self._count_far(event)
            return
        if self.keep is not None and not self.keep(event, self.scan.base_ns + ce.ts_ns, ce.dur_ns):
            ce = ce._replace(kept=False)
        if ce.nccl_p2p in ("send", "recv"):
            ext = event["args"].get("External id") if isinstance(event.get("args"), dict) else None
            if type(ext) in (int, str):
                self.scan.plain_p2p_ids.add(ext)
        self.scan.events.append(ce)

    def _count_far(self, event: Dict[str, Any]) -> None:
        """Count an event left out for a time beyond the analysis' range (a note says so)."""
        ts, dur = us_to_ns_or_none(event.get("ts")), us_to_ns_or_none(event.get("dur", 0))
        if ts is not None and dur is not None and not analysable(self.scan.base_ns, ts, dur):
            self.scan.far += 1


def scan_collectives(
    path: PathLike,
    rank: int,
    base_time_ns: Optional[int],
    keep: Optional[Callable[[Dict[str, Any], int, int], bool]] = None,
    positions: bool = True,
) -> RankScan:
    """One streaming pass over ``path`` keeping only its collective events (and steps).

    ``keep(event, start_ns, dur_ns)`` says whether the merge will keep an event
    (filters and window; ``start_ns`` absolute); None: all are kept. ``positions``:
    record each event's position in the file (what the merge's links need); without
    it the compiled kernel skips every other event unread (``pos`` is then -1). A
    file that turns out broken midway keeps what was read (``error`` says why);
    missing files raise.
    """
    scan = RankScan(rank, int(base_time_ns or 0))
    collector = CollectiveCollector(scan, keep)
    index = -1
    select = None if positions else COLLECTIVE_SELECTION
    try:
        for batch in iter_event_batches(
            path, what="looking for collectives", select=select, tally=None if positions else Tally()
        ):
            for event in batch:
                index += 1
                collector.feed(event, index if positions else -1)
    except InputError as e:
        if e.kind in (ErrorKind.MISSING, ErrorKind.UNREADABLE):
            raise
        scan.error = e.problem
    read_batches(path, scan)
    return scan


@dataclass
class Instance:
    """One collective instance matched on all its ranks."""

    id: int
    name: str
    group: str
    match: str  # "seq", "order" (GPU kernels without seq), "gloo order"
    entries: Dict[int, Entry]
    step: Optional[int] = None  # ProfilerStep#N of its lowest rank at arrival; None outside steps
    sender: Optional[int] = None  # a point-to-point pair (align/p2p.py): its sending rank

    @property
    def ranks(self) -> List[int]:
        return sorted(self.entries)

    @property
    def arrival_order(self) -> List[int]:
        return sorted(self.entries, key=lambda r: (self.entries[r].start_ns, r))

    _last: Optional[int] = field(default=None, init=False, repr=False, compare=False)

    @property
    def last_rank(self) -> int:
        """arrival_order's last, once (entries never change once the instance is made)."""
        if self._last is None:
            self._last = max(self.entries, key=lambda r: (self.entries[r].start_ns, r))
        return self._last

    @property
    def last_arrival_ns(self) -> int:
        return self.entries[self.last_rank].start_ns

    @property
    def first_arrival_ns(self) -> int:
        return min(e.start_ns for e in self.entries.values())

    @property
    def spread_ns(self) -> int:
        """Last arrival - first arrival: how long the earliest rank waited."""
        return self.last_arrival_ns - self.first_arrival_ns

    def wait_ns(self, rank: int) -> int:
        return self.last_arrival_ns - self.entries[rank].start_ns


@dataclass
class CollectiveTable:
    """Matched instances, what could not be matched, and how matching was done."""

    ranks: List[int]
    instances: List[Instance]
    unmatched: Counter  # (kind, name, group, reason) -> instances
    notes: List[str]
    steps: Dict[int, Mapping[int, Tuple[int, int]]] = field(
        default_factory=dict
    )  # rank -> step -> abs (start, end)
    point_to_point: Counter = field(default_factory=Counter)  # op name -> events (all ranks)
    hosts: Dict[int, Optional[str]] = field(default_factory=dict)
    timelines: Dict[int, Any] = field(
        default_factory=dict
    )  # rank -> the why's segments (analyze/timeline.py)
    step_times: Dict[int, List[Any]] = field(
        default_factory=dict
    )  # rank -> its analyze/step_time.StepTime per step (info's single pass, or the why's pass: analyse())
    p2p_spans: Dict[int, List[Tuple[int, int]]] = field(
        default_factory=dict
    )  # rank -> its gloo send/recv not linked to their peer, abs ns
    p2p_pairs: List[Instance] = field(default_factory=list)  # linked send/recv pairs (ids after instances)
    p2p_unlinked: Counter = field(default_factory=Counter)  # reason -> point-to-point ops not linked
    #: ``report --steps A:B``: the ProfilerSteps chosen (then one step is "selected", not "profiled")
    steps_selected: Optional[Tuple[int, int]] = None
    #: the step cap, when it dropped steps (analyze/step_cap.py ``StepCap``): said in every output
    step_cap: Any = None
    #: host label ("host vm"; "rank r" without a host name) -> its clock ahead of the lowest
    #: rank's host (ns), from the instances' ends (align/instance_ends.py); empty on one clock
    clock_offsets: Dict[str, int] = field(default_factory=dict)

    @property
    def unmatched_total(self) -> int:
        return sum(self.unmatched.values())


def _match_gloo(
    scans: Mapping[int, RankScan],
    cfgs: Mapping[int, PgConfig],
    pg_counts: Mapping[int, Optional[int]],
    hosts: Mapping[int, Optional[str]],
    offsets: Mapping[int, int],
    unmatched: Counter,
    notes: List[str],
) -> List[Tuple[str, str, str, Dict[int, Entry]]]:
    """gloo ops (point-to-point ones left out: align/p2p.py ``p2p_ops``): attributed to groups (align/gloo_groups.py), matched per group in order."""
    merged = sorted(scans)
    ops: Dict[int, List[Entry]] = {}
    for r in merged:
        base, off = scans[r].base_ns, offsets.get(r, 0)
        ops[r] = [
            Entry(e, base + e.ts_ns + off, base + e.ts_ns + off + e.dur_ns, None)
            for e in scans[r].events
            if e.kind == "gloo" and e.name not in P2P_GLOO
        ]
    if not any(ops.values()):
        return []
    table = gloo_groups.group_table({r: cfgs.get(r, []) for r in merged}, notes)
    groups: Dict[int, List[gloo_groups.Group]] = {}
    for r in merged:
        if not ops[r]:
            continue
        groups[r], why = gloo_groups.rank_groups(r, cfgs.get(r, []), table, pg_counts.get(r))
        if why is not None:
            _unattributed(r, ops[r], why, unmatched, notes)
    seqs, undecided = gloo_groups.assign(ops, groups, hosts, merged)
    for r, why in sorted(undecided.items()):
        _unattributed(r, ops[r], why, unmatched, notes)
    names = sorted({g.name for gs in groups.values() for g in gs} | set(table), key=gloo_groups._creation_key)
    found = []
    for g in names:
        ranks = table.get(g) if g in table else None
        members = [r for r in (merged if ranks is None else ranks) if r in scans]
        if not any(g in seqs.get(r, {}) for r in members):
            continue
        instances, bad = match_group(members, {r: seqs[r][g] for r in members if g in seqs.get(r, {})}, hosts)
        for (name, why), n in bad.items():
            unmatched[("gloo", name, g, why)] += n
        found += [(next(iter(e.values())).event.name, g, "gloo order", e) for e in instances]
    return found


def _unattributed(r: int, ops: Sequence[Entry], why: str, unmatched: Counter, notes: List[str]) -> None:
    notes.append(f"rank {r}: {len(ops)} gloo op(s) not attributed to a process group: {why}")
    for e in ops:
        unmatched[("gloo", e.event.name, "?", "process group unknown")] += 1


def _step_at(scan: RankScan, start_ns: int) -> Optional[int]:
    """The step of ``scan`` whose span holds the absolute ``start_ns``."""
    rel = start_ns - scan.base_ns
    for step, (lo, hi) in scan.steps.items():
        if lo <= rel <= hi:
            return step
    return None


def match_instances(
    scans: Mapping[int, RankScan],
    pg_configs: Mapping[int, PgConfig],
    hosts: Mapping[int, Optional[str]],
    offsets: Optional[Mapping[int, int]] = None,
    pg_counts: Optional[Mapping[int, Optional[int]]] = None,
) -> CollectiveTable:
    """Match every rank's collectives into instances (see the module docstring)."""
    merged = sorted(scans)
    offsets = offsets or {}
    notes: List[str] = []
    unmatched: Counter = Counter()
    found = match_gpu(scans, pg_configs, hosts, offsets, unmatched)
    n_gpu_order = sum(1 for f in found if f[2] == "order")
    p2p = p2p_ops(scans)
    found += _match_gloo(scans, pg_configs, pg_counts or {}, hosts, offsets, unmatched, notes)
    found = drop_apart(found, unmatched)  # type: ignore[arg-type,assignment]  # never one collective, whatever the clocks
    found, host_offs, _tol = check_ends(found, hosts, unmatched)  # type: ignore[arg-type,assignment]
    notes += [far_clock_note(h, off) for h, off in sorted(host_offs.items()) if abs(off) > FAR_CLOCK_NS]
    found.sort(key=lambda f: (min(e.start_ns for e in f[3].values()), f[1], f[0]))
    instances = []
    for i, (name, group, match, entries) in enumerate(found):
        low = min(entries)
        step = _step_at(scans[low], entries[low].start_ns - offsets.get(low, 0))
        instances.append(Instance(i, name, group, match, entries, step))
    if any(f[2] == "gloo order" for f in found) or any(k[0] == "gloo" for k in unmatched):
        notes.insert(
            0,
            "gloo ops matched per process group in its order of issue (Kineto writes no process group "
            "or sequence number for them; groups from pg_config and the ranks' thread blocks)",
        )
    if n_gpu_order:
        notes.insert(0, "GPU kernels without Seq/Comms Id matched by order per kernel name and stream")
    for r in merged:
        if scans[r].error:
            notes.append(f"rank {r}: trace read only partly: {scans[r].error}")
        if scans[r].far:
            notes.append(
                f"rank {r}: {scans[r].far} collective or ProfilerStep event(s) left out: a ts or dur "
                "beyond 2**62 ns from the file's base, outside the range the analysis reads"
            )
    steps = {  # held as arrays: align/step_spans.py
        r: step_spans({s: (lo + scans[r].base_ns + offsets.get(r, 0), hi + scans[r].base_ns + offsets.get(r, 0))
                       for s, (lo, hi) in sorted(scans[r].steps.items())})
        for r in merged
    }  # fmt: skip
    table = CollectiveTable(merged, instances, unmatched, notes, steps, p2p, {r: hosts.get(r) for r in merged})  # fmt: skip
    table.clock_offsets = dict(host_offs)
    _link_p2p(table, scans, pg_configs, hosts, offsets)
    return table


def _link_p2p(
    table: CollectiveTable,
    scans: Mapping[int, RankScan],
    cfgs: Mapping[int, PgConfig],
    hosts: Mapping[int, Optional[str]],
    offsets: Mapping[int, int],
) -> None:
    """Point-to-point pairs as two-member instances (align/p2p.py); the time of the ops
    not linked (no peer recorded) stays plain waiting (``p2p_spans``)."""
    res = match_pairs(scans, cfgs, hosts, offsets)
    table.p2p_spans, table.p2p_unlinked = res.spans, res.unlinked
    res.pairs.sort(key=lambda p: (min(p.send.start_ns, p.recv.start_ns), p.src, p.dst))
    for k, p in enumerate(res.pairs):
        entries = {
            p.src: Entry(p.send.event, p.send.start_ns, p.send.end_ns, (p.src, p.dst)),
            p.dst: Entry(p.recv.event, p.recv.start_ns, p.recv.end_ns, (p.src, p.dst)),
        }
        inst = Instance(len(table.instances) + k, f"send/recv {p.src}->{p.dst}", p.group, "p2p", entries)
        inst.step, inst.sender = p.send.step, p.src
        table.p2p_pairs.append(inst)
    table.notes += p2p_link_notes(res.pairs)


__all__ = [
    "COLLECTIVE_SELECTION",
    "CollectiveCollector",
    "CollectiveEvent",
    "CollectiveTable",
    "Entry",
    "Instance",
    "RankScan",
    "is_gloo_op",
    "read_batches",
    "match_instances",
    "pg_config_of",
    "pg_count_of",
    "scan_collectives",
]
