"""PyTimeline's step-time methods: the compiled kernel's ``Timeline.records`` and
``Timeline.gpu_windows`` (csrc/timeline_steps.c) in Python, over PyTimeline's records
``(a, b, name, thread, dev, kind)``.

Why a module of its own: analyze/timeline.py holds the why's timeline and stays under
the size limit; these are the step-time figures' (analyze/step_time.py), with the rule
itself in analyze/gpu_union.py, so the kernel off and on give one answer
(tests/test_step_time.py compares them).
"""

from __future__ import annotations

from array import array
from itertools import chain
from typing import Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.analyze.gpu_union import as_row, name_sums, window_figures

Rec = Tuple[int, int, bytes, bytes, bytes, int]
GpuOut = Tuple[Optional[bytes], bytes, bytes]  # (device, figures, name rows)


def _name_ids(recs: Sequence[Rec]) -> Dict[bytes, int]:
    names: Dict[bytes, int] = {}
    for r in recs:  # ids in the order first seen (the kernel's: its records' order)
        names.setdefault(r[2], len(names))
    return names


def records(recs: Sequence[Rec], kind: int) -> Tuple[List[bytes], bytes]:
    """(keys, packed): the records of ``kind`` in the order added, 4 native int64
    each (a, b, name id, key index; the key: the device of a GPU record, else the
    thread), keys in the order first seen among them."""
    if kind not in (0, 1, 2):
        raise ValueError("Timeline.records: kind is 0, 1 or 2")
    names = _name_ids(recs)
    keys: Dict[bytes, int] = {}
    flat = array("q")
    for a, b, name, thread, dev, k in recs:
        if k == kind:
            key = dev if kind == 2 else thread
            flat.extend((a, b, names[name], keys.setdefault(key, len(keys))))
    return list(keys), flat.tobytes()


def gpu_windows(
    recs: Sequence[Rec], dev: Optional[bytes], windows: Sequence[int], classes: bytes, kernel_wait_ns: int
) -> GpuOut:
    """(the device, 8 int64 figures a window, 4 int64 name rows): see
    csrc/timeline_steps.c (dev None: the device with most GPU records, ties: the
    smallest key)."""
    gpu = [r for r in recs if r[5] == 2]
    if dev is None:
        counts: Dict[bytes, int] = {}
        for r in gpu:
            counts[r[4]] = counts.get(r[4], 0) + 1
        if not counts:
            return None, b"", b""
        dev = min(counts, key=lambda k: (-counts[k], k))
    names = _name_ids(recs)
    mine = [(r[0], r[1], names[r[2]]) for r in gpu if r[4] == dev]
    cls = [classes[n] if n < len(classes) and classes[n] <= 2 else 0 for _a, _b, n in mine]
    wins = list(zip(windows[0::2], windows[1::2]))
    figs = window_figures([(a, b, c) for (a, b, _n), c in zip(mine, cls)], wins, kernel_wait_ns)
    flat = array("q", chain.from_iterable(as_row(f) for f in figs))
    rows = array("q", chain.from_iterable(name_sums(mine, wins)))
    return dev, flat.tobytes(), rows.tobytes()


__all__ = ["GpuOut", "gpu_windows", "records"]
