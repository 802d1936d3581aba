"""One process group's collectives, matched across its ranks by order of issue.

Why: when Kineto writes no sequence number (gloo on CPU, NCCL before 2026), the only
thing the ranks of one process group agree on is the ORDER in which they issued the
group's collectives: the i-th collective of a group on one rank is the i-th on every
other. This module turns each member's sequence of the group's ops (start order,
across all the group's threads) into instances, and says why the rest do not match.

What is checked, per candidate instance (never guessed past):

* every member of the group among the merged ranks has an op there (else "missing on
  rank(s) ...");
* all ops have the same name, and the same recorded shapes where both sides have them;
* on one clock (one host) no participant of a symmetric collective (all-reduce,
  all-gather, reduce-scatter, all-to-all, barrier) ends before another arrives, give or
  take :data:`OVERLAP_TOLERANCE_NS` -- which an order-based match that is off by one
  violates. Rooted ops (broadcast, reduce, send/recv, ...) may legally finish on the
  root before a receiver arrives, so for them only names and shapes are checked.

A profiling window can start one collective later on one rank than on another, so
each member's sequence may be shifted by up to :data:`MAX_SHIFT` against the group's
reference member (its lowest rank): the shift that makes the most ops compatible wins,
ties going to the one whose ends agree best (a collective ends at about the same time
on all its ranks), then to the smallest shift.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tracefuse_stream.rankset import compress_ranges

MAX_SHIFT = 3
OVERLAP_TOLERANCE_NS = 100_000  # 0.1 ms: processes on one host convert their clocks separately
_SYMMETRIC = ("allreduce", "all_reduce", "allgather", "all_gather", "reducescatter", "reduce_scatter",
              "alltoall", "all_to_all", "barrier")  # fmt: skip


@lru_cache(maxsize=256)
def is_symmetric(name: str) -> bool:
    """True for a collective no rank can leave before every rank has arrived."""
    low = name.lower()
    return any(s in low for s in _SYMMETRIC)


def _host_key(rank: int, hosts: Mapping[int, Optional[str]]) -> str:
    h = hosts.get(rank)
    return f"host {h}" if h else f"rank {rank}"


def compatible(a: Any, b: Any, same_clock: bool) -> bool:
    """Can entries ``a`` and ``b`` (of two ranks) be one collective instance?"""
    ea, eb = a.event, b.event
    if ea.name != eb.name:
        return False
    if ea.signature is not None and eb.signature is not None and ea.signature != eb.signature:
        return False
    if same_clock and is_symmetric(ea.name):
        return max(a.start_ns, b.start_ns) <= min(a.end_ns, b.end_ns) + OVERLAP_TOLERANCE_NS
    return True


def pair_fit(a: Sequence[Any], b: Sequence[Any], shift: int, same_clock: bool) -> Tuple[int, int]:
    """(compatible pairs, -median |end difference| in ns) when b[i + shift] pairs a[i]
    (:func:`compatible`, inlined: this is the inner loop of group attribution)."""
    n = 0
    gaps: List[int] = []
    tol = OVERLAP_TOLERANCE_NS
    for i in range(max(0, -shift), min(len(a), len(b) - shift)):
        x, y = a[i], b[i + shift]
        ex, ey = x.event, y.event
        if ex.name != ey.name:
            continue
        if ex.signature is not None and ey.signature is not None and ex.signature != ey.signature:
            continue
        if same_clock and is_symmetric(ex.name):
            if (x.start_ns if x.start_ns > y.start_ns else y.start_ns) > (
                x.end_ns if x.end_ns < y.end_ns else y.end_ns
            ) + tol:
                continue
        n += 1
        gaps.append(abs(x.end_ns - y.end_ns))
    gaps.sort()
    return n, -(gaps[len(gaps) // 2] if gaps else 0)


def best_shift(a: Sequence[Any], b: Sequence[Any], same_clock: bool) -> Tuple[int, int]:
    """(shift, compatible pairs) of the best alignment of ``b`` against ``a``."""
    if len(a) == len(b):  # the common case: every op pairs at shift 0, no other shift can
        n0 = pair_fit(a, b, 0, same_clock)[0]
        if n0 == len(a):
            return 0, n0
    limit = min(MAX_SHIFT, max(len(a), len(b)))
    best: Optional[Tuple[Tuple[int, int, int], int]] = None
    for d in range(-limit, limit + 1):
        n, end_fit = pair_fit(a, b, d, same_clock)
        score = (n, end_fit, -abs(d))
        if best is None or score > best[0]:
            best = (score, d)
    assert best is not None
    return best[1], best[0][0]


def instance_ok(entries: Mapping[int, Any], hosts: Mapping[int, Optional[str]]) -> Optional[str]:
    """None when ``entries`` (rank -> entry) can be one instance, else the reason."""
    first = next(iter(entries.values())).event
    if any(e.event.name != first.name for e in entries.values()):
        return "op names differ across ranks (order off)"
    sigs = {e.event.signature for e in entries.values() if e.event.signature is not None}
    if len(sigs) > 1:
        return "shapes differ across ranks (order off)"
    if not is_symmetric(first.name):
        return None
    by_host: Dict[str, List[Any]] = {}
    for r, e in entries.items():
        by_host.setdefault(_host_key(r, hosts), []).append(e)
    for es in by_host.values():
        if max(e.start_ns for e in es) > min(e.end_ns for e in es) + OVERLAP_TOLERANCE_NS:
            return "ends before another rank arrives (order off)"
    return None


def match_group(
    members: Sequence[int], seqs: Mapping[int, Sequence[Any]], hosts: Mapping[int, Optional[str]]
) -> Tuple[List[Dict[int, Any]], Counter]:
    """Instances (rank -> entry) of one group and the unmatched candidates by (op name, reason).

    ``members``: the group's ranks among the merged ones; ``seqs``: each member's ops
    of this group in start order (a member without any may be absent)."""
    unmatched: Counter = Counter()
    present = [r for r in members if seqs.get(r)]
    if len(members) < 2 or not present:
        return [], unmatched
    ref = present[0]
    shifts = {ref: 0}
    for r in present[1:]:
        same = _host_key(r, hosts) == _host_key(ref, hosts)
        shifts[r] = best_shift(seqs[ref], seqs[r], same)[0]
    lo = min(-d for d in shifts.values())
    hi = max(len(seqs[r]) - shifts[r] for r in present)
    out: List[Dict[int, Any]] = []
    for i in range(lo, hi):
        entries = {}
        for r in present:
            j = i + shifts[r]
            if 0 <= j < len(seqs[r]):
                entries[r] = seqs[r][j]
        if not entries:
            continue
        name = next(iter(entries.values())).event.name
        missing = [r for r in members if r not in entries]
        if missing:
            unmatched[(name, f"missing on rank(s) {_ranks_text(missing)}")] += 1
            continue
        why = instance_ok(entries, hosts)
        if why is not None:
            unmatched[(name, why)] += 1
            continue
        out.append(entries)
    return out, unmatched


def _ranks_text(ranks: Sequence[int]) -> str:
    return compress_ranges(sorted(ranks))


__all__ = ["MAX_SHIFT", "OVERLAP_TOLERANCE_NS", "best_shift", "compatible", "instance_ok", "is_symmetric",
           "match_group", "pair_fit"]  # fmt: skip
