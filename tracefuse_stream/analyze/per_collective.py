"""Per collective type and message size: how long the communication itself takes.

Why: a straggler report says who is late; the next question about a collective is
whether the communication is slow in itself. Per (collective, message size, dtype,
group size) -- the sizes where the trace records them (NCCL's ``In msg nelems``,
``Out msg nelems``, ``dtype``, ``Group size``) -- this gives the count of instances, the
**shortest duration across ranks** (the last rank to arrive spends no time waiting, so
its duration is the communication time without skew), the skew of starts and of ends
(medians over the instances), the ranks that arrived first, and the bandwidths as
NCCL's tests define them: ``algbw = bytes / time`` and ``busbw = algbw x factor``
(all-reduce ``2(n-1)/n``; all-gather, reduce-scatter, all-to-all ``(n-1)/n``;
broadcast, reduce, send/recv 1), bytes being the larger of the input and output
buffers (nccl-tests' "size").
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Dict, List, Tuple

from tracefuse_stream.align.collectives import CollectiveTable
from tracefuse_stream.analyze.medians import median

DTYPE_BYTES = {
    "float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
    "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1,
    "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}  # fmt: skip


def bus_factor(name: str, n: int) -> float:
    """NCCL tests' busbw factor for a collective of ``n`` ranks."""
    low = name.lower().replace("_", "")
    if n < 2:
        return 1.0
    if "allreduce" in low:
        return 2.0 * (n - 1) / n
    if re.search(r"allgather|reducescatter|alltoall", low):
        return (n - 1) / n
    return 1.0


def kind_of(name: str) -> str:
    """The collective's type from its event name (``gloo:all_reduce`` -> ``all_reduce``,
    ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` -> ``AllReduce``)."""
    if name.startswith("gloo:"):
        return name[5:]
    m = re.match(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", name)
    return m.group(1) if m else name


def rows(table: CollectiveTable) -> List[Dict[str, Any]]:
    """One row per (collective type, message size, dtype, group size), most time first."""
    groups: Dict[Tuple[Any, ...], List[Any]] = {}
    for inst in table.instances:
        size = next((e.event.size for e in inst.entries.values() if e.event.size), None)
        nin, nout, dtype, gsize = size if size else (None, None, None, None)
        n = gsize if type(gsize) is int else len(inst.entries)
        groups.setdefault((kind_of(inst.name), nin, nout, dtype, n), []).append(inst)
    out = []
    for (kind, nin, nout, dtype, n), insts in groups.items():
        durs = [min(e.end_ns - e.start_ns for e in i.entries.values()) for i in insts]
        first: Counter = Counter(i.arrival_order[0] for i in insts)
        esize = DTYPE_BYTES.get(str(dtype).lower()) if dtype is not None else None
        elems = max((v for v in (nin, nout) if type(v) is int), default=None)
        nbytes = elems * esize if elems is not None and esize is not None else None
        t = median(durs)
        algbw = nbytes / t if nbytes is not None and t > 0 else None  # bytes/ns = GB/s
        out.append({
            "name": kind, "group_size": n, "dtype": dtype, "nelems": elems, "bytes": nbytes,
            "count": len(insts), "min_duration_us": round(t / 1000, 3),
            "start_skew_us": round(median([i.spread_ns for i in insts]) / 1000, 3),
            "end_skew_us": round(median([_end_skew(i) for i in insts]) / 1000, 3),
            "algbw_gbps": None if algbw is None else round(algbw, 3),
            "busbw_gbps": None if algbw is None else round(algbw * bus_factor(kind, n), 3),
            "first_arrivals": {str(r): c for r, c in sorted(first.items())},
            "_total": sum(durs),
        })  # fmt: skip
    out.sort(key=lambda r: (-r["_total"], r["name"]))
    for r in out:
        del r["_total"]
    return out


def _end_skew(inst: Any) -> int:
    ends = [e.end_ns for e in inst.entries.values()]
    return max(ends) - min(ends)


__all__ = ["DTYPE_BYTES", "bus_factor", "kind_of", "rows"]
