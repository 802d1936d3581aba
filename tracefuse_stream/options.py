"""``MergeOptions``: everything a merge can be asked to do, validated once, here.

A merge used to take 21 keyword arguments, repeated by the command line and the
TraceLens-compatible class and checked in four places. Now the choices are one frozen
value made of small parts, each of which validates itself when it is made:

* :class:`Selection` — which files are which rank, which ranks, which profiling cycle;
* :class:`Filters` — which events (categories, names, python_function, a callback), which args;
* :class:`TimeWindow` — ``--steps`` or ``--window``;
* :class:`Alignment` — how clocks are aligned;
* :class:`OutputOptions` — overwrite, split, dry run, verify;
* :class:`Execution` — workers, progress bar, salvage.

``merge(inputs, output, options=None, **kwargs)`` keeps the flat keyword API:
:meth:`MergeOptions.from_kwargs` maps each old keyword to its part. An invalid value
raises :class:`~tracefuse_stream.errors.UsageError` with the one-line message the CLI
prints, before any file is opened.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, Literal, Mapping, Optional, Tuple, Union

from tracefuse_stream.errors import UsageError
from tracefuse_stream.rankset import parse_rank_spec, parse_steps, parse_window_ms
from tracefuse_stream.rewrite.args import ARGS_CHOICES, ArgsMode
from tracefuse_stream.workers import check_jobs

Event = Dict[str, Any]
RankFrom = Literal["auto", "order"]
AlignMode = Literal["base", "collectives"]
CycleChoice = Union[int, Literal["latest", "all"], None]

RANK_FROM_CHOICES: Tuple[str, ...] = ("auto", "order")
ALIGN_CHOICES: Tuple[str, ...] = ("base", "collectives")


def _choice(value: Any, choices: Tuple[str, ...], what: str) -> None:
    if value not in choices:
        raise UsageError(f"{what} must be one of {', '.join(choices)}, not {value!r}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _categories(value: Optional[Iterable[str]], what: str) -> Optional[FrozenSet[str]]:
    if value is None:
        return None
    if isinstance(value, str):
        raise UsageError(f"{what} takes a list of categories, not the string {value!r}")
    cats = frozenset(value)
    if not all(isinstance(c, str) for c in cats):
        raise UsageError(f"{what}: categories must be strings")
    return cats


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # normalising a frozen dataclass in __post_init__


@dataclass(frozen=True)
class Selection:
    """Which input is which rank, and which ranks and cycle are merged."""

    rank_from: RankFrom = "auto"
    ranks: Optional[Tuple[int, ...]] = None
    cycle: CycleChoice = None

    def __post_init__(self) -> None:
        _choice(self.rank_from, RANK_FROM_CHOICES, "--rank-from")
        parsed = _cli_form("ranks", self.ranks)  # "0,8,16-23" or 3: as --ranks reads them
        if parsed is not None:
            _set(self, "ranks", parsed)
        if self.ranks is not None:
            ranks = tuple(self.ranks)
            if not ranks:
                raise UsageError("--ranks selects no rank")
            bad = [r for r in ranks if not _is_int(r) or r < 0]
            if bad:
                raise UsageError(f"--ranks: ranks are non-negative integers, not {bad[0]!r}")
            _set(self, "ranks", tuple(sorted(set(ranks))))
        c: Any = self.cycle
        if isinstance(c, str) and c.strip().isascii() and c.strip().isdigit():
            c = int(c.strip())  # the command line's "--cycle 2"
        if c is not None and c not in ("latest", "all") and not (_is_int(c) and c >= 1):
            raise UsageError(f"--cycle must be a cycle number (1, 2, ...), 'latest' or 'all', not {c!r}")
        _set(self, "cycle", c)


@dataclass(frozen=True)
class Filters:
    """Which events are kept (metadata is never filtered)."""

    include_pyfunc: bool = False
    keep_cat: Optional[FrozenSet[str]] = None
    drop_cat: FrozenSet[str] = field(default_factory=frozenset)
    name_regex: Optional[str] = None
    filter_fn: Optional[Callable[[Event], bool]] = None
    args: ArgsMode = "all"  # which event args are kept: tracefuse_stream/rewrite/args.py

    def __post_init__(self) -> None:
        _choice(self.args, ARGS_CHOICES, "--args")
        _set(self, "keep_cat", _categories(self.keep_cat, "--keep-cat"))
        _set(self, "drop_cat", _categories(self.drop_cat, "--drop-cat") or frozenset())
        if self.name_regex is not None:
            try:
                re.compile(self.name_regex)
            except (re.error, TypeError) as e:
                raise UsageError(
                    f"--name {self.name_regex!r} is not a valid regular expression: {e}"
                ) from None
        if self.filter_fn is not None and not callable(self.filter_fn):
            raise UsageError("filter_fn must be callable (event -> bool)")


@dataclass(frozen=True)
class TimeWindow:
    """Keep only a time window: ``--steps A:B`` as timed on ``step_rank``, or
    ``--window START_MS:END_MS`` from the merged trace's first event."""

    steps: Optional[Tuple[int, int]] = None
    step_rank: Optional[int] = None
    window_ms: Optional[Tuple[float, float]] = None

    def __post_init__(self) -> None:
        for key in ("steps", "window_ms"):  # "3:5", 9, "0:5.5": as --steps / --window read them
            parsed = _cli_form(key, getattr(self, key))
            if parsed is not None:
                _set(self, key, parsed)
        if self.steps is not None and self.window_ms is not None:
            raise UsageError("use either --steps or --window, not both")
        if self.steps is not None:
            a, b = self.steps
            for s in (a, b):
                if not _is_int(s):
                    raise UsageError(f"step numbers must be integers, got {s!r}")
                if s < 0:
                    raise UsageError(f"step numbers cannot be negative, got {s}")
            if a > b:
                raise UsageError(f"--steps {a}:{b}: first step is after last step")
            _set(self, "steps", (a, b))
        if self.step_rank is not None:
            if self.steps is None:
                raise UsageError("--step-rank only applies with --steps")
            if not _is_int(self.step_rank) or self.step_rank < 0:
                raise UsageError(f"--step-rank must be a non-negative rank, not {self.step_rank!r}")
        if self.window_ms is not None:
            lo, hi = self.window_ms
            if not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (lo, hi)
            ):
                raise UsageError(f"--window {lo}:{hi}: bounds must be finite numbers of ms")
            if lo < 0 or hi < 0:
                raise UsageError(f"--window {lo}:{hi}: bounds must not be negative")
            if not lo < hi:
                raise UsageError(f"--window {lo}:{hi}: start is not before end")
            _set(self, "window_ms", (lo, hi))

    @property
    def active(self) -> bool:
        return self.steps is not None or self.window_ms is not None


@dataclass(frozen=True)
class Alignment:
    """How rank clocks are put on one timeline: exact ``baseTimeNanoseconds``
    (``base``), plus per-host offsets estimated from collectives, or known offsets
    from a file (``clock_offsets``)."""

    mode: AlignMode = "base"
    clock_offsets: Optional[str] = None

    def __post_init__(self) -> None:
        _choice(self.mode, ALIGN_CHOICES, "--align")
        if self.clock_offsets is not None:
            if not isinstance(self.clock_offsets, str) or not self.clock_offsets:
                raise UsageError("--clock-offsets needs a file name")
            if self.mode == "collectives":
                raise UsageError(
                    "--clock-offsets and --align collectives are alternatives: known offsets, "
                    "or offsets estimated from collectives; choose one"
                )


@dataclass(frozen=True)
class OutputOptions:
    """What is written: overwrite or not, one file per K ranks, nothing (dry run),
    and whether the result is verified against the inputs."""

    force: bool = False
    split_ranks: Optional[int] = None
    dry_run: bool = False
    verify: Optional[bool] = None  # None (not asked) and False: no verification
    link_collectives: bool = False  # flows joining each collective instance across ranks: align/links.py
    #: rank -> (the processes' title in place of ``RANK r``, the rank's place in the
    #: sort order): ``merge --against`` names BASE's ranks ``BASE rank r`` and puts each
    #: under NEW's rank r (pipeline/against.py); None: ``RANK r``, in rank order
    rank_titles: Optional[Tuple[Tuple[int, str, int], ...]] = None

    def __post_init__(self) -> None:
        if self.split_ranks is not None and (not _is_int(self.split_ranks) or self.split_ranks < 1):
            raise UsageError(f"--split-ranks must be a whole number of at least 1, not {self.split_ranks!r}")


@dataclass(frozen=True)
class Execution:
    """How the work runs: worker processes, a Dask cluster for the side passes, progress
    bar, salvage of broken inputs."""

    jobs: Optional[int] = 1  # None or 0: usable cores; 1: in this process
    progress: bool = False
    salvage: bool = False
    dask: Optional[str] = None  # a scheduler address or file: the side passes run there (cluster.py)

    def __post_init__(self) -> None:
        if self.dask is not None and (not isinstance(self.dask, str) or not self.dask):
            raise UsageError(
                f"--dask must be a scheduler address (tcp://host:8786) or a scheduler file, not {self.dask!r}"
            )
        check_jobs(self.jobs)


@dataclass(frozen=True)
class MergeOptions:
    """All of a merge's choices; build with the parts or :meth:`from_kwargs`."""

    selection: Selection = field(default_factory=Selection)
    filters: Filters = field(default_factory=Filters)
    window: TimeWindow = field(default_factory=TimeWindow)
    alignment: Alignment = field(default_factory=Alignment)
    output: OutputOptions = field(default_factory=OutputOptions)
    execution: Execution = field(default_factory=Execution)

    @classmethod
    def from_kwargs(cls, base: Optional[MergeOptions] = None, **kwargs: Any) -> MergeOptions:
        """Options from the flat keyword API of ``merge()`` (``ranks=``, ``jobs=``,
        ``align=``, ...), on top of ``base``. An unknown keyword is a TypeError, as
        for any Python function."""
        opts = base or cls()
        changes: Dict[str, Dict[str, Any]] = {}
        for key, value in kwargs.items():
            try:
                part, name = KEYWORDS[key]
            except KeyError:
                raise TypeError(f"merge() got an unexpected keyword argument {key!r}") from None
            changes.setdefault(part, {})[name] = _convert(key, value)
        parts = {part: dataclasses.replace(getattr(opts, part), **vals) for part, vals in changes.items()}
        return dataclasses.replace(opts, **parts)


def _convert(key: str, value: Any) -> Any:
    """A keyword's value as the options hold it. The command line's words (a rank
    spec, a ``--steps``/``--window`` string, one step number) pass as they are: the
    option classes read them (:func:`_cli_form`)."""
    if value is None or _cli_form(key, value) is not None:
        return value
    if key == "ranks":
        if isinstance(value, bytes) or not isinstance(value, Iterable):
            raise UsageError(
                f"ranks must be a list of integers or a rank spec like '0,8,16-23', not {value!r}"
            )
        return tuple(value)
    if key in ("steps", "window_ms"):
        if isinstance(value, bytes) or not isinstance(value, Iterable) or len(tuple(value)) != 2:
            hint = "'3:5', a step number or " if key == "steps" else "'START_MS:END_MS' or "
            raise UsageError(f"{key} must be {hint}a pair (first, last), not {value!r}")
        return tuple(value)
    return value


def _cli_form(key: str, value: Any) -> Optional[Tuple[Any, ...]]:
    """``value`` in the command line's form, parsed as the command line parses it, or
    None. The API takes what the CLI takes (issue 28, item 6: ``steps="9"`` was a
    UsageError while ``--steps 9`` merged): ``ranks="0,8,16-23"`` or one rank number,
    ``steps="3:5"``/``"9"`` or one step number, ``window_ms="0:5.5"``."""
    if key == "ranks" and (isinstance(value, str) or _is_int(value)):
        return tuple(parse_rank_spec(str(value)))
    if key == "steps" and (isinstance(value, str) or _is_int(value)):
        return parse_steps(str(value))
    if key == "window_ms" and isinstance(value, str):
        return parse_window_ms(value)
    return None


#: The flat ``merge()`` keyword -> (part, field) it sets.
KEYWORDS: Mapping[str, Tuple[str, str]] = {
    "rank_from": ("selection", "rank_from"),
    "ranks": ("selection", "ranks"),
    "cycle": ("selection", "cycle"),
    "include_pyfunc": ("filters", "include_pyfunc"),
    "keep_cat": ("filters", "keep_cat"),
    "drop_cat": ("filters", "drop_cat"),
    "name_regex": ("filters", "name_regex"),
    "filter_fn": ("filters", "filter_fn"),
    "args": ("filters", "args"),
    "steps": ("window", "steps"),
    "step_rank": ("window", "step_rank"),
    "window_ms": ("window", "window_ms"),
    "align": ("alignment", "mode"),
    "clock_offsets": ("alignment", "clock_offsets"),
    "force": ("output", "force"),
    "split_ranks": ("output", "split_ranks"),
    "dry_run": ("output", "dry_run"),
    "verify": ("output", "verify"),
    "link_collectives": ("output", "link_collectives"),
    "jobs": ("execution", "jobs"),
    "progress": ("execution", "progress"),
    "salvage": ("execution", "salvage"),
    "dask": ("execution", "dask"),
}

__all__ = [
    "Alignment",
    "Execution",
    "Filters",
    "MergeOptions",
    "OutputOptions",
    "Selection",
    "TimeWindow",
    "KEYWORDS",
]
