"""Cross-host clock alignment from NCCL/RCCL collective kernels (``--align collectives``).

Why this exists: every host has its own clock and Kineto does no cross-host sync, so
ranks on different hosts are skewed by hundreds of microseconds to milliseconds. A GPU
collective (AllReduce, AllGather, ReduceScatter, Broadcast, all-to-all, ...) cannot
finish on any rank before the last rank has joined, and it finishes on all of them at
nearly the same true time. Its kernel END times are therefore a shared event seen by
every clock; its START times are not (stragglers start late and wait less), so starts
are never used.

How: :func:`collect_collective_ends` makes one streaming pass over a rank's trace and
keeps only collective kernel end times (absolute ns, bounded by ``cap``);
:func:`estimate_offsets` matches them across ranks and estimates ONE offset per host
(ranks share a clock when they share ``host_name``; a rank without a known host is
its own clock) as the median difference to the reference host (the host of the lowest
rank). Median and MAD make it robust to the few collectives that end late on one rank.

Never invent skew: with no GPU collectives (CPU-only gloo jobs have none, and CPU-side
collective ops end hundreds of microseconds apart even on one host, so they are not
used), with fewer than ``min_matches`` matched collectives, or when the spread of the
differences exceeds the offset itself, the host keeps offset 0 and the reason says why.

Sign convention (everywhere in this module, including ``--clock-offsets`` files):
``offset_ns`` is ADDED to the rank's absolute times. After alignment a host's collective
ends coincide with the reference host's: ``end_host + offset ~= end_ref``.
"""

from tracefuse_stream.align.ends import (  # noqa: F401  (the public API of clock alignment)
    DEFAULT_CAP,
    DEFAULT_MIN_MATCHES,
    MatchKey,
    RankCollectives,
    _seq_value,
    _stream_of,
    collect_collective_ends,
    is_collective_kernel,
)
from tracefuse_stream.align.offsets import RankAlignment, estimate_offsets, format_alignment_table  # noqa: F401
from tracefuse_stream.align.offsets_file import load_clock_offsets, offsets_from_file  # noqa: F401

__all__ = [
    "DEFAULT_CAP",
    "DEFAULT_MIN_MATCHES",
    "MatchKey",
    "RankAlignment",
    "RankCollectives",
    "collect_collective_ends",
    "estimate_offsets",
    "format_alignment_table",
    "is_collective_kernel",
    "load_clock_offsets",
    "offsets_from_file",
]
