"""Collective kernel END times of one rank, from one streaming pass.

A GPU collective cannot finish on any rank before the last rank has joined, and it
finishes on all of them at nearly the same true time: its end is an event every
clock sees (see :mod:`tracefuse_stream.align.clock`). This pass keeps only those ends
(absolute ns, bounded by a cap), keyed so that the same collective has the same key on
every rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Dict, Hashable, Iterator, List, Mapping, Optional, Tuple

import msgspec

from tracefuse_stream.errors import ErrorKind, InputError, UsageError
from tracefuse_stream.read.events import KernelFields, decode_args, iter_event_batches
from tracefuse_stream.read.scan import ScanSelection, Tally
from tracefuse_stream.read.sources import PathLike
from tracefuse_stream.timeunits import us_to_ns_or_none as us_to_ns

#: A match key: ``("seq", pg_name, collective_name, seq)`` when the kernel carries a
#: ``Seq`` / ``Comms Id`` arg, else ``("order", kernel_name, stream, occurrence_index)``.
MatchKey = Tuple[Hashable, ...]

DEFAULT_CAP = 50000
DEFAULT_MIN_MATCHES = 3

# Below 2**42 us, round(ts * 1000) is exact for 3-decimal values: the float's
# representation error (<= 2**-12 us) plus the product's rounding (<= 0.25 ns) stays
# under half a nanosecond. From 2**42 on (current Kineto's relative ts are often just
# above it) the product can be off by one ns, while the shortest repr of the float is
# still the original 3-decimal string up to 2**43 -- so go through Decimal(repr()).
# Beyond 2**43 (absolute epoch us of PyTorch <= 2.3) a float cannot hold ns anyway;
# Decimal(repr()) then gives the nearest value the parser kept, far below the
# microsecond accuracy alignment needs.

_COLLECTIVE_PREFIXES = ("nccl", "rccl")
_COLLECTIVE_MARKERS = ("ncclDevKernel", "ncclKernel")
#: ASCII digits only: a ``Seq`` given as text, a ``--clock-offsets`` key naming a rank
DIGITS = re.compile(r"[0-9]+")
_RANK_KEY = DIGITS


def is_collective_kernel(event: Mapping[str, Any]) -> bool:
    """True for a GPU kernel of a NCCL/RCCL collective.

    Only GPU kernels qualify (``cat == "kernel"``): CPU-side ops such as
    ``record_param_comms`` or gloo's ``allreduce`` end when *that* rank's call returns,
    which differs by hundreds of microseconds between ranks even on one clock.
    """
    if event.get("cat") != "kernel":
        return False
    args = event.get("args")
    if isinstance(args, dict) and "Collective name" in args:
        return True
    return _named_collective(event.get("name"))


#: ``Collective name`` of NCCL's point-to-point ops (record_param_comms) -> direction
P2P_COLLECTIVE_NAMES = {"send": "send", "recv": "recv"}
#: NCCL's point-to-point kernel (all-to-all runs in it too, named by its args)
SENDRECV_KERNEL = "SendRecv"
#: the ``Collective name`` a coalesced block's record_param_comms gives (no peer in it)
BATCHED_NAME = "coalesced"


def p2p_kernel_op(event: Mapping[str, Any]) -> Optional[str]:
    """``"send"`` / ``"recv"`` for the GPU kernel of a NCCL point-to-point op, else None.

    Why apart from the collectives: a send and a recv involve two ranks, not a group,
    and their ``Seq`` counts the rank's own point-to-point ops (a separate counter), so
    rank 0's third send and rank 1's third send are not one operation; matched as a
    collective they would pair a pipeline's first stage with its last. Only the
    ``Collective name`` decides: NCCL's all-to-all runs in the same ``SendRecv`` kernels.

    A ``SendRecv`` kernel with no ``Collective name`` (or ``coalesced``) is ``"batched"``:
    the one kernel of a ``batch_isend_irecv`` (Megatron's 1F1B) whose CPU op is the
    ``nccl:coalesced`` annotation, not a ``record_param_comms``, so Kineto copies it no
    collective args; its sends and recvs are found through that annotation
    (align/coalesced.py), never matched as a collective nor used to align clocks.
    """
    if event.get("cat") != "kernel":
        return None
    args = event.get("args")
    name = args.get("Collective name") if isinstance(args, dict) else None
    if type(name) is str and name in P2P_COLLECTIVE_NAMES:
        return P2P_COLLECTIVE_NAMES[name]
    if (name is None or name == BATCHED_NAME) and SENDRECV_KERNEL in str(event.get("name")):
        return "batched"
    return None


def _seq_value(args: Mapping[str, Any]) -> Optional[Hashable]:
    """The collective's sequence number (``Seq``, else ``Comms Id``), normalised so that
    ``5`` and ``"5"`` written by two Kineto versions still match."""
    for name in ("Seq", "Comms Id"):
        v = args.get(name)
        if v is None or isinstance(v, bool):
            continue
        if isinstance(v, int):
            return v
        if isinstance(v, str) and v.strip():
            s = v.strip()
            return int(s) if _RANK_KEY.fullmatch(s) else s
        if isinstance(v, (float, Decimal)) and v == int(v):
            return int(v)
    return None


def _stream_of(event: Mapping[str, Any], args: Mapping[str, Any]) -> Hashable:
    """The kernel's stream: ``args.stream``, else the tid (old Kineto writes negative
    tids for what newer versions write as the absolute value, so fold the sign)."""
    s = args.get("stream")
    if s is None or isinstance(s, bool):
        s = event.get("tid")
    if isinstance(s, int) and not isinstance(s, bool):
        return abs(s)
    return s if isinstance(s, (str, int)) else repr(s)


@dataclass
class RankCollectives:
    """What alignment needs from one rank: collective kernel end times by match key.

    ``ends`` maps :data:`MatchKey` -> absolute end time in ns. ``count`` is the number
    of collective kernels recorded (at most ``cap``); ``cap_hit`` says more were present
    and were not read (memory stays bounded on huge traces; the first ``cap`` are
    plenty for a median). ``error`` is set when the trace could be read only partly
    (truncated or invalid JSON): what was read before the problem is still usable.
    """

    ends: Dict[MatchKey, int] = field(default_factory=dict)
    count: int = 0
    cap_hit: bool = False
    error: Optional[str] = None
    path: str = ""


def collect_collective_ends(
    path: PathLike, base_time_ns: Optional[int], cap: int = DEFAULT_CAP, validate: bool = True
) -> RankCollectives:
    """One streaming pass over ``path`` keeping only GPU collective kernel end times
    (a second, exact-decimal pass only for files with integers beyond int64).

    ``base_time_ns`` is the file's ``baseTimeNanoseconds`` (None for PyTorch <= 2.3,
    whose ``ts`` are absolute epoch us and are then parsed as exact decimals), so that
    ends of ranks with different bases are comparable. Ends are exact integer ns.

    Keys: with ``Seq``/``Comms Id`` args, ``("seq", pg_name, collective_name, seq)``:
    the same number on every participant. Without them (Kineto before 2026),
    ``("order", kernel_name, stream, i)``: the i-th kernel of that name on that stream.
    Occurrence is counted in end-time order, not file order: kernels on one stream are
    serialised, so end order is their execution order, whereas the order in which
    Kineto flushes activity buffers to the file is not guaranteed.

    Missing files raise :class:`InputError`; a file that turns out truncated or invalid
    midway is not fatal here (``error`` is set) -- the merge reports it on its own pass.
    ``validate=False`` (a strict merge, which validates every byte itself right after):
    the compiled kernel only delimits events on the way to the kernels.
    """
    if cap < 0:
        raise UsageError(f"collective cap must be >= 0, got {cap}")
    base = int(base_time_ns) if base_time_ns is not None else 0
    return _scan(path, base, cap, validate)


def _collective_kernels(path: PathLike, validate: bool = True) -> Iterator[Dict[str, Any]]:
    # the compiled kernel skips the other events unread: a superset of is_collective_kernel
    kernels = ScanSelection(
        cat="kernel", name_contains=("nccl", "rccl"), text_contains='"Collective name"', validate=validate
    )
    for batch in iter_event_batches(
        path, what="looking for collective kernels", fields=KernelFields, select=kernels, tally=Tally()
    ):
        for event in batch:
            if type(event) is not dict or event.get("cat") != "kernel":
                continue
            raw = event.get("args")
            if type(raw) is msgspec.Raw and not _named_collective(event.get("name")):
                if b'"Collective name"' not in bytes(raw):
                    continue  # most kernels: no collective, no need to decode their args
            event["args"] = decode_args(event)
            if is_collective_kernel(event) and p2p_kernel_op(event) is None:
                yield event  # a send/recv's end is not one every rank of a group sees


def _named_collective(name: Any) -> bool:
    return isinstance(name, str) and (
        name.startswith(_COLLECTIVE_PREFIXES) or any(m in name for m in _COLLECTIVE_MARKERS)
    )


def _scan(path: PathLike, base: int, cap: int, validate: bool = True) -> RankCollectives:
    """The single pass behind :func:`collect_collective_ends` (events from
    :func:`~tracefuse_stream.read.events.iter_event_batches`: both layouts, exact
    numbers)."""
    result = RankCollectives(path=str(path))
    seq_ends: Dict[MatchKey, int] = {}
    by_stream: Dict[Tuple[str, Hashable], List[int]] = {}
    try:
        for event in _collective_kernels(path, validate):
            ts = us_to_ns(event.get("ts"))
            dur = us_to_ns(event.get("dur"))
            if ts is None or dur is None or dur < 0:
                continue
            if result.count >= cap:
                result.cap_hit = True
                break
            result.count += 1
            end = base + ts + dur
            args = event.get("args")
            if not isinstance(args, dict):
                args = {}
            name = event.get("name")
            name = name if isinstance(name, str) else ""
            seq = _seq_value(args)
            if seq is not None:
                pg = args.get("Process Group Name")
                coll = args.get("Collective name")
                key: MatchKey = (
                    "seq",
                    "" if pg is None else str(pg),
                    str(coll) if coll is not None else name,
                    seq,
                )
                # Coalesced collectives can launch several kernels under one Seq:
                # the collective is over when the last of them ends.
                prev = seq_ends.get(key)
                seq_ends[key] = end if prev is None else max(prev, end)
            else:
                by_stream.setdefault((name, _stream_of(event, args)), []).append(end)
    except InputError as e:
        if e.kind in (ErrorKind.MISSING, ErrorKind.UNREADABLE):
            raise
        result.error = e.problem
    ends: Dict[MatchKey, int] = dict(seq_ends)
    for (name, stream), values in by_stream.items():
        values.sort()
        for i, end in enumerate(values):
            ends[("order", name, stream, i)] = end
    result.ends = ends
    return result
