"""A rank's steps -> (start, end) ns held as three int64 arrays (issue 38, item 2:
bounded memory).

Why: every rank's ProfilerStep spans are kept from the pass to the end of the
analysis, twice (the scan's, on the file's clock; the table's, aligned): as dicts
step -> (start, end) that is ~100 bytes a rank and step each (the dict's slot, the
tuple, its two ints). As arrays it is 24 bytes. It reads as the dict did (the same
steps in the same order, equal tuples); spans whose steps are not ascending ints or
whose numbers do not fit 64 bits stay a dict.
"""

from __future__ import annotations

import bisect
from array import array
from typing import Any, Dict, Iterator, Mapping, Tuple

Span = Tuple[int, int]


class StepSpans(Mapping[int, Span]):
    """step -> (start ns, end ns), steps ascending, read only."""

    __slots__ = ("_steps", "_lo", "_hi")

    def __init__(self, steps: array[int], lo: array[int], hi: array[int]) -> None:
        self._steps, self._lo, self._hi = steps, lo, hi

    def __getitem__(self, step: Any) -> Span:
        try:
            i = bisect.bisect_left(self._steps, step)
        except TypeError:  # not a number: no such step, as the dict would say
            raise KeyError(step) from None
        if i < len(self._steps) and self._steps[i] == step:
            return self._lo[i], self._hi[i]
        raise KeyError(step)

    def __contains__(self, step: object) -> bool:
        try:
            self[step]
        except (KeyError, TypeError):
            return False
        return True

    def __iter__(self) -> Iterator[int]:
        return iter(self._steps)

    def __len__(self) -> int:
        return len(self._steps)

    # iterated as the dict's were (align/collectives.py finds an instance's step in a
    # loop over them): at C speed, not one __getitem__ a step
    def items(self) -> Iterator[Tuple[int, Span]]:  # type: ignore[override]
        return zip(self._steps, zip(self._lo, self._hi))

    def values(self) -> Iterator[Span]:  # type: ignore[override]
        return zip(self._lo, self._hi)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


def step_spans(d: Dict[Any, Any]) -> Mapping[Any, Any]:
    """``d`` (step -> (start, end)) as a :class:`StepSpans`, or ``d`` itself where that
    would not read the same."""
    if not d or any(type(s) is not int for s in d):
        return d
    if any(
        type(v) is not tuple or len(v) != 2 or type(v[0]) is not int or type(v[1]) is not int
        for v in d.values()
    ):
        return d
    try:
        steps = array("q", d)
        lo, hi = array("q", (v[0] for v in d.values())), array("q", (v[1] for v in d.values()))
    except OverflowError:
        return d
    if any(steps[k] >= steps[k + 1] for k in range(len(steps) - 1)):
        return d  # not ascending: the dict's order would not be kept
    return StepSpans(steps, lo, hi)


__all__ = ["Span", "StepSpans", "step_spans"]
