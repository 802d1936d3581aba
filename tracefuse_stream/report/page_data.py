"""What ``tracefuse report`` shows: the ``info --collectives --json`` object, made the
way ``info`` makes it, plus the few facts only the page needs.

No second source of truth: the inputs are planned and read by ``info``'s own
:func:`~tracefuse_stream.report.info.collect_info` (one streaming pass per file,
analyze/onepass.py: memory bounded as ``info --collectives``), the instances matched by
:func:`~tracefuse_stream.report.collectives.table_from_scans`, judged and explained by
:func:`~tracefuse_stream.report.collectives.analyse` (the why from the same pass's
timelines, analyze/timeline.py and analyze/why.py) and written by :func:`~tracefuse_stream.report.collectives.to_json`,
exactly as ``info --collectives --json`` does. This module only chooses which profiling cycle
(``--cycle``) and which steps (``--steps``) to look at, and adds the ``page`` object:
the inputs, the command line, the host of each rank (from the plans' headers) and the
``merge`` command for the worst step (report/collectives.py ``merge_command``).
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream._version import __version__
from tracefuse_stream.errors import UsageError
from tracefuse_stream.plan.cycles import parse_cycle
from tracefuse_stream.plan.planner import InputSpec
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.report.collectives import analyse, merge_command, table_from_scans, to_json
from tracefuse_stream.report.info import collect_info


@dataclass
class ReportData:
    """The page's data: ``document`` is what the page embeds (``{"collectives", "page"}``)."""

    document: Dict[str, Any]
    plans: List[RankPlan] = field(default_factory=list)
    broken: List[Tuple[str, str]] = field(default_factory=list)

    @property
    def input_paths(self) -> List[str]:
        """Every file read (the output must never be one of them)."""
        return [str(p.path) for p in self.plans] + [str(path) for path, _ in self.broken]


def only_steps(table: Any, first: int, last: int) -> Any:
    """``table`` with only the instances (and step spans) of ProfilerSteps
    ``first``..``last``: the report on those steps, as a merge of them would show.
    Unmatched counts stay those of the whole recording (they have no step)."""

    def keep(step: Optional[int]) -> bool:
        return step is not None and first <= step <= last

    return dataclasses.replace(
        table,
        instances=[i for i in table.instances if keep(i.step)],
        steps={r: {s: v for s, v in st.items() if keep(s)} for r, st in table.steps.items()},
        steps_selected=(first, last),
    )


def _choose_cycle(cycles: Sequence[Optional[int]], choice: Any) -> Optional[int]:
    """The cycle to show: ``choice`` (N or ``latest``; default: the latest, which is the
    one ``info --collectives --json`` puts under ``collectives``)."""
    c = parse_cycle(choice)
    if c == "all":
        raise UsageError("report shows one profiling cycle: --cycle N or latest (not all)")
    known = sorted(x for x in cycles if x is not None)
    if c is None or c == "latest" or not known:
        return known[-1] if known else (cycles[0] if cycles else None)
    if c not in known:
        raise UsageError(f"--cycle {c}: the inputs hold cycle(s) {', '.join(map(str, known))}")
    return int(c)


def command_line(
    inputs: Sequence[str],
    output: str,
    *,
    ranks: Optional[str] = None,
    cycle: Optional[str] = None,
    steps: Optional[str] = None,
) -> str:
    """The ``tracefuse report`` command that makes this page (for the page's header)."""
    parts = ["tracefuse", "report", *map(str, inputs)]
    for flag, v in (("--ranks", ranks), ("--cycle", cycle), ("--steps", steps)):
        if v is not None:
            parts += [flag, str(v)]
    return shlex.join(parts + ["-o", output])


def report_data(
    inputs: InputSpec,
    *,
    rank_from: str = "auto",
    ranks: Optional[Sequence[int]] = None,
    cycle: Any = None,
    steps: Optional[Tuple[int, int]] = None,
    jobs: int = 0,
    command: str = "",
) -> ReportData:
    """Plan and read ``inputs`` as ``info --collectives`` does (one pass per file, in
    ``jobs`` workers) and return the page's data (see the module docstring)."""
    scans: List[Any] = []
    plans, _rows, _out, _text = collect_info(
        inputs, rank_from=rank_from, ranks=ranks, jobs=jobs, sections=["collectives"], scans_out=scans
    )
    by_cycle: Dict[Optional[int], List[Tuple[RankPlan, Any]]] = {}
    for p, sc in zip(plans, scans):
        by_cycle.setdefault(p.cycle, []).append((p, sc))
    chosen = _choose_cycle(list(by_cycle), cycle)
    pairs = by_cycle.get(chosen, [])
    ps = [p for p, _ in pairs]
    table = table_from_scans(ps, [sc for _, sc in pairs])
    if steps is not None:
        table = only_steps(table, *steps)
    analysis = analyse(table, ps, jobs)  # the judgement and the why, as info --collectives
    collectives = to_json(analysis)["collectives"]
    several = len(by_cycle) > 1
    listed = [str(x) for x in inputs] if not isinstance(inputs, dict) else [str(v) for v in inputs.values()]
    merge = merge_command(analysis.verdict, listed, chosen if several else None)
    page: Dict[str, Any] = {
        "tool": f"tracefuse-stream {__version__}",
        "command": command,
        "inputs": listed,
        "files": len(ps),
        "hosts": {str(p.rank): p.host_name for p in ps},
        "cycle": chosen,
        "cycles": sorted(c for c in by_cycle if c is not None),
        "steps": list(steps) if steps is not None else None,
        "merge_command": merge,
        "broken": [{"path": str(path), "broken": str(why)} for path, why in plans.broken],
        "warnings": list(plans.warnings()),
    }
    return ReportData({"collectives": collectives, "page": page}, list(ps), list(plans.broken))


__all__ = ["ReportData", "command_line", "only_steps", "report_data"]
