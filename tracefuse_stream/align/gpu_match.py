"""GPU collective kernels matched across ranks into instances (align/collectives.py).

Why apart: how a NCCL/RCCL kernel is recognised on every rank (by ``Seq``, else by
order per kernel name and stream) is its own rule, next to gloo's (align/sequences.py,
align/gloo_groups.py); align/collectives.py puts the two together. The rules are in
that module's docstring.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Tuple

from tracefuse_stream.align.collective_event import Entry, Key
from tracefuse_stream.align.pg_config import PgConfig
from tracefuse_stream.rankset import compress_ranges


def gpu_entries(scan: Any, cfg: PgConfig, offset: int) -> Dict[Key, Entry]:
    """This rank's GPU collectives keyed for matching (occurrence index appended)."""
    out: Dict[Key, Entry] = {}
    groups: Dict[Key, List[Entry]] = {}
    cfg_ranks = dict(cfg)
    for e in scan.events:
        if e.kind != "gpu" or e.nccl_p2p:  # send/recv: linked as pairs (align/p2p.py)
            continue
        start = scan.base_ns + e.ts_ns + offset
        entry = Entry(e, start, start + e.dur_ns, e.ranks or cfg_ranks.get(e.pg or ""))
        if e.key[0] == "seq":
            prev = out.get(e.key)
            if prev is None:
                out[e.key] = entry
            else:  # coalesced kernels under one seq: the first one, ending with the last
                first = entry if start < prev.start_ns else prev
                out[e.key] = first._replace(end_ns=max(prev.end_ns, entry.end_ns))
        else:
            groups.setdefault(e.key, []).append(entry)
    for key, entries in groups.items():
        entries.sort(key=lambda x: (x.start_ns, x.event.pos))
        for i, entry in enumerate(entries):
            out[key + (i,)] = entry
    return out


def overlap_ok(entries: Mapping[int, Entry], hosts: Mapping[int, Optional[str]]) -> bool:
    """On one clock, no participant can finish before the last one has arrived."""
    by_host: Dict[str, List[Entry]] = {}
    for r, e in entries.items():
        h = hosts.get(r)
        by_host.setdefault(f"host {h}" if h else f"rank {r}", []).append(e)
    return all(max(e.start_ns for e in es) <= min(e.end_ns for e in es) for es in by_host.values())


def match_gpu(
    scans: Mapping[int, Any],
    cfgs: Mapping[int, PgConfig],
    hosts: Mapping[int, Optional[str]],
    offsets: Mapping[int, int],
    unmatched: Counter,
) -> List[Tuple[str, str, str, Dict[int, Entry]]]:
    """GPU kernels: by (group, collective, Seq) where present, else by order per
    kernel name and stream; (name, group, match, entries) per instance."""
    merged = sorted(scans)
    by_key: Dict[Key, Dict[int, Entry]] = {}
    for r in merged:
        for key, entry in gpu_entries(scans[r], cfgs.get(r, []), offsets.get(r, 0)).items():
            by_key.setdefault(key, {})[r] = entry
    found = []
    for key, entries in by_key.items():
        named = next((e.participants for e in entries.values() if e.participants), None)
        expected = set(merged) if named is None else set(named) & set(merged)
        name, group, match = str(key[2]), str(key[1]), "seq" if key[0] == "seq" else "order"
        if len(expected) < 2:
            continue  # a group of one merged rank: nothing to match across ranks
        if set(entries) != expected:
            missing = expected - set(entries)
            reason = (
                f"missing on rank(s) {compress_ranges(sorted(missing))}"
                if missing
                else "on ranks outside its group"
            )
            unmatched[("gpu", name, group, reason)] += 1
        elif not overlap_ok(entries, hosts):
            unmatched[("gpu", name, group, "ends before another rank arrives (order off)")] += 1
        else:
            found.append((name, group, match, entries))
    return found


__all__ = ["gpu_entries", "match_gpu", "overlap_ok"]
