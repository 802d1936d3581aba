"""The start of a cycle or a run as messages show it: its earliest timed event.

Planning orders files by a cheap estimate, the first timed event *in file order*
(``RankPlan.start_ns``, from the head of each file); Kineto does not write events in
time order, so that can be later than the earliest event by a large part of a second
(a recorded cycle "started" 06:07:13.058 while ``info`` listed first events from
06:07:12.915, and the merge began there). Ordering does not mind; a printed start does:
every place that shows one — ``info``'s table and cycle list, the merge's errors and
notes — shows the earliest timed event of the files, which is what ``info`` reports
per file and where the merged trace begins (:func:`~tracefuse_stream.plan.starts.first_event_ns`).
Finding it reads the files, so it is done only for what is about to be printed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, Optional

from tracefuse_stream.errors import TraceFuseError

if TYPE_CHECKING:  # pragma: no cover
    from tracefuse_stream.plan.rankplan import RankPlan


def earliest_ns(plans: Iterable[RankPlan], known: Optional[Dict[str, Optional[int]]] = None) -> Optional[int]:
    """The earliest timed event of ``plans`` (absolute ns), None without any.

    ``known``: path -> earliest event already found (``info`` scanned every file);
    other files are read. A file that cannot be read for it keeps its estimate (the
    error that matters is reported where that file is merged)."""
    from tracefuse_stream.plan.starts import first_event_ns  # lazy: it imports the readers

    found = []
    for p in plans:
        if known is not None and p.path in known:
            ns = known[p.path]
        else:
            try:
                ns = first_event_ns(p)
            except (TraceFuseError, OSError):
                ns = p.start_ns
        if ns is not None:
            found.append(ns)
    return min(found, default=None)
