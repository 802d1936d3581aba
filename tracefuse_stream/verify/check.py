"""``tracefuse verify``: show that a merged trace will render right in Perfetto.

The merged file is read once, streaming, by the fast batched reader with an exact
ijson fallback (:mod:`tracefuse_stream.verify.passes`), so ``.json``, ``.json.gz``
and ``.json.zst`` all work and memory stays bounded by the number of processes,
threads and flow keys, never by the number of events. The checks, by module:

* strict JSON, the byte offset of the first error, the top-level keys
  (:mod:`~tracefuse_stream.verify.passes`, :mod:`~tracefuse_stream.verify.toplevel`);
  a gzip file must be ONE member (:mod:`~tracefuse_stream.verify.structure`);
* pids/tids inside Perfetto's uint32, every process named once and carrying one
  rank, sort indexes int32, flow keys per rank (:mod:`~tracefuse_stream.verify.events`);
* complete events that overlap without nesting, by external sort
  (:mod:`~tracefuse_stream.verify.overlap`);
* the ``tracefuse`` header against the file (:mod:`~tracefuse_stream.verify.header`)
  and, with ``against``, every kept input event present exactly once with its mapped
  pid and absolute time (:mod:`~tracefuse_stream.verify.against`).

This module runs them in order and assembles the :class:`VerifyReport`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Union

from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.read.discover import discover
from tracefuse_stream.read.sources import PathLike, detect_compression
from tracefuse_stream.verify.against import check_against
from tracefuse_stream.verify.events import MergedChecker
from tracefuse_stream.verify.header import check_header
from tracefuse_stream.verify.passes import PassResult, run_pass
from tracefuse_stream.verify.report import CODES, Finding, VerifyReport
from tracefuse_stream.verify.structure import gzip_members, header_pass


def verify(
    path: PathLike,
    against: Optional[Sequence[Union[str, os.PathLike[str]]]] = None,
    max_examples: int = 5,
    *,
    sort_chunk_records: Optional[int] = None,
) -> VerifyReport:
    """Check that the merged trace ``path`` renders right in Perfetto.

    ``against``: the merge's input files (or directories); every kept input event must
    be present exactly once with its mapped pid and its time. Raises
    :class:`~tracefuse_stream.errors.InputError` when a file cannot be opened.
    """
    t0 = time.perf_counter()
    path = str(path)
    # the inputs as a merge finds them: non-trace JSON and earlier merged outputs skipped
    against_paths = [str(c.path) for c in discover([Path(p) for p in against]).candidates] if against else []
    if not os.path.isfile(path):
        if not os.path.exists(path):
            raise InputError(path, "no such file", kind=ErrorKind.MISSING)
        raise InputError(path, "not a regular file", kind=ErrorKind.UNREADABLE)
    from tracefuse_stream.verify.archive import is_archive, verify_archive_file

    if is_archive(path):  # a Perfetto archive (-o NAME.perfetto.tar): member by member
        return verify_archive_file(path, against_paths)
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
    for r, st in v.ranks.items():
        ranks[r if r is not None else "unknown"] = st
    return VerifyReport(path, not errors, errors, warnings, ranks, totals, against_paths)


def _totals(v: MergedChecker, res: PassResult, seconds: float) -> Dict[str, Any]:
    keys = ("events", "metadata", "complete", "instants", "counters", "flow_starts", "flow_steps",
            "flow_ends", "flow_orphan_ends", "overlaps", "processes", "threads")  # fmt: skip
    t: Dict[str, Any] = {k: sum(st[k] for st in v.ranks.values()) for k in keys}
    t["ranks"] = len([r for r in v.ranks if r is not None])
    t["bytes"] = res.nbytes
    t["file_bytes"] = os.path.getsize(v.path)
    t["compression"] = detect_compression(v.path)
    t["seconds"] = round(seconds, 3)
    t["mb_per_s"] = round(res.nbytes / 1e6 / seconds, 2) if seconds > 0 else None
    t["overlap_records_spilled"] = bool(v.sorter.runs)
    return t


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``verify MERGED [--against INPUT...] [--json]`` through the shared CLI (see
    :func:`tracefuse_stream.verify.cli.main`)."""
    from tracefuse_stream.verify.cli import main as cli_main

    return cli_main(argv)


__all__ = ["CODES", "Finding", "VerifyReport", "main", "verify"]
