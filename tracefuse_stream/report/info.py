"""``info``: what each input holds, streamed, without writing anything.

Per rank: file, rank (and where it came from), world size, host, bytes, events,
base time and the absolute time span (first ts to last ts+dur). The span makes
clock and base problems visible before a merge ("rank 5 starts 91 days later").

``info`` is the tool to look at a directory that does not merge: it lists every
profiling cycle (where ``merge`` asks which one), names the skipped files, and a
file it cannot read gets a ``BROKEN`` line with the error while the table of the
readable ones is still printed (the exit code is then 1).

Speed over checking: the pass reads each event's top level (its keys, strings and
numbers; ``ts`` and ``dur`` exactly) and only delimits what is nested (``args``, the
compiled kernel's walk, read/scan.py): a file cut short, damaged compression, an
event that is not an object or does not end are ``BROKEN``; invalid JSON inside an
event's ``args`` is not looked for here (``merge`` rejects it, naming the position).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.analyze.kernel_categories import CategorySpec
from tracefuse_stream.analyze.name_cap import NAME_CAP
from tracefuse_stream.analyze.onepass import broken_text, scan_files
from tracefuse_stream.analyze.step_cap import Window, cycle_cap, steps_limit
from tracefuse_stream.errors import UsageError
from tracefuse_stream.plan.cycles import describe_cycles
from tracefuse_stream.plan.extent import RankInfo
from tracefuse_stream.plan.planner import InputSpec, PlanList, plan_all
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.plan.starts import earliest_ns
from tracefuse_stream.rankset import parse_rank_spec
from tracefuse_stream.textout import printable
from tracefuse_stream.timeunits import iso_utc


def format_info(rows: List[RankInfo], broken: Sequence[Tuple[str, str]] = ()) -> str:
    """A readable per-rank table (a ``cycle`` column when there are several); files
    that could not be read get one ``BROKEN`` line each, after the table."""
    cyc = any(r.cycle is not None for r in rows)
    lines = [
        ("cycle " if cyc else "")
        + f"{'rank':>5} {'from':<15} {'world':>5} {'host':<12} {'MB':>9} {'events':>11} "
        f"{'base time (ns)':>20} {'first event (UTC)':<28} {'span ms':>10}  file"
    ]
    for r in rows:
        span = "-" if r.span_ms is None else f"{r.span_ms:,.3f}"
        lines.append(
            (f"{r.cycle:>5} " if cyc else "")
            + f"{r.rank:>5} {r.rank_from:<15} {r.world_size if r.world_size is not None else '-':>5} "
            f"{printable(r.host_name or '-')[:12]:<12} {r.bytes / 1e6:>9.2f} {r.events:>11,} "
            f"{r.base_time_ns if r.base_time_ns is not None else '(none: epoch ts)':>20} "
            f"{iso_utc(r.first_ns):<28} {span:>10}  {printable(r.path)}"
        )
    if rows:
        firsts = [r.first_ns for r in rows if r.first_ns is not None]
        if len(firsts) > 1:
            what = "files start" if cyc else "ranks start"
            lines.append(f"{what} within {(max(firsts) - min(firsts)) / 1e6:,.3f} ms of each other")
    for path, err in broken:
        lines.append(f"BROKEN {printable(path)}: {printable(err)}")
    return "\n".join(lines)


def collect_info(
    inputs: InputSpec,
    *,
    rank_from: str = "auto",
    ranks: Optional[Sequence[int]] = None,
    jobs: int = 1,
    sections: Sequence[str] = (),
    scans_out: Optional[List[Any]] = None,
    kernel_categories: Optional[CategorySpec] = None,
    name_cap: int = NAME_CAP,
    max_steps: Optional[int] = None,
    step_window: Window = None,
) -> Tuple[PlanList, List[RankInfo], Dict[str, Any], List[str]]:
    """Plan and scan every readable input, every cycle: ``(plans, rows, json, text)``.

    Broken files land in ``plans.broken`` (and as ``{"path", "broken"}`` entries in the
    JSON list) instead of stopping; the caller decides the exit code from them.
    ``sections`` ("steps", "collectives", "align"): the same single pass per file also
    keeps what those need (analyze/onepass.py), appended to ``scans_out`` in the order of
    the readable plans; ``jobs`` > 1: files are scanned in worker processes;
    ``kernel_categories``: the step-time figures' category rules (None: built-in);
    ``name_cap``: the why's names kept per rank and step (analyze/name_cap.py); with
    ``collectives``, the steps kept per rank are capped (analyze/step_cap.py: ``max_steps``,
    None: automatic; ``step_window``: the user's ``--steps``), each cycle's cap in
    ``plans.step_caps`` when it applied, its recorded step numbers in ``plans.cycle_steps``.
    """
    plans = plan_all(inputs, rank_from=rank_from, ranks=ranks, every_cycle=True, keep_going=True)
    plans.broken[:] = [(path, broken_text(e)) for path, e in plans.broken]
    rows: List[RankInfo] = []
    good: List[RankPlan] = []
    plans.steps = {}  # the steps each rank recorded: the run check's
    files, limit = len(plans), steps_limit(len(plans), max_steps)
    step_cap = (limit, step_window) if "collectives" in sections else None
    for p, fs in zip(plans, scan_files(list(plans), jobs, sections, kernel_categories, name_cap, step_cap)):
        if fs.broken is not None:
            plans.broken.append((p.path, fs.broken))
            continue
        assert fs.info is not None
        rows.append(fs.info)
        good.append(p)
        plans.steps.setdefault(p.rank, set()).update(fs.steps)
        plans.cycle_steps.setdefault(p.cycle, set()).update(fs.steps)
        if scans_out is not None:
            scans_out.append(fs.scan)
    plans[:] = good
    if step_cap is not None:
        caps = {
            c: cycle_cap(n, limit, files, max_steps is not None, step_window)
            for c, n in plans.cycle_steps.items()
        }
        plans.step_caps = {c: cap for c, cap in caps.items() if cap is not None}
    plans.extents = {r.path: (r.first_ns, r.last_ns, r.events) for r in rows}  # the run check's
    text = []
    known = {r.path: r.first_ns for r in rows}  # each file's earliest event: the cycles' starts
    for c in plans.cycles:
        c.start_ns = earliest_ns(c.plans, known)
    if len(plans.cycles) > 1:
        text.append(
            f"{len(plans.cycles)} profiling cycles (the cycle column; merge needs --cycle N|latest|all):"
        )
        text.extend(describe_cycles(plans.cycles, known=known))
    text.append(format_info(rows, plans.broken))
    text.extend(f"warning: {w}" for w in plans.warnings())
    text.extend(f"note: {n}" for n in plans.input_notes(limit=None))
    listing: List[Dict[str, Any]] = [r.to_dict() for r in rows]
    listing += [{"path": path, "broken": err} for path, err in plans.broken]
    out: Dict[str, Any] = dict.fromkeys(INFO_JSON_KEYS)  # one shape whatever the flags
    out["ranks"] = listing
    out["cycles"] = [c.to_dict() for c in plans.cycles]
    out["warnings"] = plans.warnings()
    return plans, rows, out, text


#: ``info --json`` prints one object with exactly these keys, whatever the flags:
#: ``ranks`` (one entry per file: its facts, or ``{"path", "broken"}``), ``cycles`` (every
#: profiling cycle, one for a single run), and the optional sections, ``null`` unless
#: asked for: ``steps`` (--steps: rank -> ProfilerStep numbers), ``align`` (--align:
#: rank -> estimated clock offset), ``collectives`` (--collectives: the latest cycle's
#: table) and ``collectives_by_cycle`` (--collectives with several cycles: cycle -> table);
#: ``warnings``: the input warnings every command prints (plan/planner.py PlanList.warnings).
INFO_JSON_KEYS = ("ranks", "cycles", "steps", "align", "collectives", "collectives_by_cycle", "warnings")


def input_list(inputs: Any) -> List[str]:
    """The API's ``inputs`` (``stragglers()``, ``diff()``): one path (``str`` or
    ``os.PathLike``: a ``pathlib.Path`` is one run, not an iterable) or an iterable of
    them, as strings; anything else a :class:`UsageError` saying what is expected (was
    Python's TypeError: the API raises only the package's errors)."""
    if isinstance(inputs, (str, os.PathLike)):
        return [os.fspath(inputs)]
    try:
        items = list(inputs)
    except TypeError:
        raise UsageError(f"inputs: a path or a list of paths, not {type(inputs).__name__}") from None
    bad = [x for x in items if not isinstance(x, (str, os.PathLike))]
    if bad:
        raise UsageError(f"inputs: a path or a list of paths, not {type(bad[0]).__name__} {bad[0]!r}")
    return [os.fspath(x) for x in items]


def rank_list_arg(ranks: Any) -> Optional[List[int]]:
    """The API's ``ranks``: ``None``, a spec (``"0-3"``) or rank numbers; anything else
    a :class:`UsageError`."""
    if ranks is None:
        return None
    if isinstance(ranks, str):
        return parse_rank_spec(ranks)
    try:
        items = list(ranks)
    except TypeError:
        raise UsageError(
            f"ranks: a spec like '0-3' or a list of rank numbers, not {type(ranks).__name__}"
        ) from None
    bad = [r for r in items if type(r) is not int]
    if bad:
        raise UsageError(f"ranks: rank numbers (int), not {type(bad[0]).__name__} {bad[0]!r}")
    return items
