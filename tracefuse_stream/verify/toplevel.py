"""The top-level keys other than ``traceEvents``, recovered without a second parse.

A pass keeps the bytes before the first event (the header region plus a chunk) and,
on the exact path, the bytes after the last one; the keys are read from those
regions by :mod:`tracefuse_stream.read.toplevel` (the one reader of a file's top
level), with plain values (floats, not Decimals: what a plain JSON reader gives).
The fast path decodes the keys after the events itself (``EventBatches.trailer``)
and :func:`~tracefuse_stream.read.toplevel.to_plain` turns its exact numbers into
the same floats.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from tracefuse_stream.read.toplevel import EVENTS_KEY, keys_after, keys_before, loads_dict, to_plain

#: (top-level keys except traceEvents, all of them recovered?, has a traceEvents array?)
TopLevel = Tuple[Dict[str, Any], bool, bool]


def top_level(head: Optional[bytes], tail: Optional[bytes], seen_items: bool) -> TopLevel:
    """Recover the top-level keys except traceEvents from the head and tail regions."""
    if not seen_items:
        d = loads_dict(head) if head is not None else None
        if d is None:
            return {}, False, False
        has = isinstance(d.get(EVENTS_KEY), list)
        return {k: v for k, v in d.items() if k != EVENTS_KEY}, True, has
    out: Dict[str, Any] = {}
    pre = keys_before(head)
    post = keys_after(tail)
    if pre is not None:
        out.update(pre)
    if post is not None:
        out.update(post)
    return out, pre is not None and post is not None, True


def top_level_with_trailer(head: Optional[bytes], trailer: Dict[str, Any]) -> TopLevel:
    """Like :func:`top_level` when the keys after the events are already decoded."""
    out: Dict[str, Any] = {}
    pre = keys_before(head)
    if pre is not None:
        out.update(pre)
    out.update(to_plain(trailer))
    return out, pre is not None, True


__all__ = ["TopLevel", "top_level", "top_level_with_trailer"]
