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
  sequence number for them, so the match is **by name (and shapes, when recorded) and
  order**: the i-th ``gloo:all_reduce`` of a group on one rank is the i-th on every
  other. A rank in one process group (``pg_config`` with one entry) puts all its gloo
  ops in it. A rank in several: every group has its own runloop threads, so threads
  that run ops of the same shapes are one group's, and those thread sets, in thread
  creation order (OS tid order), are the rank's groups in ``pg_config`` order. When
  that does not give exactly one thread set per group (no shapes recorded, a group
  idle in the window), the rank's gloo ops cannot be attributed and are reported,
  not guessed.

An instance is *matched* only when every participant among the merged ranks has it,
and when on each host (one clock) no participant's collective ends before another
participant arrives -- which an order-based match that is off by one (a profiling
window that starts inside a step) violates. Everything else is counted and
reported with a reason, never guessed.

Times are absolute epoch ns; ``offsets`` (the ``--align collectives`` corrections)
are added before anything is compared.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Hashable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tracefuse_stream.align.clock import _seq_value, _stream_of, is_collective_kernel
from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.read.events import iter_event_batches
from tracefuse_stream.read.sources import PathLike
from tracefuse_stream.timeunits import us_to_ns_or_none

GLOO_PREFIX = "gloo:"
GLOO_CAT = "user_annotation"
Key = Tuple[Hashable, ...]
PgConfig = List[Tuple[str, Optional[Tuple[int, ...]]]]  # (pg_name, ranks) in pg_config order


class CollectiveEvent(NamedTuple):
    """One collective event of one rank (file-relative ns; absolute = base + these)."""

    pos: int  # position in the file's event array: how the merge finds it again
    kind: str  # "gpu" or "gloo"
    name: str
    ts_ns: int  # the event's own ts in ns (relative to the file's base)
    dur_ns: int
    tid: Any
    key: Key  # match key without the occurrence index (seq keys are complete)
    pg: Optional[str]
    ranks: Optional[Tuple[int, ...]]  # participants named by the event itself
    signature: Optional[str]  # gloo: shapes, when recorded
    kept: bool  # survives the merge's filters and window


@dataclass
class RankScan:
    """The collective events of one rank and how its file was read."""

    rank: int
    base_ns: int
    events: List[CollectiveEvent] = field(default_factory=list)
    error: Optional[str] = None


def is_gloo_op(event: Mapping[str, Any]) -> bool:
    """A gloo collective as Kineto records it: ``gloo:<op>`` on a runloop thread."""
    name = event.get("name")
    return event.get("cat") == GLOO_CAT and isinstance(name, str) and name.startswith(GLOO_PREFIX)


def _ranks_arg(v: Any) -> Optional[Tuple[int, ...]]:
    """``Process Group Ranks`` as Kineto writes it (the string ``"[0, 1]"``)."""
    if isinstance(v, list):
        items = v
    elif isinstance(v, str) and v.strip().startswith("["):
        items = [x.strip() for x in v.strip()[1:-1].split(",") if x.strip()]
    else:
        return None
    try:
        return tuple(sorted({int(x) for x in items}))
    except (TypeError, ValueError):
        return None


def _describe(event: Dict[str, Any], index: int, kept: bool) -> Optional[CollectiveEvent]:
    ts, dur = us_to_ns_or_none(event.get("ts")), us_to_ns_or_none(event.get("dur"))
    if ts is None or dur is None or dur < 0 or event.get("ph") != "X":
        return None
    args = event.get("args")
    args = args if isinstance(args, dict) else {}
    name = str(event.get("name"))
    if event.get("cat") == "kernel":
        pg = args.get("Process Group Name")
        pg_s = None if pg is None else str(pg)
        seq = _seq_value(args)
        coll = args.get("Collective name")
        if seq is not None:
            key: Key = ("seq", pg_s or "", str(coll) if coll is not None else name, seq)
        else:
            key = ("order", pg_s or "", name, _stream_of(event, args))
        ranks = _ranks_arg(args.get("Process Group Ranks"))
        return CollectiveEvent(index, "gpu", name, ts, dur, event.get("tid"), key, pg_s, ranks, None, kept)
    shapes = [args.get(k) for k in ("Input Dims", "Input type") if k in args]
    sig = repr(shapes) if shapes else None
    return CollectiveEvent(index, "gloo", name, ts, dur, event.get("tid"), (), None, None, sig, kept)


def scan_collectives(
    path: PathLike,
    rank: int,
    base_time_ns: Optional[int],
    keep: Optional[Callable[[Dict[str, Any], int, int], bool]] = None,
) -> RankScan:
    """One streaming pass over ``path`` keeping only its collective events.

    ``keep(event, start_ns, dur_ns)`` says whether the merge will keep an event
    (filters and window; ``start_ns`` absolute); None: all are kept. A file that turns
    out broken midway keeps what was read (``error`` says why); missing files raise.
    """
    scan = RankScan(rank, int(base_time_ns or 0))
    index = -1
    try:
        for batch in iter_event_batches(path, what="looking for collectives"):
            for event in batch:
                index += 1
                if type(event) is not dict or not (is_gloo_op(event) or is_collective_kernel(event)):
                    continue
                ce = _describe(event, index, True)
                if ce is None:
                    continue
                if keep is not None and not keep(event, scan.base_ns + ce.ts_ns, ce.dur_ns):
                    ce = ce._replace(kept=False)
                scan.events.append(ce)
    except InputError as e:
        if e.kind in (ErrorKind.MISSING, ErrorKind.UNREADABLE):
            raise
        scan.error = e.problem
    return scan


def pg_config_of(header: Mapping[str, Any]) -> PgConfig:
    """``distributedInfo.pg_config`` as (name, ranks) pairs, in the order written."""
    di = header.get("distributedInfo")
    cfg = di.get("pg_config") if isinstance(di, dict) else None
    out: PgConfig = []
    for pg in cfg if isinstance(cfg, list) else []:
        if isinstance(pg, dict) and pg.get("pg_name") is not None:
            out.append((str(pg["pg_name"]), _ranks_arg(pg.get("ranks"))))
    return out


def _gloo_groups(events: Sequence[CollectiveEvent], cfg: PgConfig) -> Optional[Dict[Any, int]]:
    """tid -> index into ``cfg`` for a rank's gloo threads, or None when the threads
    cannot be told apart (see the module docstring)."""
    tids = sorted(
        {e.tid for e in events},
        key=lambda t: (not isinstance(t, int), str(t) if not isinstance(t, int) else t),
    )
    if len(cfg) <= 1:
        return {t: 0 for t in tids}
    parent = {t: t for t in tids}

    def find(t: Any) -> Any:
        while parent[t] != t:
            t = parent[t]
        return t

    by_sig: Dict[Tuple[str, str], Any] = {}
    for e in events:
        if e.signature is None:
            return None
        first = by_sig.setdefault((e.name, e.signature), e.tid)
        parent[find(e.tid)] = find(first)
    roots: Dict[Any, List[Any]] = {}
    for t in tids:  # in tid order, so sets come out in creation order of their first thread
        roots.setdefault(find(t), []).append(t)
    sets = list(roots.values())
    if len(sets) != len(cfg):
        return None
    return {t: i for i, members in enumerate(sets) for t in members}


class Entry(NamedTuple):
    event: CollectiveEvent
    start_ns: int  # absolute, aligned
    end_ns: int
    participants: Optional[Tuple[int, ...]]


@dataclass
class Instance:
    """One collective instance matched on all its ranks."""

    id: int
    name: str
    group: str
    match: str  # "seq", "order" (GPU kernels without seq), "gloo order"
    entries: Dict[int, Entry]

    @property
    def ranks(self) -> List[int]:
        return sorted(self.entries)

    @property
    def arrival_order(self) -> List[int]:
        return sorted(self.entries, key=lambda r: (self.entries[r].start_ns, r))

    @property
    def last_rank(self) -> int:
        return self.arrival_order[-1]

    @property
    def last_arrival_ns(self) -> int:
        return self.entries[self.last_rank].start_ns

    def wait_ns(self, rank: int) -> int:
        return self.last_arrival_ns - self.entries[rank].start_ns


@dataclass
class CollectiveTable:
    """Matched instances, what could not be matched, and how matching was done."""

    ranks: List[int]
    instances: List[Instance]
    unmatched: Counter  # (kind, name, group, reason) -> instances
    notes: List[str]

    @property
    def unmatched_total(self) -> int:
        return sum(self.unmatched.values())


def _rank_entries(
    scan: RankScan, cfg: PgConfig, offset: int, notes: List[str], unmatched: Counter
) -> Dict[Key, Entry]:
    """This rank's collectives keyed for matching (occurrence index appended)."""
    out: Dict[Key, Entry] = {}
    groups: Dict[Key, List[Entry]] = {}
    cfg_ranks = dict(cfg)
    gloo = [e for e in scan.events if e.kind == "gloo"]
    tid_group = _gloo_groups(gloo, cfg) if gloo else {}
    if gloo and tid_group is None:
        notes.append(
            f"rank {scan.rank}: {len(gloo)} gloo op(s) on {len({e.tid for e in gloo})} thread(s) cannot be "
            f"attributed to its {len(cfg)} process groups (record with record_shapes=True to tell them apart)"
        )
        for e in gloo:
            unmatched[("gloo", e.name, "?", "process group unknown")] += 1
    for e in scan.events:
        start = scan.base_ns + e.ts_ns + offset
        if e.kind == "gloo":
            if tid_group is None:
                continue
            gi = tid_group[e.tid]
            pg, ranks = cfg[gi] if cfg else ("", None)
            key: Key = ("gloo", pg, e.name, e.signature)
        else:
            pg = e.pg or ""
            ranks = e.ranks or cfg_ranks.get(pg)
            key = e.key
        entry = Entry(e, start, start + e.dur_ns, ranks)
        if key[0] == "seq":
            prev = out.get(key)
            if prev is None:
                out[key] = entry
            else:  # coalesced kernels under one seq: the first one, ending with the last
                first = entry if start < prev.start_ns else prev
                out[key] = first._replace(end_ns=max(prev.end_ns, entry.end_ns))
        else:
            groups.setdefault(key, []).append(entry)
    for key, entries in groups.items():
        entries.sort(key=lambda x: (x.start_ns, x.event.pos))
        for i, entry in enumerate(entries):
            out[key + (i,)] = entry
    return out


def _overlap_ok(entries: Mapping[int, Entry], hosts: Mapping[int, Optional[str]]) -> bool:
    """On one clock, no participant can finish before the last one has arrived."""
    by_host: Dict[str, List[Entry]] = {}
    for r, e in entries.items():
        h = hosts.get(r)
        by_host.setdefault(f"host {h}" if h else f"rank {r}", []).append(e)
    return all(max(e.start_ns for e in es) <= min(e.end_ns for e in es) for es in by_host.values())


def _label(key: Key) -> Tuple[str, str, str]:
    """(name, group, match) of a key."""
    if key[0] == "seq":
        return str(key[2]), str(key[1]), "seq"
    if key[0] == "order":
        return str(key[2]), str(key[1]), "order"
    return str(key[2]), str(key[1]), "gloo order"


def match_instances(
    scans: Mapping[int, RankScan],
    pg_configs: Mapping[int, PgConfig],
    hosts: Mapping[int, Optional[str]],
    offsets: Optional[Mapping[int, int]] = None,
) -> CollectiveTable:
    """Match every rank's collectives into instances (see the module docstring)."""
    merged = sorted(scans)
    notes: List[str] = []
    unmatched: Counter = Counter()
    per_rank = {
        r: _rank_entries(scans[r], pg_configs.get(r, []), (offsets or {}).get(r, 0), notes, unmatched)
        for r in merged
    }
    by_key: Dict[Key, Dict[int, Entry]] = {}
    for r in merged:
        for key, entry in per_rank[r].items():
            by_key.setdefault(key, {})[r] = entry
    found: List[Tuple[Key, Dict[int, Entry]]] = []
    for key, entries in by_key.items():
        named = next((e.participants for e in entries.values() if e.participants), None)
        expected = set(merged) if named is None else set(named) & set(merged)
        name, group, _ = _label(key)
        kind = "gloo" if key[0] == "gloo" else "gpu"
        if len(expected) < 2:
            continue  # a group of one merged rank: nothing to match across ranks
        if set(entries) != expected:
            missing = expected - set(entries)
            reason = f"missing on rank(s) {_ranks_text(missing)}" if missing else "on ranks outside its group"
            unmatched[(kind, name, group, reason)] += 1
        elif not _overlap_ok(entries, hosts):
            unmatched[(kind, name, group, "ends before another rank arrives (order off)")] += 1
        else:
            found.append((key, entries))
    found.sort(key=lambda ke: (min(e.start_ns for e in ke[1].values()), str(ke[0])))
    instances = [Instance(i, *_label(key), entries=entries) for i, (key, entries) in enumerate(found)]
    if any(k[0] == "gloo" for k, _ in found) or any(k[0] == "gloo" for k, _, _, _ in unmatched):
        notes.insert(
            0,
            "gloo ops matched by name (and shapes, when recorded) and order: "
            "Kineto writes no process group or sequence number for them",
        )
    if any(k[0] == "order" for k, _ in found):
        notes.insert(0, "GPU kernels without Seq/Comms Id matched by order per kernel name and stream")
    for r in merged:
        if scans[r].error:
            notes.append(f"rank {r}: trace read only partly: {scans[r].error}")
    return CollectiveTable(merged, instances, unmatched, notes)


def _ranks_text(ranks: Any) -> str:
    from tracefuse_stream.select.ranges import compress_ranges

    return compress_ranges(sorted(ranks))


__all__ = [
    "CollectiveEvent",
    "CollectiveTable",
    "Entry",
    "Instance",
    "RankScan",
    "is_gloo_op",
    "match_instances",
    "pg_config_of",
    "scan_collectives",
]
