"""The run check: do the inputs hold one run, all of it, once?

Why: a folder can hold rank 0 of one job and ranks 1-7 of another (a re-run written into
the same folder, hours later), only some of the world's ranks (a copy that stopped
early), or one rank's trace copied with its rank number edited. Merged or analysed as
they are, each gives an answer that looks right and is not: a collective "matched"
across two runs 18 hours apart, a straggler verdict without the two ranks that were
not there, "no rank stands out" among four copies of one rank. Every command
(``merge``, ``info`` and its sections, ``report``, ``stragglers()``) prints the same
warnings, from here, through :meth:`~tracefuse_stream.plan.planner.PlanList.warnings`;
the collectives analysis, whose answer would be wrong, refuses mixed runs and edited
copies (:func:`require_one_run`).

The rules, per profiling cycle:

* **mixed runs**: the ranks' first events (planning's, which every command has), in
  order; a rank whose first event comes more than ``max(MIXED_GAP_NS, the longest
  rank's recording)`` after the previous rank's starts another run (the recordings'
  lengths are known when a pass has read the files: ``info``, ``report``,
  ``stragglers()``; a merge uses ``MIXED_GAP_NS``). One job's ranks record the same
  steps (the profiler's schedule counts the steps they share), so they start within a
  step of each other; ten minutes is longer than any step we have seen profiled, and
  much shorter than the time between two runs written into one folder. When a pass has
  read the files, also the ranks of one host (one clock) of a distributed job
  (``world_size`` above 1) whose recordings do not overlap at all: one job's ranks record
  the same steps, together, so two runs minutes or seconds apart show here.
* **missing ranks**: ``distributedInfo.world_size`` (the most common value) against the
  ranks present, and the members of every process group in ``pg_config`` that have no
  file. Not checked when ``--ranks`` chose the ranks (the user left the others out).
* **edited copies**: two files of different ranks whose first event is at the same
  instant, to the nanosecond (separate processes never start at the same nanosecond),
  and -- when a pass has read them -- with the same event count and the same last event.
  Traces whose times are whole microseconds (older Kineto) can share a first event by
  chance: there the count and the last event must be known and equal.
* **steps with no overlap** (every command that read the steps: ``info``, ``merge``
  from the events it wrote, the analyses; an error in the analyses, a warning in
  ``info`` and ``merge``): ranks whose ``ProfilerStep`` numbers share none with the
  others' recorded different steps, or different runs.

A merge reads only each file's first events before it writes; the rules that need a
pass (recordings that do not overlap, steps) are applied to what it wrote, after
writing (:func:`written_findings`), so its warnings are the same lines as ``info``'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from tracefuse_stream.errors import UsageError
from tracefuse_stream.listing import bounded, inline
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.plan.starts import earliest_ns
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.textout import printable
from tracefuse_stream.timeunits import iso_utc

#: the smallest gap between two ranks' recordings that makes them two runs (see above)
MIXED_GAP_NS = 10 * 60 * 10**9

#: path -> (first event ns, last event ns, events), from a pass over the file
Extents = Mapping[str, Tuple[Optional[int], Optional[int], int]]


@dataclass
class RunCheck:
    """What the run check found in one set of plans (one profiling cycle)."""

    runs: List[List[RankPlan]] = field(default_factory=list)  # more than one: mixed runs
    gap_ns: int = 0  # the largest gap between two runs
    one_host: Optional[str] = None  # the runs are told apart by recordings that do not overlap on this host
    world_size: Optional[int] = None
    missing: List[int] = field(default_factory=list)  # ranks of the world without a file
    group_missing: Dict[str, List[int]] = field(default_factory=dict)  # pg name -> members without a file
    edited: List[List[RankPlan]] = field(default_factory=list)  # files of one recording, ranks edited
    step_runs: List[List[Tuple[int, Set[int]]]] = field(default_factory=list)  # (rank, steps) per group
    cycle: Optional[int] = None
    ranks: List[int] = field(default_factory=list)  # the ranks checked
    firsts: Optional[Dict[str, Optional[int]]] = None  # path -> earliest event, when a pass found it
    plans: List[RankPlan] = field(default_factory=list)  # the plans checked (messages name their files)
    selected: bool = False  # --ranks chose the ranks: the others are left out on purpose

    def _where(self) -> str:
        return f"cycle {self.cycle}: " if self.cycle is not None else ""

    def mixed_text(self, steps: bool = False) -> Optional[str]:
        """The mixed-run finding in one line (files named), or None; ``steps``: also from
        the step numbers (only the analyses read them: not among the warnings, which
        every command prints alike)."""
        if len(self.runs) > 1:
            parts = [
                f"{_rank_label(run)} from {iso_utc(earliest_ns(run, self.firsts))} ({_files(run)})"
                for run in self.runs
            ]
            why = (
                f"their first events are {_duration(self.gap_ns)} apart (one job's ranks start within a step of each other)"
                if self.one_host is None
                else f"their recordings on host {printable(self.one_host)} (one clock) do not overlap, "
                f"{_duration(self.gap_ns)} apart (one job's ranks record the same steps together)"
            )
            return f"{self._where()}the inputs hold {len(self.runs)} runs: {'; '.join(parts)}: {why}"
        if steps and len(self.step_runs) > 1:
            plans = {p.rank: p for p in self.plans}
            parts = [
                f"rank{'s' if len(g) > 1 else ''} {compress_ranges(sorted(r for r, _ in g))} "
                f"({_files([plans[r] for r, _ in g if r in plans])}) "
                f"recorded steps {compress_ranges(sorted(set().union(*(s for _, s in g))))}"
                for g in self.step_runs
            ]
            return f"{self._where()}the ranks recorded different steps, none in common: {'; '.join(parts)}; one run?"
        return None

    def warnings(self) -> List[str]:
        out = []
        mixed = self.mixed_text(steps=True)
        if mixed is not None:
            out.append(mixed)
        if self.missing:
            n = self.world_size or 0
            out.append(
                f"{self._where()}{len(self.missing)} of the world's {n} ranks have no file: rank(s) "
                f"{compress_ranges(self.missing)} (distributedInfo.world_size {n}, {n - len(self.missing)} "
                "present); what they did is not in any answer"
            )
        for pg, members in sorted(self.group_missing.items()):
            out.append(
                f"{self._where()}process group {pg} names rank(s) {compress_ranges(members)} "
                "(distributedInfo.pg_config), which have no file"
            )
        out += [self.edited_text(group) for group in self.edited]
        return out

    def edited_text(self, group: Sequence[RankPlan]) -> str:
        files = ", ".join(f"rank {p.rank} {printable(p.path)}" for p in group)
        return (
            f"{self._where()}one recording under {len(group)} ranks (rank numbers edited?): {files} start at "
            f"the same nanosecond ({iso_utc(group[0].start_ns)}) with the same events; two processes never do"
        )


def _rank_label(plans: Sequence[RankPlan]) -> str:
    rs = sorted(p.rank for p in plans)
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {compress_ranges(rs)}"


def _files(plans: Sequence[RankPlan]) -> str:
    return inline([p.path for p in sorted(plans, key=lambda p: p.rank)], limit=2)


def _duration(ns: int) -> str:
    if ns >= 3600 * 10**9:
        return f"{ns / 3600e9:,.1f} h"
    if ns >= 60 * 10**9:
        return f"{ns / 60e9:,.1f} min"
    return f"{ns / 1e9:,.1f} s"


def _runs(plans: Sequence[RankPlan], extents: Optional[Extents]) -> Tuple[List[List[RankPlan]], int]:
    timed = sorted(((p.start_ns, p.rank, p) for p in plans if p.start_ns is not None and not p.empty),
                   key=lambda t: t[:2])  # fmt: skip
    if len(timed) < 2 or timed[-1][0] - timed[0][0] <= MIXED_GAP_NS:
        return [], 0
    # the estimate (first event in file order) says far apart: judge by the earliest events,
    # the starts the finding prints (plan/starts.far_apart_warning does the same)
    firsts = None if extents is None else {k: v[0] for k, v in extents.items()}
    earliest = [(earliest_ns([p], firsts), r, p) for _, r, p in timed]
    timed = sorted(((ns, r, p) for ns, r, p in earliest if ns is not None), key=lambda t: t[:2])
    if len(timed) < 2 or timed[-1][0] - timed[0][0] <= MIXED_GAP_NS:
        return [], 0
    spans = [e[1] - e[0] for e in (extents or {}).values() if e[0] is not None and e[1] is not None]
    limit = max([MIXED_GAP_NS] + spans)
    runs: List[List[RankPlan]] = [[timed[0][2]]]
    gap = 0
    for (prev, _, _), (start, _, p) in zip(timed, timed[1:]):
        if start - prev > limit:
            gap = max(gap, start - prev)
            runs.append([])
        runs[-1].append(p)
    return (runs, gap) if len(runs) > 1 else ([], 0)


def _disjoint(
    plans: Sequence[RankPlan], extents: Optional[Extents]
) -> Tuple[List[List[RankPlan]], int, Optional[str]]:
    """(runs, gap, host): the ranks of one host, of a distributed job, in groups whose
    recordings (first to last event, from a pass) do not overlap; ([], 0, None) if none."""
    by_host: Dict[str, List[Tuple[int, int, int, RankPlan]]] = {}
    for p in plans:
        e = (extents or {}).get(p.path)
        if p.host_name and (p.world_size or 0) > 1 and e and e[0] is not None and e[1] is not None:
            by_host.setdefault(p.host_name, []).append((e[0], e[1], p.rank, p))
    for host, spans in sorted(by_host.items()):
        spans.sort(key=lambda t: t[:3])
        runs, end, gap = [[spans[0][3]]], spans[0][1], 0
        for first, last, _, p in spans[1:]:
            if first > end:
                gap = max(gap, first - end)
                runs.append([])
            runs[-1].append(p)
            end = max(end, last)
        if len(runs) > 1:
            return runs, gap, host
    return [], 0, None


def _world(plans: Sequence[RankPlan]) -> Optional[int]:
    sizes: Dict[int, int] = {}
    for p in plans:
        if p.world_size is not None and p.world_size > 0:
            sizes[p.world_size] = sizes.get(p.world_size, 0) + 1
    return max(sizes, key=lambda k: (sizes[k], k)) if sizes else None


def _pg_members(header: Mapping[str, Any]) -> Dict[str, Set[int]]:
    di = header.get("distributedInfo")
    cfg = di.get("pg_config") if isinstance(di, dict) else None
    out: Dict[str, Set[int]] = {}
    for pg in cfg if isinstance(cfg, list) else []:
        if not isinstance(pg, dict) or pg.get("pg_name") is None or not isinstance(pg.get("ranks"), list):
            continue
        members = {r for r in pg["ranks"] if type(r) is int and r >= 0}
        out.setdefault(str(pg["pg_name"]), set()).update(members)
    return out


def _edited(plans: Sequence[RankPlan], extents: Optional[Extents]) -> List[List[RankPlan]]:
    by_start: Dict[int, List[RankPlan]] = {}
    for p in plans:
        if p.start_ns is not None and not p.empty:
            by_start.setdefault(p.start_ns, []).append(p)
    out = []
    for start, group in sorted(by_start.items()):
        if len({p.rank for p in group}) < 2:
            continue
        known = extents is not None and all(p.path in extents for p in group)
        if known:
            assert extents is not None
            same: Dict[Any, List[RankPlan]] = {}
            for p in group:
                same.setdefault(tuple(extents[p.path][1:]), []).append(p)
            out += [sorted(g, key=lambda p: p.rank) for g in same.values() if len({p.rank for p in g}) > 1]
        elif start % 1000:  # nanosecond times: no two processes share one (module docstring)
            out.append(sorted(group, key=lambda p: p.rank))
    return out


def _step_runs(steps: Mapping[int, Set[int]]) -> List[List[Tuple[int, Set[int]]]]:
    """Ranks grouped by shared step numbers (a rank with none joins nobody)."""
    groups: List[List[Tuple[int, Set[int]]]] = []
    for r, s in sorted(steps.items()):
        if not s:
            continue
        hit = [g for g in groups if any(s & t for _, t in g)]
        merged = [(r, s)] + [x for g in hit for x in g]
        groups = [g for g in groups if g not in hit] + [merged]
    return groups if len(groups) > 1 else []


def check_run(
    plans: Sequence[RankPlan],
    extents: Optional[Extents] = None,
    *,
    selected: bool = False,
    steps: Optional[Mapping[int, Set[int]]] = None,
    cycle: Optional[int] = None,
) -> RunCheck:
    """The run check of one profiling cycle's ``plans`` (module docstring). ``extents``:
    what a pass over the files found; ``selected``: ``--ranks`` chose the ranks (no
    missing-rank check); ``steps``: rank -> its ProfilerStep numbers, when read."""
    rc = RunCheck(cycle=cycle, ranks=sorted(p.rank for p in plans), plans=list(plans), selected=selected)
    rc.firsts = None if extents is None else {k: v[0] for k, v in extents.items()}
    rc.runs, rc.gap_ns = _runs(plans, extents)
    if not rc.runs:
        rc.runs, rc.gap_ns, rc.one_host = _disjoint(plans, extents)
    present = {p.rank for p in plans}
    if not selected and all(p.rank_source in ("distributedInfo", "explicit") for p in plans):
        rc.world_size = _world(plans)
        if rc.world_size is not None and len(plans) < rc.world_size:
            rc.missing = sorted(set(range(rc.world_size)) - present)
        told = set(rc.missing)
        for p in plans:
            for pg, members in _pg_members(p.header).items():
                lost = sorted(members - present - told)
                if lost:
                    rc.group_missing.setdefault(pg, [])
                    rc.group_missing[pg] = sorted(set(rc.group_missing[pg]) | set(lost))
    rc.edited = _edited(plans, extents)
    if steps is not None:
        rc.step_runs = _step_runs(steps)
    return rc


def by_cycle(plans: Sequence[RankPlan]) -> Dict[Optional[int], List[RankPlan]]:
    out: Dict[Optional[int], List[RankPlan]] = {}
    for p in plans:
        out.setdefault(p.cycle, []).append(p)
    return out


def check_runs(
    plans: Sequence[RankPlan],
    extents: Optional[Extents] = None,
    *,
    selected: bool = False,
    steps: Optional[Mapping[int, Set[int]]] = None,
) -> List[RunCheck]:
    """:func:`check_run` for every profiling cycle of ``plans``."""
    cycles = by_cycle(plans)
    several = len(cycles) > 1
    return [
        check_run(
            ps, extents, selected=selected, steps=steps if not several else None, cycle=c if several else None
        )
        for c, ps in sorted(cycles.items(), key=lambda kv: kv[0] or 0)
    ]


def written_findings(
    plans: Sequence[RankPlan],
    extents: Extents,
    steps: Mapping[int, Set[int]],
    *,
    selected: bool = False,
) -> List[str]:
    """What only a pass over the files finds, for a merge, whose planning read only each
    file's start: recordings of one host that do not overlap (two runs seconds or
    minutes apart) and steps with none in common -- from ``extents`` and ``steps``, the
    events the merge wrote. Lines of the run check (every command's words); none for a
    cycle whose mixed runs planning already named."""
    out: List[str] = []
    before = check_runs(plans, selected=selected)
    after = check_runs(plans, extents, selected=selected, steps=steps)
    for rc_before, rc in zip(before, after):
        mixed = rc.mixed_text(steps=True)
        if not rc_before.runs and mixed is not None:
            out.append(mixed)
    return out


def require_one_run(checks: Sequence[RunCheck], what: str = "the collectives analysis") -> None:
    """Refuse (a usage error naming the files and the choices) what would give a wrong
    answer: mixed runs, and one recording under several ranks."""
    problems: List[str] = []
    choices: List[str] = []
    for rc in checks:
        mixed = rc.mixed_text(steps=True)
        if mixed is not None:
            problems.append(mixed)
            if rc.runs:
                keep = max(rc.runs, key=len)
                choices.append(f"--ranks {compress_ranges(sorted(p.rank for p in keep))} (one run's ranks)")
                folders = {os.path.dirname(os.path.abspath(p.path)) for run in rc.runs for p in run}
                choices.append(
                    "one run per folder (move the other run's files out)"
                    if len(folders) == 1
                    else "one run's files by path"
                )
            elif rc.step_runs:
                keep_ranks = max((sorted(r for r, _ in g) for g in rc.step_runs), key=len)
                choices.append(f"--ranks {compress_ranges(keep_ranks)} (the ranks of one run)")
        for group in rc.edited:
            problems.append(rc.edited_text(group))
            rest = sorted(set(rc.ranks) - {p.rank for p in group[1:]})
            choices.append(f"--ranks {compress_ranges(rest)} (one of the copies), or the real rank files")
    if not problems:
        return
    lines = [f"{what} needs one run, each rank once:"] + bounded(problems, limit=6)
    lines.append("choose: " + ", or ".join(dict.fromkeys(choices)))
    raise UsageError("\n".join(lines))


def merge_inputs(plans: Sequence[RankPlan], inputs: Sequence[Any]) -> List[str]:
    """The inputs a suggested ``merge`` command names: as the user gave them, or -- when
    files were left out (one trace given twice, which ``merge`` refuses) or are broken
    (``merge`` stops at the first) -- the files read, by path: the command runs."""
    if getattr(plans, "left_out", None) or getattr(plans, "broken", None):
        return [p.path for p in sorted(plans, key=lambda p: p.position)]
    return [str(i) for i in inputs]


__all__ = [
    "MIXED_GAP_NS",
    "RunCheck",
    "by_cycle",
    "check_run",
    "check_runs",
    "merge_inputs",
    "require_one_run",
    "written_findings",
]
