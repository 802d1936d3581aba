"""The ``perfetto_manifest.json`` of a Perfetto v58 archive, and the members' names.

Perfetto v58 imports a TAR of several traces as one merged trace. Without a manifest
every member lands on one (host) machine, where processes with the same pid in two
files become ONE process (containerised ranks all have pid 1). The manifest gives each
member its own machine, which keeps the ranks apart, and may pin each member's clock
to another member's (``clocks.sync_to`` + ``offset_ns``: the member reads T when the
reference reads T + offset_ns). JSON traces are clockless: pinning is the only
relation Perfetto has for them.

Format (Perfetto's reference, "Trace manifest format", checked against
trace_processor v58.2): ``{"perfetto_manifest": {"version": 1, "files": [{"path":
MEMBER, "machine": {"name": NAME}, "clocks": {"sync_to": {"file": REF}, "offset_ns":
N}}, ...]}}``. ``path`` must equal the member name exactly (no ``./``); the manifest is
detected by its first key, so ``perfetto_manifest`` comes first; other top-level keys
are ignored (ours: ``tracefuse``, what wrote it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

MANIFEST_NAME = "perfetto_manifest.json"
_ARCHIVE_SUFFIX = re.compile(r"\.perfetto\.tar(\.gz)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Member:
    """One rank's member: its name in the archive, its machine, its clock offset."""

    rank: int
    path: str
    machine: str
    offset_ns: int = 0  # relative to the first member (the reference clock)


def archive_stem(target: str) -> str:
    """``run/merged.perfetto.tar.gz`` -> ``merged`` (members are ``merged.rank0.json``, ...)."""
    name = Path(target).name
    stem = _ARCHIVE_SUFFIX.sub("", name)
    return stem or "trace"


def member_name(stem: str, rank: int) -> str:
    return f"{stem}.rank{rank}.json"


def machine_name(rank: int, host: Optional[str]) -> str:
    """``rank 3 (node07)``: the machine row Perfetto shows; unique because ranks are."""
    return f"rank {rank} ({host})" if host else f"rank {rank}"


def members_for(stem: str, ranks: Sequence[tuple[int, Optional[str]]]) -> List[Member]:
    """One member per (rank, host), all at offset 0.

    The members hold the JSON merge's rewritten events, already shifted onto the
    merged base (base alignment, ``--align``, ``--clock-offsets`` included), so every
    rank lands where it lands in the JSON merge when each member is pinned to the
    first one with offset 0."""
    return [Member(rank=r, path=member_name(stem, r), machine=machine_name(r, h)) for r, h in ranks]


def manifest_bytes(members: Sequence[Member], about: Optional[Dict[str, Any]] = None) -> bytes:
    """The manifest JSON: each member on its own machine, members after the first
    pinned to the first one's clock with their ``offset_ns``."""
    files: List[Dict[str, Any]] = []
    ref = members[0].path if members else None
    for i, m in enumerate(members):
        entry: Dict[str, Any] = {"path": m.path, "machine": {"name": m.machine}}
        if i and ref is not None:
            entry["clocks"] = {"sync_to": {"file": ref}, "offset_ns": int(m.offset_ns)}
        files.append(entry)
    doc: Dict[str, Any] = {"perfetto_manifest": {"version": 1, "files": files}}
    if about:
        doc["tracefuse"] = about
    # one line: Perfetto detects a manifest by its bytes starting with '{"perfetto_manifest"'
    return (json.dumps(doc, ensure_ascii=False) + "\n").encode()


__all__ = [
    "MANIFEST_NAME",
    "Member",
    "archive_stem",
    "machine_name",
    "manifest_bytes",
    "member_name",
    "members_for",
]
