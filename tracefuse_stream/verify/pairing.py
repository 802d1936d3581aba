"""How ``verify --against`` tells which merged rank an input is when the path the merge
recorded (``source``) is not the input's: copies of the inputs elsewhere."""

from __future__ import annotations

import os
from typing import Dict, List


def by_trailing_path(path: str, sources: Dict[int, str]) -> List[int]:
    """The one rank whose recorded source ends with the longest run of path components
    ``path`` ends with too (at least the file name); [] when none or several tie."""
    mine = _parts(path)
    best, ranks = 0, []
    for rank, src in sources.items():
        theirs = _parts(src)
        n = 0
        while n < min(len(mine), len(theirs)) and mine[-1 - n] == theirs[-1 - n]:
            n += 1
        if n > best:
            best, ranks = n, [rank]
        elif n == best and n > 0:
            ranks.append(rank)
    return ranks if len(ranks) == 1 else []


def _parts(path: str) -> List[str]:
    return [c for c in os.path.normpath(os.path.abspath(path)).split(os.sep) if c]


def merged_from(sources: Dict[int, str], shown: int = 4) -> List[str]:
    """The sources of the merged ranks in rank order, by their last two path components
    (the first ``shown``; the header holds the full paths)."""
    names = [os.path.join(*_parts(sources[r])[-2:]) for r in sorted(sources)]
    return names[:shown] + ([f"... and {len(names) - shown} more"] if len(names) > shown else [])


__all__ = ["by_trailing_path", "merged_from"]
