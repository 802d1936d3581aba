"""Where one rank's time went over given stretches of its timeline (the why's raw data).

Why: "rank 5 is late" is half an answer; the user's next question is *why*. For each
stretch asked for -- from a step's start to the rank's arrival at one collective -- this
module partitions the stretch of the rank's **main thread** (the thread holding its
``ProfilerStep#N``) into the innermost thing running at each instant, so the parts add
up to the stretch exactly:

* ``op``: the self time of each operator by name (a ``cpu_op`` not covered by its
  child ops: a slow ``aten::mm`` inside ``aten::linear`` counts as ``aten::mm``),
  with the number of calls that start in the stretch;
* ``outside_ops``: time inside no operator, named by the innermost user annotation
  (``record_function`` / ``user_annotation``) holding it, or "outside every annotation"
  (the ``ProfilerStep`` itself is the profiler's, not the user's).

For a GPU collective, the GPU it ran on (all its streams) is partitioned the same way:
``kernel`` (kernels, memcpy, memset by name; where streams overlap, the most recently
started kernel holds the instant) and ``gpu_idle`` (no kernel on any stream: the GPU
waiting for the CPU to launch work). Each part also keeps its largest single stretch (where to show it).

Memory: only the events that overlap an asked stretch are held, compactly (a tuple
each), for one file at a time; what is returned is one aggregate per (stretch, kind,
name). The events come from the compiled kernel's scan (``ph`` X only, read/scan.py);
without the kernel every event is offered and filtered here, to the same result.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

from tracefuse_stream.timeunits import us_to_ns_or_none

OP_CATS = frozenset({"cpu_op", "user_annotation"})
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
OUTSIDE_ALL = "outside every annotation"
STEP_PREFIX = "ProfilerStep#"
Key = Tuple[str, str]  # (kind, name): the same on every rank (where: Breakdown.main_thread / stream)


@dataclass(frozen=True)
class Stretch:
    """A stretch of one rank's timeline to break down (file-relative ns)."""

    key: Hashable  # the caller's name for it: (step, instance id)
    step: int
    lo_ns: int
    hi_ns: int
    gpu_tid: Any = None  # the GPU stream of the collective (None: a CPU collective)


@dataclass
class Part:
    """One contributor of one stretch: total ns, calls (or gaps), largest piece."""

    ns: int = 0
    count: int = 0
    piece: Tuple[int, int] = (0, 0)  # the largest single interval (file-relative ns)
    span: Tuple[int, int] = (0, 0)  # first start .. last end of what it holds

    def add(self, a: int, b: int) -> None:
        self.ns += b - a
        if b - a > self.piece[1] - self.piece[0]:
            self.piece = (a, b)
        self.span = (a, b) if self.span == (0, 0) else (min(self.span[0], a), max(self.span[1], b))


@dataclass
class Breakdown:
    """What one stretch of one rank was made of."""

    stretch_ns: int
    parts: Dict[Key, Part] = field(default_factory=dict)
    main_thread: Optional[str] = None
    stream: Optional[str] = None


class TimelineCollector:
    """Feeds on one rank's events (any order) and breaks the asked stretches down."""

    def __init__(self, stretches: Sequence[Stretch]) -> None:
        self.stretches = list(stretches)
        self.gpu_tids = {s.gpu_tid for s in stretches if s.gpu_tid is not None}
        merged: List[List[int]] = []  # the stretches' union, sorted: only events in it are kept
        for lo, hi in sorted((s.lo_ns, s.hi_ns) for s in stretches):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self._los = [m[0] for m in merged]
        self._his = [m[1] for m in merged]
        self.cpu: Dict[
            Tuple[Any, Any], List[Tuple[int, int, str, bool]]
        ] = {}  # thread -> (a, b, name, is_op)
        self.gpu: Dict[Any, List[Tuple[int, int, str]]] = {}  # device pid -> (a, b, name), every stream
        self.gpu_at: Dict[Tuple[Any, int], Any] = {}  # (stream tid, start ns) -> device pid
        self.step_thread: Dict[int, Tuple[Any, Any]] = {}  # step -> (pid, tid) holding ProfilerStep#N

    def feed(self, ev: Any) -> None:
        if type(ev) is not dict or ev.get("ph") != "X":
            return
        cat = ev.get("cat")
        if type(cat) is not str or (cat not in OP_CATS and cat not in GPU_CATS):
            return  # (a cat that is no string is no op: not even hashable when an object)
        name = ev.get("name")
        if type(name) is not str:
            return
        a = _ns(ev.get("ts"))
        d = _ns(ev.get("dur"))
        if a is None or d is None or d < 0:
            return
        b = a + d
        i = bisect.bisect_right(self._los, b) - 1
        if i < 0 or self._his[i] < a:
            return  # in no asked stretch
        pid, tid = ev.get("pid"), ev.get("tid")
        if not isinstance(pid, (int, str)) or not isinstance(tid, (int, str)) or isinstance(pid, bool):
            return
        if cat in GPU_CATS:
            if self.gpu_tids:
                self.gpu.setdefault(pid, []).append((a, b, name))
                if tid in self.gpu_tids:
                    self.gpu_at[(tid, a)] = pid
            return
        self.cpu.setdefault((pid, tid), []).append((a, b, name, cat == "cpu_op"))
        if name.startswith(STEP_PREFIX) and name[len(STEP_PREFIX) :].isdigit():
            self.step_thread[int(name[len(STEP_PREFIX) :])] = (pid, tid)

    def result(self) -> Dict[Hashable, Breakdown]:
        """stretch key -> its breakdown (a stretch whose step has no thread: CPU parts
        left out, GPU parts still there)."""
        index: Dict[Tuple[Any, Any], Tuple[List[int], List[Tuple[int, int, str, bool]], int]] = {}
        for th, events in self.cpu.items():
            events.sort(key=lambda e: (e[0], -e[1]))
            longest = max((e[1] - e[0] for e in events), default=0)
            index[th] = ([e[0] for e in events], events, longest)
        for kernels in self.gpu.values():
            kernels.sort()
        out: Dict[Hashable, Breakdown] = {}
        for s in self.stretches:
            bd = Breakdown(max(0, s.hi_ns - s.lo_ns))
            thread = self.step_thread.get(s.step)
            if thread is not None:
                bd.main_thread = f"thread {thread[1]}"
                _cpu_parts(_window(index.get(thread), s.lo_ns, s.hi_ns), s.lo_ns, s.hi_ns, bd)
            if s.gpu_tid is not None:
                dev = self.gpu_at.get((s.gpu_tid, s.hi_ns))  # the device the collective ran on
                if dev is None:
                    dev = next(
                        (d for (t, _a), d in sorted(self.gpu_at.items(), key=str) if t == s.gpu_tid), None
                    )
                bd.stream = f"GPU {dev}"
                _gpu_parts(self.gpu.get(dev, []), s.lo_ns, s.hi_ns, bd)
            out[s.key] = bd
        return out


def _window(
    idx: Optional[Tuple[List[int], List[Tuple[int, int, str, bool]], int]], lo: int, hi: int
) -> List[Tuple[int, int, str, bool]]:
    """The thread's events that may overlap [lo, hi], in order (those starting before
    ``lo`` are kept when they can reach it: ProfilerStep, annotations)."""
    if idx is None:
        return []
    starts, events, longest = idx
    j = bisect.bisect_left(starts, hi)
    i = bisect.bisect_left(starts, lo)
    early = [e for e in events[bisect.bisect_left(starts, lo - longest) : i] if e[1] > lo]
    return early + events[i:j]


def _ns(v: Any) -> Optional[int]:
    """Microseconds as whole ns, fast for what Kineto writes (ints, 3-decimal numbers;
    digits beyond the ns are cut, which no aggregate here can show); None: no time."""
    t = type(v)
    if t is int:
        return v * 1000
    if t is Decimal:
        return int(v.scaleb(3)) if v.is_finite() else None
    return us_to_ns_or_none(v) if t is float else None


def _part(bd: Breakdown, key: Key) -> Part:
    p = bd.parts.get(key)
    if p is None:
        p = bd.parts[key] = Part()
    return p


def _cpu_parts(events: Sequence[Tuple[int, int, str, bool]], lo: int, hi: int, bd: Breakdown) -> None:
    """Partition [lo, hi] of one thread into the innermost op / annotation gap."""
    none: Key = ("outside_ops", OUTSIDE_ALL)
    stack: List[Tuple[int, Key]] = []  # (end, owner key)
    key: Key
    t = lo

    def give(a: int, b: int, key: Key) -> None:
        if b > a:
            _part(bd, key).add(a, b)

    for a0, b0, name, is_op in events:
        if b0 <= lo or a0 >= hi:
            continue
        a, b = max(a0, lo), min(b0, hi)
        while stack and stack[-1][0] <= a:
            end, key = stack.pop()
            give(t, end, key)
            t = max(t, end)
        owner = stack[-1][1] if stack else none
        give(t, a, owner)
        t = max(t, a)
        if stack and b > stack[-1][0]:
            b = stack[-1][0]  # overlaps its parent's end without nesting: clipped there
        if is_op:
            key = ("op", name)
            if a0 >= lo:
                _part(bd, key).count += 1
        elif owner[0] == "op":
            key = owner  # an annotation inside an operator is the operator's time
        elif name.startswith(STEP_PREFIX):
            key = none
        else:
            key = ("outside_ops", name)
        stack.append((b, key))
    while stack:
        end, key = stack.pop()
        give(t, end, key)
        t = max(t, end)
    give(t, hi, none)
    for key, p in bd.parts.items():
        if key[0] == "outside_ops":
            p.count = max(p.count, 1)


def _gpu_parts(kernels: Sequence[Tuple[int, int, str]], lo: int, hi: int, bd: Breakdown) -> None:
    """Partition [lo, hi] of one GPU (all its streams) into kernels by name -- where
    streams overlap, the most recently started kernel holds the instant -- and idle
    time (no kernel on any stream: the GPU waits for the CPU to launch work)."""
    idle: Key = ("gpu_idle", "idle")
    inside = [(max(a, lo), min(b, hi), name) for a, b, name in kernels if b > lo and a < hi and b > a]
    for a0, _b, name in inside:
        if a0 >= lo:
            _part(bd, ("kernel", name)).count += 1
    points = sorted({lo, hi} | {a for a, _, _ in inside} | {b for _, b, _ in inside})
    starts = sorted(range(len(inside)), key=lambda k: inside[k][0])
    active: List[int] = []
    j = 0
    for t0, t1 in zip(points, points[1:]):
        while j < len(starts) and inside[starts[j]][0] <= t0:
            active.append(starts[j])
            j += 1
        active = [k for k in active if inside[k][1] > t0]
        if active:
            top = max(active, key=lambda k: (inside[k][0], k))
            _part(bd, ("kernel", inside[top][2])).add(t0, t1)
        else:
            p = _part(bd, idle)
            if p.piece[1] != t0 or p.ns == 0:
                p.count += 1
            p.add(t0, t1)


__all__ = ["Breakdown", "GPU_CATS", "OP_CATS", "OUTSIDE_ALL", "Part", "Stretch", "TimelineCollector"]
