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

import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from tracefuse_stream._version import __version__
from tracefuse_stream.align.instance_ends import MAX_CLOCK_OFFSET_S
from tracefuse_stream.analyze.assessment import not_assessed
from tracefuse_stream.analyze.name_cap import NAME_CAP
from tracefuse_stream.analyze.step_cap import capped, only_steps
from tracefuse_stream.errors import UsageError
from tracefuse_stream.listing import inline
from tracefuse_stream.plan.cycles import choose_cycle, parse_cycle
from tracefuse_stream.plan.planner import InputSpec, PlanList
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.plan.runcheck import RunCheck, merge_inputs, require_one_run
from tracefuse_stream.report.collectives import analyse, merge_command, table_from_scans, to_json
from tracefuse_stream.report.info import collect_info
from tracefuse_stream.report.json_stream import LazyArray
from tracefuse_stream.report.page import pack_array
from tracefuse_stream.select.window import steps_not_found


@dataclass
class ReportData:
    """The page's data: ``document`` is what the page embeds (``{"collectives", "page"}``)."""

    document: Dict[str, Any]
    plans: List[RankPlan] = field(default_factory=list)
    broken: List[Tuple[str, str]] = field(default_factory=list)
    #: ``keep_pass=True``: the pass itself (every cycle's plans and scans), for
    #: ``report --against``'s diff to use instead of reading the run again; drop it
    #: (``None``) once used, the scans hold the run's timelines
    read: Optional[Tuple[PlanList, List[Any]]] = None

    @property
    def input_paths(self) -> List[str]:
        """Every file read (the output must never be one of them)."""
        return [str(p.path) for p in self.plans] + [str(path) for path, _ in self.broken]


def choose_shown_cycle(plans: PlanList, choice: Any, where: str) -> Optional[int]:
    """The cycle to show: ``choice`` (N or ``latest``; default: the latest, which is the
    one ``info --collectives --json`` puts under ``collectives``), as ``p.cycle`` numbers
    it (None: the inputs hold one). A cycle that is not there is the error ``merge``
    gives (plan/cycles.py ``choose_cycle``: the cycles, listed)."""
    c = parse_cycle(choice)
    if c == "all":
        raise UsageError("report shows one profiling cycle: --cycle N or latest (not all)")
    cycles = plans.cycles
    if not cycles:
        return None
    chosen = choose_cycle(cycles, "latest" if c is None else c, where)
    return chosen.index if len(cycles) > 1 else None


def check_steps(present: Set[int], steps: Tuple[int, int], where: str) -> None:
    """``--steps A:B`` must name steps the ranks recorded (``present``, every one of them:
    not only those the step cap kept), both ends, as ``merge`` asks."""
    missing = [s for s in dict.fromkeys(steps) if s not in present]
    if missing:
        raise steps_not_found(missing, where, present)


def select_cycle(checks: Sequence[RunCheck], chosen: Optional[int]) -> List[RunCheck]:
    return [rc for rc in checks if rc.cycle == chosen]


def command_line(
    inputs: Sequence[str],
    output: str,
    *,
    ranks: Optional[str] = None,
    cycle: Optional[str] = None,
    steps: Optional[str] = None,
    against: Optional[Sequence[str]] = None,
) -> str:
    """The ``tracefuse report`` command that makes this page (for the page's header)."""
    parts = ["tracefuse", "report", *map(str, inputs)]
    for flag, v in (("--ranks", ranks), ("--cycle", cycle), ("--steps", steps)):
        if v is not None:
            parts += [flag, str(v)]
    if against:
        parts += ["--against", *map(str, against)]
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
    keep_pass: bool = False,
    name_cap: int = NAME_CAP,
    max_clock_offset_s: float = MAX_CLOCK_OFFSET_S,
    max_steps: Optional[int] = None,
) -> ReportData:
    """Plan and read ``inputs`` as ``info --collectives`` does (one pass per file, in
    ``jobs`` workers) and return the page's data (see the module docstring);
    ``keep_pass``: with the pass's plans and scans (``ReportData.read``); ``name_cap``:
    the why's names kept per rank and step (analyze/name_cap.py); ``max_clock_offset_s``:
    host clocks further apart are refused (analyze/analysis.py require_near_clocks);
    ``max_steps``: the steps kept per rank (None: automatic, analyze/step_cap.py)."""
    scans: List[Any] = []
    plans, _rows, _out, _text = collect_info(
        inputs,
        rank_from=rank_from,
        ranks=ranks,
        jobs=jobs,
        sections=["collectives"],
        scans_out=scans,
        name_cap=name_cap,
        max_steps=max_steps,
        step_window=steps,
    )
    by_cycle: Dict[Optional[int], List[Tuple[RankPlan, Any]]] = {}
    for p, sc in zip(plans, scans):
        by_cycle.setdefault(p.cycle, []).append((p, sc))
    listed = [str(x) for x in inputs] if not isinstance(inputs, dict) else [str(v) for v in inputs.values()]
    where = inline(listed, limit=3)
    chosen = choose_shown_cycle(plans, cycle, where)
    checks = select_cycle(plans.run_checks(), chosen)
    require_one_run(checks, "the report")  # mixed runs, one recording under several ranks: a wrong page
    pairs = by_cycle.get(chosen, [])
    ps = [p for p, _ in pairs]
    table = table_from_scans(ps, [sc for _, sc in pairs], max_clock_offset_s)
    if steps is not None:
        where_c = f"in {where}" + (f" (cycle {chosen})" if chosen is not None else "")
        check_steps(plans.cycle_steps.get(chosen, set()), steps, where_c)
    table = capped(table, plans.step_caps.get(chosen), steps)  # the step cap, else --steps
    analysis = analyse(table, ps, jobs)  # the judgement and the why, as info --collectives
    collectives = to_json(analysis, stream=True)["collectives"]
    for k, v in collectives.items():  # every rank and step's breakdown and step_time stay lazy
        if isinstance(v, LazyArray) and k not in ("breakdown", "step_time"):  # (the page packs them);
            collectives[k] = pack_array(v)  # the rest (instances, by_step, step_skew) packed now: as
            # dicts of every rank they were ~40% of the page's document (issue 38)
    collectives["warnings"] = plans.warnings()
    collectives["not_assessed"] = not_assessed(table, checks)
    several = len(by_cycle) > 1
    merge = merge_command(analysis.verdict, merge_inputs(plans, listed), chosen if several else None)
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
        "not_assessed": collectives["not_assessed"],
    }
    read = (plans, scans) if keep_pass else None
    return ReportData({"collectives": collectives, "page": page}, list(ps), list(plans.broken), read)


__all__ = ["ReportData", "command_line", "only_steps", "report_data"]
