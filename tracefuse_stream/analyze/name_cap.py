"""The cap on distinct names one rank keeps per step (issue 38, item 2: bounded memory).

Why: the why's partitions (analyze/timeline.py :class:`Segments`) keep one row per
segment, kind and name, and the names themselves; a trace with 400,000 distinct op
names (a name per call: an f-string in a ``record_function``, a JIT kernel per shape)
made the reduce hold every one of them for every rank. Here, once a file's pass has
computed its step figures, each unit's rows (the step thread, each GPU) are capped per
step: the :data:`NAME_CAP` names with most time of each kind (``op``,
``outside_ops``, ``kernel``) in the step are kept exactly, the rest of that kind are
summed into one :data:`FOLDED` row per segment. A step here runs from its start to the
next step's start (the why's stretches and the diff's whole steps lie inside one).
The names no row holds any more are dropped (they are read by id only), so what a rank
keeps grows with its steps and segments, not with its distinct names. How many names
were folded is kept with the partitions and reported as a note (analysis.py), never
silently. Runs in the file's pass, in Python, on the rows either timeline gave (the
compiled kernel's or PyTimeline's): both paths give the same bytes.
"""

from __future__ import annotations

import bisect
from array import array
from typing import Dict, List, Set, Tuple

from tracefuse_stream.analyze.timeline import Segments
from tracefuse_stream.analyze.unit_pack import ROW_FIELDS, pack_unit, segment_starts

#: names kept per rank, step, unit (step thread or GPU) and kind; ``--name-cap`` changes it
NAME_CAP = 256
#: the name of the row the names past the cap are summed into
FOLDED = "(other names)"
_CAPPED_KINDS = (0, 1, 2)  # op, outside_ops, kernel (3, gpu_idle, has no name)


def _groups(segments: Segments, step_starts: List[int]) -> List[int]:
    """Each segment's step group: the index of the last step start at or before it."""
    return [bisect.bisect_right(step_starts, c) - 1 for c in segments.cuts]


def _kept(
    flat: array, groups: List[int], names: List[str], cap: int
) -> Tuple[Set[Tuple[int, int, int]], Set[int]]:
    """((group, kind, name id) kept, name ids folded) of one unit's rows."""
    totals: Dict[Tuple[int, int], Dict[int, int]] = {}
    for i in range(0, len(flat), ROW_FIELDS):
        kind, nid = flat[i + 1], flat[i + 2]
        if kind in _CAPPED_KINDS and nid >= 0:
            per = totals.setdefault((groups[flat[i]], kind), {})
            per[nid] = per.get(nid, 0) + flat[i + 3]
    keep: Set[Tuple[int, int, int]] = set()
    folded: Set[int] = set()
    for (g, kind), per in totals.items():
        order = sorted(per, key=lambda n: (-per[n], names[n]))
        keep.update((g, kind, n) for n in order[:cap])
        folded.update(order[cap:])
    return keep, folded


def _merge(dst: List[int], row: List[int]) -> None:
    """Sum one folded row into the segment's folded row ``dst`` (same layout)."""
    dst[3] += row[3]
    dst[4] += row[4]
    dst[5] += row[5]
    if not row[5]:
        return
    if not dst[5] - row[5]:  # the first folded row with time
        dst[6:14] = row[6:14]
        return
    if row[7] - row[6] > dst[7] - dst[6]:
        dst[6], dst[7] = row[6], row[7]
    dst[8], dst[9] = min(dst[8], row[8]), max(dst[9], row[9])
    if row[10] < dst[10]:
        dst[10], dst[11] = row[10], row[11]
    if row[13] > dst[13]:
        dst[12], dst[13] = row[12], row[13]


def _fold(flat: array, groups: List[int], keep: Set[Tuple[int, int, int]], other: int) -> array:
    """The rows with every name not kept summed into one ``other`` row per segment and
    kind, at the place of the first of them (the rest in their order)."""
    out: List[List[int]] = []
    at: Dict[Tuple[int, int], List[int]] = {}
    for i in range(0, len(flat), ROW_FIELDS):
        row = flat[i : i + ROW_FIELDS].tolist()
        seg, kind, nid = row[0], row[1], row[2]
        if kind not in _CAPPED_KINDS or nid < 0 or (groups[seg], kind, nid) in keep:
            out.append(row)
            continue
        dst = at.get((seg, kind))
        if dst is None:
            dst = at[(seg, kind)] = [seg, kind, other] + [0] * (ROW_FIELDS - 3)
            out.append(dst)
        _merge(dst, row)
    return array("q", [x for row in out for x in row])


def _remap(flat: array, ids: Dict[int, int]) -> None:
    nids = flat[2::ROW_FIELDS].tolist()
    flat[2::ROW_FIELDS] = array("q", [ids[n] if n >= 0 else n for n in nids])


def cap_names(segments: Segments, steps: Dict[int, Tuple[int, int]], cap: int = NAME_CAP) -> None:
    """Cap ``segments`` at ``cap`` names per step, unit and kind (the module docstring),
    in place; drop the names no row holds; record the cap and the names folded
    (``segments.name_cap``, ``segments.folded``); the rows come uncompressed
    (``TimelineFeed.finish(compress=False)``) and are compressed here, once.
    ``steps``: step -> (start, end) ns."""
    if cap < 1:
        raise ValueError("cap_names: the cap is at least 1")
    groups = _groups(segments, sorted({lo for lo, _hi in steps.values()}))
    names = segments.names
    units = []
    for d in (segments.cpu, segments.gpu):
        for k in sorted(d):
            units.append((d, k, array("q", b"".join(d[k][1]))))
            d[k] = (d[k][0], ())  # its bytes are the array's now: one copy of the rows at a time
    nids = [set(flat[2::ROW_FIELDS]) for _d, _k, flat in units]
    kept = [
        _kept(flat, groups, names, cap) if len(n) > cap else (set(), set())
        for (_d, _k, flat), n in zip(units, nids)
    ]
    folded = set().union(*(out for _keep, out in kept))
    other = len(names)  # the folded rows' id until the names are renumbered below
    if folded:
        units = [
            (d, k, _fold(flat, groups, keep, other) if out else flat)
            for (d, k, flat), (keep, out) in zip(units, kept)
        ]
        nids = [set(flat[2::ROW_FIELDS]) for _d, _k, flat in units]
    used = sorted(set().union(*nids) - {-1})
    segments.names = [FOLDED if old == other else names[old] for old in used]
    ids = {old: new for new, old in enumerate(used)}
    units.reverse()
    while units:  # each unit's array freed once packed
        d, k, flat = units.pop()
        if len(used) < len(names) or folded:
            _remap(flat, ids)
        starts = segment_starts(flat, len(segments.cuts)) if folded else d[k][0]
        d[k] = (starts, pack_unit(flat))
        del flat
    segments.name_cap = cap
    segments.folded = len(folded)


__all__ = ["FOLDED", "NAME_CAP", "cap_names"]
