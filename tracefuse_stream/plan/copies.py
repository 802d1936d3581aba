"""Inputs that hold one trace twice: byte-for-byte copies, or one rank's recording
twice (``trace.json`` beside its ``trace.json.gz``).

A folder that holds ``trace.json`` and ``trace (1).json`` (downloaded twice), a ``cp``
of one rank's file, or a file and its ``gunzip -k`` copy is not a profiling cycle and
not a second rank: the copy says the same rank, at the same times, as its original.
Planned as it is, it became a "second profiling cycle" (the same rank again) and
``--cycle 1`` merged the copy with half of the other ranks, or a second rank when the
rank came from the file name: a trace with one rank's events under two labels. Files
reached twice by path (links, ``RUN RUN/``) are caught by discovery (same device and
inode); this catches copies:

* the same bytes (whatever the rank, however the files are named);
* the same rank (``distributedInfo.rank``, else a rank in the file name) whose first
  event is at the same instant, to the nanosecond: two profiling cycles, or two runs,
  of one rank cannot start at the same time; one recording stored twice does.

Cost: files are compared only within a group of the same size on disk, compression
and first event time; there, by a hash of their first and last 64 KiB, then by a hash of
all their bytes, then byte by byte. Traces of different ranks or runs differ in their
first bytes (pids, times, ``distributedInfo``), so a real job reads at most 128 KiB of
a few files here; a copy is read in full, twice. Never a comparison of every pair.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, Hashable, List, Optional, Sequence, Tuple

from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.plan.ranks import rank_from_name
from tracefuse_stream.plan.starts import earliest_ns
from tracefuse_stream.textout import printable
from tracefuse_stream.timeunits import iso_utc

BLOCK = 1 << 20
EDGE = 64 << 10  # bytes hashed at each end of a file before the whole of it


def same_bytes(a: str, b: str) -> bool:
    """Whether files ``a`` and ``b`` hold exactly the same bytes (sizes are equal)."""
    try:
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                x, y = fa.read(BLOCK), fb.read(BLOCK)
                if x != y:
                    return False
                if not x:
                    return True
    except OSError as e:
        raise InputError(getattr(e, "filename", None) or a, f"cannot be read: {e.strerror or e}",
                         kind=ErrorKind.UNREADABLE) from None  # fmt: skip


@dataclass(frozen=True)
class Copy:
    """``copy`` holds what ``original`` (the first by position) holds; ``why``: how we know."""

    original: RankPlan
    copy: RankPlan
    why: str


def _rank_key(p: RankPlan) -> Optional[int]:
    return p.dist_rank if p.dist_rank is not None else rank_from_name(p.path)


def _digest(path: str, head_tail: bool) -> bytes:
    """blake2b of the first and last :data:`EDGE` bytes (``head_tail``), or of all bytes."""
    import hashlib  # only when two inputs may be copies (start-up: hashlib loads OpenSSL)

    h = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as f:
            if head_tail:
                h.update(f.read(EDGE))
                size = os.fstat(f.fileno()).st_size
                if size > EDGE:
                    f.seek(max(EDGE, size - EDGE))
                    h.update(f.read(EDGE))
            else:
                for block in iter(lambda: f.read(BLOCK), b""):
                    h.update(block)
    except OSError as e:
        raise InputError(path, f"cannot be read: {e.strerror or e}", kind=ErrorKind.UNREADABLE) from None
    return h.digest()


def _refine(groups: List[List[RankPlan]], head_tail: bool) -> List[List[RankPlan]]:
    """Each group split by digest; groups of one dropped (nothing to compare)."""
    out: List[List[RankPlan]] = []
    for group in groups:
        by: Dict[bytes, List[RankPlan]] = {}
        for p in group:
            by.setdefault(_digest(p.path, head_tail), []).append(p)
        out.extend(g for g in by.values() if len(g) > 1)
    return out


def find_copies(plans: Sequence[RankPlan], by_rank: bool = True) -> List[Copy]:
    """Every plan that holds the same trace as an earlier one (module docstring).
    ``by_rank=False`` (``--rank-from order``: the files' own ranks are not used): the
    same bytes only."""
    ordered = sorted(plans, key=lambda p: p.position)
    groups: Dict[Hashable, List[RankPlan]] = {}
    for p in ordered:
        groups.setdefault((p.size_bytes, p.compression, str(p.first_ts)), []).append(p)
    found: Dict[int, Copy] = {}
    same = _refine(_refine([g for g in groups.values() if len(g) > 1], head_tail=True), head_tail=False)
    for group in same:
        first = group[0]
        for p in group[1:]:  # equal digests: the bytes decide (exact, whatever the hash)
            if same_bytes(first.path, p.path):
                found[id(p)] = Copy(first, p, "hold the same bytes")
    if by_rank:
        starts: Dict[Tuple[int, int], RankPlan] = {}
        for p in ordered:
            r = _rank_key(p)
            if r is None or p.start_ns is None or p.empty or id(p) in found:
                continue
            first = starts.setdefault((r, p.start_ns), p)
            if first is not p:
                # the instant shown is the earliest event, as info and every start (earliest_ns)
                found[id(p)] = Copy(
                    first, p, f"hold rank {r}'s recording from the same instant ({iso_utc(earliest_ns([p]))})"
                )
    return sorted(found.values(), key=lambda c: c.copy.position)


def copies_text(copies: Sequence[Copy]) -> List[str]:
    """One line per copy: ``FIRST and COPY hold the same bytes`` (which one is the copy
    no file says: the first by position is kept)."""
    return [f"{printable(c.original.path)} and {printable(c.copy.path)} {c.why}" for c in copies]


__all__ = ["Copy", "copies_text", "find_copies", "same_bytes"]
