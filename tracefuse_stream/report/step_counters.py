"""``merge --link-collectives``: two counter tracks per GPU rank, where each step went.

Why: ``info --collectives`` says per rank and step how much communication the GPU did
not hide under compute and how long it sat idle (analyze/step_time.py); in Perfetto the
same figures belong beside the rank's kernels, so a step whose exposed communication
or idle time jumps shows up while scrolling the timeline, not only in a table.

What is written (docs/collectives.md, *What merge --link-collectives writes*):

* in each rank's GPU process -- the device its figures are of (the one its GPU
  collectives ran on, else the one with most GPU events), the process its kernels are
  in -- two counter events series, :data:`EXPOSED` and :data:`IDLE`, each with one arg
  :data:`KEY`; Perfetto's JSON importer names a counter track ``"<name> <arg key>"``, so
  the tracks read ``exposed comm (ms) per step`` and ``GPU idle (ms) per step``;
* values: the step's total in milliseconds, exact to the nanosecond (``comm_exposed_us``
  and ``idle_us`` of ``info --collectives --json``'s ``step_time``, / 1000): one counter
  each, in ms, which Perfetto draws on one scale per track; a share of the step is the
  value over the ``ProfilerStep#N`` slice right above it;
* times: at the step's start (its ``ProfilerStep#N`` on the rank's step thread, the
  window ``info`` uses) the step's value, at its end 0 -- unless the next step starts
  there (or earlier): then that step's value from its start on. Shifted exactly as the
  rank's own events (its ``shift_ns``: the output base, the clock alignment);
* only steps the merge's ``--steps`` / ``--window`` keeps (the step's window meets it,
  the rule every event has); a rank without GPU events gets none (the summary's note
  names it).

The events carry no ``args.rank``: every arg of a counter is a value, so a ``rank`` arg
would be a third track. The verifier knows them by :func:`is_step_counter` and counts
them in the rank of their pid; they are in no input, so ``verify --against`` leaves them
out of its comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.align.links import _us as exact_us
from tracefuse_stream.listing import by_ranks, rank_label
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.rewrite.contract import PID_STRIDE
from tracefuse_stream.select.filters import EventFilter

if TYPE_CHECKING:  # the merge's stream (in workers) needs only the events, not the analysis
    from tracefuse_stream.analyze.step_time import StepTime

EXPOSED = "exposed comm (ms)"
IDLE = "GPU idle (ms)"
NAMES = (EXPOSED, IDLE)
KEY = "per step"
#: the tracks as Perfetto names them ("<name> <arg key>")
TRACKS = tuple(f"{n} {KEY}" for n in NAMES)

Step = Tuple[int, int, int, int]  # (start ns, end ns, exposed comm ns, GPU idle ns), file-relative


@dataclass(frozen=True)
class RankCounters:
    """One rank's counters: its GPU process (the pid in its file, and the label the
    step figures give it) and, in start order, the steps the merge keeps."""

    device_pid: Any
    device: str
    steps: Tuple[Step, ...]


def is_step_counter(ev: Dict[str, Any]) -> bool:
    """True for a counter event of :func:`counter_events` (the verifier's test): its
    name, a rank's pid and exactly the one arg (an input's counters carry ``args.rank``)."""
    if ev.get("ph") != "C" or ev.get("name") not in NAMES:
        return False
    pid, args = ev.get("pid"), ev.get("args")
    return type(pid) is int and pid >= PID_STRIDE and type(args) is dict and len(args) == 1 and KEY in args


def _ms(ns: int) -> Any:
    """Exact ms: an int when whole, else a Decimal with its ns digits."""
    return ns // 10**6 if ns % 10**6 == 0 else Decimal(ns).scaleb(-6)


def rank_counters(plan: RankPlan, rows: Sequence[StepTime], flt: EventFilter) -> Optional[RankCounters]:
    """``plan``'s counters from its step figures (one rank's), the steps outside the
    merge's window left out; None: no step with GPU figures."""
    gpu = sorted((st for st in rows if st.gpu is not None), key=lambda st: (st.start_ns, st.step))
    if not gpu:
        return None
    at = int(plan.base_time_ns or 0) + int(plan.align_offset_ns or 0)  # file ns -> aligned absolute ns
    steps = tuple(
        (st.start_ns, st.start_ns + st.step_ns, st.gpu.figures.comm_exposed_ns, st.gpu.figures.idle_ns)
        for st in gpu
        if st.gpu is not None and flt.in_window(at + st.start_ns, st.step_ns)
    )
    return RankCounters(gpu[0].gpu.device_pid, gpu[0].gpu.device, steps)  # type: ignore[union-attr]


def counter_events(c: RankCounters, pid: int, shift_ns: int) -> List[Dict[str, Any]]:
    """The counter events of ``c`` in output process ``pid``, times shifted by
    ``shift_ns`` (the rank's), in time order (see the module docstring)."""
    out: List[Dict[str, Any]] = []
    for k, (lo, hi, exposed, idle) in enumerate(c.steps):
        out += _pair(lo + shift_ns, exposed, idle, pid)
        nxt = c.steps[k + 1][0] if k + 1 < len(c.steps) else None
        if nxt is None or nxt > hi:  # the next step's start sets its own value otherwise
            out += _pair(hi + shift_ns, 0, 0, pid)
    return out


def _pair(ns: int, exposed: int, idle: int, pid: int) -> List[Dict[str, Any]]:
    ts = exact_us(ns)
    return [
        {"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": ts, "args": {KEY: _ms(v)}}
        for name, v in ((EXPOSED, exposed), (IDLE, idle))
    ]


def plan_counters(
    plans: Sequence[RankPlan], rows: Dict[int, List[StepTime]], flt: EventFilter, unread: Dict[int, str]
) -> Tuple[Dict[int, RankCounters], List[str]]:
    """Every merged rank's counters (``rows``: rank -> its step figures; ``unread``:
    rank -> why its file could not be read for them) and the summary's notes."""
    out: Dict[int, RankCounters] = {}
    no_steps: List[int] = []
    cpu_only: List[int] = []
    outside: List[int] = []
    for p in plans:
        if p.rank in unread:
            continue
        c = rank_counters(p, rows.get(p.rank, []), flt)
        if not rows.get(p.rank):
            no_steps.append(p.rank)
        elif c is None:
            cpu_only.append(p.rank)
        elif not c.steps:
            outside.append(p.rank)
        else:
            out[p.rank] = c
    notes = []
    if out:
        notes.append(
            f"step counters: {rank_label(out)}: '{TRACKS[0]}' and '{TRACKS[1]}' "
            "in each rank's GPU process (info --collectives' step_time figures, ms)"
        )
    if no_steps:
        notes.append(f"step counters: none for {rank_label(no_steps)}: no ProfilerStep#N (no step figures)")
    if cpu_only:
        notes.append(f"step counters: none for {rank_label(cpu_only)}: no GPU events (CPU only)")
    if outside:
        notes.append(f"step counters: none for {rank_label(outside)}: no step in the time window")
    notes += by_ranks((r, f"step counters: none, not read: {why}") for r, why in sorted(unread.items()))
    return out, notes


__all__ = [
    "EXPOSED",
    "IDLE",
    "KEY",
    "NAMES",
    "RankCounters",
    "TRACKS",
    "counter_events",
    "is_step_counter",
    "plan_counters",
    "rank_counters",
]
