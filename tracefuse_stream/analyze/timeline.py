"""Where one rank's time went over stretches of its timeline (the why's raw data).

Why: "rank 5 is late" is half an answer; the user's next question is *why*. A
*stretch* runs from a step's start to the rank's arrival at one collective. It is
partitioned on the rank's **main thread** (the thread holding its ``ProfilerStep#N``)
into the innermost thing running at each instant, so the parts add up to the stretch
exactly:

* ``op``: the self time of each operator by name (a ``cpu_op`` not covered by its
  child ops: a slow ``aten::mm`` inside ``aten::linear`` counts as ``aten::mm``),
  with the number of calls that start in the stretch;
* ``outside_ops``: time inside no operator, named by the innermost user annotation
  (``record_function`` / ``user_annotation``) holding it, or "outside every annotation"
  (the ``ProfilerStep`` itself is the profiler's, not the user's); its count is the
  number of separate gaps.

For a GPU collective, the GPU it ran on (all its streams) is partitioned the same way:
``kernel`` (kernels, memcpy, memset by name; where streams overlap, the most recently
started kernel holds the instant) and ``gpu_idle`` (no kernel on any stream: the GPU
waiting for the CPU to launch work; count: the gaps). Each part also keeps its largest
single piece and its span (where to show it in Perfetto).

One pass (issue 27, item 9: a second pass over every file cost more than the merge):
which stretches are asked is known only once all ranks are matched, so info's single
pass keeps the file's operator, annotation and kernel events compactly (the compiled
kernel's ``Timeline``: 32 bytes an event, names interned; :class:`PyTimeline` is the
same in Python) and, at the file's end, partitions the step threads and the
collectives' GPUs once, **cut at every step start and collective arrival** of the rank
(:class:`Segments`: aggregates per segment, kind and name). Any stretch is then a sum
of segments (:func:`breakdown`); the events are freed with the file.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from tracefuse_stream import native
from tracefuse_stream.analyze import pytimeline_steps
from tracefuse_stream.analyze.gpu_devices import GpuDevices, gpu_devices
from tracefuse_stream.analyze.pytimeline_steps import GpuOut
from tracefuse_stream.analyze.unit_pack import (
    BLOCK_ROWS,
    ROW_FIELDS,
    Packed,
    Spill,
    Unit,
    pack_unit,
    packed_rows,
    rows_between,
    segment_starts,
    spill_unit,
    unit_rows,
    unpack_rows,
)
from tracefuse_stream.select.window import step_number
from tracefuse_stream.timeunits import FAR_NS, us_to_ns_or_none

OP_CATS = frozenset({"cpu_op", "user_annotation"})
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
OUTSIDE_ALL = "outside every annotation"
STEP_PREFIX = "ProfilerStep#"
Key = Tuple[str, str]  # (kind, name): the same on every rank (where: Breakdown.main_thread / stream)
KINDS = ("op", "outside_ops", "kernel", "gpu_idle")
_CAT_KIND = {"cpu_op": 0, "user_annotation": 1, "kernel": 2, "gpu_memcpy": 2, "gpu_memset": 2}
_STEP_B = STEP_PREFIX.encode()

# a segment row: (seg, kind, name_id, ns, count, runs, piece_a, piece_b, span_a, span_b,
#                 first_a, first_b, last_a, last_b)
Row = Tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int]
# kept per unit as one flat array of int64, 112 bytes a row (a tuple of 14 ints took
# ~500: 1.3 MB a 20 MB rank)
_FIELDS = ROW_FIELDS


@dataclass(slots=True)  # one per part of every rank's stretch: the --json breakdown holds a step's
class Part:
    """One contributor of one stretch: total ns, calls (or gaps), largest piece."""

    ns: int = 0
    count: int = 0
    piece: Tuple[int, int] = (0, 0)  # the largest single interval (file-relative ns)
    span: Tuple[int, int] = (0, 0)  # first start .. last end of what it holds


@dataclass(slots=True)
class Breakdown:
    """What one stretch of one rank was made of."""

    stretch_ns: int
    parts: Dict[Key, Part] = field(default_factory=dict)
    main_thread: Optional[str] = None
    stream: Optional[str] = None


def value_key(v: Any) -> Optional[bytes]:
    """A pid or tid as the timeline keys it (the compiled kernel spells it the same
    way from the text): an int (not a bool) or a string; None: no thread of any part."""
    if type(v) is int:
        b = str(v).encode()
        return b"i" + struct.pack("<I", len(b)) + b
    if type(v) is str:
        b = v.encode("utf-8", "surrogatepass")
        return b"s" + struct.pack("<I", len(b)) + b
    return None


def pid_of_key(key: bytes) -> Any:
    """The pid (or tid) a :func:`value_key` spells: an int or a string (the merge maps a
    rank's GPU device back to its output process by it: report/step_counters.py)."""
    text = key[5:].decode("utf-8", "surrogatepass")
    return int(text) if key[:1] == b"i" else text


def _hashable(v: Any) -> bool:
    return type(v) is int or type(v) is str


_FAR = FAR_NS  # ns: csrc/walk.c's WALK_FAR, the collectives' and steps' bound too (timeunits.analysable)


def _ns(v: Any) -> Optional[int]:
    """Microseconds as whole ns, truncated toward zero (the kernel's rule); None: no time."""
    t = type(v)
    if t is int:
        return int(v * 1000)
    if t is Decimal:
        return int(v.scaleb(3)) if v.is_finite() else None
    return us_to_ns_or_none(v) if t is float else None


class PyTimeline:
    """The compiled kernel's ``Timeline`` in Python (csrc/timeline.c: the same rows)."""

    def __init__(self) -> None:
        self._recs: List[Tuple[int, int, bytes, bytes, bytes, int]] = []  # (a, b, name, thread, dev, kind)
        self._floor, self._limit = -(2**63), 2**63  # events ending before / starting at or after: not held

    def __len__(self) -> int:
        return len(self._recs)

    def add(self, kind: int, a: int, b: int, name: bytes, thread: bytes, dev: bytes) -> None:
        if kind not in (0, 1, 2):
            raise ValueError("Timeline.add: kind is 0, 1 or 2")
        if a >= self._limit or b < self._floor:
            return  # past the step cap's last step, or before its window: never read
        self._recs.append((a, b, bytes(name), bytes(thread), bytes(dev), kind))

    def set_limit(self, ns: int) -> None:
        """Hold no event starting at or after ``ns`` (the step cap, analyze/step_cap.py)."""
        self._limit = min(self._limit, ns)
        self._recs = [r for r in self._recs if r[0] < self._limit]

    def set_floor(self, ns: int) -> None:
        """Hold no event ending before ``ns`` (the step cap's window)."""
        self._floor = max(self._floor, ns)
        self._recs = [r for r in self._recs if r[1] >= self._floor]

    def segments(
        self, cuts: Sequence[int], threads: List[bytes], devices: List[bytes]
    ) -> Tuple[List[bytes], List[bytes], List[bytes]]:
        """(names, rows per thread, rows per device); a unit's rows as the kernel gives
        them: bytes of 14 native int64 a row (:func:`unpack_rows`)."""
        names: Dict[bytes, int] = {}
        for r in self._recs:  # ids in the order first seen (the kernel's: its records' order)
            names.setdefault(r[2], len(names))
        cuts = list(cuts)
        if any(b <= a for a, b in zip(cuts, cuts[1:])):
            raise ValueError("Timeline.segments: cuts are increasing")
        out_t = [packed_rows(self._unit(t, False, cuts, names)) for t in threads]
        out_d = [packed_rows(self._unit(d, True, cuts, names)) for d in devices]
        return list(names), out_t, out_d

    def records(self, kind: int) -> Tuple[List[bytes], bytes]:
        """The kernel's ``records`` (analyze/pytimeline_steps.py)."""
        return pytimeline_steps.records(self._recs, kind)

    def gpu_windows(self, dev: Optional[bytes], windows: Sequence[int], classes: bytes, wait: int) -> GpuOut:
        """The kernel's ``gpu_windows`` (analyze/pytimeline_steps.py)."""
        return pytimeline_steps.gpu_windows(self._recs, dev, windows, classes, wait)

    def _unit(self, key: bytes, gpu: bool, cuts: List[int], names: Dict[bytes, int]) -> List[Row]:
        if len(cuts) < 2 or not any(key in (r[3], r[4]) for r in self._recs):
            return []  # a key no record holds: no rows (the kernel's: a key it never interned)
        if gpu:
            evs = sorted(
                (r for r in self._recs if r[5] == 2 and r[4] == key), key=lambda r: (r[0], r[1], r[2])
            )
        else:
            evs = sorted(
                (r for r in self._recs if r[5] != 2 and r[3] == key), key=lambda r: (r[0], -r[1], -r[5], r[2])
            )
        seg = _Segmenter(cuts)
        (_gpu if gpu else _cpu)(evs, seg, names)
        seg.flush()
        return seg.rows


class _Segmenter:
    """Aggregates given intervals per (segment, kind, name), cut at ``cuts``."""

    def __init__(self, cuts: List[int]) -> None:
        self.cuts = cuts
        self.seg = 0
        self.aggs: Dict[Tuple[int, int], List[int]] = {}
        self.rows: List[Row] = []

    def flush(self) -> None:
        for (kind, name), x in self.aggs.items():
            self.rows.append((self.seg, kind, name, *x[:11]))  # type: ignore[arg-type]
        self.aggs = {}

    def at(self, t: int) -> None:
        seg = self.seg
        while seg + 2 < len(self.cuts) and self.cuts[seg + 1] <= t:
            seg += 1
        if seg != self.seg:
            self.flush()
            self.seg = seg

    def _agg(self, kind: int, name: int) -> List[int]:
        x = self.aggs.get((kind, name))
        if x is None:  # ns count runs piece_a piece_b span_a span_b first_a first_b last_a last_b has_run
            x = self.aggs[(kind, name)] = [0] * 12
        return x

    def give(self, a: int, b: int, kind: int, name: int) -> None:
        while b > a:
            self.at(a)
            e = min(b, self.cuts[self.seg + 1])
            x = self._agg(kind, name)
            x[0] += e - a
            if x[11] and x[10] == a:
                x[10] = e
                if x[2] == 1:
                    x[8] = e
            else:
                x[2] += 1
                x[9], x[10] = a, e
                if not x[11]:
                    x[7], x[8], x[5] = a, e, a
                x[11] = 1
            x[6] = e
            if x[10] - x[9] > x[4] - x[3]:
                x[3], x[4] = x[9], x[10]
            a = e

    def count(self, a: int, kind: int, name: int) -> None:
        self.at(a)
        self._agg(kind, name)[1] += 1


def _cpu(
    evs: Sequence[Tuple[int, int, bytes, bytes, bytes, int]], g: _Segmenter, names: Dict[bytes, int]
) -> None:
    lo, hi = g.cuts[0], g.cuts[-1]
    t = lo
    stack: List[Tuple[int, int, int]] = []  # (end, kind, name id)
    for a0, b0, name, _th, _dev, kind in evs:
        if a0 >= hi:
            break
        if b0 <= lo:
            continue
        a, b = max(a0, lo), min(b0, hi)
        while stack and stack[-1][0] <= a:
            end, k, n = stack.pop()
            g.give(t, end, k, n)
            t = max(t, end)
        owner = stack[-1] if stack else (0, 1, -1)
        g.give(t, a, owner[1], owner[2])
        t = max(t, a)
        if stack and b > stack[-1][0]:
            b = stack[-1][0]  # overlaps its parent's end without nesting: clipped there
        nid = names[name]
        if kind == 0:
            key = (0, nid)
            if a0 >= lo:
                g.count(a0, 0, nid)
        elif owner[1] == 0:
            key = (0, owner[2])  # an annotation inside an operator is the operator's time
        else:
            key = (1, -1 if name.startswith(_STEP_B) else nid)
        stack.append((b, key[0], key[1]))
    while stack:
        end, k, n = stack.pop()
        g.give(t, end, k, n)
        t = max(t, end)
    g.give(t, hi, 1, -1)


def _gpu(
    evs: Sequence[Tuple[int, int, bytes, bytes, bytes, int]], g: _Segmenter, names: Dict[bytes, int]
) -> None:
    lo, hi = g.cuts[0], g.cuts[-1]
    t, i, n = lo, 0, len(evs)
    stack: List[int] = []
    while t < hi:
        while i < n and evs[i][0] <= t:
            a, b = evs[i][0], evs[i][1]
            if b > a and b > lo:
                if a >= lo:
                    g.count(a, 2, names[evs[i][2]])
                if b > t:
                    stack.append(i)
            i += 1
        while stack and evs[stack[-1]][1] <= t:
            stack.pop()
        nxt = min(evs[i][0] if i < n else hi, hi)
        if stack:
            top = evs[stack[-1]]
            t1 = min(top[1], nxt)
            g.give(t, t1, 2, names[top[2]])
        else:
            t1 = nxt
            g.give(t, t1, 3, -1)
        t = t1


def new_timeline() -> Any:
    """The compiled kernel's ``Timeline`` where it is here, else a :class:`PyTimeline`."""
    if native.available():
        return native.kernel.Timeline()  # type: ignore[union-attr]
    return PyTimeline()


@dataclass
class Segments:
    """One rank's partitions, cut at its step starts and collective arrivals (picklable:
    what a worker hands back instead of the events)."""

    cuts: List[int]
    names: List[str]
    # thread -> (where each segment's rows start, the rows: int64s in compressed blocks of
    # BLOCK_ROWS rows (pack_unit): ~5x smaller, ~14 KB a rank, not 64; in the reduce
    # moved to a temporary file (:meth:`spill`) while every rank waits for the why
    # (issue 38); blocks, so that a step's stretch decompresses its own rows, not the
    # whole run's)
    cpu: Dict[bytes, Unit]
    gpu: Dict[bytes, Unit]  # device -> the same
    step_thread: Dict[int, bytes]
    labels: Dict[bytes, str]  # thread / device key -> "thread 7" / "GPU 0"
    gpu_dev: Union[
        GpuDevices, Dict[Tuple[Any, int], bytes]
    ]  # (stream tid, start ns) of a GPU collective -> device
    name_cap: int = 0  # names kept per step, unit and kind (analyze/name_cap.py; 0: not capped)
    folded: int = 0  # distinct names past the cap, summed into "(other names)"

    def rows(self, unit: Unit, i: int, j: int) -> Any:
        """The rows of segments ``i`` to ``j`` of ``unit`` (a ``cpu`` / ``gpu`` value),
        as tuples, decompressing only the blocks that hold them (the last few kept,
        for the whole process: a rank's stretches are broken down one after another).
        Why blocks: the ``--json`` breakdown reads every rank's stretches step by step;
        one block for the whole unit made each read decompress every step's rows, a
        cost quadratic in the steps (8 ranks x 400 steps: 24.6 s, 200 steps: 7.0 s)."""
        return unit_rows(unit, i, j)

    def share_names(self, cache: Dict[str, str]) -> None:
        """Make the names and labels the strings ``cache`` already holds (one string per
        distinct name in the reduce, not one per rank; issue 38)."""
        self.names = [cache.setdefault(n, n) for n in self.names]
        self.labels = {k: cache.setdefault(v, v) for k, v in self.labels.items()}

    def spill(self, spill: Spill) -> None:
        """Move the rows' blocks to ``spill`` (analyze/unit_pack.py): what the reduce
        holds of a rank between the pass and the why is then its cuts and names."""
        self.cpu = {k: spill_unit(u, spill) for k, u in self.cpu.items()}
        self.gpu = {k: spill_unit(u, spill) for k, u in self.gpu.items()}
        self.cuts = array("q", self.cuts)  # type: ignore[assignment]  # read only from here: 8 bytes a cut, not ~36


class TimelineFeed:
    """One file's pass: the events Python decodes itself go in through :meth:`offer`
    (with the kernel, those it hands over; without, every event); the kernel's scan
    records the rest straight into :attr:`timeline`."""

    def __init__(self) -> None:
        self.timeline = new_timeline()
        self._steps: Dict[int, Tuple[int, int, bytes]] = {}  # step -> (start, -end, thread key)
        self._labels: Dict[bytes, str] = {}
        self._gpu_dev: Dict[Tuple[Any, int], bytes] = {}
        self._keys: Dict[Tuple[Any, ...], Tuple[Optional[bytes], Optional[bytes]]] = {}  # (pid, tid) -> keys

    def offer(self, ev: Any) -> None:
        if type(ev) is not dict or ev.get("ph") != "X":
            return
        cat = ev.get("cat")
        kind = _CAT_KIND.get(cat) if type(cat) is str else None
        name = ev.get("name")
        if kind is None or type(name) is not str:
            return
        a, d = _ns(ev.get("ts")), _ns(ev.get("dur"))
        pid, tid = ev.get("pid"), ev.get("tid")
        keys = self._keys.get((type(pid), pid, type(tid), tid)) if _hashable(pid) and _hashable(tid) else None
        if keys is None:
            keys = (value_key(pid), value_key(tid))
            if _hashable(pid) and _hashable(tid):
                self._keys[(type(pid), pid, type(tid), tid)] = keys
        pk, tk = keys
        if a is None or d is None or d < 0 or pk is None or tk is None or not (-_FAR < a < _FAR and d < _FAR):
            return  # beyond 2**62 ns: the kernel's walk bound (WALK_FAR), so both paths skip it
        self.timeline.add(kind, a, a + d, name.encode("utf-8", "surrogatepass"), pk + tk, pk)
        if kind == 2:
            start = us_to_ns_or_none(ev.get("ts"))
            if start is not None:
                self._gpu_dev.setdefault((ev.get("tid"), start), pk)
                self._labels.setdefault(pk, f"GPU {ev.get('pid')}")
        elif name.startswith(STEP_PREFIX) and (step := step_number(name)) is not None:
            mine = (a, -(a + d), pk + tk)
            if step not in self._steps or mine < self._steps[step]:
                self._steps[step] = mine  # the earliest ProfilerStep#N's thread (ties: the longest)
            self._labels.setdefault(pk + tk, f"thread {ev.get('tid')}")

    def finish(
        self,
        steps: Dict[int, Tuple[int, int]],
        arrivals: Sequence[int],
        gpu_arrivals: Sequence[Tuple[Any, int]],
        keep: bool = False,
        compress: bool = True,
    ) -> Segments:
        """Partition at ``steps``' starts and ends and ``arrivals`` (file-relative ns)
        the step threads and the GPUs of ``gpu_arrivals`` ((stream tid, start ns) of the
        GPU collectives); free the events (``keep``: the caller frees them with
        :meth:`release`, once it has read the step-time figures from them; ``compress``
        False: the rows left uncompressed, for analyze/name_cap.py to compress once)."""
        # step ends too: a whole step is then a sum of segments (analyze/diff_figures.py)
        cuts = sorted({lo for lo, _hi in steps.values()} | {hi for _lo, hi in steps.values()} | set(arrivals))
        one = {v[2]: v[2] for v in self._steps.values()}
        threads = sorted(one)
        want = set(gpu_arrivals)
        gpu_dev = {k: d for k, d in self._gpu_dev.items() if k in want}
        devices = sorted(set(gpu_dev.values()))
        names, rows_t, rows_d = self.timeline.segments(cuts, threads, devices)
        if not keep:
            self.timeline = new_timeline()
        text = [n.decode("utf-8", "surrogatepass") for n in names]

        def per_seg(packed: bytes) -> Unit:
            if not compress:  # read in place: no second copy of the file's rows (issue 38)
                return segment_starts(memoryview(packed).cast("q"), len(cuts)), (packed,)  # type: ignore[arg-type]
            flat = array("q")
            flat.frombytes(packed)
            return segment_starts(flat, len(cuts)), pack_unit(flat)

        return Segments(
            cuts, text,
            {k: per_seg(r) for k, r in zip(threads, rows_t)},
            {k: per_seg(r) for k, r in zip(devices, rows_d)},
            {s: one[v[2]] for s, v in self._steps.items()},  # a thread's key once, not once a step
            {k: v for k, v in self._labels.items() if k in set(threads) | set(devices)}, gpu_devices(gpu_dev),
        )  # fmt: skip

    def release(self) -> None:
        """Free the events kept by ``finish(keep=True)``."""
        self.timeline = new_timeline()

    def keep_steps(self, keep: Any) -> None:
        """Forget the ``ProfilerStep#N`` not in ``keep`` (the step cap: analyze/step_cap.py)."""
        self._steps = {s: v for s, v in self._steps.items() if s in keep}

    def step_windows(self) -> Dict[int, Tuple[int, int]]:
        """step -> (start, end) ns of its ``ProfilerStep#N`` on the step thread (not the GPU's)."""
        return {s: (v[0], -v[1]) for s, v in self._steps.items()}

    def step_threads(self) -> Dict[int, bytes]:
        """step -> the thread key holding its ``ProfilerStep#N``."""
        return {s: v[2] for s, v in self._steps.items()}


__all__ = [
    "BLOCK_ROWS",
    "Packed",
    "Unit",
    "rows_between",
    "Breakdown",
    "GPU_CATS",
    "OP_CATS",
    "OUTSIDE_ALL",
    "Part",
    "PyTimeline",
    "ROW_FIELDS",
    "Segments",
    "Spill",
    "TimelineFeed",
    "new_timeline",
    "pack_unit",
    "pid_of_key",
    "unpack_rows",
    "value_key",
]
