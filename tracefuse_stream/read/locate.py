"""Name the event, and the field, of a problem the exact reader's parser hides.

yajl (ijson's C backend) writes a lone surrogate escape as ``"?"`` and the parse goes
on: the exact reader only sees, in its raw text, that the file *may* hold one
(read/textcheck.SurrogateScan). This pass frames the file's events itself (salvage's
framer, unparsed) and judges each one's text, so the error names the event's position
and the field; it runs on that error path only.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Optional, Tuple

from tracefuse_stream.read.salvage import Framer, SalvageReport, tolerant_chunks
from tracefuse_stream.read.textcheck import lone_surrogate, surrogate_field


def find_lone_surrogate(path: str) -> Optional[Tuple[int, str, str]]:
    """``(event index, field, escape)`` of the first event holding a lone surrogate
    escape, or None (the raw text held only pairs)."""
    report = SalvageReport()
    framer = Framer(tolerant_chunks(path, report), report, exact=True, raw=True, path=str(path))
    for index, data in enumerate(framer.events()):
        found = lone_surrogate(data)
        if found is None:
            continue
        try:
            value = json.loads(data.decode("utf-8", "replace"), parse_float=Decimal)
            field = surrogate_field(value) or "a string"
        except (ValueError, RecursionError):
            field = "a string"
        return index, field, found[1]
    return None


__all__ = ["find_lone_surrogate"]
