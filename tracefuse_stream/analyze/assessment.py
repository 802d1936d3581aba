"""Whether the collectives analysis could assess the run at all, said before the verdict.

Why: "no rank stands out" on a green banner reads as an all-clear. When no collective
instance was matched there was nothing to judge, and when ranks of the world have no
file a straggler among them cannot be named: the report (text and page) says so
first, in a colour that is not the all-clear (report/page.js ``#verdict.unassessed``).
Mixed runs, edited copies and selections that do not exist never get this far: they
are errors (plan/runcheck.py ``require_one_run``, report/page_data.py).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from tracefuse_stream.rankset import compress_ranges

#: the matching's reason for a candidate whose members cannot overlap in time
NO_OVERLAP = "ends before another rank arrives"


def no_overlap_text(table: Any) -> Optional[str]:
    """When no instance matched and every candidate failed because one rank's op ends
    before another rank's starts: the files cannot be one job's collectives as their
    clocks stand -- two runs in one folder, or clocks far apart. One line, or None."""
    reasons = [k[-1] for k in getattr(table, "unmatched", {}) if k]
    if table.instances or not reasons or not all(NO_OVERLAP in str(r) for r in reasons):
        return None
    return (
        f"none of the {table.unmatched_total} collective(s) can be one instance across the ranks: each ends on "
        "one rank before another rank arrives; are these files from one run (or are their clocks far apart)?"
    )


def not_assessed(table: Any, checks: Sequence[Any] = ()) -> Optional[str]:
    """One line saying what the analysis of ``table`` (a CollectiveTable) could not
    assess, or None; ``checks``: the run checks of its cycle (plan/runcheck.py)."""
    if not table.instances:
        why = no_overlap_text(table) or (
            f"{table.unmatched_total} could not be matched (see unmatched)"
            if table.unmatched_total
            else "the inputs hold no collective that two ranks share"
        )
        pairs = len(getattr(table, "p2p_pairs", ()))
        graph = (f"; the steps' critical paths come from the {pairs} linked send/recv pair(s) alone"
                 if pairs else "")  # fmt: skip
        return f"not assessed: no collective instance matched across ranks ({why}); nobody is judged{graph}"
    missing = sorted({r for rc in checks for r in rc.missing})
    if missing:
        n = max((rc.world_size or 0 for rc in checks), default=0)
        return (
            f"partly assessed: rank(s) {compress_ranges(missing)} of the world's {n} have no file; "
            "a straggler among them cannot be named"
        )
    return None


__all__ = ["NO_OVERLAP", "no_overlap_text", "not_assessed"]
