"""Complete ("X") events that overlap without nesting on one thread, in bounded memory.

Events of a thread arrive in file order, not sorted, so this is an external sort:
one fixed-size record per X event is buffered, sorted and spilled to a temporary
file every ``chunk_records`` records; the sorted runs are merged with
``heapq.merge`` (in several levels beyond ``SORT_FAN_IN`` runs) and swept with one
stack per thread.
"""

from __future__ import annotations

import heapq
import os
import shutil
import struct
import tempfile
from typing import Callable, Iterator, List, Optional, Tuple

#: X-event records buffered before a sorted run is spilled to disk (32 bytes each).
SORT_CHUNK_RECORDS = 1 << 18
#: sorted runs merged at once; more runs are merged in several levels.
SORT_FAN_IN = 64
_MASK64 = (1 << 64) - 1

#: (end_ns, event index, name id, ts_ns) of one swept slice
Slice = Tuple[int, int, int, int]


class OverlapSorter:
    """External sort of X-event records ``(thread, ts, -end, index, name)``."""

    REC = struct.Struct(">IQQQI")
    OFF = 1 << 62  # ts and end are stored offset by this, so negative times sort right

    def __init__(self, chunk_records: Optional[int] = None) -> None:
        self.chunk = chunk_records or SORT_CHUNK_RECORDS
        self.buf: List[bytes] = []
        self.runs: List[str] = []
        self.records = 0
        self._tmp: Optional[str] = None

    def add(self, thread: int, ts: int, end: int, idx: int, name_id: int) -> bool:
        o = self.OFF
        if not (-o <= ts < o and -o <= end < o):
            return False
        self.buf.append(self.REC.pack(thread, ts + o, _MASK64 - (end + o), idx, name_id))
        if len(self.buf) >= self.chunk:
            self.spill()
        return True

    def _tmpdir(self) -> str:
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="tracefuse-verify-")
        return self._tmp

    def spill(self) -> None:
        """Sort the buffered records into a run file; ``buf`` becomes a new empty list."""
        if not self.buf:
            return
        self.buf.sort()
        p = os.path.join(self._tmpdir(), f"run{len(self.runs)}")
        with open(p, "wb") as f:
            f.write(b"".join(self.buf))
        self.records += len(self.buf)
        self.buf = []
        self.runs.append(p)

    def _read_run(self, p: str) -> Iterator[bytes]:
        size = self.REC.size
        block = size * 8192
        with open(p, "rb") as f:
            while True:
                data = f.read(block)
                if not data:
                    return
                for i in range(0, len(data), size):
                    yield data[i : i + size]

    def sorted_records(self) -> Iterator[bytes]:
        if not self.runs:
            self.records += len(self.buf)
            self.buf.sort()
            yield from self.buf
            self.buf = []
            return
        self.spill()
        runs = self.runs
        level = 0
        while len(runs) > SORT_FAN_IN:
            merged = []
            for g in range(0, len(runs), SORT_FAN_IN):
                group = runs[g : g + SORT_FAN_IN]
                p = os.path.join(self._tmpdir(), f"l{level}m{g}")
                with open(p, "wb") as f:
                    out: List[bytes] = []
                    for rec in heapq.merge(*(self._read_run(x) for x in group)):
                        out.append(rec)
                        if len(out) >= 8192:
                            f.write(b"".join(out))
                            out = []
                    f.write(b"".join(out))
                for x in group:
                    os.unlink(x)
                merged.append(p)
            runs = merged
            level += 1
        self.runs = runs
        yield from heapq.merge(*(self._read_run(x) for x in runs))

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self.buf = []


def sweep(sorter: OverlapSorter, on_overlap: Callable[[int, Slice, Slice], None]) -> None:
    """Stack sweep over records sorted by (thread, ts, end desc): an event that starts
    inside the innermost open slice but ends after it cannot nest."""
    unpack = sorter.REC.unpack
    off = sorter.OFF
    cur = -1
    stack: List[Slice] = []
    for rec in sorter.sorted_records():
        th, ts, ne, idx, nm = unpack(rec)
        ts -= off
        end = _MASK64 - ne - off
        if th != cur:
            cur = th
            stack = []
        while stack and stack[-1][0] <= ts:
            stack.pop()
        if stack and end > stack[-1][0]:
            on_overlap(th, (end, idx, nm, ts), stack[-1])
            continue
        stack.append((end, idx, nm, ts))


__all__ = ["OverlapSorter", "SORT_CHUNK_RECORDS", "SORT_FAN_IN", "Slice", "sweep"]
