"""A model of Perfetto's JSON importer, run on the merged JSON itself.

Perfetto's ``trace_processor`` is not installable here (see ``tests/perfetto.py``), so
the properties its tests protect are also checked, in every run, through this model of
the importer rules that ``../shared/TRACE_FORMAT_FACTS.md`` records. It builds the same
:class:`perfetto.View` the trace_processor tests read, so one test body can be judged
by both (``judge_view``): the model always, trace_processor where it is installed.

The rules modelled, each as the facts file states it:

* processes: a numeric ``pid`` is stored as uint32 (outside 0..2^32-1 -> 0, floats
  truncated); a string pid is an interned string, never equal to a number, and the same
  string in two ranks is the SAME process. Threads are ``(pid, tid)`` with the same
  rules; a tid of 0 on a non-zero pid is the pid.
* metadata: ``process_name`` / ``thread_name`` set names, the last one wins; an empty
  ``args.name`` counts one ``json_parser_failure`` import error.
* slices: ``X`` events, ``B``/``E`` pairs and thread-scoped instants (``i``/``I`` with
  ``s`` absent or ``"t"``) are slices on their thread's track; ``s: "g"`` instants go to
  the global instant track; ``s: "p"`` to a process track.
* time: ``ts`` and ``dur`` are read as doubles of µs and each turned into integer ns
  (``llround(double * 1000)``, as Perfetto's current JSON tokenizer does; integer tokens
  exactly); a slice ends at ``ts_ns + dur_ns``. The file's ``baseTimeNanoseconds`` is NOT added. ``X`` events that partially overlap an open
  slice on their thread cannot nest: counted as ``slice_spill_overlapping_complete_event``.
* flows v1: bound by ``(id, cat, name)``; the first ``s`` of a key wins, a second one
  is ignored; every ``f`` of that key draws an arrow from it. ``s`` attaches to the
  innermost slice open on its thread at its ts; ``f`` with ``bp: "e"`` to the enclosing
  slice, without it to the next slice that starts at or after its ts.

* counters (``ph: "C"``): each numeric arg is one value of the process counter track
  ``"<name> <arg key>"`` (``"<name> id: <id> <arg key>"`` with an ``id``) of the event's
  process; args that are not an object count one ``json_parser_failure``
  (:func:`model_counters`).

What the model does not do (and the tests do not need): args tables, the UI's own limits. Where it and trace_processor disagree, trace_processor is right; the
tests that use it run wherever ``TRACEFUSE_TRACE_PROCESSOR`` points at one.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Hashable, List, Optional, Tuple

from conftest import read_bytes
from perfetto import View

UINT32 = 1 << 32
OVERLAP_STAT = "slice_spill_overlapping_complete_event"


def _id32(v: Any) -> Hashable:
    """pid/tid as the importer stores it: uint32 for numbers, interned for strings."""
    if isinstance(v, bool) or v is None:
        return 0
    if isinstance(v, (int, float, Decimal)):
        n = int(v)
        return n if 0 <= n < UINT32 else 0
    return ("str", str(v))


def _ts_ns(v: Any) -> Optional[int]:
    """µs from the JSON text -> integer ns as the importer computes them."""
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
        return None
    if isinstance(v, int):
        return v * 1000
    x = float(v) * 1000.0
    if not math.isfinite(x):
        return None
    return int(math.copysign(math.floor(abs(x) + 0.5), x))  # llround: half away from zero


@dataclass
class Slice:
    """One slice on a thread track: its event and its span in integer ns."""

    event: Dict[str, Any]
    upid: int
    start: int
    end: int


@dataclass
class Flow:
    out_slice: Slice
    in_slice: Slice


@dataclass
class ModelTrace:
    """What the model imported: the :class:`View` facts plus the slices and flows."""

    view: View
    slices: List[Slice] = field(default_factory=list)
    flows: List[Flow] = field(default_factory=list)


class _Importer:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.upids: Dict[Hashable, int] = {}
        self.proc_names: Dict[int, str] = {}
        self.threads: Dict[Tuple[int, Hashable], List[Slice]] = defaultdict(list)
        self.errors: Counter = Counter()
        self.global_ts: List[int] = []
        self.process_track_slices = 0

    def upid(self, pid: Any) -> int:
        key = _id32(pid)
        return self.upids.setdefault(key, len(self.upids) + 1)

    def thread(self, ev: Dict[str, Any]) -> Tuple[int, Hashable]:
        pid, tid = _id32(ev.get("pid")), _id32(ev.get("tid"))
        if tid == 0 and pid != 0:
            tid = pid
        return self.upid(ev.get("pid")), tid

    def metadata(self, ev: Dict[str, Any]) -> None:
        name = ev.get("name")
        if name not in ("process_name", "thread_name"):
            return
        label = (ev.get("args") or {}).get("name")
        if label == "":
            self.errors["json_parser_failure"] += 1
            return
        if name == "process_name" and isinstance(label, str):
            self.proc_names[self.upid(ev.get("pid"))] = label

    def add_slice(self, ev: Dict[str, Any], start: int, end: int) -> None:
        key = self.thread(ev)
        self.threads[key].append(Slice(ev, key[0], start, end))

    def load(self, events: List[Dict[str, Any]]) -> None:
        open_b: Dict[Tuple[int, Hashable], List[Tuple[Dict[str, Any], int]]] = defaultdict(list)
        for ev in sorted((e for e in events if isinstance(e, dict)), key=lambda e: _ts_ns(e.get("ts")) or 0):
            ph = ev.get("ph")
            if ph == "M":
                self.metadata(ev)
                continue
            ts = _ts_ns(ev.get("ts"))
            if ts is None:
                continue
            if ph == "X":
                dur = _ts_ns(ev.get("dur")) or 0
                self.add_slice(ev, ts, ts + dur)
            elif ph == "B":
                open_b[self.thread(ev)].append((ev, ts))
            elif ph == "E" and open_b[self.thread(ev)]:
                b, start = open_b[self.thread(ev)].pop()
                self.add_slice(b, start, ts)
            elif ph in ("i", "I"):
                scope = ev.get("s", "t")
                if scope == "g":
                    self.global_ts.append(ts)
                elif scope == "p":
                    self.process_track_slices += 1
                else:
                    self.add_slice(ev, ts, ts)

    def count_overlaps(self) -> None:
        """Partially overlapping X events on one thread (they cannot nest)."""
        for slices in self.threads.values():
            stack: List[int] = []
            for s in sorted(slices, key=lambda s: (s.start, -s.end)):
                while stack and stack[-1] <= s.start:
                    stack.pop()
                if stack and s.end > stack[-1]:
                    self.errors[OVERLAP_STAT] += 1
                    continue  # moved to an overflow track: not a parent of later slices
                stack.append(s.end)


def _enclosing(slices: List[Slice], starts: List[int], ts: int) -> Optional[Slice]:
    """The innermost slice open at ``ts`` (latest start, then shortest)."""
    best: Optional[Slice] = None
    for s in slices[: bisect.bisect_right(starts, ts)]:
        if s.start <= ts <= s.end and (best is None or (s.start, -s.end) > (best.start, -best.end)):
            best = s
    return best


def _next_slice(slices: List[Slice], starts: List[int], ts: int) -> Optional[Slice]:
    i = bisect.bisect_left(starts, ts)
    return slices[i] if i < len(slices) else None


def _flows(imp: _Importer, events: List[Dict[str, Any]]) -> List[Flow]:
    ordered = {k: sorted(v, key=lambda s: (s.start, -s.end)) for k, v in imp.threads.items()}
    starts = {k: [s.start for s in v] for k, v in ordered.items()}
    begins: Dict[Tuple[Any, Any, Any], Slice] = {}
    flows: List[Flow] = []
    for ev in sorted(
        (e for e in events if isinstance(e, dict) and e.get("ph") in ("s", "f")),
        key=lambda e: _ts_ns(e.get("ts")) or 0,
    ):
        ts = _ts_ns(ev.get("ts"))
        if ts is None:
            continue
        key = (ev.get("id"), ev.get("cat"), ev.get("name"))
        thread = imp.thread(ev)
        slices, st = ordered.get(thread, []), starts.get(thread, [])
        if ev["ph"] == "s":
            if key not in begins:
                s = _enclosing(slices, st, ts)
                if s is not None:
                    begins[key] = s
        elif key in begins:
            target = _enclosing(slices, st, ts) if ev.get("bp") == "e" else _next_slice(slices, st, ts)
            if target is not None:
                flows.append(Flow(begins[key], target))
    return flows


def load_trace(path: Path) -> Dict[str, Any]:
    obj = json.loads(read_bytes(path), parse_float=Decimal)
    return obj if isinstance(obj, dict) else {"traceEvents": obj}


def model_import(path: Path, trace: Optional[Dict[str, Any]] = None) -> ModelTrace:
    """Import ``path`` (or its already-parsed ``trace``) as the modelled importer would."""
    trace = load_trace(path) if trace is None else trace
    events = trace.get("traceEvents") or []
    imp = _Importer(Path(path))
    imp.load(events)
    imp.count_overlaps()
    v = View(path=Path(path))
    v.error_stats = dict(imp.errors)
    slices = [s for ss in imp.threads.values() for s in ss]
    per_upid: Counter = Counter(s.upid for s in slices)
    v.slices_by_upid = dict(per_upid)
    v.slices_no_pyfunc_by_upid = dict(
        Counter(s.upid for s in slices if s.event.get("cat") != "python_function")
    )
    for s in slices:
        v.first_ts_by_upid[s.upid] = min(s.start, v.first_ts_by_upid.get(s.upid, s.start))
    for upid in set(imp.upids.values()):
        v.process_names[upid] = imp.proc_names.get(upid, "")
    flows = _flows(imp, events)
    between: Counter = Counter((f.out_slice.upid, f.in_slice.upid) for f in flows)
    v.flows_between = dict(between)
    v.all_flows = len(flows)
    v.thread_slices = len(slices)
    v.global_slices = len(imp.global_ts)
    v.all_slices = v.thread_slices + v.global_slices + imp.process_track_slices
    v.global_first_ts = min(imp.global_ts) if imp.global_ts else None
    v.machines = [""]  # one JSON file: one (host) machine
    return ModelTrace(view=v, slices=slices, flows=flows)


def model_view(path: Path) -> View:
    return model_import(Path(path)).view


def model_counters(path: Path) -> Dict[Tuple[Hashable, str], List[Tuple[int, float]]]:
    """The counter tracks the importer makes: ``(pid as the importer keeps it, track
    name)`` -> the ``(ts ns, value)`` points in time order (Perfetto's
    ``PushProcessCounterForThread`` on the track named ``"<name> <arg key>"``)."""
    tracks: Dict[Tuple[Hashable, str], List[Tuple[int, float]]] = defaultdict(list)
    for ev in load_trace(Path(path)).get("traceEvents") or []:
        if not isinstance(ev, dict) or ev.get("ph") != "C" or not isinstance(ev.get("args"), dict):
            continue
        ts = _ts_ns(ev.get("ts"))
        pid = _id32(ev.get("pid"))
        prefix = str(ev.get("name", "")) + (f" id: {ev['id']}" if "id" in ev else "")
        for key, v in ev["args"].items():
            if ts is not None and isinstance(v, (int, float, Decimal)) and not isinstance(v, bool):
                tracks[(pid, f"{prefix} {key}")].append((ts, float(v)))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in tracks.items()}


def _arg_text(ev: Dict[str, Any], key: str) -> str:
    """An event arg as trace_processor's CSV shows it (``[NULL]`` when absent)."""
    v = (ev.get("args") or {}).get(key)
    return "[NULL]" if v is None else str(v)


def model_cross_rank_flows(path: Path) -> Tuple[List[Dict[str, str]], List[str]]:
    """Flows joining slices of two ranks (merged pids are ``(rank + 1) * 10000 + n``),
    as rows of ``tests/test_collectives.py``'s CROSS_FLOWS_SQL, and the import-error
    stat names (``error:NAME``) the model counts."""
    m = model_import(Path(path))
    rows: List[Dict[str, str]] = []
    for f in m.flows:
        o, i = f.out_slice, f.in_slice
        ro, ri = int(o.event["pid"]) // 10000 - 1, int(i.event["pid"]) // 10000 - 1
        if ro == ri:
            continue
        rows.append(
            {
                "out_name": str(o.event.get("name")),
                "in_name": str(i.event.get("name")),
                "out_rank": str(ro),
                "in_rank": str(ri),
                "out_ts": str(o.start),
                "in_ts": str(i.start),
                "out_inst": _arg_text(o.event, "collective_instance"),
                "in_inst": _arg_text(i.event, "collective_instance"),
                "last_rank": _arg_text(i.event, "collective_last_rank"),
                "in_wait": _arg_text(i.event, "collective_wait_us"),
            }
        )
    errors = [f"error:{k}" for k, v in m.view.error_stats.items() if v > 0]
    return rows, errors
