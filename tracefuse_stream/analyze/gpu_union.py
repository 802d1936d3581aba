"""Where one GPU's time went over a window: compute, communication, copies, idle.

Why a union, and why this order: streams overlap (an NCCL all-reduce runs beside the
backward GEMMs; that is the point of DDP's buckets), so summing kernel durations counts
an instant twice. Each instant of the window on the rank's GPU (all its streams) is
given to exactly one part, by precedence **compute > communication > memory > idle**:

* ``compute``: any non-communication, non-copy kernel runs (it is the work; a
  collective under it is hidden);
* ``comm_exposed``: communication runs and no compute (the step waits on it);
* ``memcpy``: only copies / memsets run (exposed copies);
* ``idle``: nothing runs on any stream, split by what bounds the gap inside the window:
  ``kernel_wait`` (between two kernels, at most :data:`KERNEL_WAIT_NS`: the GPU's own
  launch gap between back-to-back kernels), ``host_wait`` (between two kernels,
  longer: with every stream empty nothing was queued, so the host had not launched the
  next kernel yet) and ``other`` (before the window's first kernel or after its last,
  or a window with no kernel: the step's edges -- data loading, the host's end-of-step
  work, synchronisation -- which the kept events cannot attribute).

So ``compute + comm_exposed + memcpy + idle == window`` exactly, and ``comm`` (the
union of communication kernels, whatever runs beside them) ``>= comm_exposed``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

#: a gap between two kernels at most this long is the launch gap of back-to-back
#: kernels (measured on the real traces in ../shared/fixtures: H100/A100 1-4 us between
#: queued kernels); HTA's default is 30 ns, but HTA tells host wait from the launch
#: time, which the kept events do not have (docs/collectives.md)
KERNEL_WAIT_NS = 10_000

COMPUTE_C, COMM_C, MEMORY_C = 0, 1, 2
_IDLE = 3


@dataclass(slots=True)
class GpuFigures:
    """One window's parts, ns (see the module docstring)."""

    window_ns: int
    compute_ns: int = 0
    comm_ns: int = 0
    comm_exposed_ns: int = 0
    memcpy_ns: int = 0
    idle_ns: int = 0
    idle_host_wait_ns: int = 0
    idle_kernel_wait_ns: int = 0
    idle_other_ns: int = 0


def _pieces(events: Sequence[Tuple[int, int, int]]) -> Tuple[List[int], List[int], List[int], List[int]]:
    """The device's time cut where the running set changes: (starts, ends, state,
    comm running) of maximal pieces of one state; between pieces nothing runs."""
    points: List[Tuple[int, int, int]] = []
    for a, b, c in events:
        if b > a:
            points.append((a, 1, c))
            points.append((b, -1, c))
    points.sort()
    starts: List[int] = []
    ends: List[int] = []
    states: List[int] = []
    comm: List[int] = []
    cnt = [0, 0, 0]
    i, n = 0, len(points)
    while i < n:
        t = points[i][0]
        while i < n and points[i][0] == t:
            cnt[points[i][2]] += points[i][1]
            i += 1
        if i == n:
            break
        state = COMPUTE_C if cnt[0] else COMM_C if cnt[1] else MEMORY_C if cnt[2] else _IDLE
        c = 1 if cnt[1] else 0
        nxt = points[i][0]
        if state == _IDLE:
            continue  # gaps are what lies between pieces
        if starts and ends[-1] == t and states[-1] == state and comm[-1] == c:
            ends[-1] = nxt
        else:
            starts.append(t)
            ends.append(nxt)
            states.append(state)
            comm.append(c)
    return starts, ends, states, comm


def window_figures(
    events: Sequence[Tuple[int, int, int]],
    windows: Sequence[Tuple[int, int]],
    kernel_wait_ns: int = KERNEL_WAIT_NS,
) -> List[GpuFigures]:
    """The figures of each ``(lo, hi)`` window (ns, on the events' clock) from the
    device's ``(start, end, class)`` events (class: :data:`COMPUTE_C`, :data:`COMM_C`,
    :data:`MEMORY_C`), any order."""
    starts, ends, states, comm = _pieces(events)
    out = []
    for lo, hi in windows:
        f = GpuFigures(max(0, hi - lo))
        k = max(0, bisect.bisect_right(ends, lo))
        at = lo  # the end of the last busy piece seen (the window's start at first)
        busy_seen = False
        while k < len(starts) and starts[k] < hi:
            a, b = max(starts[k], lo), min(ends[k], hi)
            if a > at:
                _idle(f, at, a, busy_seen, True, kernel_wait_ns)
            d = b - a
            if states[k] == COMPUTE_C:
                f.compute_ns += d
            elif states[k] == COMM_C:
                f.comm_exposed_ns += d
            else:
                f.memcpy_ns += d
            if comm[k]:
                f.comm_ns += d
            at, busy_seen = b, True
            k += 1
        if hi > at:
            _idle(f, at, hi, busy_seen, False, kernel_wait_ns)
        out.append(f)
    return out


def name_sums(
    events: Sequence[Tuple[int, int, int]], windows: Sequence[Tuple[int, int]]
) -> List[Tuple[int, int, int, int]]:
    """``(window, name id, ns clipped to it, events starting in it)`` rows, by window
    and name id, from ``(start, end, name id)`` events; ``windows`` sorted by start."""
    los = [w[0] for w in windows]
    acc: Dict[Tuple[int, int], List[int]] = {}
    for a, b, nid in events:
        w = max(0, bisect.bisect_right(los, a) - 1)
        while w < len(windows) and windows[w][0] < max(b, a + 1):
            lo, hi = windows[w]
            d = min(b, hi) - max(a, lo)
            starts = 1 if lo <= a < hi else 0
            if d > 0 or starts:
                x = acc.setdefault((w, nid), [0, 0])
                x[0] += max(0, d)
                x[1] += starts
            w += 1
    return [(w, nid, x[0], x[1]) for (w, nid), x in sorted(acc.items())]


def _idle(f: GpuFigures, a: int, b: int, after_busy: bool, before_busy: bool, kernel_wait_ns: int) -> None:
    d = b - a
    f.idle_ns += d
    if after_busy and before_busy:
        if d <= kernel_wait_ns:
            f.idle_kernel_wait_ns += d
        else:
            f.idle_host_wait_ns += d
    else:
        f.idle_other_ns += d


FIGURE_FIELDS = (
    "compute_ns", "comm_ns", "comm_exposed_ns", "memcpy_ns", "idle_ns",
    "idle_host_wait_ns", "idle_kernel_wait_ns", "idle_other_ns",
)  # fmt: skip  # the order of the compiled kernel's figures (csrc/timeline_steps.c)


def as_row(f: GpuFigures) -> Tuple[int, ...]:
    return tuple(getattr(f, k) for k in FIGURE_FIELDS)


def from_row(window_ns: int, row: Sequence[int]) -> GpuFigures:
    return GpuFigures(window_ns, **dict(zip(FIGURE_FIELDS, row)))


__all__ = [
    "COMM_C",
    "COMPUTE_C",
    "FIGURE_FIELDS",
    "GpuFigures",
    "KERNEL_WAIT_NS",
    "MEMORY_C",
    "as_row",
    "from_row",
    "name_sums",
    "window_figures",
]
