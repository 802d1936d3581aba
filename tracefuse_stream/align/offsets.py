"""One clock offset per host, estimated from matched collective kernel ends.

Ranks share a clock when they share ``host_name``; the offset of a host is the median
end-time difference to the reference host (the host of the lowest rank), applied only
when it is significant (enough matches, spread below the offset). See
:mod:`tracefuse_stream.align.clock` for the reasoning and the sign convention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from tracefuse_stream.align.ends import DEFAULT_MIN_MATCHES, MatchKey, RankCollectives
from tracefuse_stream.rankset import compress_ranges


@dataclass
class RankAlignment:
    """The clock correction for one rank and why it is what it is.

    ``offset_ns`` is ADDED to the rank's absolute times (0 unless ``applied``);
    ``estimate_ns`` keeps the raw estimate even when it was rejected, so a user can see
    how close it came. ``matched`` counts the collectives the host matched with the
    reference host; ``spread_us`` is the MAD of the end-time differences.
    """

    offset_ns: int
    host: str
    matched: int = 0
    spread_us: float = 0.0
    applied: bool = False
    reason: str = ""
    method: str = "collectives"
    estimate_ns: Optional[int] = None

    @property
    def offset_us(self) -> float:
        return self.offset_ns / 1000.0

    def to_header(self) -> Dict[str, Any]:
        """JSON-safe record for the merged file's ``tracefuse.ranks[r].align``."""
        return {
            "method": self.method,
            "host": self.host,
            "offset_ns": self.offset_ns,
            "estimate_ns": self.estimate_ns,
            "matched": self.matched,
            "spread_us": round(self.spread_us, 3),
            "applied": self.applied,
            "reason": self.reason,
        }


def _group_of(rank: int, hosts: Mapping[int, Optional[str]]) -> Tuple[Tuple[str, Any], str]:
    """(clock group id, label): ranks on one named host share a clock; a rank with no
    known host is its own clock (we cannot assume it shares one with anybody)."""
    h = hosts.get(rank)
    if h is None or (isinstance(h, str) and not h.strip()):
        return ("rank", rank), f"rank {rank} (host unknown)"
    return ("host", str(h)), str(h)


def _median2(values: List[int]) -> int:
    """Twice the median of integers, as an exact integer."""
    v = sorted(values)
    n = len(v)
    return 2 * v[n // 2] if n % 2 else v[n // 2 - 1] + v[n // 2]


_NO_GPU = (
    "no GPU collective kernels (NCCL/RCCL) in any trace; CPU-side collective ops "
    "do not end together and are not used"
)


def estimate_offsets(
    ranks: Mapping[int, RankCollectives],
    hosts: Mapping[int, Optional[str]],
    min_matches: int = DEFAULT_MIN_MATCHES,
) -> Dict[int, RankAlignment]:
    """Estimate one clock offset per host from matched collective kernel ends.

    The reference clock is the host of the lowest rank (offset 0). For every key the
    reference end is the median over the reference host's ranks that have it; each
    rank of another host contributes ``ref_end - own_end`` per common key, and the
    host's offset is the median of those differences (so ``own_end + offset`` lands
    on ``ref_end``). All ranks of a host get the same offset because they share its
    clock. The estimate is applied only if at least ``min_matches`` distinct
    collectives matched and the spread (MAD) is below ``|offset|`` (:func:`significant`).
    """
    all_ranks = sorted(set(ranks) | set(hosts))
    out: Dict[int, RankAlignment] = {}
    if not all_ranks:
        return out
    groups: Dict[Tuple[str, Any], List[int]] = {}
    labels: Dict[Tuple[str, Any], str] = {}
    for r in all_ranks:
        gid, label = _group_of(r, hosts)
        groups.setdefault(gid, []).append(r)
        labels[gid] = label
    ref_gid, _ = _group_of(all_ranks[0], hosts)
    ends = {r: (ranks[r].ends if r in ranks else {}) for r in all_ranks}
    any_collectives = any(ends.values())
    ref_ends2 = _reference_ends2(ends, groups[ref_gid])
    for gid, members in groups.items():
        if gid == ref_gid:
            reason = (
                f"reference host ({len(ref_ends2)} collectives); offset 0 by definition"
                if any_collectives
                else f"reference host; {_NO_GPU}; offset 0"
            )
            for r in members:
                out[r] = RankAlignment(0, labels[gid], reason=reason)
            continue
        host_ends = [ends[r] for r in members]
        for r in members:
            out[r] = _host_alignment(
                host_ends, ref_ends2, labels[gid], labels[ref_gid], any_collectives, min_matches
            )
    _add_read_notes(out, ranks)
    return out


def _reference_ends2(ends: Mapping[int, Dict[MatchKey, int]], ref_ranks: List[int]) -> Dict[MatchKey, int]:
    """Reference end per key: median over the reference host's ranks, kept DOUBLED so
    it stays an exact integer (the median of an even count is a half-integer, and
    epoch ns ~1.7e18 are far beyond float precision: ulp 256 ns)."""
    ref_values: Dict[MatchKey, List[int]] = {}
    for r in ref_ranks:
        for k, e in ends[r].items():
            ref_values.setdefault(k, []).append(e)
    return {k: _median2(v) for k, v in ref_values.items()}


def significant(offset: float, mad: float) -> bool:
    """The rule the README states and ``info --align`` prints: an estimate is applied
    when its spread (MAD) is *below* it (was: not above it, so +0.500 us with a spread
    of 0.500 us printed "applied yes"). A spread of 0 is every difference equal: exact,
    whatever the offset (0 included)."""
    return mad < abs(offset) or mad == 0


def _host_alignment(
    host_ends: List[Dict[MatchKey, int]],
    ref_ends2: Dict[MatchKey, int],
    label: str,
    ref_label: str,
    any_collectives: bool,
    min_matches: int,
) -> RankAlignment:
    """One non-reference host's offset (the same for each of its ranks), and why."""
    diffs2: List[int] = []  # doubled ref_end - own_end: small exact integers
    matched_keys = set()
    for own in host_ends:
        for k, e in own.items():
            ref2 = ref_ends2.get(k)
            if ref2 is not None:
                diffs2.append(ref2 - 2 * e)
                matched_keys.add(k)
    n = len(matched_keys)
    estimate: Optional[int] = None
    spread_us = 0.0
    applied = False
    if not any_collectives:
        reason = f"{_NO_GPU}; offset 0"
    elif not any(host_ends):
        reason = "no GPU collective kernels (NCCL/RCCL) in this host's traces; offset 0"
    elif not ref_ends2:
        reason = f"reference host {ref_label} has no GPU collective kernels (NCCL/RCCL); offset 0"
    elif n < min_matches:
        reason = (
            f"only {n} collective(s) matched with reference host {ref_label} (need {min_matches}); offset 0"
        )
    else:
        import statistics  # here: its fractions import is start-up every command paid

        med2 = statistics.median(diffs2)  # values are offsets, exact in a float
        mad = statistics.median([abs(d - med2) for d in diffs2]) / 2
        med = med2 / 2
        estimate = int(round(med))
        spread_us = mad / 1000.0
        if not significant(med, mad):
            reason = (
                f"estimate {med / 1000.0:+.3f} us over {n} collectives is not "
                f"significant: spread (MAD) {spread_us:.3f} us is not below it; offset 0"
            )
        else:
            applied = True
            reason = f"aligned to host {ref_label} on {n} collectives"
    return RankAlignment(
        estimate if applied and estimate is not None else 0,
        label,
        matched=n,
        spread_us=spread_us,
        applied=applied,
        reason=reason,
        estimate_ns=estimate,
    )


def _add_read_notes(out: Dict[int, RankAlignment], ranks: Mapping[int, RankCollectives]) -> None:
    """Per-rank notes that qualify the numbers (partial reads, cap)."""
    for r in sorted(ranks):
        rc = ranks[r]
        notes = []
        if rc.cap_hit:
            notes.append(f"only the first {rc.count} collective kernels were read (cap)")
        if rc.error:
            notes.append(f"trace read only partly: {rc.error}")
        if notes:
            out[r].reason += "; " + "; ".join(notes)


def format_alignment_table(alignments: Mapping[int, RankAlignment]) -> str:
    """A plain-text table for ``info --align`` and the merge summary: one row per run
    of consecutive ranks with the same figures (``0-7``), not the same line 8 times."""
    header = ("rank", "host", "offset_us", "matched", "spread_us", "applied", "reason")
    rows: List[Tuple[str, ...]] = [header]
    runs: List[Tuple[List[int], Tuple[str, ...]]] = []
    for r in sorted(alignments):
        a = alignments[r]
        cells = (
            a.host,
            f"{a.offset_ns / 1000.0:+.3f}",
            str(a.matched) if a.method == "collectives" else "-",
            f"{a.spread_us:.3f}" if a.matched else "-",
            "yes" if a.applied else "no",
            a.reason,
        )
        if runs and runs[-1][1] == cells and runs[-1][0][-1] == r - 1:
            runs[-1][0].append(r)
        else:
            runs.append(([r], cells))
    rows += [(compress_ranges(rs),) + cells for rs, cells in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = []
    for row in rows:
        line = [
            row[i].rjust(widths[i]) if i in (0, 2, 3, 4) else row[i].ljust(widths[i])
            for i in range(len(header) - 1)
        ]
        lines.append("  ".join(line + [row[-1]]).rstrip())
    return "\n".join(lines)


__all__ = ["RankAlignment", "estimate_offsets", "format_alignment_table"]
