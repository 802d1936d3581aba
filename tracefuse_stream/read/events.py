"""One way to read the events of a trace: :func:`iter_event_batches` / :func:`iter_events`.

Every pass that is not the merge itself — step windows, the first event of a rank,
collective matching for clock alignment, ``info``, ``verify`` — needs the events of a
file and nothing else. They all read them here, so they all accept both layouts
(``{"traceEvents": [...]}`` and the bare ``[...]`` array), every compression the
merge accepts, and numbers exactly as the merge reads them (integers of any size,
other numbers as ``Decimal`` with their digits: a uint64 ``Comms Id`` is no error).

Reading is the merge's own: validated ~1 MB batches decoded by msgspec
(:mod:`tracefuse_stream.read.batches`); whatever that stage hands back (invalid or
truncated JSON, an open-ended array, a damaged stream) is re-read from the start by
the exact ijson reader, which skips the events already delivered and names the exact
position of the problem. Both produce the same values, so a caller cannot tell which
one it got, except by speed.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, TypedDict

import msgspec

from tracefuse_stream.errors import InputError
from tracefuse_stream.exactjson import loads_exact
from tracefuse_stream.read.batches import EventBatches, NotBatchable
from tracefuse_stream.read.readers import ExactReader, TooDeepError
from tracefuse_stream.read.scan import ScanSelection, Tally, kernel_scan
from tracefuse_stream.read.sources import PathLike, TraceReader, detect_compression

EXACT_BATCH = 4096  # events per list handed out by the exact reader


def sniff_layout(path: PathLike, compression: Optional[str] = None) -> str:
    """``"array"`` when the first non-blank byte is ``[``, else ``"object"`` (the
    readers report anything else as not a trace)."""
    reader = TraceReader(path, compression)
    try:
        while True:
            chunk = reader.read(4096)
            if not chunk:
                return "object"
            stripped = chunk.lstrip(b" \t\r\n\xef\xbb\xbf")
            if stripped:
                return "array" if stripped[:1] == b"[" else "object"
    finally:
        reader.close()


def iter_event_batches(
    path: PathLike,
    *,
    compression: Optional[str] = None,
    layout: Optional[str] = None,
    strict: bool = True,
    what: str = "reading events",
    progress: Optional[Callable[[int], None]] = None,
    fields: Optional[type] = None,
    select: Optional[ScanSelection] = None,
    tally: Optional[Tally] = None,
) -> Iterator[List[Any]]:
    """Lists of the events of ``path``, in file order.

    ``select`` and ``tally`` (read/scan.py): where the compiled kernel is here, only the
    selected events (and those it cannot judge) are handed out; the others are counted
    and timed into ``tally``. Callers add the tally to what their loop finds.

    ``fields``: a ``TypedDict`` of the keys the caller reads (see the ``*Fields`` types
    below): events then come as dicts of only those keys, decoded several times faster.
    The exact fallback reader delivers whole events (a superset), so callers use
    ``ev.get(key)`` and must not rely on other keys being absent.

    ``strict``: a problem in the file raises :class:`InputError` naming the file, the
    position and ``what`` the pass was doing; with ``strict=False`` iteration simply
    ends after the last complete event (for truncated files of killed jobs).
    ``progress`` receives compressed bytes read (first pass only).
    """
    layout = layout or sniff_layout(path, compression)
    delivered = 0
    reader = TraceReader(path, compression)
    try:
        last = 0
        scan = kernel_scan(select, tally)
        batches = EventBatches(reader, layout, fields)
        source = batches.mixed(scan, decode_out=True) if scan is not None else iter(batches)
        for batch in source:
            assert isinstance(batch, list)
            if progress is not None:
                now = reader.tell_raw()
                progress(now - last)
                last = now
            delivered += len(batch)
            yield batch
        return
    except NotBatchable:
        pass
    except InputError as e:
        if e.event_index is not None:
            raise
        # a read or decompression problem: the exact reader reports it with its position
    finally:
        reader.close()
    if tally is not None:
        delivered += tally.events  # judged by the kernel: the exact reader skips them too
    yield from _exact_batches(path, compression, layout, strict, what, delivered)


def _exact_batches(
    path: PathLike, compression: Optional[str], layout: str, strict: bool, what: str, skip: int
) -> Iterator[List[Any]]:
    """The merge's exact reader (:class:`~tracefuse_stream.read.readers.ExactReader`),
    skipping the ``skip`` events already delivered, regrouped into lists; its errors
    say what the pass was doing (and suggest nothing: side passes have no salvage)."""
    reader = ExactReader(str(path), compression or detect_compression(path), layout, need_trailer=False)
    batch: List[Any] = []
    try:
        for one in reader.batches():
            if reader.index <= skip:
                continue
            batch.extend(one)
            if len(batch) >= EXACT_BATCH:
                yield batch
                batch = []
    except InputError as e:
        if strict and (e.event_index is None or isinstance(e, TooDeepError)):
            raise  # a read or decompression problem, as the file reader words it; a depth
        if strict:
            raise InputError(
                e.path, f"{e.problem} while {what}", kind=e.kind, offset=e.offset, event_index=e.event_index
            ) from None
    finally:
        reader.close()
    if batch:
        yield batch


def iter_events(path: PathLike, **kwargs: Any) -> Iterator[Any]:
    """The events of ``path`` one by one (see :func:`iter_event_batches`)."""
    for batch in iter_event_batches(path, **kwargs):
        yield from batch


class TimedFields(TypedDict, total=False):
    """What placing an event in time needs (first/last event, windows)."""

    ph: Any
    ts: Any
    dur: Any


class StepFields(TimedFields, total=False):
    """What finding ``ProfilerStep#N`` needs."""

    name: Any


class KernelFields(StepFields, total=False):
    """What finding collective kernels needs; ``args`` stays raw JSON until an event
    turns out to be a kernel (``decode_args``)."""

    cat: Any
    pid: Any
    tid: Any  # the stream of a kernel whose args do not name one
    args: msgspec.Raw


def decode_args(event: Dict[str, Any]) -> Any:
    """The event's ``args`` as a value (decoding a projected event's raw args)."""
    args = event.get("args")
    return loads_exact(args) if isinstance(args, msgspec.Raw) else args


__all__ = [
    "KernelFields",
    "StepFields",
    "TimedFields",
    "decode_args",
    "iter_event_batches",
    "iter_events",
    "sniff_layout",
]
