"""Lists a person reads: bounded, one item a line, and one line for many ranks.

An error or a summary that lists every file of a 64-rank job in one line is not read;
it is scrolled past. So every listing in a message goes through :func:`bounded`: the
first few items, one a line, then ``... and N more`` (``info`` prints everything). A
note that holds for several ranks goes through :func:`by_ranks`: printed once, with
its ranks (``ranks 0-7: ...``), never once per rank.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Sequence, Tuple

from tracefuse_stream.rankset import compress_ranges

#: items shown before "... and N more"
SHOWN = 4


def bounded(items: Sequence[str], indent: str = "  ", limit: int = SHOWN, more: str = "") -> List[str]:
    """``items`` as indented lines: all of them when there are at most ``limit + 1``
    (a "... and 1 more" line would save nothing), else the first ``limit`` and
    ``... and N more`` (plus ``more``, e.g. where to see them all)."""
    if len(items) <= limit + 1:
        return [indent + x for x in items]
    rest = len(items) - limit
    tail = f"{indent}... and {rest} more" + (f" ({more})" if more else "")
    return [indent + x for x in items[:limit]] + [tail]


def inline(items: Sequence[str], limit: int = 2) -> str:
    """``a, b, ... and N more`` for a short list inside one line."""
    if len(items) <= limit + 1:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f", ... and {len(items) - limit} more"


def rank_label(ranks: Iterable[int]) -> str:
    """``rank 3`` or ``ranks 0-7`` (compressed ranges)."""
    rs = sorted(set(ranks))
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {compress_ranges(rs)}"


def by_ranks(notes: Iterable[Tuple[int, str]]) -> List[str]:
    """``(rank, note)`` pairs as one ``ranks 0-7: note`` line per distinct note, in
    the order the notes first appear."""
    ranks: Dict[str, List[int]] = {}
    for r, note in notes:
        ranks.setdefault(note, []).append(r)
    return [f"{rank_label(rs)}: {note}" for note, rs in ranks.items()]


__all__ = ["SHOWN", "bounded", "by_ranks", "inline", "rank_label"]
