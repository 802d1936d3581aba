"""The top-level keys other than ``traceEvents``, recovered without a second parse.

A pass keeps the bytes before the first event (the header region plus a chunk) and,
on the exact path, the bytes after the last one; those regions are parsed with
orjson (so values are what a plain JSON reader gives: floats, not Decimals). The
fast path decodes the keys after the events itself (``EventBatches.trailer``) and
:func:`to_plain` turns its exact numbers into the same floats.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Dict, Optional, Tuple

import orjson

_TE_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_ARRAY_END = re.compile(rb"\}\s*\]\s*([,}])")

#: (top-level keys except traceEvents, all of them recovered?, has a traceEvents array?)
TopLevel = Tuple[Dict[str, Any], bool, bool]


def loads_dict(data: bytes) -> Optional[Dict[str, Any]]:
    """``data`` parsed as a JSON object, or None."""
    try:
        d = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return d if isinstance(d, dict) else None


def to_plain(o: Any) -> Any:
    """Exact Decimals -> what orjson would have produced (float)."""
    if isinstance(o, dict):
        return {k: to_plain(v) for k, v in o.items()}
    if isinstance(o, list):
        return [to_plain(v) for v in o]
    if isinstance(o, Decimal):
        return float(o)
    return o


def keys_before_events(head: Optional[bytes]) -> Optional[Dict[str, Any]]:
    """The keys before ``"traceEvents": [`` in ``head``; None when they cannot be parsed."""
    if head is None:
        return None
    for m in _TE_KEY.finditer(head):
        pre = loads_dict(head[: m.start()] + b'"traceEvents":[]}')
        if pre is not None:
            return {k: v for k, v in pre.items() if k != "traceEvents"}
    return None


def keys_after_events(tail: Optional[bytes]) -> Optional[Dict[str, Any]]:
    """The keys after the event array's closing ``]`` in ``tail``; None when unparsable."""
    if tail is None:
        return None
    for m in _ARRAY_END.finditer(tail):
        if m.group(1) == b"}":
            if not tail[m.end() :].strip():
                return {}
            continue
        post = loads_dict(b"{" + tail[m.end() :])
        if post is not None:
            return post
    return None


def top_level(head: Optional[bytes], tail: Optional[bytes], seen_items: bool) -> TopLevel:
    """Recover the top-level keys except traceEvents from the head and tail regions."""
    if not seen_items:
        d = loads_dict(head) if head is not None else None
        if d is None:
            return {}, False, False
        has = isinstance(d.get("traceEvents"), list)
        return {k: v for k, v in d.items() if k != "traceEvents"}, True, has
    out: Dict[str, Any] = {}
    pre = keys_before_events(head)
    post = keys_after_events(tail)
    if pre is not None:
        out.update(pre)
    if post is not None:
        out.update(post)
    return out, pre is not None and post is not None, True


def top_level_with_trailer(head: Optional[bytes], trailer: Dict[str, Any]) -> TopLevel:
    """Like :func:`top_level` when the keys after the events are already decoded."""
    out: Dict[str, Any] = {}
    pre = keys_before_events(head)
    if pre is not None:
        out.update(pre)
    out.update(to_plain(trailer))
    return out, pre is not None, True


__all__ = [
    "TopLevel",
    "keys_after_events",
    "keys_before_events",
    "loads_dict",
    "to_plain",
    "top_level",
    "top_level_with_trailer",
]
