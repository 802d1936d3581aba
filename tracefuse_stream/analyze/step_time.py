"""Where every rank's step goes: per rank and step, the GPU side and the CPU side.

Why: most slow jobs have no straggler -- every rank is slow the same way
(communication not hidden, a GPU starved by its host, copies on the critical stream).
The straggler verdict then says "no rank stands out" and stops; these figures say
where each rank's step went, so the ranks can be put side by side (and compared with
another run by ``diff``).

Computed once per file at the end of info's single pass (analyze/onepass.py), from
the events the why's timeline already keeps (analyze/timeline.py), over each step's
window: the rank's ``ProfilerStep#N`` on its own clock (Kineto puts GPU events on the
CPU clock), so every part of a step adds up to the step time the rest of the report
uses. What is kept per rank and step is small and bounded: the GPU parts
(analyze/gpu_union.py), kernel time per category, the top :data:`TOP_N` kernel and
operator names (the rest summed as ``other``), and the step thread's time outside
operators by annotation. The events are freed with the file.
"""

from __future__ import annotations

import bisect
import re
from array import array
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from tracefuse_stream.analyze.gpu_union import KERNEL_WAIT_NS, GpuFigures, from_row
from tracefuse_stream.analyze.kernel_categories import OTHER, KernelCategories
from tracefuse_stream.analyze.stragglers import union_ns
from tracefuse_stream.analyze.timeline import OUTSIDE_ALL, ROW_FIELDS, Segments, pid_of_key

TOP_N = 5
OTHER_NAMES = "other"
#: annotations the CPU side reports apart (the union of their spans in the step, on
#: the step thread): PyTorch's ``enumerate(DataLoader)#...__next__`` and
#: ``Optimizer.step#SGD.step`` / ``Optimizer.zero_grad#...``
DATALOADER = re.compile(r"DataLoader")
OPTIMIZER = re.compile(r"^Optimizer\.")


@dataclass(slots=True)
class GpuStep:
    """The GPU side of one rank's step (ns). ``categories``: kernel time per category
    (durations clipped to the step, streams summed: a category's own busy time);
    ``kernels``: the top names by time, ``(name, ns, count)``, then ``("other", ns,
    count)`` for the rest; ``unknown``: the names no category rule matched."""

    figures: GpuFigures
    device: str
    categories: Dict[str, int] = field(default_factory=dict)
    kernels: List[Tuple[str, int, int]] = field(default_factory=list)
    unknown: List[Tuple[str, int]] = field(default_factory=list)
    device_pid: Any = None  # the device's pid in the file (an int or a string): its process

    @property
    def overlap_pct(self) -> Optional[float]:
        """Share of the communication hidden by compute, %; None without communication."""
        f = self.figures
        return None if f.comm_ns == 0 else 100.0 * (f.comm_ns - f.comm_exposed_ns) / f.comm_ns


@dataclass(slots=True)
class CpuStep:
    """The CPU side of one rank's step on its step thread (ns): operators by self
    time and time outside operators by innermost annotation (the top names, then
    ``other``), data loading and optimizer annotations, and (filled in by the
    analysis, from the cross-rank graph) the time blocked in collectives."""

    thread: Optional[str]
    ops: List[Tuple[str, int, int]] = field(default_factory=list)  # (name, self ns, calls)
    outside: List[Tuple[str, int]] = field(default_factory=list)  # (annotation, ns)
    dataloader_ns: int = 0
    optimizer_ns: int = 0
    collective_wait_ns: Optional[int] = None
    collective_comm_ns: Optional[int] = None


@dataclass(slots=True)
class StepTime:
    """One rank's step: its window and where it went (``gpu`` None: no GPU events)."""

    rank: int
    step: int
    start_ns: int  # file-relative, on the rank's clock
    step_ns: int
    gpu: Optional[GpuStep]
    cpu: CpuStep


def _top(items: Dict[int, List[int]], names: List[str], n: int = TOP_N) -> List[Tuple[str, int, int]]:
    """The ``n`` name ids with most time (ties: by name), then ``other`` for the rest;
    ``items``: name id (-1: outside every annotation) -> [ns, count]."""
    if not items:
        return []
    if len(items) > n:  # the candidates: at least the n-th largest time (ties kept)
        ns_all = [v[0] for v in items.values()]
        floor = sorted(ns_all, reverse=True)[n - 1]
        cands = [(k, v) for k, v in items.items() if v[0] >= floor]
    else:
        cands = list(items.items())
    cands.sort(key=lambda kv: (-kv[1][0], names[kv[0]] if kv[0] >= 0 else OUTSIDE_ALL))
    out = [(names[k] if k >= 0 else OUTSIDE_ALL, v[0], v[1]) for k, v in cands[:n]]
    if len(items) > n:
        calls = sum([v[1] for v in items.values()])
        out.append((OTHER_NAMES, sum(ns_all) - sum([x[1] for x in out]), calls - sum([x[2] for x in out])))
    return out


def gpu_steps(
    timeline: Any,
    names: List[str],
    windows: List[Tuple[int, int]],
    categories: KernelCategories,
    prefer: Sequence[bytes],
    labels: Dict[bytes, str],
) -> Optional[List[GpuStep]]:
    """Each window's :class:`GpuStep` on the rank's GPU -- the one its GPU collectives
    ran on, else the one with the most GPU events -- from the file's ``timeline``
    (its ``gpu_windows``: csrc/timeline_steps.c, or PyTimeline's); None: no GPU events."""
    flat_w = [x for w in windows for x in w]
    classes = categories.class_codes(names)
    dev, figs_b, rows_b = timeline.gpu_windows(prefer[0] if prefer else None, flat_w, classes, KERNEL_WAIT_NS)
    if dev is None:
        return None
    figs = array("q")
    figs.frombytes(figs_b)
    rows = array("q")
    rows.frombytes(rows_b)
    del rows_b
    label = labels.get(dev) or _device_label(dev)
    cat_of: Dict[int, str] = {}
    out = []
    at, n_rows = 0, len(rows) // 4
    for i, (lo, hi) in enumerate(windows):
        f = from_row(hi - lo, figs[8 * i : 8 * i + 8])
        # the name rows come sorted by window (then name): a window's are the next run
        # of them, read as the window is made -- not every window's dict at once (a
        # rank's run of steps of them made a file's pass grow with its steps; issue 38)
        per: Dict[int, List[int]] = {}
        while at < n_rows and rows[4 * at] == i:
            per[rows[4 * at + 1]] = [rows[4 * at + 2], rows[4 * at + 3]]
            at += 1
        cats: Dict[str, int] = {}
        unknown: Dict[int, List[int]] = {}
        for nid, (ns, _cnt) in per.items():
            cat = cat_of.get(nid) or cat_of.setdefault(nid, categories.of(names[nid])[0])
            cats[cat] = cats.get(cat, 0) + ns
            if cat == OTHER:
                unknown[nid] = [ns, 0]
        top = _top(per, names)
        unknown_top = [(n, v) for n, v, _c in _top(unknown, names)[:TOP_N]] if unknown else []
        out.append(GpuStep(f, label, dict(sorted(cats.items())), top, unknown_top, pid_of_key(dev)))
    if at != n_rows:
        raise ValueError("gpu_windows: name rows out of window order")
    return out


def _device_label(key: bytes) -> str:
    return "GPU " + key[5:].decode("utf-8", "replace")


def _cpu_sums(timeline: Any, thread: bytes, windows: List[Tuple[int, int]]) -> Iterator[Tuple[int, Any]]:
    """Per window (index, yielded in order, one at a time: every window's dicts at
    once made a file's pass grow with its steps, issue 38): (operators by name id ->
    [self ns, calls], annotation name id (-1: outside every annotation) -> ns outside
    operators): the step thread partitioned once more, cut at the step windows only
    (the why's segments are cut at its arrivals, not at step ends), by the timeline's
    own rule (``segments``)."""
    cuts = sorted({x for w in windows for x in w})
    _names, rows_t, _rows_d = timeline.segments(cuts, [thread], [])
    flat = memoryview(rows_t[0]).cast("q")  # read in place, not copied (issue 38)
    segs, kinds, nids = flat[0::ROW_FIELDS], flat[1::ROW_FIELDS], flat[2::ROW_FIELDS]
    nss, calls = flat[3::ROW_FIELDS], flat[4::ROW_FIELDS]
    for w, (lo, hi) in enumerate(windows):
        seg = bisect.bisect_left(cuts, lo)  # a window is one segment, its start's (none: a gap between)
        if seg + 1 >= len(cuts) or cuts[seg + 1] != hi:
            continue  # an empty step, or windows that overlap: no segment is the window
        a, b = bisect.bisect_left(segs, seg), bisect.bisect_right(segs, seg)  # one row per (kind, name)
        rows = list(zip(kinds[a:b], nids[a:b], nss[a:b], calls[a:b]))
        yield w, ({n: [ns, c] for k, n, ns, c in rows if k == 0}, {n: ns for k, n, ns, _c in rows if k == 1})


def _near(
    spans: Optional[Tuple[List[Tuple[int, int, str]], int]], lo: int, hi: int
) -> List[Tuple[int, int, str]]:
    """The spans that may overlap [lo, hi]; ``spans``: (sorted by start, the longest)."""
    if not spans:
        return []
    ordered, longest = spans
    return ordered[bisect.bisect_left(ordered, (lo - longest,)) : bisect.bisect_left(ordered, (hi,))]


def cpu_step(
    names: List[str],
    thread: Optional[str],
    sums: Optional[Any],
    lo: int,
    hi: int,
    annotations: List[Tuple[int, int, str]],
) -> CpuStep:
    """The step thread's side of the step [lo, hi]: ``sums`` from :func:`_cpu_sums`;
    ``annotations``: the step thread's (start, end, "dataloader" | "optimizer") spans."""
    cs = CpuStep(thread)
    if sums is not None:
        ops, outside = sums
        cs.ops = _top(ops, names)
        cs.outside = [(n, ns) for n, ns, _c in _top({k: [v, 0] for k, v in outside.items()}, names)]
    cs.dataloader_ns = union_ns([(a, b) for a, b, k in annotations if k == "dataloader" and a < hi], lo, hi)
    cs.optimizer_ns = union_ns([(a, b) for a, b, k in annotations if k == "optimizer" and a < hi], lo, hi)
    return cs


def compute(
    rank: int,
    steps: Dict[int, Tuple[int, int]],
    segments: Segments,
    timeline: Any,
    step_threads: Dict[int, bytes],
    categories: KernelCategories,
    names: Optional[List[str]] = None,
) -> List[StepTime]:
    """Every step's :class:`StepTime` of one rank (see the module docstring), from the
    file's ``timeline`` (still holding its events) and its ``segments``; ``names``:
    the timeline's names by id, when ``segments.names`` no longer are (the pass caps
    and packs the segments' rows first, analyze/onepass.py)."""
    names = segments.names if names is None else names
    order = sorted(steps, key=lambda s: (steps[s], s))  # by start: gpu_windows' order
    windows = [steps[s] for s in order]
    prefer = sorted(set(segments.gpu_dev.values()))
    gpu = gpu_steps(timeline, names, windows, categories, prefer, segments.labels)
    keys, packed = timeline.records(1)
    quads = array("q")  # the annotations: (a, b, name id, thread index) each, read in place
    quads.frombytes(packed)
    del packed
    wanted: Dict[int, str] = {}
    for nid in set(quads[2::4]):
        if DATALOADER.search(names[nid]):
            wanted[nid] = "dataloader"
        elif OPTIMIZER.search(names[nid]):
            wanted[nid] = "optimizer"
    anns: Dict[int, List[Tuple[int, int, str]]] = {}
    for j in range(0, len(quads), 4) if wanted else ():
        if quads[j + 2] in wanted:
            anns.setdefault(quads[j + 3], []).append((quads[j], quads[j + 1], wanted[quads[j + 2]]))
    del quads
    prepared = {k: (sorted(v), max(b - a for a, b, _k in v)) for k, v in anns.items()}
    index = {key: k for k, key in enumerate(keys)}
    by_thread: Dict[bytes, List[int]] = {}  # thread -> its steps' indices
    for i, s in enumerate(order):
        if s in step_threads:
            by_thread.setdefault(step_threads[s], []).append(i)

    def mine(i: int) -> List[Tuple[int, int, str]]:
        return _near(prepared.get(index.get(step_threads.get(order[i], b""), -1)), *windows[i])

    cpu: Dict[int, CpuStep] = {}  # made as each window's sums come (not every window's sums at once)
    for thread, idx in by_thread.items():
        label = segments.labels.get(thread)
        for w, v in _cpu_sums(timeline, thread, [windows[i] for i in idx]):
            cpu[idx[w]] = cpu_step(names, label, v, *windows[idx[w]], mine(idx[w]))
    out = []
    for i, s in enumerate(order):
        lo, hi = windows[i]
        g = gpu[i] if gpu is not None else None
        cs = cpu[i] if i in cpu else cpu_step(names, None, None, lo, hi, mine(i))
        out.append(StepTime(rank, s, lo, hi - lo, g, cs))
    return sorted(out, key=lambda st: st.step)


def fill_blocked(table: Any, per_rank: Mapping[int, Sequence[StepTime]]) -> None:
    """Each row's time blocked in collectives on its rank's own step (``table``: the
    matched :class:`~tracefuse_stream.align.collectives.CollectiveTable`, absolute
    ns; ``per_rank``: rank -> its rows, a list filled in place or packed rows,
    analyze/step_pack.py, packed again): ``collective_wait_ns`` the union of
    ``[arrival, last arrival]`` (waiting for the others), ``collective_comm_ns`` the
    union of ``[arrival, end]`` less that (communicating once all are in), both clipped
    to the step (the straggler report's wait, on the rank's own step numbers)."""
    spans: Dict[int, List[Tuple[int, int, int]]] = {}
    for inst in table.instances:
        last = inst.last_arrival_ns
        for r, e in inst.entries.items():
            spans.setdefault(r, []).append((e.start_ns, max(e.start_ns, last), e.end_ns))
    for v in spans.values():
        v.sort()  # by arrival: a step's collectives found by bisection, not a scan per step
    for held in per_rank.values():
        if isinstance(held, list):
            for st in held:
                _fill(st, table, spans)
        else:  # packed: decoded, filled and packed again a chunk at a time
            held.pack(_fill(st, table, spans) for st in held)  # type: ignore[attr-defined]


def _fill(st: StepTime, table: Any, spans: Mapping[int, List[Tuple[int, int, int]]]) -> StepTime:
    """``st`` with its blocked times filled in (:func:`fill_blocked`)."""
    win = table.steps.get(st.rank, {}).get(st.step)
    if win is not None:
        lo, hi = win
        theirs = spans.get(st.rank, [])
        mine = theirs[bisect.bisect_left(theirs, (lo,)) : bisect.bisect_left(theirs, (hi,))]
        wait = union_ns([(a, w) for a, w, _e in mine], lo, hi)
        blocked = union_ns([(a, max(w, e)) for a, w, e in mine], lo, hi)
        st.cpu.collective_wait_ns, st.cpu.collective_comm_ns = wait, blocked - wait
    return st


def _us(ns: Optional[int]) -> Optional[float]:
    return None if ns is None else round(ns / 1000.0, 3)


def to_json(st: StepTime) -> Dict[str, Any]:
    """One rank and step as ``collectives.step_time`` holds it (docs/collectives.md)."""
    gpu = None
    if st.gpu is not None:
        f = st.gpu.figures
        ov = st.gpu.overlap_pct
        gpu = {
            "device": st.gpu.device,
            "compute_us": _us(f.compute_ns),
            "comm_us": _us(f.comm_ns),
            "comm_exposed_us": _us(f.comm_exposed_ns),
            "memcpy_us": _us(f.memcpy_ns),
            "idle_us": _us(f.idle_ns),
            "overlap_pct": None if ov is None else round(ov, 2),
            "idle_host_wait_us": _us(f.idle_host_wait_ns),
            "idle_kernel_wait_us": _us(f.idle_kernel_wait_ns),
            "idle_other_us": _us(f.idle_other_ns),
            "categories_us": {k: _us(v) for k, v in st.gpu.categories.items()},
            "top_kernels": [{"name": n, "us": _us(ns), "count": c} for n, ns, c in st.gpu.kernels],
            "unknown_kernels": [{"name": n, "us": _us(ns)} for n, ns in st.gpu.unknown],
        }
    c = st.cpu
    cpu = {
        "thread": c.thread,
        "top_ops": [{"name": n, "self_us": _us(ns), "count": k} for n, ns, k in c.ops],
        "outside_ops": [{"annotation": n, "us": _us(ns)} for n, ns in c.outside],
        "dataloader_us": _us(c.dataloader_ns),
        "optimizer_us": _us(c.optimizer_ns),
        "collective_wait_us": _us(c.collective_wait_ns),
        "collective_comm_us": _us(c.collective_comm_ns),
    }
    return {"rank": st.rank, "step": st.step, "step_us": _us(st.step_ns), "gpu": gpu, "cpu": cpu}


__all__ = [
    "CpuStep",
    "GpuStep",
    "StepTime",
    "TOP_N",
    "compute",
    "cpu_step",
    "fill_blocked",
    "gpu_steps",
    "to_json",
]
