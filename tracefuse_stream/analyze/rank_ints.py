"""rank -> int figures of every step held as int64 arrays once the verdict is made
(issue 38, item 2: bounded memory).

Why: the verdict keeps, for every step, a dozen dicts rank -> ns (waits, holds,
lateness, thresholds, the graph's starts, ends and skews): a dict of 8 ranks is ~290
bytes and each of its ns values an int of 32 more, ~550 bytes a dict, ~0.6 KB a rank
and step in all. Once judged they are only read, so each becomes a :class:`RankInts`:
its ranks as one tuple shared by every mapping with the same ranks in the same order,
its values as an int64 array (~180 bytes for 8 ranks). It reads as the dict did (the
same keys in the same order, the same int values), so every report is the same bytes;
a dict with a value that is not a plain int or is beyond 64 bits stays a dict.
"""

from __future__ import annotations

from array import array
from typing import Any, Dict, Iterator, Mapping, Sequence, Tuple


class RankInts(Mapping[int, int]):
    """A read-only rank -> int mapping: keys in the dict's order, values as int64."""

    __slots__ = ("_keys", "_at", "_values")

    def __init__(self, keys: Tuple[int, ...], at: Dict[int, int], values: array[int]) -> None:
        self._keys, self._at, self._values = keys, at, values

    def __getitem__(self, k: int) -> int:
        return self._values[self._at[k]]

    def __contains__(self, k: object) -> bool:
        return k in self._at

    def __iter__(self) -> Iterator[int]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    # iterated as the dicts were (the reports read every row's): at C speed
    def items(self) -> Iterator[Tuple[int, int]]:  # type: ignore[override]
        return zip(self._keys, self._values)

    def values(self) -> Iterator[int]:  # type: ignore[override]
        return iter(self._values)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


class Freezer:
    """Turns dicts into :class:`RankInts`, sharing each distinct key order once."""

    __slots__ = ("_orders",)

    def __init__(self) -> None:
        self._orders: Dict[Tuple[Any, ...], Tuple[Tuple[int, ...], Dict[int, int]]] = {}

    def freeze(self, d: Any) -> Any:
        """``d`` as a :class:`RankInts`, or ``d`` itself: not a dict of int keys and
        plain int values within 64 bits, or empty."""
        if type(d) is not dict or not d:
            return d
        if any(type(k) is not int for k in d) or any(type(v) is not int for v in d.values()):
            return d
        try:
            values = array("q", d.values())
        except OverflowError:
            return d
        keys = tuple(d)
        got = self._orders.get(keys)
        if got is None:
            got = self._orders[keys] = (keys, {k: i for i, k in enumerate(keys)})
        return RankInts(got[0], got[1], values)


#: a step row's and its graph's rank -> int dicts, read only once the verdict is made
_ROW_FIGURES = ("wait", "held", "lateness", "late_at", "busy", "last", "count", "threshold", "own", "own_at",
                "skew", "held_raw")  # fmt: skip
_GRAPH_FIGURES = ("start", "end", "skew", "late_skew", "own_late", "own_late_at")


def freeze_step_rows(rows: Sequence[Any]) -> None:
    """Every step row's and its graph's rank -> int dicts (analyze/stragglers.py
    ``StepRow``, analyze/graph.py ``StepGraph``) as :class:`RankInts`, once the verdict
    is made; a dict held twice (a row's ``own`` is its graph's ``own_late``) frozen once."""
    f = Freezer()
    done: Dict[int, Tuple[Any, Any]] = {}  # id(dict) -> (the dict, kept alive; its frozen form)

    def frozen(d: Any) -> Any:
        got = done.get(id(d))
        if got is None:
            got = done[id(d)] = (d, f.freeze(d))
        return got[1]

    for row in rows:
        g = row.graph
        for k in _GRAPH_FIGURES if g is not None else ():
            setattr(g, k, frozen(getattr(g, k)))
        for k in _ROW_FIGURES:
            setattr(row, k, frozen(getattr(row, k)))


__all__ = ["Freezer", "RankInts", "freeze_step_rows"]
