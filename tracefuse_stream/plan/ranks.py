"""Which rank each file is, and where that came from.

A trace names its rank in ``distributedInfo.rank`` only since PyTorch 2.0. Before
that (and for single-process profiles) the rank is in the file name by convention —
``rank_3.json``, ``rank-3``, ``rank3``, ``worker 3``, ``worker_3`` — or nowhere. So a
file's rank comes, in this order, from:

1. ``distributedInfo.rank`` (``rank_from`` ``"distributedInfo"``);
2. a ``rank[_-]?N`` / ``worker[ _-]?N`` part of its file name (``"filename"``);
3. its position among the inputs, directories listed in natural order (``"order"``).

``{rank: path}`` inputs are ``"explicit"``. The same *identity* (same rank from 1 or 2,
or the same ``tensorboard_trace_handler`` worker name ``<worker>.<time_ns>.pt.trace``)
in several files means profiling cycles, not duplicate ranks: see ``cycles``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Hashable, List, Optional, Sequence

from tracefuse_stream.errors import UsageError
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.textout import printable

if TYPE_CHECKING:  # pragma: no cover
    from tracefuse_stream.plan.rankplan import RankPlan

RANK_SOURCES = ("distributedInfo", "filename", "order", "explicit")
# "rank_3", "rank-3", "rank3", "Rank 3", "worker_3", "worker 3"; not inside a word
# ("crank3", "framework2") and not followed by more digits or a decimal point.
_NAME_RANK = re.compile(r"(?<![a-z0-9])(?:rank|worker)[ _-]?(\d{1,7})(?![0-9])", re.IGNORECASE)
# tensorboard_trace_handler: "<worker>.<time_ns>.pt.trace.json[.gz]"
_TB_NAME = re.compile(r"^(?P<worker>.+)\.(?P<ns>\d{16,20})\.pt\.trace\.json(?:\.gz|\.zst|\.zstd)?$")


def rank_from_name(path: str) -> Optional[int]:
    """The rank a file name states, if exactly one rank/worker number is in it."""
    found = {int(m.group(1)) for m in _NAME_RANK.finditer(Path(path).name)}
    return found.pop() if len(found) == 1 else None


def tensorboard_parts(path: str) -> Optional[tuple]:
    """``(worker, time_ns)`` of a ``tensorboard_trace_handler`` file name, else None."""
    m = _TB_NAME.match(Path(path).name)
    return (m.group("worker"), int(m.group("ns"))) if m else None


def identity(plan: RankPlan, rank_from: str) -> Hashable:
    """What makes two files the same rank (then they are two cycles of it)."""
    if rank_from == "order" or not plan.from_dir:
        # files given by path are never cycles of each other: the same rank twice there
        # is the duplicate-rank error (two single-GPU runs, or a mistake)
        return ("file", plan.position)
    r = plan.dist_rank
    if r is not None:
        return ("rank", r)
    r = rank_from_name(plan.path)
    if r is not None:
        return ("rank", r)
    tb = tensorboard_parts(plan.path)
    if tb is not None:
        return ("worker", str(Path(plan.path).parent), tb[0])
    return ("file", plan.position)


def assign_ranks(plans: Sequence[RankPlan], rank_from: str = "auto") -> None:
    """Give every plan its rank and ``rank_source`` (see module doc).

    ``order`` ranks are positions among the given plans (already one cycle), counted
    in input order. Two files with the same rank are an error naming both.
    """
    if rank_from not in ("auto", "order"):
        raise UsageError(f"--rank-from must be 'auto' or 'order', not {rank_from!r}")
    for i, p in enumerate(plans):
        if p.rank_source == "explicit":
            continue
        r = p.dist_rank if rank_from == "auto" else None
        if r is not None:
            p.rank, p.rank_source = r, "distributedInfo"
            continue
        r = rank_from_name(p.path) if rank_from == "auto" else None
        if r is not None:
            p.rank, p.rank_source = r, "filename"
        else:
            p.rank, p.rank_source = i, "order"
    seen: Dict[int, RankPlan] = {}
    for p in plans:
        if p.rank in seen:
            other = seen[p.rank]
            raise UsageError(
                f"rank {p.rank} appears twice: {printable(other.path)} (from {other.rank_source}) and "
                f"{printable(p.path)} (from {p.rank_source}); use --rank-from order to number files by "
                f"their position instead"
            )
        seen[p.rank] = p


def rank_source_note(plans: Sequence[RankPlan]) -> List[str]:
    """One summary line saying where ranks came from, when not all from the traces."""
    by: Dict[str, List[int]] = {}
    for p in plans:
        by.setdefault(p.rank_source, []).append(p.rank)
    if set(by) <= {"distributedInfo", "explicit"}:
        return []

    parts = [f"{src}: {compress_ranges(sorted(rs))}" for src, rs in sorted(by.items())]
    if all(p.rank_source == "order" for p in plans) and any(
        p.dist_rank is not None or rank_from_name(p.path) is not None for p in plans
    ):  # --rank-from order: the files may well say their rank; the position was asked for
        why = "--rank-from order: the position among the inputs, whatever the files say"
    else:
        why = "no distributedInfo.rank in those files; 'order' = natural order of the file names"
    return ["rank numbers taken from " + "; ".join(parts) + f" ({why})"]
