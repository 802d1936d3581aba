"""What goes around the ranks' events in a merged file, and which files are written.

A merged file is a head (``baseTimeNanoseconds`` and the opening of ``traceEvents``),
the ranks' fragments in rank order, and a tail: the ``tracefuse`` header that keeps
every input's top-level keys, the applied shifts, pid maps and counts ("nothing
lost"). With ``--split-ranks K`` there is one such file per K consecutive ranks, all
on the same base; their names derive from ``-o``.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from tracefuse_stream._version import __version__
from tracefuse_stream.errors import UsageError
from tracefuse_stream.exactjson import dumps_exact
from tracefuse_stream.pipeline.stream import RankResult
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.write.codecs import ACCEPTED_EXTENSIONS

# the output extensions (one home: write/codecs), longest first so ".json.gz" wins over ".json"
OUTPUT_SUFFIXES = tuple(sorted(ACCEPTED_EXTENSIONS, key=len, reverse=True))


def head_bytes(base_ns: int) -> bytes:
    """The merged file's bytes before the events (named apart from read/head's
    ``Head``, which is what an *input* file's start says)."""
    return b'{"schemaVersion":1,"displayTimeUnit":"ms","baseTimeNanoseconds":%d,"traceEvents":[\n' % base_ns


def tail_bytes(meta: Dict[str, Any]) -> bytes:
    """The merged file's bytes after the events: the ``tracefuse`` header, exact numbers."""
    return b'\n],"tracefuse":' + dumps_exact(meta) + b"}\n"


def split_stem(name: str) -> tuple[str, str]:
    """``merged.json.gz`` -> (``merged``, ``.json.gz``)."""
    lower = name.lower()
    for suf in OUTPUT_SUFFIXES:
        if lower.endswith(suf):
            return name[: -len(suf)], name[-len(suf) :]
    return name, ""


def tagged_name(output: str, tag: str) -> str:
    """``merged.json.gz`` + ``ranks0-7`` -> ``merged.ranks0-7.json.gz`` (same folder)."""
    path = Path(output)
    stem, ext = split_stem(path.name)
    return str(path.with_name(f"{stem}.{tag}{ext}"))


def rank_groups(plans: Sequence[RankPlan], split_ranks: Optional[int]) -> List[List[RankPlan]]:
    if not split_ranks:
        return [list(plans)]
    return [list(plans[i : i + split_ranks]) for i in range(0, len(plans), split_ranks)]


def output_names(output: str, groups: List[List[RankPlan]], split: bool) -> List[str]:
    """One file name per rank group: ``output`` itself, or tagged by rank range."""
    if not split:
        return [output]
    if output == "-":
        raise UsageError("--split-ranks needs a file name for -o, not stdout")
    names = []
    for g in groups:
        lo, hi = g[0].rank, g[-1].rank
        names.append(tagged_name(output, f"ranks{lo}" if lo == hi else f"ranks{lo}-{hi}"))
    return names


def rank_header(plan: RankPlan, res: RankResult) -> Dict[str, Any]:
    """The per-rank record kept under ``tracefuse.ranks["r"]``."""
    return {
        "rank": plan.rank,
        "rank_from": plan.rank_source,
        **({"cycle": plan.cycle} if plan.cycle is not None else {}),  # verify: other cycles left out
        "source": os.path.abspath(plan.path),
        "compression": plan.compression,
        "layout": plan.layout,
        "base_time_ns": plan.base_time_ns,
        "shift_ns": plan.shift_ns,
        "shift_us": Decimal(plan.shift_ns).scaleb(-3),  # exact, as shift_ns (never a float)
        "align": plan.align,
        "header": res.header,
        "pids": res.pid_map,
        "events_in": res.events_in,
        "events_out": res.events_out,
        "dropped": res.dropped,
        "salvage": res.salvage,
    }


def file_meta(
    base_ns: int,
    group: List[RankPlan],
    part: int,
    names: List[str],
    split: bool,
    flt: EventFilter,
    results: Dict[int, RankResult],
) -> Dict[str, Any]:
    """The ``tracefuse`` header of one written file."""
    return {
        "tool": "tracefuse-stream",
        "version": __version__,
        "base_time_ns": base_ns,
        "ranks_merged": [p.rank for p in group],
        "split": {"part": part, "parts": len(names), "files": names} if split else None,
        "filters": flt.to_header(),
        "ranks": {str(p.rank): rank_header(p, results[p.rank]) for p in group},
    }
