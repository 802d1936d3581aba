"""A stretch of one rank's timeline as the sum of its segments (the why's and the
diff's raw figures), from the partitions analyze/timeline.py keeps.

Why its own module: the partitioning (timeline.py) runs inside each file's pass; the
sums here run in the reduce, once the stretches wanted are known.
"""

from __future__ import annotations

import bisect
from typing import Any, Dict, List, Optional, Tuple

from tracefuse_stream.analyze.timeline import (
    KINDS,
    OUTSIDE_ALL,
    Breakdown,
    Key,
    Part,
    Segments,
    Unit,
)

_NO_PIECE = (0, 0)
KeyCache = List[Dict[str, Key]]  # per kind: name -> its key (:func:`key_cache`)


def key_cache() -> KeyCache:
    """Where :func:`breakdown` finds the key of a part: one ``(kind, name)`` tuple per
    distinct part for the caller that keeps it, not one per part of every rank's
    breakdown (the ``--json`` breakdown holds a step's every rank at once: issue 38)."""
    return [{} for _ in KINDS]


def _combine(
    rows: Any, names: List[str], bd: Breakdown, pieces: bool = True, keys: Optional[KeyCache] = None
) -> None:
    """Sum segment rows (in time order) into ``bd``'s parts, joining pieces that meet at a
    cut (``pieces`` False: the parts without their largest piece and span, which the
    every-rank breakdown never shows: ~60% of a part's memory)."""
    cache = keys if keys is not None else key_cache()
    acc: Dict[Tuple[int, int], List[int]] = {}
    for _seg, kind, nid, ns, count, runs, pa, pb, sa, sb, fa, fb, la, lb in rows:
        x = acc.get((kind, nid))
        if x is None:
            acc[(kind, nid)] = [ns, count, runs, pa, pb, sa, sb, la, lb]
            continue
        x[0] += ns
        x[1] += count
        if not runs:
            continue
        if not x[2]:  # the first segment where it holds time
            x[2:9] = [runs, pa, pb, sa, sb, la, lb]
            continue
        if x[8] == fa:  # its last piece so far runs on into this segment: one piece
            joined = (x[7], fb)
            x[2] += runs - 1
            if joined[1] - joined[0] > x[4] - x[3]:
                x[3], x[4] = joined
            x[7], x[8] = joined if runs == 1 else (la, lb)
        else:
            x[2] += runs
            x[7], x[8] = la, lb
        if pb - pa > x[4] - x[3]:
            x[3], x[4] = pa, pb
        x[6] = sb
    parts = bd.parts
    for (kind, nid), x in acc.items():
        if kind in (1, 3):
            name = names[nid] if nid >= 0 else (OUTSIDE_ALL if kind == 1 else "idle")
            count = x[2]
        else:
            name, count = names[nid], x[1]
        known = cache[kind]
        key = known.get(name)
        if key is None:
            key = known[name] = (KINDS[kind], name)
        if pieces:
            parts[key] = Part(x[0], count, (x[3], x[4]), (x[5], x[6]))
        else:
            parts[key] = Part(x[0], count, _NO_PIECE, _NO_PIECE)


def breakdown(
    segments: Segments,
    step: int,
    lo: int,
    hi: int,
    gpu_tid: Any = None,
    pieces: bool = True,
    keys: Optional[KeyCache] = None,
) -> Optional[Breakdown]:
    """The stretch [lo, max(lo, hi)] of ``step`` (file-relative ns, both cuts), or None
    when the pass did not cut there (``pieces``: :func:`_combine`'s; ``keys``: a
    :func:`key_cache` the parts' keys are shared from)."""
    hi = max(lo, hi)
    cuts = segments.cuts
    i, j = bisect.bisect_left(cuts, lo), bisect.bisect_left(cuts, hi)
    if i >= len(cuts) or cuts[i] != lo or j >= len(cuts) or cuts[j] != hi:
        return None
    bd = Breakdown(hi - lo)
    thread = segments.step_thread.get(step)
    if thread is not None and thread in segments.cpu:
        bd.main_thread = segments.labels.get(thread)
        _combine(segments.rows(segments.cpu[thread], i, j), segments.names, bd, pieces, keys)
    if gpu_tid is not None:
        dev = segments.gpu_dev.get((gpu_tid, hi))
        if dev is None:
            dev = next((d for (t, _a), d in sorted(segments.gpu_dev.items(), key=str) if t == gpu_tid), None)
        if dev is not None and dev in segments.gpu:
            bd.stream = segments.labels.get(dev)
            _combine(segments.rows(segments.gpu[dev], i, j), segments.names, bd, pieces, keys)
        else:
            bd.stream = "GPU ?"
    return bd


def unit_parts(segments: Segments, unit: Unit, lo: int, hi: int) -> Dict[Key, Part]:
    """One unit's (``segments.cpu`` / ``.gpu`` value) parts over [lo, hi], both cuts."""
    i, j = bisect.bisect_left(segments.cuts, lo), bisect.bisect_left(segments.cuts, hi)
    bd = Breakdown(hi - lo)
    _combine(segments.rows(unit, i, j), segments.names, bd)
    return bd.parts


__all__ = ["KeyCache", "breakdown", "key_cache", "unit_parts"]
