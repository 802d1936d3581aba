"""Whether the collectives analysis could assess the run at all, said before the verdict.

Why: "no rank stands out" on a green banner reads as an all-clear. When no collective
instance was matched there was nothing to judge, and when ranks of the world have no
file (by ``distributedInfo.world_size``, or named as members by the collectives
themselves) a straggler among them cannot be named: the report (text and page) says so
first, in a colour that is not the all-clear (report/page.js ``#verdict.unassessed``).
Mixed runs, edited copies and selections that do not exist never get this far: they
are errors (plan/runcheck.py ``require_one_run``, report/page_data.py).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

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


def named_without_file(table: Any) -> List[int]:
    """Ranks the matched collectives name as members (``Process Group Ranks``, else
    ``pg_config``) that have no file: a world size the headers do not say (older traces,
    ranks from file names) still shows here. One entry per process group is read: its
    members all name the same ranks."""
    present = set(table.ranks)
    named: Dict[str, Any] = {}
    for inst in table.instances:
        if inst.group not in named:
            named[inst.group] = next(iter(inst.entries.values())).participants
    return sorted({r for members in named.values() for r in members or () if r not in present})


def not_assessed(table: Any, checks: Sequence[Any] = ()) -> Optional[str]:
    """One line saying what the analysis of ``table`` (a CollectiveTable) could not
    assess, or None; ``checks``: the run checks of its cycle (plan/runcheck.py)."""
    if not table.ranks and not table.instances:  # every file broken: there was nothing to read
        return "not assessed: no input file could be read (see the BROKEN lines); nobody is judged"
    pairs = len(getattr(table, "p2p_pairs", ()))
    if not table.instances and not any(p.step is not None for p in getattr(table, "p2p_pairs", ())):
        why = no_overlap_text(table) or (
            f"{table.unmatched_total} could not be matched (see unmatched)"
            if table.unmatched_total
            else "the inputs hold no collective that two ranks share"
        )
        graph = f"; {pairs} linked send/recv pair(s), none in a ProfilerStep" if pairs else ""
        return f"not assessed: no collective instance matched across ranks ({why}); nobody is judged{graph}"
    missing = sorted({r for rc in checks for r in rc.missing})
    absent = set() if any(rc.selected for rc in checks) else set(named_without_file(table))  # --ranks chose
    absent.update(r for rc in checks for members in rc.group_missing.values() for r in members)
    if absent and not missing:
        return (
            f"partly assessed: rank(s) {compress_ranges(sorted(absent))}, members of the process groups "
            "(Process Group Ranks, pg_config), have no file; a straggler among them cannot be named"
        )
    if missing:
        n = max((rc.world_size or 0 for rc in checks), default=0)
        return (
            f"partly assessed: rank(s) {compress_ranges(missing)} of the world's {n} have no file; "
            "a straggler among them cannot be named"
        )
    return None


__all__ = ["NO_OVERLAP", "named_without_file", "no_overlap_text", "not_assessed"]
