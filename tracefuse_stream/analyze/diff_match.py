"""Which ranks and steps of two runs ``tracefuse diff`` compares.

Why: two runs are only comparable rank by rank and step by step. Ranks are matched by
number; steps by number (``ProfilerStep#N`` in both runs), else by position
(``--align-steps position``: the first recorded step of one with the first of the
other, ...), as two jobs profiled at different points of training need. Runs that
cannot be matched (different world sizes, no common rank, no common step) are an error
that names what differs and the option that resolves it, never a diff of the wrong
things.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.errors import UsageError
from tracefuse_stream.rankset import compress_ranges

ALIGN_CHOICES = ("number", "position")


@dataclass
class Matched:
    """The ranks both runs have and the step pairs (base step, new step) compared."""

    ranks: List[int]
    pairs: List[Tuple[int, int]]
    align: str

    @property
    def base_steps(self) -> List[int]:
        return [b for b, _n in self.pairs]

    @property
    def new_steps(self) -> List[int]:
        return [n for _b, n in self.pairs]


def _steps_text(steps: Sequence[int]) -> str:
    return f"ProfilerStep#{compress_ranges(sorted(steps))}" if steps else "no ProfilerStep"


def run_steps(
    steps: Dict[int, List[int]], ranks: Sequence[int], window: Optional[Tuple[int, int]]
) -> List[int]:
    """The steps every one of ``ranks`` recorded, within ``window`` (A, B inclusive)."""
    common: Optional[set] = None
    for r in ranks:
        mine = set(steps.get(r, []))
        common = mine if common is None else common & mine
    out = sorted(common or set())
    if window is not None:
        out = [s for s in out if window[0] <= s <= window[1]]
    return out


def match_ranks(
    base: Sequence[int],
    new: Sequence[int],
    sizes: Tuple[Optional[int], Optional[int]],
    ranks_given: bool,
) -> List[int]:
    """The ranks to compare: both runs' (``ranks_given``: what ``--ranks`` left of each)."""
    if sizes[0] is not None and sizes[1] is not None and sizes[0] != sizes[1] and not ranks_given:
        both = sorted(set(base) & set(new))
        hint = f" --ranks {compress_ranges(both)} (the ranks both have)" if both else " --ranks"
        raise UsageError(
            f"the runs have different world sizes: BASE {sizes[0]} ranks, NEW {sizes[1]}; "
            f"compare the same ranks of each:{hint}"
        )
    common = sorted(set(base) & set(new))
    if not common:
        raise UsageError(
            f"no common rank: BASE has ranks {compress_ranges(sorted(base)) or 'none'}, NEW has "
            f"{compress_ranges(sorted(new)) or 'none'}; give each run's files of the same ranks, or "
            "--rank-from order to number each run's files by their position"
        )
    return common


def match_steps(
    base: Sequence[int],
    new: Sequence[int],
    align: str,
    recorded: Tuple[Sequence[int], Sequence[int]] = ((), ()),
) -> List[Tuple[int, int]]:
    """(base step, new step) pairs: by number (both have it) or by position; ``recorded``:
    each run's steps before ``--steps`` (for the message when none is left)."""
    if align not in ALIGN_CHOICES:
        raise UsageError(f"--align-steps {align!r}: expected one of {', '.join(ALIGN_CHOICES)}")
    if not base or not new:
        which = "BASE" if not base else "NEW"
        raise UsageError(
            f"no steps to compare: {which} has no ProfilerStep that all its ranks recorded in the "
            f"chosen range (every rank of BASE recorded {_steps_text(recorded[0])}, of NEW "
            f"{_steps_text(recorded[1])}); --steps / --base-steps / --new-steps choose other steps"
        )
    if align == "position":
        return list(zip(sorted(base), sorted(new)))
    common = sorted(set(base) & set(new))
    if not common:
        raise UsageError(
            f"no common steps: BASE has {_steps_text(base)}, NEW has {_steps_text(new)}; "
            "--align-steps position matches them by position, or --base-steps / --new-steps choose them"
        )
    return [(s, s) for s in common]


__all__ = ["ALIGN_CHOICES", "Matched", "match_ranks", "match_steps", "run_steps"]
