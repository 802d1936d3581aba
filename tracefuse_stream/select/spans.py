"""Kineto's profiler-span slice under ``--steps``/``--window``: dropped when it
reaches outside the window.

Kineto writes one ``X`` event per profiler run, ``cat`` "Trace", ``pid`` "Spans",
named ``PyTorch Profiler (N)``, spanning the whole recording. A windowed merge keeps
the events that *intersect* the window, so that slice alone would stretch the merged
trace back to the recording's full length (and Perfetto's view with it). It is dropped
instead when it does not lie inside the window, and the summary says so; clipping it
would invent a profiler start that never happened. The merge (``rewrite/rules.py``,
the compiled kernel hands such events to it) and ``verify --against`` decide with the
same function. No imports: the rewrite's hot module uses it.
"""

from __future__ import annotations

from typing import Any, Tuple

PROFILER_SPAN_CAT = "Trace"
PROFILER_SPAN_PID = "Spans"
PROFILER_SPAN_PREFIX = "PyTorch Profiler"


def is_profiler_span(ph: Any, cat: Any, name: Any, pid: Any) -> bool:
    """Whether an event is Kineto's profiler-span slice (see the constants above)."""
    return (
        ph == "X"
        and cat == PROFILER_SPAN_CAT
        and pid == PROFILER_SPAN_PID
        and isinstance(name, str)
        and name.startswith(PROFILER_SPAN_PREFIX)
    )


def span_fits(start_ns: int, dur_ns: int, window_ns: Tuple[int, int]) -> bool:
    """Whether a profiler span ``[start, start + dur]`` lies inside the window.

    A ``--steps``/``--window`` merge keeps events that *intersect* the window, so the
    profiler span, which covers the whole recording, would stretch the merged trace
    back to its full length: every other event cut to the window, one slice (and the
    trace's extent in Perfetto) still minutes long. A span that reaches outside the
    window is dropped instead (the summary says so); clipping it would invent a
    profiler start that never happened. The merge and ``verify --against`` both decide
    with this function.
    """
    lo, hi = window_ns
    return lo <= start_ns and start_ns + max(dur_ns, 0) <= hi


SPAN_DROPPED_NOTE = (
    "Kineto's profiler-span slice ('PyTorch Profiler (N)', process Spans) covers the whole "
    "recording, beyond the window: dropped; the other events that cross the window's edges "
    "are kept whole, so a rank's slices can reach before and after the window"
)


__all__ = ["PROFILER_SPAN_CAT", "SPAN_DROPPED_NOTE", "is_profiler_span", "span_fits"]
