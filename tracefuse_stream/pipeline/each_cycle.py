"""``--cycle all``: one merge per profiling cycle, and one summary of them all.

Orchestration, so it lives in the pipeline: it runs merges (the caller's ``merge_one``)
and names their outputs as ``--split-ranks`` does (:func:`.outputs.tagged_name`); the
planner only counts the cycles.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

from tracefuse_stream.errors import UsageError
from tracefuse_stream.pipeline.outputs import tagged_name
from tracefuse_stream.plan.planner import count_cycles


def cycle_names(output: str, count: int) -> List[str]:
    """``merged.json.gz`` -> ``merged.cycle1.json.gz``, ... (as ``--split-ranks`` names)."""
    if output == "-":
        raise UsageError("--cycle all writes one file per cycle and needs a file name for -o, not stdout")
    return [tagged_name(output, f"cycle{i}") for i in range(1, count + 1)]


def merge_each_cycle(merge_one: Callable[..., Any], kwargs: Dict[str, Any], output: str) -> Any:
    """``--cycle all``: one merge per cycle into ``cycle_names(output)``; the summaries
    are combined (all ranks of all cycles, warnings prefixed with their cycle)."""
    n = count_cycles(
        kwargs["inputs"], rank_from=kwargs.get("rank_from", "auto"), salvage=kwargs.get("salvage", False)
    )
    names = cycle_names(str(output), n)
    summaries = [merge_one(output=name, cycle=i, **kwargs) for i, name in enumerate(names, 1)]
    for i, s in enumerate(summaries, 1):
        for r in s.ranks:
            r.cycle = i
    first = summaries[0]
    first.warnings[:] = [f"cycle 1: {w}" for w in first.warnings]
    first.notes[:] = [f"cycle 1: {n}" for n in first.notes]
    for i, s in enumerate(summaries[1:], 2):
        first.ranks.extend(s.ranks)
        first.bytes_in += s.bytes_in
        first.bytes_out += s.bytes_out
        first.json_bytes += s.json_bytes
        first.seconds += s.seconds
        first.outputs.extend(s.outputs)
        first.verify_reports.extend(s.verify_reports)
        first.warnings.extend(f"cycle {i}: {w}" for w in s.warnings)
        first.notes.extend(f"cycle {i}: {n}" for n in s.notes)
    first.output = ", ".join(s.output for s in summaries)
    first.cycles = len(summaries)
    return first


__all__ = ["cycle_names", "merge_each_cycle"]
