"""Matched instances checked by their ends, across hosts.

Why: matching by order (gloo ops, GPU kernels without ``Seq``) can pair the k-th
operation of one rank with the k-th of another that is not the same collective (a
profiling window that starts inside a step, a rank that issued one more). On one clock
the matcher already refuses an instance where a member finishes before another
arrives; across hosts nothing compared the ends, and a pairing in which one rank
*finishes* 100 ms before the other *starts* counted as 100 ms of waiting.

Every member of a *symmetric* collective (all-reduce, all-gather, reduce-scatter,
all-to-all, barrier) leaves it at about the same instant: the data every member needs
is complete only when the last one has sent its part. So:

* the clock offset of each host against the host of the lowest rank is estimated from
  the instances themselves, as ``--align collectives`` estimates it: the median over
  instances of the difference of the two hosts' median end;
* ``tolerance`` = max(``FACTOR`` x the median, over instances, of the spread of the
  members' offset-corrected ends, ``FLOOR_NS``): how far apart ends of one collective
  are in this run;
* a symmetric instance whose corrected ends are further apart than that, or any
  instance in which a member (corrected) finishes before another (corrected) arrives,
  is not one collective: it goes to ``unmatched`` with that reason and counts in no wait.

Rooted and point-to-point operations (broadcast, reduce, send/recv) may finish on one
member long before another: only the "finishes before another arrives" rule applies.

Before any of that, whatever the clocks: members that arrive, or leave, more than
:data:`MAX_APART_NS` apart are not one collective (:func:`drop_apart`). No rank waits
that long inside one collective (torch's default process-group timeout is 30 min for
gloo, 10 for NCCL), and the hosts of one job do not disagree by that much; two runs
written into one folder do (issue 39: a broadcast "matched" across runs 18.5 h apart,
and the clock offset estimated from such instances "corrected" it away).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tracefuse_stream.errors import UsageError

FACTOR = 8
FLOOR_NS = 1_000_000  # 1 ms: ends of one collective on one host agree far better
MAX_APART_NS = 30 * 60 * 10**9  # members further apart than this are not one collective
FAR_CLOCK_NS = 10**9  # a host clock offset estimated beyond this is said (far_clock_note)
#: the default ``--max-clock-offset`` (``max_clock_offset_s``): synced hosts agree to
#: milliseconds, so an offset estimated beyond a second is refused by the analyses
#: (analyze/analysis.require_near_clocks) unless the user accepts it
MAX_CLOCK_OFFSET_S = 1.0
_SYMMETRIC = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|barrier", re.IGNORECASE)

Found = Tuple[str, str, str, Dict[int, "object"]]  # (name, group, match, rank -> Entry)


def is_symmetric(name: str) -> bool:
    return _SYMMETRIC.search(name) is not None


def _host(rank: int, hosts: Mapping[int, Optional[str]]) -> str:
    h = hosts.get(rank)
    return f"host {h}" if h else f"rank {rank}"


def _median(values: Sequence[int]) -> int:
    s = sorted(values)
    n = len(s)
    if not n:
        return 0
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2


def drop_apart(found: List[Found], unmatched: Counter) -> List[Found]:
    """The instances whose members arrive and leave within :data:`MAX_APART_NS` of each
    other; the others are counted in ``unmatched`` with the reason."""
    kept: List[Found] = []
    for f in found:
        name, group, match, entries = f
        starts = [e.start_ns for e in entries.values()]  # type: ignore[attr-defined]
        ends = [e.end_ns for e in entries.values()]  # type: ignore[attr-defined]
        apart = max(max(starts) - min(starts), max(ends) - min(ends))
        if apart > MAX_APART_NS:
            kind = "gloo" if match == "gloo order" else "gpu"
            unmatched[(kind, name, group, f"members {apart / 3600e9:,.1f} h apart, more than {MAX_APART_NS // 60_000_000_000} min "
                       "(no rank waits that long in a collective): not one collective (two runs?)")] += 1  # fmt: skip
        else:
            kept.append(f)
    return kept


def clock_offset_limit(value: Any, what: str = "max_clock_offset_s") -> float:
    """``--max-clock-offset`` / ``max_clock_offset_s``: seconds, a finite number of 0 or
    more (text from the command line, ``what`` a flag; an int or float from the API); a
    usage error otherwise."""
    text = what.startswith("--")
    s = math.nan
    if (isinstance(value, (int, float)) and not isinstance(value, bool)) or (text and isinstance(value, str)):
        try:
            s = float(value)
        except ValueError:
            pass
    if not (math.isfinite(s) and s >= 0):
        raise UsageError(f"{what} must be a number of seconds, 0 or more, not {value!r}")
    return s


def far_clock_note(host: str, offset_ns: int) -> str:
    """Why: within :data:`MAX_APART_NS` a clock offset between hosts and two runs look
    alike (the instances "correct" either away); synced hosts agree to milliseconds, so
    an offset of seconds is said, with both readings."""
    return (
        f"{host}'s clock is {abs(offset_ns) / 1e9:,.1f} s {'ahead of' if offset_ns > 0 else 'behind'} the lowest "
        "rank's host's, estimated from the collectives' ends; if the hosts' clocks agree, these files are not one run"
    )


def host_offsets(found: Sequence[Found], hosts: Mapping[int, Optional[str]]) -> Dict[str, int]:
    """host -> its clock ahead of the reference host (ns), from the symmetric instances'
    ends (the median over instances the two hosts share)."""
    diffs: Dict[str, List[int]] = {}
    ref: Optional[str] = None
    for name, _g, _m, entries in found:
        if not is_symmetric(name):
            continue
        by: Dict[str, List[int]] = {}
        for r, e in entries.items():
            by.setdefault(_host(r, hosts), []).append(e.end_ns)  # type: ignore[attr-defined]
        if ref is None:
            ref = _host(min(entries), hosts)
        if ref not in by:
            continue
        mid = _median(by[ref])
        for h, ends in by.items():
            diffs.setdefault(h, []).append(_median(ends) - mid)
    return {h: _median(v) for h, v in diffs.items()}


def check_ends(
    found: List[Found], hosts: Mapping[int, Optional[str]], unmatched: Counter
) -> Tuple[List[Found], Dict[str, int], int]:
    """(the instances that are one collective, host offsets, tolerance ns); the others
    are counted in ``unmatched`` under ``(kind, name, group, reason)``."""
    if len({_host(r, hosts) for f in found for r in f[3]}) < 2:
        return found, {}, 0  # one clock: the matcher's own overlap rule has checked them
    offsets = host_offsets(found, hosts)

    def corrected(entries: Dict[int, object]) -> Tuple[List[int], List[int]]:
        starts, ends = [], []
        for r, e in entries.items():
            off = offsets.get(_host(r, hosts), 0)
            starts.append(e.start_ns - off)  # type: ignore[attr-defined]
            ends.append(e.end_ns - off)  # type: ignore[attr-defined]
        return starts, ends

    spreads = []
    for name, _g, _m, entries in found:
        if is_symmetric(name):
            _s, ends = corrected(entries)
            spreads.append(max(ends) - min(ends))
    tol = max(FACTOR * _median(spreads), FLOOR_NS) if spreads else FLOOR_NS
    kept: List[Found] = []
    for f in found:
        name, group, match, entries = f
        starts, ends = corrected(entries)
        kind = "gloo" if match == "gloo order" else "gpu"
        if min(ends) < max(starts):
            unmatched[(kind, name, group, "a member finishes before another arrives (clocks corrected): not one collective")] += 1  # fmt: skip
        elif is_symmetric(name) and max(ends) - min(ends) > tol:
            unmatched[(kind, name, group, f"members' ends differ by more than {tol / 1e6:.3f} ms (clocks corrected): not one collective")] += 1  # fmt: skip
        else:
            kept.append(f)
    return kept, offsets, tol


__all__ = [
    "FACTOR",
    "FAR_CLOCK_NS",
    "FLOOR_NS",
    "MAX_APART_NS",
    "MAX_CLOCK_OFFSET_S",
    "check_ends",
    "clock_offset_limit",
    "drop_apart",
    "far_clock_note",
    "host_offsets",
    "is_symmetric",
]
