"""Pausing Python's cyclic garbage collector while a rank streams, without ever
surprising a program that calls ``merge()``.

Why pause at all: a decoded batch is thousands of live dicts and lists, so the
collector's generation-0 trigger fires again and again and walks them all (~12% of
a rank's pass, measured with benchmarks/stages.py). The pass creates no reference
cycles (events are freed by reference counting as soon as they are written), so its
memory stays bounded without the collector.

Why this cannot surprise a host program:

* the pause is a ``with`` block around one rank: the previous state is restored in
  ``finally``, whatever ends the block (an error, KeyboardInterrupt, the SIGTERM
  exception); a collector the host had disabled stays disabled;
* nested pauses (a merge started from inside another one, e.g. from a filter
  callback) count: only the outermost one restores, so an inner one cannot switch
  the collector back on under the outer one;
* a merge called from any thread other than the main thread does not touch the
  collector at all: the collector is process-wide, and the host's main thread (or
  its other threads) may depend on it while the merge runs. Worker processes run
  their ranks in their own main thread and pause as usual.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

_lock = threading.Lock()
_depth = 0  # pauses currently open (main thread only)
_was_enabled = False  # the collector's state when the outermost pause began


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """The cyclic collector is off inside the block (main thread only), and exactly
    as before once the outermost block ends."""
    global _depth, _was_enabled
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


__all__ = ["cyclic_gc_paused"]
