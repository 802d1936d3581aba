"""Which files of a run directory are rank traces, and what the rest are.

Real run directories hold more than traces: ``config.json``, ``execution_details.json``,
metrics arrays, earlier merged outputs of this tool, and sometimes no traces at all but
one subfolder per run. Merging any of those as a rank gives a silent wrong merge (an
empty "RANK 0 - CPU (pid None)" forces the output base to 0), so a directory is read
like this:

* candidates are its ``*.json``, ``*.json.gz``, ``*.json.zst`` files (not recursive),
  in natural order (``rank_2`` before ``rank_10``: numbers compared as numbers);
* a candidate whose JSON is cleanly *not* a trace (an object without ``traceEvents``,
  an array whose first item is not an event, a single value) is skipped and named;
  a damaged file is not judged here: the planner reports it (or salvages it);
* a merged output of this tool (its ``tracefuse`` header key, known once the planner
  has read the file's keys) is skipped with a note (see :func:`is_own_output`);
* without a trace at the top, subfolders that hold traces are named in the error, with
  the advice their ranks suggest (one folder per rank: give them together).

A file given explicitly by path is never skipped: not being a trace is an error there.

A file reached twice (``RUN RUN/``, a file and its folder, a symlink and its target,
a hard link) is a usage error naming both arguments: merging it twice would make one
rank's events look like two ranks (or like two profiling cycles), a wrong trace that
nothing downstream could tell from a right one. Files are compared by device and inode
(what ``os.path.samefile`` compares), so every spelling of one file is caught.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from tracefuse_stream.errors import ErrorKind, InputError, UsageError
from tracefuse_stream.listing import inline
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.read.head import Head, scan_head
from tracefuse_stream.read.sources import TRACE_SUFFIXES

PathLike = Union[str, "os.PathLike[str]"]

#: subfolder files sniffed to decide whether a subfolder holds traces
SUBFOLDER_SNIFF = 3
SUBFOLDER_RANKS = 8  # traces per subfolder whose rank is read for the advice
_DIGITS = re.compile(r"(\d+)")


@dataclass
class Candidate:
    """One file to plan: where it came from decides what a problem with it means."""

    path: Path
    from_dir: bool  # found by listing a directory (may be skipped) vs given explicitly
    head: Optional[Head] = None  # what its start said (read/head.py): the planner reuses it


@dataclass
class Discovery:
    """The candidate trace files, in order, and what was left out and why."""

    candidates: List[Candidate] = field(default_factory=list)
    skipped: List[Tuple[str, str]] = field(default_factory=list)  # (path, why)
    #: (device, inode) of every file reached -> (the argument that reached it, its path)
    reached: Dict[Tuple[int, int], Tuple[str, Path]] = field(default_factory=dict)

    def skip(self, path: PathLike, why: str) -> None:
        self.skipped.append((str(path), why))

    def claim(self, arg: PathLike, path: Path) -> None:
        """Record that argument ``arg`` reaches ``path``; a file reached before is a
        usage error naming both arguments (see module doc)."""
        try:
            st = path.stat()
        except OSError:
            return  # unreadable: opening it reports that, naming the file
        key = (st.st_dev, st.st_ino)
        first = self.reached.get(key)
        if first is None:
            self.reached[key] = (str(arg), path)
            return
        raise UsageError(duplicate_message(first[0], first[1], str(arg), path))


def duplicate_message(arg1: str, path1: Path, arg2: str, path2: Path) -> str:
    """The usage error for one file reached by two arguments (or twice by one)."""
    real = os.path.realpath(path1)
    if arg1 == arg2:
        how = f"the input {arg1!r} is given twice"
    elif Path(arg1).is_dir() or Path(arg2).is_dir():
        how = f"the inputs {arg1!r} and {arg2!r} both reach the file {real}"
    else:
        how = f"the inputs {arg1!r} and {arg2!r} are the same file ({real})"
    return f"{how}; every file is merged once: give each input once"


def natural_key(name: str) -> Tuple[Any, ...]:
    """Sort key comparing digit runs as numbers: ``rank_2`` < ``rank_10``."""
    return tuple(int(part) if part.isdecimal() else part for part in _DIGITS.split(name))


def is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES)


def is_own_output(header: Mapping[str, Any]) -> bool:
    """True for a merged file written by this tool (its top-level ``tracefuse`` key)."""
    tf = header.get("tracefuse")
    return isinstance(tf, dict) and tf.get("tool") == "tracefuse-stream"


OWN_OUTPUT_PROBLEM = (
    "is a merged output of tracefuse-stream, not a rank trace "
    "(merging it again would add its ranks as one more rank)"
)


def not_a_trace(path: PathLike) -> Optional[str]:
    """Why ``path`` is cleanly not a Kineto trace, or None (a trace, or damaged: the
    planner judges those). Reads only the top-level keys / the first array item."""
    return scan_head(path).why_not


def _trace_files(folder: Path) -> List[Path]:
    try:
        found = [c for c in folder.iterdir() if c.is_file() and is_trace_name(c.name)]
    except OSError as e:
        raise InputError(
            str(folder), f"cannot list directory: {e.strerror or e}", kind=ErrorKind.UNREADABLE
        ) from None
    return sorted(found, key=lambda c: natural_key(c.name))


def _run_subfolders(folder: Path) -> List[str]:
    """Subfolders (one level down) whose first few candidate files are traces."""
    runs: List[str] = []
    try:
        subs = sorted((c for c in folder.iterdir() if c.is_dir()), key=lambda c: natural_key(c.name))
    except OSError:
        return runs
    for sub in subs:
        try:
            files = _trace_files(sub)
        except InputError:
            continue
        if any(not_a_trace(f) is None for f in files[:SUBFOLDER_SNIFF]):
            runs.append(sub.name + "/")
    return runs


def _subfolder_ranks(sub: Path) -> Optional[Set[int]]:
    """The ``distributedInfo.rank`` of the first :data:`SUBFOLDER_RANKS` traces in
    ``sub``; None when one of them does not say its rank."""
    ranks: Set[int] = set()
    for f in _trace_files(sub)[:SUBFOLDER_RANKS]:
        head = scan_head(f)
        if head.why_not is not None:
            continue
        info = head.header.get("distributedInfo")
        r = info.get("rank") if isinstance(info, dict) else None
        if not isinstance(r, int) or isinstance(r, bool):
            return None
        ranks.add(r)
    return ranks


def _subfolders_message(path: Path, runs: List[str]) -> str:
    """Why ``path`` holds no trace, and what to give instead: its subfolders together
    when they hold different ranks of one job (one folder per rank: merging one of them
    would give one rank), else one of them (one run per folder)."""
    try:
        sets = [_subfolder_ranks(path / r) for r in runs]
    except InputError:
        sets = [None]
    known = [rs for rs in sets if rs]
    seen: Set[int] = set().union(*known)
    disjoint = len(runs) > 1 and len(known) == len(sets) and sum(map(len, known)) == len(seen)
    if disjoint:
        try:
            every = len(runs) == sum(1 for c in path.iterdir() if c.is_dir())
        except OSError:
            every = False
        given = f"{path}{os.sep}*{os.sep}" if every else " ".join(str(path / r) for r in runs)
        return (
            f"{path}: no trace files here, but its {len(runs)} subfolders ({inline(runs, limit=3)}) hold "
            f"ranks {compress_ranges(sorted(seen))}, other ranks in each (one job, one folder per "
            f"rank?); give them together: {given}"
        )
    return (
        f"{path}: no trace files here, but the subfolders {inline(runs, limit=3)} hold traces "
        f"(one run each?); pass the run folder to merge, e.g. {path / runs[0]}"
    )


def discover(paths: Sequence[PathLike]) -> Discovery:
    """Expand files and directories into candidate trace files (see module doc)."""
    out = Discovery()
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files = _trace_files(path)
            kept = 0
            for f in files:
                out.claim(p, f)
                head = scan_head(f)
                why = head.why_not
                if why is None:
                    out.candidates.append(Candidate(f, from_dir=True, head=head))
                    kept += 1
                else:
                    out.skip(f, f"not a trace: {why}")
            runs = _run_subfolders(path)
            if not kept:
                if runs:
                    raise UsageError(_subfolders_message(path, runs))
                what = "no *.json, *.json.gz or *.json.zst trace files"
                if files:
                    what = f"no trace files ({len(files)} JSON file(s), none a trace: {files[0].name}, ...)"
                raise InputError(str(path), f"directory contains {what}", kind=ErrorKind.NOT_A_TRACE)
            for r in runs:
                out.skip(path / r, "subfolder with traces: not read (folders are not searched recursively)")
        elif path.exists():
            if not path.is_file():
                raise InputError(str(path), "not a regular file", kind=ErrorKind.UNREADABLE)
            out.claim(p, path)
            head = scan_head(path)
            if head.why_not is not None:
                raise InputError(str(path), f"not a trace: {head.why_not}", kind=ErrorKind.NOT_A_TRACE)
            out.candidates.append(Candidate(path, from_dir=False, head=head))
        else:
            raise InputError(str(path), "no such file or directory", kind=ErrorKind.MISSING)
    return out


__all__ = [
    "Candidate",
    "Discovery",
    "discover",
    "is_own_output",
    "is_trace_name",
    "natural_key",
    "not_a_trace",
    "OWN_OUTPUT_PROBLEM",
]
