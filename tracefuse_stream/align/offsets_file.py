"""Known clock offsets from a ``--clock-offsets FILE``: ``{"host or rank": microseconds}``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from tracefuse_stream.align.ends import DIGITS as _RANK_KEY
from tracefuse_stream.align.offsets import RankAlignment, _group_of
from tracefuse_stream.errors import UsageError
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.read.sources import PathLike
from tracefuse_stream.timeunits import us_to_ns_or_none as us_to_ns


def _reject_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    seen: Dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError(f"duplicate key {k!r}")
        seen[k] = v
    return seen


def load_clock_offsets(path: PathLike) -> Dict[str, float]:
    """Read a ``--clock-offsets FILE``: a JSON object ``{"<host or rank>": microseconds}``.

    Values are ADDED to the times of that host's (or rank's) events, the same sign as
    :attr:`RankAlignment.offset_ns`. Anything else -- unreadable file, invalid JSON,
    not an object, duplicate or empty keys, non-numeric or non-finite values -- is a
    :class:`UsageError`: a wrong offset silently applied would be worse than none.
    """
    where = f"--clock-offsets {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{where}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicates)
    except ValueError as e:
        raise UsageError(f"{where}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(
            f'{where}: expected a JSON object {{"host or rank": microseconds}}, got {type(data).__name__}'
        )
    out: Dict[str, float] = {}
    for k, v in data.items():
        if not k.strip():
            raise UsageError(f"{where}: empty host/rank key")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise UsageError(f"{where}: offset for {k!r} must be a number of microseconds, got {v!r}")
        if not math.isfinite(float(v)):
            raise UsageError(f"{where}: offset for {k!r} is not finite")
        out[k] = float(v) if isinstance(v, float) else v  # ints stay exact
    return out


def offsets_from_file(
    mapping: Mapping[str, Union[int, float]], hosts: Mapping[int, Optional[str]]
) -> Dict[int, RankAlignment]:
    """Turn a loaded ``--clock-offsets`` mapping into per-rank alignments.

    A key made of ASCII digits names a rank; any other key names a host (so a host
    literally called "3" cannot be addressed -- use its ranks). A rank entry wins over
    its host's entry, which lets a user fix one odd rank. Ranks with no entry keep 0.
    An entry naming none of the merged ranks or hosts is a :class:`UsageError`: it is
    a typo or a file for another run, and an offset silently not applied is as wrong
    as a wrong one.
    """
    rank_entries: Dict[int, Tuple[str, int]] = {}
    host_entries: Dict[str, Tuple[str, int]] = {}
    for key, value in mapping.items():
        ns = us_to_ns(value)
        if ns is None:
            raise UsageError(f"--clock-offsets: offset for {key!r} is not a finite number")
        k = key.strip()
        if _RANK_KEY.fullmatch(k):
            r = int(k)
            if r in rank_entries:
                raise UsageError(
                    f"--clock-offsets: keys {rank_entries[r][0]!r} and {key!r} both name rank {r}"
                )
            rank_entries[r] = (key, ns)
        else:
            host_entries[k] = (key, ns)
    known_hosts = {str(h).strip() for h in hosts.values() if h is not None}
    unknown = [key for r, (key, _) in rank_entries.items() if r not in hosts]
    unknown += [key for h, (key, _) in host_entries.items() if h not in known_hosts]
    if unknown:
        raise UsageError(
            f"--clock-offsets: {', '.join(repr(k) for k in unknown)} name(s) no merged rank or host "
            f"(ranks {compress_ranges(hosts)}; hosts {', '.join(sorted(known_hosts)) or 'unknown'}); "
            "remove the entry or merge that rank"
        )
    out: Dict[int, RankAlignment] = {}
    for r in sorted(hosts):
        _, label = _group_of(r, hosts)
        host = hosts.get(r)
        if r in rank_entries:
            key, ns = rank_entries[r]
            out[r] = RankAlignment(
                ns, label, applied=True, method="file", reason=f"clock-offsets file, rank entry {key!r}"
            )
        elif host is not None and str(host).strip() in host_entries:
            key, ns = host_entries[str(host).strip()]
            out[r] = RankAlignment(
                ns, label, applied=True, method="file", reason=f"clock-offsets file, host entry {key!r}"
            )
        else:
            out[r] = RankAlignment(0, label, method="file", reason="not in clock-offsets file; offset 0")
    return out
