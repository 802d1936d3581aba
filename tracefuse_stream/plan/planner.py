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

import collections
import os
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import ijson
from ijson.common import ObjectBuilder

from tracefuse_stream.errors import InputError, UsageError
from tracefuse_stream.read.sources import READ_SIZE, TraceReader, detect_compression, find_inputs, input_size
from tracefuse_stream.select.ranges import compress_ranges
from tracefuse_stream.read.trailer import find_trailer

# Tail windows tried in turn for the keys after the events: Kineto's trailer is a few
# KB, so the first (small, cheap on memory) window nearly always suffices.
TAIL_WINDOWS = (1 << 20, 16 << 20)
TAIL_WINDOW = TAIL_WINDOWS[0]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class RankPlan:
    """Everything the streaming pass of one rank needs to know up front."""

    path: str
    position: int
    compression: str
    size_bytes: int
    layout: str  # "object" ({"traceEvents": [...]}) or "array" (bare [...])
    header: Dict[str, Any]  # top-level keys before traceEvents (+ trailer once known)
    trailer_known: bool
    rank: int = -1
    rank_source: str = "order"  # "distributedInfo", "order", "explicit"
    base_time_ns: Optional[int] = None
    shift_ns: int = 0
    align_offset_ns: int = 0  # clock correction folded into shift_ns
    align: Optional[Dict[str, Any]] = None
    problems: List[str] = field(default_factory=list)
    needs_salvage: bool = False  # strict reading failed; stream with the salvage reader
    first_ts: Any = None  # first event ts seen by a salvage plan (base guessing)

    @property
    def world_size(self) -> Optional[int]:
        di = self.header.get("distributedInfo")
        if isinstance(di, dict) and isinstance(di.get("world_size"), int):
            return di["world_size"]
        return None

    @property
    def host_name(self) -> Optional[str]:
        h = self.header.get("host_name")
        return h if isinstance(h, str) else None

    @property
    def dist_rank(self) -> Optional[int]:
        di = self.header.get("distributedInfo")
        if isinstance(di, dict):
            r = di.get("rank")
            if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
                return r
        return None


def read_header(path: PathLike) -> Tuple[str, Dict[str, Any], bool]:
    """Parse the top-level keys before ``traceEvents``.

    Returns ``(layout, header, saw_events)``. ``saw_events`` is False when the object
    ended without a ``traceEvents`` key (not a trace).
    """
    _check_starts_like_json(path)
    reader = TraceReader(path)
    header: Dict[str, Any] = {}
    try:
        events = ijson.parse(reader, use_float=False, buf_size=1 << 16)
        first = next(events)
        if first[1] == "start_array":
            return "array", header, True
        if first[1] != "start_map":
            raise InputError(str(path), "not a trace: top level is not a JSON object or array")
        for prefix, ev, val in events:
            if ev == "map_key":
                if val == "traceEvents":
                    nxt = next(events)
                    if nxt[1] != "start_array":
                        raise InputError(str(path), "traceEvents is not an array", offset=reader.offset)
                    return "object", header, True
                builder = ObjectBuilder()
                depth = 0
                for _p, e, v in events:
                    builder.event(e, v)
                    if e in ("start_map", "start_array"):
                        depth += 1
                    elif e in ("end_map", "end_array"):
                        depth -= 1
                    if depth == 0:
                        break
                header[val] = builder.value
            elif ev == "end_map":
                return "object", header, False
        raise InputError(str(path), "file ends inside the header (truncated)", offset=reader.offset)
    except (ijson.JSONError, UnicodeDecodeError) as e:
        text = e.args[0] if e.args else type(e).__name__
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        msg = (str(text).splitlines() or [type(e).__name__])[0].strip()
        raise InputError(
            str(path), f"invalid JSON in the header: {msg}", offset=reader.offset,
            hint="use --salvage to merge what can be read",
        ) from None
    finally:
        reader.close()


def _check_starts_like_json(path: PathLike) -> None:
    """Empty files and non-JSON files get their own, exact message."""
    reader = TraceReader(path)
    try:
        skipped = 0
        while True:
            chunk = reader.read(1 << 16)
            if not chunk:
                raise InputError(
                    str(path), "file is empty" if not skipped else "file contains only whitespace",
                    salvageable=False,
                )
            stripped = chunk.lstrip(b" \t\r\n")
            if stripped:
                break
            skipped += len(chunk)
        at = skipped + len(chunk) - len(stripped)
        if stripped[:3] == b"\xef\xbb\xbf":
            raise InputError(str(path), "starts with a UTF-8 byte-order mark, which JSON does not allow", offset=at)
        first = stripped[:1]
        if first in b'"-0123456789tfn' and first:
            raise InputError(
                str(path), "not a trace: the top level is a single JSON value, not an object or array",
                offset=at, salvageable=False,
            )
        if first not in (b"{", b"["):
            raise InputError(
                str(path), f"not JSON: starts with {stripped[:12]!r}, not '{{' or '['", offset=at,
                salvageable=False,
            )
    finally:
        reader.close()


def read_tail(path: PathLike, window: int = TAIL_WINDOW) -> Tuple[bytes, int]:
    """The last ``window`` decompressed bytes of the file, and the decompressed size.

    Plain files are read by seeking; compressed ones are decompressed in a stream,
    keeping only the last ``window`` bytes (flat memory).
    """
    reader = TraceReader(path)
    try:
        if reader.compression == "plain":
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                f.seek(max(0, size - window))
                return f.read(), size
        chunks: "collections.deque[bytes]" = collections.deque()
        kept = 0
        total = 0
        while True:
            chunk = reader.read(READ_SIZE)
            if not chunk:
                break
            chunks.append(chunk)
            kept += len(chunk)
            total += len(chunk)
            while chunks and kept - len(chunks[0]) >= window:
                kept -= len(chunks.popleft())
        data = b"".join(chunks)
        return data[-window:], total
    finally:
        reader.close()


def _coerce_base(path: str, value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool):
        raise InputError(path, f"baseTimeNanoseconds is not an integer: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, (float, Decimal)) and value == int(value):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise InputError(path, f"baseTimeNanoseconds is not an integer: {value!r}")


def complete_trailer(plan: RankPlan, trailer: Optional[Dict[str, Any]]) -> None:
    """Merge the keys found after ``traceEvents`` into the plan's header."""
    if trailer is None:
        return
    for k, v in trailer.items():
        plan.header.setdefault(k, v)
    plan.trailer_known = True


def plan_file(path: PathLike, position: int, *, salvage: bool = False) -> RankPlan:
    """Header pass for one file (and the tail when its base or rank is not in the header).

    With ``salvage``, a file that fails strict planning is planned by the salvage
    reader instead (one extra pass over that file only).
    """
    try:
        return _plan_strict(path, position)
    except InputError as e:
        if not salvage or not e.salvageable or "no such file" in e.problem or "cannot open" in e.problem:
            raise
        return _plan_salvage(path, position, e)


def _plan_salvage(path: PathLike, position: int, err: InputError) -> RankPlan:
    from tracefuse_stream.read.salvage import Framer, SalvageReport, tolerant_chunks

    report = SalvageReport()
    framer = Framer(tolerant_chunks(str(path), report), report, exact=True)
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
    plan.problems.append(f"strict read failed: {err}")
    return plan


def _plan_strict(path: PathLike, position: int) -> RankPlan:
    p = str(path)
    layout, header, saw_events = read_header(path)
    if not saw_events:
        raise InputError(p, "not a trace: the JSON object has no traceEvents key")
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
    if layout == "object" and (
        "baseTimeNanoseconds" not in header or "distributedInfo" not in header
    ):
        load_trailer(plan)
    return plan


def trailer_of_file(path: PathLike) -> Tuple[Optional[Dict[str, Any]], int]:
    """The keys after the events, from the smallest tail window that holds them
    (None: the file does not end like a complete trace), and the decompressed size."""
    trailer: Optional[Dict[str, Any]] = None
    size = 0
    for window in TAIL_WINDOWS:
        tail, size = read_tail(path, window)
        trailer = find_trailer(tail, whole=size <= len(tail))
        if trailer is not None or size <= len(tail):
            break
    return trailer, size


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
        )
    complete_trailer(plan, trailer)


def assign_ranks(
    plans: List[RankPlan], rank_from: str = "auto"
) -> None:
    """Give every plan its rank: ``distributedInfo.rank`` (``auto``) else list position.

    Two files with the same rank are an error naming both files.
    """
    if rank_from not in ("auto", "order"):
        raise UsageError(f"--rank-from must be 'auto' or 'order', not {rank_from!r}")
    for p in plans:
        if p.rank_source == "explicit":
            continue
        r = p.dist_rank if rank_from == "auto" else None
        if r is not None:
            p.rank, p.rank_source = r, "distributedInfo"
        else:
            p.rank, p.rank_source = p.position, "order"
    seen: Dict[int, RankPlan] = {}
    for p in plans:
        if p.rank in seen:
            other = seen[p.rank]
            raise UsageError(
                f"rank {p.rank} appears twice: {other.path} ({other.rank_source}) and "
                f"{p.path} ({p.rank_source}); use --rank-from order to number files by "
                f"their position instead"
            )
        seen[p.rank] = p


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
    bases = [p.base_time_ns or 0 for p in plans]
    out_base = min(bases) if bases else 0
    for p, b in zip(plans, bases):
        p.shift_ns = b - out_base
    return out_base


InputSpec = Union[Sequence[PathLike], Mapping[int, PathLike]]


def plan_inputs(
    inputs: InputSpec,
    *,
    rank_from: str = "auto",
    ranks: Optional[Sequence[int]] = None,
    salvage: bool = False,
) -> List[RankPlan]:
    """Plan every input: find files, read headers, assign ranks, select ``ranks``.

    ``inputs`` is a list of files/directories (rank = distributedInfo.rank or list
    position) or a ``{rank: path}`` mapping (explicit ranks). Returns the selected
    plans sorted by rank, with shifts assigned.
    """
    plans: List[RankPlan] = []
    if isinstance(inputs, Mapping):
        for pos, (r, path) in enumerate(sorted(inputs.items())):
            if not isinstance(r, int) or r < 0:
                raise UsageError(f"rank keys must be non-negative integers, not {r!r}")
            if not Path(path).is_file():
                find_inputs([path])  # raises the right error
                raise InputError(str(path), "not a regular file")
            p = plan_file(path, pos, salvage=salvage)
            p.rank, p.rank_source = r, "explicit"
            plans.append(p)
    else:
        if isinstance(inputs, (str, os.PathLike)):
            inputs = [inputs]
        files = find_inputs(list(inputs))
        if not files:
            raise UsageError("no input files given")
        plans = [plan_file(f, i, salvage=salvage) for i, f in enumerate(files)]
    assign_ranks(plans, rank_from)
    plans.sort(key=lambda p: p.rank)
    if ranks is not None:
        wanted = set(ranks)
        have = {p.rank for p in plans}
        missing = sorted(wanted - have)
        if missing:
            raise UsageError(
                f"--ranks asks for rank(s) {compress_ranges(missing)} but the inputs have ranks {compress_ranges(sorted(have))}"
            )
        plans = [p for p in plans if p.rank in wanted]
    assign_shifts(plans)
    return plans
