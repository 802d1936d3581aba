"""Profiling cycles: several files of the same rank in one directory.

``schedule(..., repeat=N)`` with ``tensorboard_trace_handler`` writes one file per rank
*per cycle* into one folder. Numbering those files as ranks builds a trace in which
"RANK 1" is really rank 0's second cycle, so files are grouped into cycles instead:
all files in order of time (each trace's first timed event, else the ``time_ns`` of a
``<worker>.<time_ns>.pt.trace.json`` name, else input order), a new cycle starting
whenever a rank already seen in the current cycle appears again. That stays right when
a rank misses a cycle (its next file still lands in the cycle of its time).

One cycle merges as it is; several need a choice (``--cycle N``, ``latest``, ``all``).
Files that only look like cycles (the same rank in another folder, or a day later) are
two runs, named as such with their full paths (:func:`two_runs`), never offered as cycles.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Hashable, List, Optional, Sequence, Union

from tracefuse_stream.errors import UsageError
from tracefuse_stream.listing import SHOWN, bounded, inline
from tracefuse_stream.plan.ranks import tensorboard_parts
from tracefuse_stream.plan.starts import FAR_APART_NS, earliest_ns
from tracefuse_stream.timeunits import iso_utc

if TYPE_CHECKING:  # pragma: no cover
    from tracefuse_stream.plan.rankplan import RankPlan

CycleChoice = Union[None, int, str]  # None: only one allowed; N (1-based); "latest"; "all"


@dataclass
class Cycle:
    """One profiling cycle: its 1-based index, earliest start and files."""

    index: int
    start_ns: Optional[int]
    plans: List[RankPlan]

    @property
    def files(self) -> List[str]:
        return [p.path for p in self.plans]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "cycle": self.index,
            "start_ns": self.start_ns,
            "start_utc": iso_utc(self.start_ns),
            "files": self.files,
        }


def parse_cycle(value: Union[str, int, None]) -> CycleChoice:
    """``--cycle`` value: a 1-based number, ``latest`` or ``all``."""
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        if isinstance(value, int) and value < 1:
            raise UsageError(f"--cycle must be 1 or more (cycles count from 1), not {value}")
        return value
    text = str(value).strip().lower()
    if text in ("latest", "all"):
        return text
    if text.isascii() and text.isdigit() and int(text) >= 1:
        return int(text)
    raise UsageError(f"--cycle must be a cycle number (1, 2, ...), 'latest' or 'all', not {value!r}")


def _order_key(p: RankPlan) -> tuple:
    if p.start_ns is not None:
        return (0, p.start_ns, p.position)
    tb = tensorboard_parts(p.path)
    if tb is not None:
        return (1, tb[1], p.position)
    return (2, 0, p.position)


def group_cycles(plans: Sequence[RankPlan], ids: Sequence[Hashable]) -> List[Cycle]:
    """Cycles of ``plans`` (``ids[i]`` is the rank identity of ``plans[i]``)."""
    ident = {id(p): k for p, k in zip(plans, ids)}
    groups: List[List[RankPlan]] = [[]]
    seen: set = set()
    for p in sorted(plans, key=_order_key):
        k = ident[id(p)]
        if k in seen:
            groups.append([])
            seen = set()
        groups[-1].append(p)
        seen.add(k)
    cycles = []
    for i, g in enumerate(groups, 1):
        g.sort(key=lambda p: p.position)
        starts = [p.start_ns for p in g if p.start_ns is not None]
        cycles.append(Cycle(i, min(starts) if starts else None, g))
    return cycles


def describe_cycles(
    cycles: Sequence[Cycle], limit: int = SHOWN, known: Optional[Dict[str, Optional[int]]] = None
) -> List[str]:
    """One line per cycle (the first few, then ``... and N more``): its start (its
    earliest timed event, as ``info`` shows it: plan/starts.earliest_ns; ``known``: the
    starts ``info`` found) and the first file names (``info`` lists every file)."""
    shown = cycles[:limit] if len(cycles) > limit + 1 else cycles
    lines = [
        f"cycle {c.index}: starts {iso_utc(earliest_ns(c.plans, known))}, {plural(len(c.files), 'file')}: "
        + inline([Path(f).name for f in c.files])
        for c in shown
    ]
    lines += [f"cycle {c.index}" for c in cycles[len(shown) :]]  # only counted by bounded()
    return bounded(lines, limit=limit, more="`tracefuse info` lists every file")


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def choose_cycle(cycles: List[Cycle], choice: CycleChoice, where: str) -> Cycle:
    """The cycle to merge; several without a choice is a usage error listing them."""
    if choice is None:
        if len(cycles) == 1:
            return cycles[0]
        raise UsageError(
            "\n".join(
                [
                    f"{where} holds {len(cycles)} profiling cycles (the same ranks appear again, "
                    "e.g. schedule(repeat=N)):"
                ]
                + describe_cycles(cycles)
                + ["choose one with --cycle N, --cycle latest, or --cycle all (one output per cycle)"]
            )
        )
    if choice == "latest":
        return cycles[-1]
    if choice == "all":
        raise UsageError("--cycle all is handled by merging each cycle on its own")  # pragma: no cover
    assert isinstance(choice, int)
    if choice > len(cycles):
        raise UsageError(
            "\n".join(
                [f"--cycle {choice}: {where} holds {plural(len(cycles), 'cycle')}:"] + describe_cycles(cycles)
            )
        )
    return cycles[choice - 1]


def two_runs(
    plans: Sequence[RankPlan], ids: Sequence[Hashable], cycles: Sequence[Cycle], where: str
) -> Optional[str]:
    """Why ``cycles`` are files of two (or more) runs rather than profiling cycles of
    one, as a message listing each run with full paths; None when they look like cycles.

    Cycles of one job are written by one ``tensorboard_trace_handler`` into one folder,
    minutes apart. The same rank again in another folder, or a cycle starting more than
    :data:`~tracefuse_stream.plan.starts.FAR_APART_NS` (a day) after the previous one, is
    another run: merging "cycle 2" of that is not what anyone asked for.
    """
    folders: Dict[Hashable, set] = {}
    for p, k in zip(plans, ids):
        folders.setdefault(k, set()).add(os.path.dirname(os.path.abspath(p.path)))
    runs: List[List[RankPlan]]
    if any(len(f) > 1 for f in folders.values()):
        by_dir: Dict[str, List[RankPlan]] = {}
        for p in sorted(plans, key=lambda p: p.position):
            by_dir.setdefault(os.path.dirname(os.path.abspath(p.path)), []).append(p)
        runs, why = list(by_dir.values()), "the same ranks appear again in another folder"
        advice = "merge one run at a time: give its folder, or its files by path"
    else:
        runs = [list(cycles[0].plans)]
        gaps = []
        for prev, c in zip(cycles, cycles[1:]):
            if (
                prev.start_ns is not None
                and c.start_ns is not None
                and c.start_ns - prev.start_ns > FAR_APART_NS
            ):
                runs.append([])
                gaps.append(c.start_ns - prev.start_ns)
            runs[-1].extend(c.plans)
        if not gaps:
            return None
        why = f"the same ranks appear again {max(gaps) / 86400e9:,.1f} days later (cycles of one job follow within minutes)"
        advice = "merge one run at a time: give its files by path"
    lines = [f"{where}: files of {len(runs)} runs? {why}; not merged as profiling cycles:"]
    for i, run in enumerate(runs, 1):
        lines.append(f"  run {i}: starts {iso_utc(earliest_ns(run))}, {plural(len(run), 'file')}:")
        lines += bounded([os.path.abspath(p.path) for p in run], indent="    ")
    return "\n".join(lines + [advice])
