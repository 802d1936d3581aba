"""Cross-host clock alignment from NCCL/RCCL collective kernels (``--align collectives``).

Why this exists: every host has its own clock and Kineto does no cross-host sync, so
ranks on different hosts are skewed by hundreds of microseconds to milliseconds. A GPU
collective (AllReduce, AllGather, ReduceScatter, Broadcast, all-to-all, ...) cannot
finish on any rank before the last rank has joined, and it finishes on all of them at
nearly the same true time. Its kernel END times are therefore a shared event seen by
every clock; its START times are not (stragglers start late and wait less), so starts
are never used.

How: :func:`collect_collective_ends` makes one streaming pass over a rank's trace and
keeps only collective kernel end times (absolute ns, bounded by ``cap``);
:func:`estimate_offsets` matches them across ranks and estimates ONE offset per host
(ranks share a clock when they share ``host_name``; a rank without a known host is
its own clock) as the median difference to the reference host (the host of the lowest
rank). Median and MAD make it robust to the few collectives that end late on one rank.

Never invent skew: with no GPU collectives (CPU-only gloo jobs have none, and CPU-side
collective ops end hundreds of microseconds apart even on one host, so they are not
used), with fewer than ``min_matches`` matched collectives, or when the spread of the
differences exceeds the offset itself, the host keeps offset 0 and the reason says why.

Sign convention (everywhere in this module, including ``--clock-offsets`` files):
``offset_ns`` is ADDED to the rank's absolute times. After alignment a host's collective
ends coincide with the reference host's: ``end_host + offset ~= end_ref``.
"""
from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Hashable, Iterator, List, Mapping, Optional, Tuple, Union


from tracefuse_stream.timeunits import us_to_ns_or_none as us_to_ns
from tracefuse_stream.errors import ErrorKind, InputError, UsageError
from tracefuse_stream.read.events import iter_event_batches
from tracefuse_stream.read.sources import PathLike

#: A match key: ``("seq", pg_name, collective_name, seq)`` when the kernel carries a
#: ``Seq`` / ``Comms Id`` arg, else ``("order", kernel_name, stream, occurrence_index)``.
MatchKey = Tuple[Hashable, ...]

DEFAULT_CAP = 50000
DEFAULT_MIN_MATCHES = 3

# Below 2**42 us, round(ts * 1000) is exact for 3-decimal values: the float's
# representation error (<= 2**-12 us) plus the product's rounding (<= 0.25 ns) stays
# under half a nanosecond. From 2**42 on (current Kineto's relative ts are often just
# above it) the product can be off by one ns, while the shortest repr of the float is
# still the original 3-decimal string up to 2**43 -- so go through Decimal(repr()).
# Beyond 2**43 (absolute epoch us of PyTorch <= 2.3) a float cannot hold ns anyway;
# Decimal(repr()) then gives the nearest value the parser kept, far below the
# microsecond accuracy alignment needs.

_COLLECTIVE_PREFIXES = ("nccl", "rccl")
_COLLECTIVE_MARKERS = ("ncclDevKernel", "ncclKernel")
_RANK_KEY = re.compile(r"[0-9]+")


def is_collective_kernel(event: Mapping[str, Any]) -> bool:
    """True for a GPU kernel of a NCCL/RCCL collective.

    Only GPU kernels qualify (``cat == "kernel"``): CPU-side ops such as
    ``record_param_comms`` or gloo's ``allreduce`` end when *that* rank's call returns,
    which differs by hundreds of microseconds between ranks even on one clock.
    """
    if event.get("cat") != "kernel":
        return False
    args = event.get("args")
    if isinstance(args, dict) and "Collective name" in args:
        return True
    name = event.get("name")
    if not isinstance(name, str):
        return False
    if name.startswith(_COLLECTIVE_PREFIXES):
        return True
    return any(m in name for m in _COLLECTIVE_MARKERS)


def _seq_value(args: Mapping[str, Any]) -> Optional[Hashable]:
    """The collective's sequence number (``Seq``, else ``Comms Id``), normalised so that
    ``5`` and ``"5"`` written by two Kineto versions still match."""
    for name in ("Seq", "Comms Id"):
        v = args.get(name)
        if v is None or isinstance(v, bool):
            continue
        if isinstance(v, int):
            return v
        if isinstance(v, str) and v.strip():
            s = v.strip()
            return int(s) if _RANK_KEY.fullmatch(s) else s
        if isinstance(v, (float, Decimal)) and v == int(v):
            return int(v)
    return None


def _stream_of(event: Mapping[str, Any], args: Mapping[str, Any]) -> Hashable:
    """The kernel's stream: ``args.stream``, else the tid (old Kineto writes negative
    tids for what newer versions write as the absolute value, so fold the sign)."""
    s = args.get("stream")
    if s is None or isinstance(s, bool):
        s = event.get("tid")
    if isinstance(s, int) and not isinstance(s, bool):
        return abs(s)
    return s if isinstance(s, (str, int)) else repr(s)


@dataclass
class RankCollectives:
    """What alignment needs from one rank: collective kernel end times by match key.

    ``ends`` maps :data:`MatchKey` -> absolute end time in ns. ``count`` is the number
    of collective kernels recorded (at most ``cap``); ``cap_hit`` says more were present
    and were not read (memory stays bounded on huge traces; the first ``cap`` are
    plenty for a median). ``error`` is set when the trace could be read only partly
    (truncated or invalid JSON): what was read before the problem is still usable.
    """

    ends: Dict[MatchKey, int] = field(default_factory=dict)
    count: int = 0
    cap_hit: bool = False
    error: Optional[str] = None
    path: str = ""


def collect_collective_ends(
    path: PathLike, base_time_ns: Optional[int], cap: int = DEFAULT_CAP
) -> RankCollectives:
    """One streaming pass over ``path`` keeping only GPU collective kernel end times
    (a second, exact-decimal pass only for files with integers beyond int64).

    ``base_time_ns`` is the file's ``baseTimeNanoseconds`` (None for PyTorch <= 2.3,
    whose ``ts`` are absolute epoch us and are then parsed as exact decimals), so that
    ends of ranks with different bases are comparable. Ends are exact integer ns.

    Keys: with ``Seq``/``Comms Id`` args, ``("seq", pg_name, collective_name, seq)``:
    the same number on every participant. Without them (Kineto before 2026),
    ``("order", kernel_name, stream, i)``: the i-th kernel of that name on that stream.
    Occurrence is counted in end-time order, not file order: kernels on one stream are
    serialised, so end order is their execution order, whereas the order in which
    Kineto flushes activity buffers to the file is not guaranteed.

    Missing files raise :class:`InputError`; a file that turns out truncated or invalid
    midway is not fatal here (``error`` is set) -- the merge reports it on its own pass.
    """
    if cap < 0:
        raise UsageError(f"collective cap must be >= 0, got {cap}")
    base = int(base_time_ns) if base_time_ns is not None else 0
    return _scan(path, base, cap)


def _collective_kernels(path: PathLike) -> Iterator[Dict[str, Any]]:
    for batch in iter_event_batches(path, what="looking for collective kernels"):
        for event in batch:
            if type(event) is dict and is_collective_kernel(event):
                yield event


def _scan(path: PathLike, base: int, cap: int) -> RankCollectives:
    """The single pass behind :func:`collect_collective_ends` (events from
    :func:`~tracefuse_stream.read.events.iter_event_batches`: both layouts, exact
    numbers)."""
    result = RankCollectives(path=str(path))
    seq_ends: Dict[MatchKey, int] = {}
    by_stream: Dict[Tuple[str, Hashable], List[int]] = {}
    try:
        for event in _collective_kernels(path):
            ts = us_to_ns(event.get("ts"))
            dur = us_to_ns(event.get("dur"))
            if ts is None or dur is None or dur < 0:
                continue
            if result.count >= cap:
                result.cap_hit = True
                break
            result.count += 1
            end = base + ts + dur
            args = event.get("args")
            if not isinstance(args, dict):
                args = {}
            name = event.get("name")
            name = name if isinstance(name, str) else ""
            seq = _seq_value(args)
            if seq is not None:
                pg = args.get("Process Group Name")
                coll = args.get("Collective name")
                key: MatchKey = (
                    "seq",
                    "" if pg is None else str(pg),
                    str(coll) if coll is not None else name,
                    seq,
                )
                # Coalesced collectives can launch several kernels under one Seq:
                # the collective is over when the last of them ends.
                prev = seq_ends.get(key)
                seq_ends[key] = end if prev is None else max(prev, end)
            else:
                by_stream.setdefault((name, _stream_of(event, args)), []).append(end)
    except InputError as e:
        if e.kind in (ErrorKind.MISSING, ErrorKind.UNREADABLE):
            raise
        result.error = e.problem
    ends: Dict[MatchKey, int] = dict(seq_ends)
    for (name, stream), values in by_stream.items():
        values.sort()
        for i, end in enumerate(values):
            ends[("order", name, stream, i)] = end
    result.ends = ends
    return result


@dataclass
class RankAlignment:
    """The clock correction for one rank and why it is what it is.

    ``offset_ns`` is ADDED to the rank's absolute times (0 unless ``applied``);
    ``estimate_ns`` keeps the raw estimate even when it was rejected, so a user can see
    how close it came. ``matched`` counts the collectives the host matched with the
    reference host; ``spread_us`` is the MAD of the end-time differences.
    """

    offset_ns: int
    host: str
    matched: int = 0
    spread_us: float = 0.0
    applied: bool = False
    reason: str = ""
    method: str = "collectives"
    estimate_ns: Optional[int] = None

    @property
    def offset_us(self) -> float:
        return self.offset_ns / 1000.0

    def to_header(self) -> Dict[str, Any]:
        """JSON-safe record for the merged file's ``tracefuse.ranks[r].align``."""
        return {
            "method": self.method,
            "host": self.host,
            "offset_ns": self.offset_ns,
            "offset_us": self.offset_ns / 1000.0,
            "estimate_ns": self.estimate_ns,
            "matched": self.matched,
            "spread_us": round(self.spread_us, 3),
            "applied": self.applied,
            "reason": self.reason,
        }


def _group_of(rank: int, hosts: Mapping[int, Optional[str]]) -> Tuple[Tuple[str, Any], str]:
    """(clock group id, label): ranks on one named host share a clock; a rank with no
    known host is its own clock (we cannot assume it shares one with anybody)."""
    h = hosts.get(rank)
    if h is None or (isinstance(h, str) and not h.strip()):
        return ("rank", rank), f"rank {rank} (host unknown)"
    return ("host", str(h)), str(h)


def _median2(values: List[int]) -> int:
    """Twice the median of integers, as an exact integer."""
    v = sorted(values)
    n = len(v)
    return 2 * v[n // 2] if n % 2 else v[n // 2 - 1] + v[n // 2]


def estimate_offsets(
    ranks: Mapping[int, RankCollectives],
    hosts: Mapping[int, Optional[str]],
    min_matches: int = DEFAULT_MIN_MATCHES,
) -> Dict[int, RankAlignment]:
    """Estimate one clock offset per host from matched collective kernel ends.

    The reference clock is the host of the lowest rank (offset 0). For every key the
    reference end is the median over the reference host's ranks that have it; each
    rank of another host contributes ``ref_end - own_end`` per common key, and the
    host's offset is the median of those differences (so ``own_end + offset`` lands
    on ``ref_end``). All ranks of a host get the same offset because they share its
    clock. The estimate is applied only if at least ``min_matches`` distinct
    collectives matched and the spread (MAD) does not exceed ``|offset|``.
    """
    all_ranks = sorted(set(ranks) | set(hosts))
    out: Dict[int, RankAlignment] = {}
    if not all_ranks:
        return out
    groups: Dict[Tuple[str, Any], List[int]] = {}
    labels: Dict[Tuple[str, Any], str] = {}
    for r in all_ranks:
        gid, label = _group_of(r, hosts)
        groups.setdefault(gid, []).append(r)
        labels[gid] = label
    ref_gid, _ = _group_of(all_ranks[0], hosts)
    ref_label = labels[ref_gid]

    def ends_of(r: int) -> Dict[MatchKey, int]:
        rc = ranks.get(r)
        return rc.ends if rc is not None else {}

    any_collectives = any(ends_of(r) for r in all_ranks)
    no_gpu = (
        "no GPU collective kernels (NCCL/RCCL) in any trace; CPU-side collective ops "
        "do not end together and are not used"
    )

    # Reference end per key: median over the reference host's ranks, kept DOUBLED so
    # it stays an exact integer (the median of an even count is a half-integer, and
    # epoch ns ~1.7e18 are far beyond float precision: ulp 256 ns).
    ref_values: Dict[MatchKey, List[int]] = {}
    for r in groups[ref_gid]:
        for k, e in ends_of(r).items():
            ref_values.setdefault(k, []).append(e)
    ref_ends2 = {k: _median2(v) for k, v in ref_values.items()}

    for gid, members in groups.items():
        label = labels[gid]
        if gid == ref_gid:
            if any_collectives:
                reason = f"reference host ({len(ref_ends2)} collectives); offset 0 by definition"
            else:
                reason = f"reference host; {no_gpu}; offset 0"
            for r in members:
                out[r] = RankAlignment(0, label, reason=reason)
            continue

        diffs2: List[int] = []  # doubled ref_end - own_end: small exact integers
        matched_keys = set()
        for r in members:
            for k, e in ends_of(r).items():
                ref2 = ref_ends2.get(k)
                if ref2 is not None:
                    diffs2.append(ref2 - 2 * e)
                    matched_keys.add(k)
        n = len(matched_keys)
        estimate: Optional[int] = None
        spread_us = 0.0
        applied = False
        if not any_collectives:
            reason = f"{no_gpu}; offset 0"
        elif not any(ends_of(r) for r in members):
            reason = "no GPU collective kernels (NCCL/RCCL) in this host's traces; offset 0"
        elif not ref_ends2:
            reason = (
                f"reference host {ref_label} has no GPU collective kernels (NCCL/RCCL); offset 0"
            )
        elif n < min_matches:
            reason = (
                f"only {n} collective(s) matched with reference host {ref_label} "
                f"(need {min_matches}); offset 0"
            )
        else:
            med2 = statistics.median(diffs2)  # values are offsets, exact in a float
            mad = statistics.median([abs(d - med2) for d in diffs2]) / 2
            med = med2 / 2
            estimate = int(round(med))
            spread_us = mad / 1000.0
            if mad > abs(med):
                reason = (
                    f"estimate {med / 1000.0:+.3f} us over {n} collectives is not "
                    f"significant: spread (MAD) {spread_us:.3f} us exceeds it; offset 0"
                )
            else:
                applied = True
                reason = f"aligned to host {ref_label} on {n} collectives"
        for r in members:
            out[r] = RankAlignment(
                estimate if applied and estimate is not None else 0,
                label,
                matched=n,
                spread_us=spread_us,
                applied=applied,
                reason=reason,
                estimate_ns=estimate,
            )

    # Per-rank notes that qualify the numbers (partial reads, cap).
    for r in all_ranks:
        rc = ranks.get(r)
        if rc is None:
            continue
        notes = []
        if rc.cap_hit:
            notes.append(f"only the first {rc.count} collective kernels were read (cap)")
        if rc.error:
            notes.append(f"trace read only partly: {rc.error}")
        if notes:
            out[r].reason += "; " + "; ".join(notes)
    return out


def _reject_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    seen: Dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError(f"duplicate key {k!r}")
        seen[k] = v
    return seen


def load_clock_offsets(path: PathLike) -> Dict[str, float]:
    """Read a ``--clock-offsets FILE``: a JSON object ``{"<host or rank>": microseconds}``.

    Values are ADDED to the times of that host's (or rank's) events, the same sign as
    :attr:`RankAlignment.offset_ns`. Anything else -- unreadable file, invalid JSON,
    not an object, duplicate or empty keys, non-numeric or non-finite values -- is a
    :class:`UsageError`: a wrong offset silently applied would be worse than none.
    """
    where = f"--clock-offsets {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{where}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicates)
    except ValueError as e:
        raise UsageError(f"{where}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(
            f"{where}: expected a JSON object {{\"host or rank\": microseconds}}, "
            f"got {type(data).__name__}"
        )
    out: Dict[str, float] = {}
    for k, v in data.items():
        if not k.strip():
            raise UsageError(f"{where}: empty host/rank key")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise UsageError(f"{where}: offset for {k!r} must be a number of microseconds, got {v!r}")
        if not math.isfinite(float(v)):
            raise UsageError(f"{where}: offset for {k!r} is not finite")
        out[k] = float(v) if isinstance(v, float) else v  # ints stay exact
    return out


def offsets_from_file(
    mapping: Mapping[str, Union[int, float]], hosts: Mapping[int, Optional[str]]
) -> Dict[int, RankAlignment]:
    """Turn a loaded ``--clock-offsets`` mapping into per-rank alignments.

    A key made of ASCII digits names a rank; any other key names a host (so a host
    literally called "3" cannot be addressed -- use its ranks). A rank entry wins over
    its host's entry, which lets a user fix one odd rank. Ranks with no entry keep 0.
    An entry naming none of the merged ranks or hosts is a :class:`UsageError`: it is
    a typo or a file for another run, and an offset silently not applied is as wrong
    as a wrong one.
    """
    rank_entries: Dict[int, Tuple[str, int]] = {}
    host_entries: Dict[str, Tuple[str, int]] = {}
    for key, value in mapping.items():
        ns = us_to_ns(value)
        if ns is None:
            raise UsageError(f"--clock-offsets: offset for {key!r} is not a finite number")
        k = key.strip()
        if _RANK_KEY.fullmatch(k):
            r = int(k)
            if r in rank_entries:
                raise UsageError(
                    f"--clock-offsets: keys {rank_entries[r][0]!r} and {key!r} both name rank {r}"
                )
            rank_entries[r] = (key, ns)
        else:
            host_entries[k] = (key, ns)
    known_hosts = {str(h).strip() for h in hosts.values() if h is not None}
    unknown = [key for r, (key, _) in rank_entries.items() if r not in hosts]
    unknown += [key for h, (key, _) in host_entries.items() if h not in known_hosts]
    if unknown:
        from tracefuse_stream.select.ranges import compress_ranges

        raise UsageError(
            f"--clock-offsets: {', '.join(repr(k) for k in unknown)} name(s) no merged rank or host "
            f"(ranks {compress_ranges(hosts)}; hosts {', '.join(sorted(known_hosts)) or 'unknown'}); "
            "remove the entry or merge that rank"
        )
    out: Dict[int, RankAlignment] = {}
    for r in sorted(hosts):
        _, label = _group_of(r, hosts)
        host = hosts.get(r)
        if r in rank_entries:
            key, ns = rank_entries[r]
            out[r] = RankAlignment(ns, label, applied=True, method="file",
                                   reason=f"clock-offsets file, rank entry {key!r}")
        elif host is not None and str(host).strip() in host_entries:
            key, ns = host_entries[str(host).strip()]
            out[r] = RankAlignment(ns, label, applied=True, method="file",
                                   reason=f"clock-offsets file, host entry {key!r}")
        else:
            out[r] = RankAlignment(0, label, method="file",
                                   reason="not in clock-offsets file; offset 0")
    return out


def format_alignment_table(alignments: Mapping[int, RankAlignment]) -> str:
    """A plain-text table (one row per rank) for ``info --align`` and the merge summary."""
    header = ("rank", "host", "offset_us", "matched", "spread_us", "applied", "reason")
    rows = [header]
    for r in sorted(alignments):
        a = alignments[r]
        rows.append((
            str(r),
            a.host,
            f"{a.offset_ns / 1000.0:+.3f}",
            str(a.matched) if a.method == "collectives" else "-",
            f"{a.spread_us:.3f}" if a.matched else "-",
            "yes" if a.applied else "no",
            a.reason,
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = []
    for row in rows:
        cells = [row[i].rjust(widths[i]) if i in (0, 2, 3, 4) else row[i].ljust(widths[i])
                 for i in range(len(header) - 1)]
        lines.append("  ".join(cells + [row[-1]]).rstrip())
    return "\n".join(lines)


__all__ = [
    "MatchKey",
    "RankCollectives",
    "RankAlignment",
    "us_to_ns",
    "is_collective_kernel",
    "collect_collective_ends",
    "estimate_offsets",
    "load_clock_offsets",
    "offsets_from_file",
    "format_alignment_table",
]
