"""Deterministic, streaming generator of realistic Kineto-shaped multi-rank traces.

Why this exists: the merger must be tested and benchmarked on inputs that look like
what PyTorch's profiler (Kineto) really writes -- per-process id counters that collide
across ranks, ``ac2g``/``fwdbwd`` flows, string pids, metadata at the end, three
top-level key orders, gzip/zstd -- at sizes (GBs) and rank counts that no committed
fixture can have. Everything here is derived from seeded ``random.Random`` instances
(no clock, no ``hash()``), so the same arguments always give byte-identical files,
and the committed ``fixtures/sample_run`` can be checked against a regeneration.

Streaming: events are rendered one by one with templates and written in small
batches (at most :data:`FLUSH_EVENTS` strings are held); memory stays flat however
large ``target_bytes`` is. Nothing but a few per-step counters is kept.

Time model (what makes the ranks of one run consistent with each other):

* A *common* schedule -- step boundaries, phase lengths, the collectives of each step
  and their "true" end times -- is derived from ``(seed, step index)`` only, never from
  the rank, in an absolute "true" clock (epoch ns).
* Each rank lays its CPU work out inside those phase windows with its own speed
  (rank-seeded RNG), so ops, launches and collective *starts* (arrival times) differ.
* A collective kernel ends at ``true_end + jitter + clock_offset_ns`` where ``jitter``
  is uniform in ``[-kernel_jitter_ns, kernel_jitter_ns]`` from a separate rank-seeded
  RNG. Every other timestamp of the rank is shifted by ``clock_offset_ns`` too, as a
  host whose clock is off would do.
* ``ts`` is written relative to ``baseTimeNanoseconds``: ``abs = base + ts*1000``
  where ``abs`` is the rank's (offset) clock; times are integers in ns internally and
  printed with exactly three decimals.

Ids (correlation, External id, flow ids, Python ids, Sequence numbers) are
per-process counters that start at the same small values on every rank, and the
event *structure* of a step depends only on ``(seed, step)``: all ranks therefore
use the same numbers, like real traces, which is what a merger must disambiguate.

Run ``python -m tracefuse_synth --help`` for the command line.

This module is the generator's front door (the names tests, benchmarks and tools
import); the work is split by job: common.py (constants, time/string rendering),
templates.py (event templates), layers.py (a layer's parts), model.py (the
transformer assembled from them),
schedule.py (the rank-independent step schedule), sink.py (plain/gzip/zstd output),
rankgen.py (one rank's events), ranktrace.py (one rank's file), run.py (a whole run,
the bundled sample) and cli.py (the command line).
"""

from __future__ import annotations

import sys

from tracefuse_synth.cli import main
from tracefuse_synth.common import (
    COMM_STREAM,
    COMPRESSIONS,
    COMPUTE_STREAM,
    DEFAULT_BASE_TIME_NS,
    FLUSH_EVENTS,
    GPU_SORT_BASE,
    KEY_ORDERS,
    MAX_TS_US,
    SPANS_SORT_INDEX,
    PathLike,
)
from tracefuse_synth.ranktrace import write_rank_trace
from tracefuse_synth.run import SAMPLE, sample_run, write_run

__all__ = [
    "DEFAULT_BASE_TIME_NS",
    "KEY_ORDERS",
    "write_rank_trace",
    "write_run",
    "sample_run",
    "main",
    "SAMPLE",
    "COMPRESSIONS",
    "COMPUTE_STREAM",
    "COMM_STREAM",
    "FLUSH_EVENTS",
    "GPU_SORT_BASE",
    "MAX_TS_US",
    "SPANS_SORT_INDEX",
    "PathLike",
]

if __name__ == "__main__":
    sys.exit(main())
