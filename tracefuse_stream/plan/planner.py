"""The planning pass: per-rank facts needed before any event is streamed.

For each input file this reads only the top-level keys *before* ``traceEvents``
(ijson, stopping at the event array) and, when the rank or the base time is not
among them, the keys *after* it (from the file's tail, see ``trailer``). From that
it decides the rank of every file, the common output base
``B = min(baseTimeNanoseconds)`` and each rank's exact time shift in nanoseconds.
Nothing here holds events; the cost is a header parse per file plus, for the older
"base after events" layout, one decompression of the file.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from tracefuse_stream.errors import ErrorKind, InputError, TraceFuseError, UsageError
from tracefuse_stream.listing import bounded, inline
from tracefuse_stream.plan.copies import copies_text, find_copies
from tracefuse_stream.plan.cycles import (
    Cycle,
    CycleChoice,
    choose_cycle,
    group_cycles,
    parse_cycle,
    two_runs,
)
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.plan.ranks import assign_ranks, identity, rank_source_note
from tracefuse_stream.plan.runcheck import Extents, RunCheck, check_runs
from tracefuse_stream.plan.starts import empty_rank_note, far_apart_warning, peek_first_ts, set_start
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.read.discover import OWN_OUTPUT_PROBLEM, Discovery, discover, is_own_output
from tracefuse_stream.read.head import Head
from tracefuse_stream.read.salvage import Framer, SalvageReport, tolerant_chunks
from tracefuse_stream.read.sources import TraceReader, detect_compression, input_size
from tracefuse_stream.read.toplevel import (  # noqa: F401  (re-exported: stream, tests)
    TAIL_WINDOW,
    TAIL_WINDOWS,
    read_header,
    read_tail,
    trailer_of_file,
)
from tracefuse_stream.textout import printable

PathLike = Union[str, "os.PathLike[str]"]


def _coerce_base(path: str, value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool):
        raise InputError(path, f"baseTimeNanoseconds is not an integer: {value!r}", kind=ErrorKind.BAD_VALUE)
    if isinstance(value, int):
        return value
    if isinstance(value, (float, Decimal)) and value == int(value):
        return int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    raise InputError(path, f"baseTimeNanoseconds is not an integer: {value!r}", kind=ErrorKind.BAD_VALUE)


def complete_trailer(plan: RankPlan, trailer: Optional[Dict[str, Any]]) -> None:
    """Merge the keys found after ``traceEvents`` into the plan's header."""
    if trailer is None:
        return
    for k, v in trailer.items():
        plan.header.setdefault(k, v)
    plan.trailer_known = True


def plan_file(
    path: PathLike, position: int, *, salvage: bool = False, head: Optional[Head] = None
) -> RankPlan:
    """Header pass for one file (and the tail when its base or rank is not in the header).

    With ``salvage``, a file that fails strict planning is planned by the salvage
    reader instead (one extra pass over that file only). ``head``: what discovery
    read of the file's start (read/head.py); its header is used when it is complete.
    """
    try:
        return _plan_strict(path, position, head)
    except InputError as e:
        if not salvage or not e.salvageable:
            raise
        return _plan_salvage(path, position, e)


def _plan_salvage(path: PathLike, position: int, err: InputError) -> RankPlan:
    report = SalvageReport()
    framer = Framer(tolerant_chunks(str(path), report), report, exact=True, path=str(path))
    first_ts = None
    for ev in framer.events():
        if first_ts is None and isinstance(ev, dict) and ev.get("ph") != "M":
            ts = ev.get("ts")
            if isinstance(ts, (int, float, Decimal)) and not isinstance(ts, bool):
                first_ts = ts
    if framer.layout is None or not framer.saw_events:
        raise InputError(str(path), f"nothing can be salvaged: {err.problem}", offset=err.offset)
    comp = detect_compression(path)
    plan = RankPlan(
        path=str(path),
        position=position,
        compression=comp,
        size_bytes=input_size(path),
        layout=framer.layout,
        header=dict(framer.header),
        trailer_known=True,
        needs_salvage=True,
        first_ts=first_ts,
    )
    plan.strict_error = str(err)
    return plan


def _plan_strict(path: PathLike, position: int, head: Optional[Head] = None) -> RankPlan:
    p = str(path)
    if head is not None and head.ok:
        layout, header, comp = head.layout, dict(head.header), head.compression
    else:
        layout, header, saw_events = read_header(path)
        if not saw_events:
            raise InputError(
                p, "not a trace: the JSON object has no traceEvents key", kind=ErrorKind.NOT_A_TRACE
            )
        reader_comp = TraceReader(path)
        comp = reader_comp.compression
        reader_comp.close()
    plan = RankPlan(
        path=p,
        position=position,
        compression=comp,
        size_bytes=input_size(path),
        layout=layout,
        header=header,
        trailer_known=layout == "array",
    )
    if layout == "object" and ("baseTimeNanoseconds" not in header or "distributedInfo" not in header):
        load_trailer(plan)
    return plan


def load_trailer(plan: RankPlan) -> None:
    """Read the keys after the events from the file's tail (strict: must be complete)."""
    if plan.trailer_known:
        return
    trailer, size = trailer_of_file(plan.path)
    if trailer is None:
        plan.problems.append("truncated")
        raise InputError(
            plan.path,
            "file does not end with a complete trace object (truncated, or damaged at the end)",
            offset=size,
            hint="use --salvage to merge the complete events it has",
            kind=ErrorKind.TRUNCATED,
        )
    complete_trailer(plan, trailer)


def world_size_warnings(plans: Sequence[RankPlan]) -> List[str]:
    """Warn when files disagree on ``distributedInfo.world_size``."""
    sizes: Dict[int, List[str]] = {}
    for p in plans:
        if p.world_size is not None:
            sizes.setdefault(p.world_size, []).append(p.path)
    if len(sizes) <= 1:
        return []
    desc = "; ".join(f"world_size {k} in {len(v)} file(s), e.g. {v[0]}" for k, v in sorted(sizes.items()))
    return [f"inputs disagree on distributedInfo.world_size: {desc}"]


def assign_shifts(plans: Sequence[RankPlan]) -> int:
    """Compute the output base ``B`` and each rank's exact shift ``base_r - B`` in ns.

    A rank without ``baseTimeNanoseconds`` (PyTorch <= 2.3) has absolute epoch
    microsecond timestamps, i.e. base 0.
    """
    for p in plans:
        p.base_time_ns = _coerce_base(p.path, p.header.get("baseTimeNanoseconds"))
    known = [p.base_time_ns for p in plans if p.base_time_ns is not None]
    for p in plans:
        if p.base_time_ns is None and p.needs_salvage and p.first_ts is not None:
            # The base may have been lost with the file's end. Relative Kineto
            # timestamps are below 2**43 us; epoch ones (no base at all) are ~1e15.
            if abs(p.first_ts) < 2**43:
                if known:
                    p.base_time_ns = min(known)
                    p.problems.append(
                        f"baseTimeNanoseconds missing (lost with the truncated end); "
                        f"assumed {p.base_time_ns}, the base of the other ranks"
                    )
                else:
                    p.problems.append(
                        "baseTimeNanoseconds missing and no other rank has one: "
                        "times stay relative to an unknown base"
                    )
    # a rank without base and without a timed event has nothing to place: it must
    # not force B = 0 (epoch) on the others; it gets the common base (shift 0)
    deciding = [p.base_time_ns or 0 for p in plans if p.base_time_ns is not None or not p.empty]
    out_base = min(deciding) if deciding else 0
    for p in plans:
        p.shift_ns = (p.base_time_ns or 0) - out_base  # an empty rank: nothing to shift
        set_start(p)
    return out_base


InputSpec = Union[Sequence[PathLike], Mapping[int, PathLike]]


#: skipped files named one by one in a merge's notes (``info`` names all of them)
SKIPPED_SHOWN = 4


class PlanList(List[RankPlan]):
    """The selected plans, sorted by rank, plus what the summary must say about the
    inputs: files skipped in directories, the cycles found, notes and warnings."""

    def __init__(self, plans: Sequence[RankPlan] = ()) -> None:
        super().__init__(plans)
        self.skipped: List[Tuple[str, str]] = []
        self.cycles: List[Cycle] = []
        self.broken: List[Tuple[str, Any]] = []  # (path, error) when planning keeps going
        self.notes: List[str] = []  # facts worth a line (which cycle was merged)
        self.cautions: List[str] = []  # warnings found while planning (info: two runs?)
        self.selected = False  # --ranks chose the ranks
        self.left_out: List[str] = []  # files left out (info: one trace given twice)
        self.extents: Optional[Extents] = None  # path -> (first, last, events): a pass read them
        self.steps: Optional[Dict[int, Set[int]]] = None  # rank -> its ProfilerSteps, when read
        self.cycle_steps: Dict[Optional[int], Set[int]] = {}  # cycle -> the step numbers its ranks recorded
        self.step_caps: Dict[Optional[int], Any] = {}  # cycle -> its analyze/step_cap.StepCap, if it applied

    def run_checks(self) -> List[RunCheck]:
        """The run check of every profiling cycle (plan/runcheck.py)."""
        return check_runs(self, self.extents, selected=self.selected, steps=self.steps)

    def warnings(self) -> List[str]:
        """What may make an answer wrong, the same lines for every command (merge, info
        and its sections, report, ``stragglers()``): world sizes that disagree, ranks days
        apart, files of two runs, files left out, mixed runs, ranks missing from the
        world, one recording under several ranks (plan/runcheck.py)."""
        far = far_apart_warning(
            self, known=None if self.extents is None else {k: v[0] for k, v in self.extents.items()}
        )
        # a mixed run days apart is said once: the days-apart line names the ranks and starts
        checks = [
            w
            for rc in self.run_checks()
            for w in rc.warnings()
            if not (far and w == rc.mixed_text(steps=True))
        ]
        return world_size_warnings(self) + far + list(self.cautions) + checks

    def input_notes(self, limit: Optional[int] = SKIPPED_SHOWN) -> List[str]:
        """Facts about the inputs that are not a problem: where ranks came from, empty
        ranks, the cycle merged, files skipped in directories (the first ``limit``;
        ``info`` names them all)."""
        out = rank_source_note(self) + empty_rank_note(self) + list(self.notes)
        skipped = [f"skipped {printable(path)}: {printable(why)}" for path, why in self.skipped]
        if limit is not None and len(skipped) > limit + 1:
            more = f"skipped {len(skipped) - limit} more files (`tracefuse info` names every one)"
            skipped = skipped[:limit] + [more]
        return out + skipped


def _plan_candidates(found: Discovery, salvage: bool, keep_going: bool, out: PlanList) -> List[RankPlan]:
    plans: List[RankPlan] = []
    for c in found.candidates:
        try:
            p = plan_file(c.path, len(plans), salvage=salvage, head=c.head)
        except TraceFuseError as e:
            if not keep_going:
                raise
            out.broken.append((str(c.path), e))
            continue
        p.from_dir = c.from_dir
        if is_own_output(p.header):
            if not c.from_dir:
                raise InputError(p.path, OWN_OUTPUT_PROBLEM, hint="give the rank traces it was made from")
            found.skip(p.path, "a merged output of tracefuse-stream (not a rank trace)")
            continue
        plans.append(p)
    return plans


def plan_inputs(
    inputs: InputSpec,
    *,
    rank_from: str = "auto",
    ranks: Optional[Sequence[int]] = None,
    salvage: bool = False,
    cycle: CycleChoice = None,
) -> List[RankPlan]:
    """The plans to merge (a :class:`PlanList`; see :func:`plan_all`)."""
    return plan_all(inputs, rank_from=rank_from, ranks=ranks, salvage=salvage, cycle=cycle)


def input_warnings(plans: Sequence[RankPlan]) -> List[str]:
    """Summary warnings about the inputs of a merge (see :meth:`PlanList.warnings`)."""
    return plans.warnings() if isinstance(plans, PlanList) else world_size_warnings(plans)


def input_notes(plans: Sequence[RankPlan]) -> List[str]:
    """Summary notes about the inputs of a merge (see :meth:`PlanList.input_notes`)."""
    return plans.input_notes() if isinstance(plans, PlanList) else []


def _plan_explicit(inputs: Mapping[int, Any], salvage: bool, out: PlanList) -> List[RankPlan]:
    """``{rank: path}`` inputs: one plan per entry, its rank as given."""
    plans: List[RankPlan] = []
    reached = Discovery()  # the same file under two ranks is the duplicate error
    for pos, (r, path) in enumerate(sorted(inputs.items())):
        if not isinstance(r, int) or r < 0:
            raise UsageError(f"rank keys must be non-negative integers, not {r!r}")
        reached.claim(path, Path(path))
        found = discover([path])
        if not Path(path).is_file():
            raise InputError(str(path), "not a regular file", kind=ErrorKind.UNREADABLE)
        p = _plan_candidates(found, salvage, False, out)[0]
        p.position, p.rank, p.rank_source = pos, r, "explicit"
        peek_first_ts(p, found.candidates[0].head)  # when it starts: the output base needs it
        plans.append(p)
    return plans


def _select_ranks(plans: List[RankPlan], ranks: Optional[Sequence[int]]) -> List[RankPlan]:
    """``--ranks``: only those (every one of them must be there)."""
    if ranks is None:
        return plans
    wanted = set(ranks)
    have = {p.rank for p in plans}
    missing = sorted(wanted - have)
    if missing:
        raise UsageError(
            f"--ranks asks for rank(s) {compress_ranges(missing)} but the inputs have ranks "
            f"{compress_ranges(sorted(have))}"
        )
    return [p for p in plans if p.rank in wanted]


def plan_all(
    inputs: InputSpec,
    *,
    rank_from: str = "auto",
    ranks: Optional[Sequence[int]] = None,
    salvage: bool = False,
    cycle: CycleChoice = None,
    every_cycle: bool = False,
    keep_going: bool = False,
) -> PlanList:
    """Plan every input: find files, read headers, group cycles, assign ranks, select.

    ``inputs`` is a list of files/directories (rank from ``distributedInfo.rank``, the
    file name or the natural order, see ``ranks``) or a ``{rank: path}`` mapping
    (explicit ranks). Files of the same rank again form profiling cycles: one cycle
    merges, several need ``cycle`` (N, ``"latest"``), or ``every_cycle`` (``info``:
    all plans, each with its ``cycle``). ``keep_going`` (``info``): files that cannot
    be planned are listed in ``.broken`` instead of stopping. Returns the selected
    plans sorted by (cycle,) rank, with shifts assigned.
    """
    out = PlanList()
    cycle = parse_cycle(cycle)
    if isinstance(inputs, Mapping):
        explicit = _plan_explicit(inputs, salvage, out)
        groups = [
            Cycle(1, None, _without_copies(explicit, keep_going, out, numbered_by="the {rank: path} keys"))
        ]
    else:
        if isinstance(inputs, (str, os.PathLike)):
            inputs = [inputs]
        if not inputs:
            raise UsageError("no input files given")
        found = discover(list(inputs))
        plans = _plan_candidates(found, salvage, keep_going, out)
        out.skipped = found.skipped
        if not plans:
            if out.broken:
                return out
            raise InputError(str(inputs[0]), "no trace files to merge (every file was skipped)")
        heads = {str(c.path): c.head for c in found.candidates}
        for p in plans:
            peek_first_ts(p, heads.get(p.path))
            _coerce_start(p)
        plans = _without_copies(
            plans, keep_going, out, numbered_by="--rank-from order" if rank_from == "order" else None
        )
        ids = [identity(p, rank_from) for p in plans]
        groups = group_cycles(plans, ids)
        runs = two_runs(plans, ids, groups, _where(inputs)) if len(groups) > 1 else None
        if runs is not None:
            if not every_cycle:
                raise UsageError(runs)
            out.cautions.append(runs)  # info: the table shows them all, with this warning
    out.cycles = groups
    where = _where(inputs)
    chosen = groups if every_cycle else [choose_cycle(groups, cycle, where)]
    for g in chosen:
        assign_ranks(g.plans, rank_from)
        if len(groups) > 1:
            for p in g.plans:
                p.cycle = g.index
    if len(groups) > 1 and not every_cycle:
        c = chosen[0]
        # no start here: the one every message shows is the earliest event, which costs a
        # pass over the files (plan/starts.earliest_ns); `info` and the cycle errors show it
        names = inline([os.path.basename(f) for f in c.files])
        out.notes.append(f"merged profiling cycle {c.index} of {len(groups)} ({names})")
    selected = _select_ranks(
        sorted((p for g in chosen for p in g.plans), key=lambda p: (p.cycle or 0, p.rank)), ranks
    )
    for g in chosen:
        assign_shifts([p for p in selected if p.cycle == (g.index if len(groups) > 1 else None)])
    out.extend(p.seal() for p in selected)
    out.selected = ranks is not None
    return out


def _without_copies(
    plans: List[RankPlan], keep_going: bool, out: PlanList, numbered_by: Optional[str]
) -> List[RankPlan]:
    """The plans, none holding the trace of another (plan/copies.py: the same bytes, or one
    rank's recording from the same instant). A copy is a usage error (exit 2) naming both; ``info`` (``keep_going``) leaves copies out of its
    table with a warning that names them. ``numbered_by`` (``--rank-from order``, the keys
    of explicit ``{rank: path}`` inputs): the user numbered the files, copies included (a
    one-rank trace copied to try a merge, a test): kept, with a warning."""
    copies = find_copies(plans, by_rank=numbered_by is None)
    if not copies:
        return plans
    lines = copies_text(copies)
    if numbered_by:
        out.cautions.extend(f"{line}: merged as two ranks, numbered by {numbered_by}" for line in lines)
        return plans
    if not keep_going:
        advice = (
            "Give each file once (remove the copy, or give the files to merge by path), or "
            "--rank-from order to merge copies as separate ranks on purpose"
        )
        if len(lines) == 1:
            raise UsageError(f"the same trace given twice: {lines[0]}; merged, one rank's events "
                             f"would appear twice. {advice}")  # fmt: skip
        raise UsageError(
            f"{len(lines)} traces given twice (merged, one rank's events would appear "
            "twice):\n" + "\n".join(bounded(lines)) + "\n" + advice
        )
    out.cautions.extend(
        f"{printable(c.copy.path)} left out: it and {printable(c.original.path)} {c.why} (one trace twice)"
        for c in copies
    )
    left_out = {id(c.copy) for c in copies}
    out.left_out.extend(c.copy.path for c in copies)
    return [p for p in plans if id(p) not in left_out]


def _where(inputs: InputSpec) -> str:
    """The inputs as the user wrote them, for a message (the first few)."""
    if isinstance(inputs, Mapping):
        return "the inputs"

    return inline([str(i) for i in inputs], limit=3)


def _coerce_start(p: RankPlan) -> None:
    """A first start estimate for cycle ordering (before shifts are assigned)."""
    base = p.header.get("baseTimeNanoseconds")
    p.base_time_ns = _coerce_base(p.path, base)
    set_start(p)


def count_cycles(inputs: InputSpec, *, rank_from: str = "auto", salvage: bool = False) -> int:
    """How many profiling cycles the inputs hold (``--cycle all``)."""
    return len(plan_all(inputs, rank_from=rank_from, salvage=salvage, every_cycle=True).cycles)


def clamp_output_base(plans: Sequence[RankPlan], base_ns: int) -> Tuple[List[RankPlan], int]:
    """Keep the output base >= 0: a clock correction that moves an epoch-timestamp rank
    (base 0) earlier is a negative shift of that rank, never a negative base. Returns
    the (new) plans and the base."""
    if base_ns >= 0:
        return list(plans), base_ns
    return [p.replaced(shift_ns=p.shift_ns + base_ns) for p in plans], 0
