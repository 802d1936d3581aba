"""Time windows for ``--steps`` and ``--window``: which wall-clock span to keep.

``--steps A:B`` is resolved on ONE reference rank: a streaming pass over its file
collects only the step table (step number -> extent), never the events, and the
window runs from the start of ``ProfilerStep#A`` to the end of ``ProfilerStep#B``.
Step numbers count per rank (profilers that started at different times number the
same training step differently), which is why one rank is the reference.

A step's extent is the union of every ``X`` event named exactly ``ProfilerStep#N``
in the file, whatever its category: the CPU ``user_annotation`` and, in GPU traces,
the ``gpu_user_annotation`` copy that Kineto writes on the GPU timeline, so that a
window ending with step B also covers the device work step B launched.

All times here are exact integers in nanoseconds: ``ts``/``dur`` are microseconds
with three decimals, converted by :func:`us_to_ns` without float rounding errors.
"""

from __future__ import annotations

import os
import re
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from tracefuse_stream.errors import ErrorKind, InputError, UsageError
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.read.events import StepFields, iter_event_batches
from tracefuse_stream.read.readers import SalvageReader
from tracefuse_stream.read.scan import ScanSelection, Tally
from tracefuse_stream.read.sources import PathLike
from tracefuse_stream.select.spans import SPAN_DROPPED_NOTE, is_profiler_span, span_fits
from tracefuse_stream.timeunits import FLOAT_FAST_LIMIT, TimeCheck, us_to_ns

Number = Union[int, float, Decimal]


BAD_TIME_HINT = "use --salvage to drop such events"
_STEP_NAME_RE = re.compile(r"ProfilerStep#([0-9]+)", re.ASCII)
_THOUSAND = Decimal(1000)
_MILLION = Decimal(1_000_000)


def step_number(name: str) -> Optional[int]:
    """N of a step named exactly ``ProfilerStep#N``, else None: the one rule every reader
    of step names applies (``--steps``, the collectives' steps, info's and the report's
    timeline). N is ASCII digits only: ``ProfilerStep#²`` (a digit to ``str.isdigit``,
    not to ``int``) or ``ProfilerStep#٣`` is no step, as it is no step to Kineto."""
    m = _STEP_NAME_RE.fullmatch(name)
    return None if m is None else int(m.group(1))


def _ms_to_ns(value: Number, rounding: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise TypeError(f"expected a number of milliseconds, got {type(value).__name__}")
    if isinstance(value, int):
        return value * 1_000_000
    d = Decimal(repr(value)) if isinstance(value, float) else value
    if not d.is_finite():
        raise UsageError(f"--window bound {value!r} ms is not finite")
    return int((d * _MILLION).to_integral_value(rounding=rounding))


def window_from_ms(first_event_abs_ns: int, start_ms: Number, end_ms: Number) -> Tuple[int, int]:
    """Convert ``--window START_MS:END_MS`` (milliseconds relative to the merged
    trace's first event at ``first_event_abs_ns``) to absolute epoch ns
    ``(start_ns, end_ns)``. Sub-nanosecond bounds round outwards (start down,
    end up), so the window never loses an event it names.

    Raises UsageError when a bound is negative or not finite, or start >= end.
    """
    start_ns = _ms_to_ns(start_ms, ROUND_FLOOR)
    end_ns = _ms_to_ns(end_ms, ROUND_CEILING)
    if start_ns < 0 or end_ns < 0:
        raise UsageError(f"--window {start_ms}:{end_ms}: bounds must not be negative")
    if not start_ns < end_ns:
        raise UsageError(f"--window {start_ms}:{end_ms}: start is not before end")
    return first_event_abs_ns + start_ns, first_event_abs_ns + end_ns


def _step_table(
    path: PathLike,
    *,
    strict: bool = True,
    salvage: bool = False,
    bad: Optional[Dict[int, str]] = None,
    base_ns: int = 0,
) -> Dict[int, Tuple[int, int]]:
    """Stream ``path`` once; return ``{step: (start_ns, end_ns)}`` relative to the
    file's own time base (i.e. ``ts`` x 1000). Only the table is kept in memory.

    Events come from :func:`~tracefuse_stream.read.events.iter_event_batches`, so both
    layouts and exact numbers (uint64 ``Comms Id``) read as in the merge. A JSON error
    raises InputError; with ``strict=False`` the pass stops there and the steps seen
    so far are returned (for truncated files of killed jobs); with ``salvage`` the
    salvage reader goes on after damage, as the merge's does.

    A step whose ``ts``/``dur`` is malformed (timeunits.time_problem) is left out, as
    ``--salvage`` drops it from the merge; ``bad`` gets ``{step: problem}`` for it.
    """
    table: Dict[int, Tuple[int, int]] = {}
    steps = ScanSelection(ph="X", name_prefix="ProfilerStep#")  # the kernel skips the rest unread
    check = TimeCheck(base_ns)
    for batch in (
        _salvaged_batches(path)
        if salvage
        else iter_event_batches(
            path,
            strict=strict,
            what="looking for ProfilerStep events",
            fields=StepFields,
            select=steps,
            tally=Tally(),
        )
    ):
        for ev in batch:
            if type(ev) is not dict or ev.get("ph") != "X":
                continue
            name = ev.get("name")
            if not isinstance(name, str) or not name.startswith("ProfilerStep#"):
                continue
            step = step_number(name)
            if step is None:
                continue
            problem = check(ev)
            if problem is not None:
                if bad is not None:
                    bad.setdefault(step, problem)
                continue
            if ev.get("ts") is None:
                continue  # a step without a time cannot bound a window
            start = us_to_ns(ev["ts"])
            dur = ev.get("dur")
            end = start + max(us_to_ns(dur) if dur is not None else 0, 0)
            old = table.get(step)
            if old is not None:
                start, end = min(start, old[0]), max(end, old[1])
            table[step] = (start, end)
    return table


def _salvaged_batches(path: PathLike) -> Iterator[List[Any]]:
    """The events the salvage reader keeps, as the merge's ``--salvage`` reads them."""
    reader = SalvageReader(str(path), os.path.getsize(path), exact=True)
    try:
        yield from reader.batches()
    finally:
        reader.close()


def list_steps(path: PathLike, *, strict: bool = True) -> Dict[int, Tuple[float, float]]:
    """``{step: (start_us, end_us)}`` for every ``ProfilerStep#N`` in ``path``, in the
    file's own relative microseconds (``ts`` as written), sorted by step number.
    Raises InputError if the file is not valid JSON (unless ``strict=False``)."""
    table = _step_table(path, strict=strict)
    return {s: (table[s][0] / 1000, table[s][1] / 1000) for s in sorted(table)}


def steps_not_found(missing: Sequence[int], where: str, present: Iterable[int]) -> UsageError:
    """The error for ``--steps`` asking for steps that are not there, as every command
    words it (merge, report, the API): which, where, and the steps present."""
    have = sorted(present)
    listed = compress_ranges(have) if have else "none (no ProfilerStep#N events)"
    what = f"step {missing[0]}" if len(missing) == 1 else f"steps {missing[0]} and {missing[1]}"
    return UsageError(f"{what} not found {where}; steps present: {listed}")


def find_step_window(
    path: PathLike,
    base_time_ns: Optional[int],
    first_step: int,
    last_step: int,
    *,
    rank: Optional[int] = None,
    strict: bool = True,
    salvage: bool = False,
) -> Tuple[int, int]:
    """Absolute epoch ns ``(start, end)`` from the start of ``ProfilerStep#first_step``
    to the end (ts + dur) of ``ProfilerStep#last_step`` in the trace at ``path``,
    whose time base is ``base_time_ns`` (its ``baseTimeNanoseconds``; 0 or None for
    PyTorch <= 2.3 files whose ts is absolute epoch us).

    ``rank`` only improves the error message. Raises UsageError when
    ``first_step > last_step``, a step is negative, or a step is missing (the message
    lists the steps present, e.g. ``steps present: 2-4``); InputError when the file
    cannot be read or parsed, or (without ``salvage``, which drops such events) when a
    step it needs has a malformed ``ts``/``dur``.
    """
    for s in (first_step, last_step):
        if isinstance(s, bool) or not isinstance(s, int):
            raise UsageError(f"step numbers must be integers, got {s!r}")
        if s < 0:
            raise UsageError(f"step numbers cannot be negative, got {s}")
    if first_step > last_step:
        raise UsageError(f"--steps {first_step}:{last_step}: first step is after last step")
    base = int(base_time_ns or 0)
    bad: Dict[int, str] = {}
    table = _step_table(path, strict=strict, salvage=salvage, bad=bad, base_ns=base)
    missing = [s for s in dict.fromkeys((first_step, last_step)) if s not in table]
    for s in missing:
        if s in bad and not salvage:
            raise InputError(
                str(path), f"bad {bad[s]} (ProfilerStep#{s})", hint=BAD_TIME_HINT, kind=ErrorKind.BAD_EVENT
            )
    if missing:
        where = f"on rank {rank} ({path})" if rank is not None else f"in {path}"
        raise steps_not_found(missing, where, table)
    start = table[first_step][0]
    end = table[last_step][1]
    if end < start:
        raise InputError(
            str(path),
            f"ProfilerStep#{last_step} ends before ProfilerStep#{first_step} starts",
        )
    return base + start, base + end


__all__ = [
    "us_to_ns",
    "window_from_ms",
    "list_steps",
    "find_step_window",
    "FLOAT_FAST_LIMIT",
    "is_profiler_span",
    "span_fits",
    "SPAN_DROPPED_NOTE",
]
