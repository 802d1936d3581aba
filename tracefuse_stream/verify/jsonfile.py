"""One merged JSON trace checked, pass by pass, into a :class:`VerifyReport`.

The checks of :mod:`tracefuse_stream.verify.check` for a single JSON file (``.json``,
``.json.gz``, ``.json.zst``); a Perfetto archive runs this once per member
(:mod:`tracefuse_stream.verify.archive`), so both depend on this module and neither on
the other's entry point.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.read.discover import discover, is_own_output
from tracefuse_stream.read.head import scan_head
from tracefuse_stream.read.sources import PathLike, detect_compression
from tracefuse_stream.verify.against import check_against
from tracefuse_stream.verify.events import MergedChecker
from tracefuse_stream.verify.header import check_header
from tracefuse_stream.verify.passes import PassResult, run_pass
from tracefuse_stream.verify.report import VerifyReport
from tracefuse_stream.verify.structure import gzip_members, header_pass


def against_files(against: Optional[Sequence[Union[str, os.PathLike[str]]]]) -> List[str]:
    """The inputs as a merge finds them: non-trace JSON and earlier merged outputs skipped."""
    return [str(c.path) for c in discover([Path(p) for p in against]).candidates] if against else []


#: top-level keys of one rank's Kineto trace that a merged file (ours or TraceLens') never has
RANK_TRACE_KEYS = ("distributedInfo", "deviceProperties", "trace_id")


def require_merged(path: str) -> None:
    """A rank's own profiler trace is not what ``verify`` checks: say so, instead of
    failing it on what every raw trace has (unnamed string pids)."""
    head = scan_head(path)
    if head.ok and not is_own_output(head.header):
        keys = [k for k in RANK_TRACE_KEYS if k in head.header]
        if keys:
            raise InputError(
                path,
                f"not a merged trace: a rank's own profiler trace (it has {', '.join(keys)}, "
                "no tracefuse header); verify checks what tracefuse merge wrote",
                kind=ErrorKind.NOT_A_TRACE,
                hint=f"merge it first (tracefuse merge {path} -o merged.json.gz), then verify merged.json.gz",
            )


def require_file(path: str) -> None:
    if not os.path.isfile(path):
        if not os.path.exists(path):
            raise InputError(path, "no such file", kind=ErrorKind.MISSING)
        raise InputError(path, "not a regular file", kind=ErrorKind.UNREADABLE)


def verify_json(
    path: PathLike,
    against_paths: Sequence[str] = (),
    max_examples: int = 5,
    *,
    sort_chunk_records: Optional[int] = None,
    started: Optional[float] = None,
) -> VerifyReport:
    """Check the merged JSON trace ``path`` against the input files ``against_paths``
    (already discovered: see :func:`against_files`); ``started``: the caller's
    ``perf_counter()`` at the start, for the report's time."""
    t0 = time.perf_counter() if started is None else started
    path = str(path)
    against_paths = list(against_paths)
    require_file(path)
    require_merged(path)
    v = MergedChecker(path, against_paths, max_examples, sort_chunk_records)
    F = v.F
    res = run_pass(path, v.handle)
    if res.error is not None:
        off, msg = res.error
        F.add("invalid_json", None, {"offset": off}, message=f"not strict JSON at byte {off}: {msg}")
    v.finish_structure()
    v.finish_overlaps()
    if detect_compression(path) == "gzip":
        members, first_end, total = gzip_members(path)
        if members > 1:
            F.add(
                "gzip_multi_member", None,
                {"members": members, "first_member_bytes": first_end, "total_bytes": total},
                message=f"{members} gzip members: Perfetto inflates only the first ({first_end:,} of {total:,} "
                "decompressed bytes) and reports the JSON as incomplete",
            )  # fmt: skip

    top: Dict[str, Any] = {}
    has_events = res.seen_items
    complete = False
    if res.error is None:
        top, complete, has_events = res.top_level()
        if not has_events and not res.seen_items:
            F.add("no_trace_events", None, message="the top level has no traceEvents array")
    tf = top.get("tracefuse") if isinstance(top.get("tracefuse"), dict) else None
    if tf is None and res.error is None and has_events and not complete:
        tf = header_pass(path)
    if tf is not None:
        check_header(v, top, tf)
    elif res.error is None:
        F.add("header_missing", None, level="error" if v.against else "warning",
              message="no tracefuse header in the merged file" + ("; cannot check --against" if v.against else ""))  # fmt: skip

    if v.against:
        if res.error is not None:
            F.add(
                "against_skipped", None, message="merged file is not valid JSON; --against comparison skipped"
            )
        elif tf is not None:
            check_against(v, tf)

    errors, warnings = F.finish()
    totals = _totals(v, res, time.perf_counter() - t0)
    ranks = {}
    for r, st in v.ranks.items():  # events of no rank: the Collectives process (only), or unknown
        ranks[r if r is not None else _no_rank_key(st, v.summary_events)] = st
    return VerifyReport(path, not errors, errors, warnings, ranks, totals, against_paths)


#: The report's row for the events of ``merge --link-collectives``' summary process.
COLLECTIVES_ROW = "Collectives"


def _no_rank_key(st: Dict[str, Any], summary_events: int) -> str:
    """The row of the events that belong to no rank: "Collectives" when they are all
    the summary process's (report/summary_track.py), else "unknown"."""
    return COLLECTIVES_ROW if summary_events and st["events"] == summary_events else "unknown"


def _totals(v: MergedChecker, res: PassResult, seconds: float) -> Dict[str, Any]:
    keys = ("events", "metadata", "complete", "instants", "counters", "flow_starts", "flow_steps",
            "flow_ends", "flow_orphan_ends", "overlaps", "processes", "threads")  # fmt: skip
    t: Dict[str, Any] = {k: sum(st[k] for st in v.ranks.values()) for k in keys}
    t["ranks"] = len([r for r in v.ranks if r is not None])
    t["collectives_events"] = v.summary_events
    t["bytes"] = res.nbytes
    t["file_bytes"] = os.path.getsize(v.path)
    t["compression"] = detect_compression(v.path)
    t["seconds"] = round(seconds, 3)
    t["mb_per_s"] = round(res.nbytes / 1e6 / seconds, 2) if seconds > 0 else None
    t["overlap_records_spilled"] = bool(v.sorter.runs)
    return t


__all__ = ["against_files", "require_file", "verify_json"]
