"""The sends and recvs of a batched NCCL point-to-point kernel (``batch_isend_irecv``).

Why: Megatron's 1F1B schedule sends and receives through
``torch.distributed.batch_isend_irecv``. With NCCL each op of the batch writes a CPU
``record_param_comms`` (``Collective name`` send / recv, its peer) that launches no
kernel; the end of the coalescing block writes a CPU ``nccl:coalesced`` annotation and
launches ONE ``ncclDevKernel_SendRecv`` for the whole batch. Kineto copies the collective
args onto a kernel only when its CPU op is a ``record_param_comms``
(pytorch/kineto ``libkineto/src/output_json.cpp``, ``handleActivity``), so that kernel
names no collective, no peer, no group: keyed as a collective it matched whatever
SendRecv kernel came at the same position on other ranks. Newer PyTorch (pytorch/pytorch
PR #160680) also writes a GPU-side ``nccl:coalesced`` annotation (``gpu_user_annotation``)
around the batch's GPU work, whose ``External id`` is the CPU annotation's.

How a batched kernel is given its ops (docs/collectives.md, "Batched point-to-point"):
the GPU ``nccl:coalesced`` around the kernel's start -> the CPU ``nccl:coalesced`` with
the same ``External id`` -> the send / recv ``record_param_comms`` on that CPU thread
since the previous ``nccl:coalesced`` there (not those of a plain send/recv: its kernel
carries their ``External id``). Each op then is one side of a pair, timed
as the kernel, linked like any NCCL send/recv (align/p2p.py). Where a link is missing
the kernel is not linked, with one reason (:data:`REASONS`), never guessed.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Any, Collection, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from tracefuse_stream.align.collective_event import p2p_peer
from tracefuse_stream.align.ends import P2P_COLLECTIVE_NAMES
from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.read.events import decode_args, iter_event_batches
from tracefuse_stream.read.scan import ScanSelection, Tally
from tracefuse_stream.read.sources import PathLike
from tracefuse_stream.timeunits import analysable, us_to_ns_or_none

COMMS_OP = "record_param_comms"
COALESCED = "nccl:coalesced"
GPU_ANNOTATION = "gpu_user_annotation"
NO_GPU_MARK = (
    "batched SendRecv kernel: no GPU nccl:coalesced annotation around it (PyTorch before PR #160680)"
)
SEVERAL_MARKS = "batched SendRecv kernel: several GPU nccl:coalesced annotations around it"
SHARED_MARK = "batched SendRecv kernel: its GPU nccl:coalesced annotation covers several kernels"
NO_CPU_MARK = "batched SendRecv kernel: no single CPU nccl:coalesced with its annotation's External id"
NO_OPS = "batched SendRecv kernel: no send/recv record_param_comms before its CPU nccl:coalesced"
NO_OP_PEER = "batched SendRecv kernel: a record_param_comms of its batch names no peer"
REASONS = (NO_GPU_MARK, SEVERAL_MARKS, SHARED_MARK, NO_CPU_MARK, NO_OPS, NO_OP_PEER)


class CommsCall(NamedTuple):
    """One send / recv ``record_param_comms`` (CPU op, file-relative ns)."""

    tid: Any
    ts_ns: int
    op: str  # "send" | "recv"
    peer: Optional[int]  # global rank (None: not recorded)
    pg: Optional[str]
    ext: Any = None  # its External id (a plain send/recv's kernel carries the same)


class CoalescedMark(NamedTuple):
    """One ``nccl:coalesced`` annotation, CPU or GPU side (file-relative ns)."""

    gpu: bool
    tid: Any
    ts_ns: int
    end_ns: int
    ext: Any  # its External id


BatchedOp = Tuple[str, int, Optional[str]]  # (op, global peer, process group)


def _times(event: Mapping[str, Any], base_ns: int) -> Optional[Tuple[int, int]]:
    ts, dur = us_to_ns_or_none(event.get("ts")), us_to_ns_or_none(event.get("dur"))
    if event.get("ph") != "X" or ts is None or dur is None or dur < 0 or not analysable(base_ns, ts, dur):
        return None
    return ts, ts + dur


def comms_call(event: Dict[str, Any], base_ns: int = 0) -> Optional[CommsCall]:
    """The send / recv ``record_param_comms`` X event ``event`` (None: another one)."""
    if event.get("name") != COMMS_OP:
        return None
    args = decode_args(event)
    coll = args.get("Collective name") if isinstance(args, dict) else None
    op = P2P_COLLECTIVE_NAMES.get(coll) if type(coll) is str else None
    span = _times(event, base_ns) if op is not None else None
    if op is None or span is None:
        return None
    pg = args.get("Process Group Name")
    ext = args.get("External id")
    ext = ext if type(ext) in (int, str) else None
    return CommsCall(event.get("tid"), span[0], op, p2p_peer(args, op), None if pg is None else str(pg), ext)


def coalesced_mark(event: Dict[str, Any], base_ns: int = 0) -> Optional[CoalescedMark]:
    """The ``nccl:coalesced`` annotation ``event`` (None: another event)."""
    if event.get("name") != COALESCED:
        return None
    span = _times(event, base_ns)
    if span is None:
        return None
    args = decode_args(event)
    ext = args.get("External id") if isinstance(args, dict) else None
    return CoalescedMark(event.get("cat") == GPU_ANNOTATION, event.get("tid"), span[0], span[1], ext)


def keep_batch_event(scan: Any, event: Dict[str, Any]) -> None:
    """Keep ``event`` in ``scan`` (align/collectives.RankScan) if it is a send/recv
    ``record_param_comms`` or a ``nccl:coalesced`` annotation."""
    if event.get("name") == COMMS_OP:
        call = comms_call(event, scan.base_ns)
        if call is not None:
            scan.comms_calls.append(call)
    else:
        mark = coalesced_mark(event, scan.base_ns)
        if mark is not None:
            scan.coalesced.append(mark)


#: what a batched SendRecv kernel's ops are read from (align/coalesced.py): read by a
#: second pass over a rank only when its first found such a kernel (:func:`read_batches`)
BATCH_SELECTION = ScanSelection(ph="X", name_contains=(COMMS_OP, COALESCED), validate=False)


def read_batches(path: PathLike, scan: Any, **how: Any) -> None:
    """The send/recv ``record_param_comms`` and ``nccl:coalesced`` events of a rank with
    batched SendRecv kernels, when its first pass did not keep them.

    Why a second pass, and only here: handing every ``record_param_comms`` (one per
    collective) to Python in every scan cost info's pass ~3% of its CPU time on a job
    without a single batch; a rank with batches pays one more skim of its file (the
    compiled kernel hands over only these events). A file broken midway: what was read
    is kept (the first pass already reported it)."""
    if scan.comms_calls or not any(e.nccl_p2p == "batched" for e in scan.events):
        return
    scan.coalesced = []
    try:
        for batch in iter_event_batches(path, what="looking for batched send/recv", select=BATCH_SELECTION, tally=Tally(), **how):  # fmt: skip
            for event in batch:
                # as the first pass keeps them (align/collectives.py): an op from a cpu_op
                # event, an annotation from any other
                if type(event) is dict and (event.get("cat") == "cpu_op") == (event.get("name") == COMMS_OP):
                    keep_batch_event(scan, event)
    except InputError as e:
        if e.kind in (ErrorKind.MISSING, ErrorKind.UNREADABLE):
            raise


def attribute(
    kernels: Sequence[Any],
    calls: Sequence[CommsCall],
    marks: Sequence[CoalescedMark],
    plain_ids: Collection[Any] = (),
) -> List[Tuple[Any, Union[str, List[BatchedOp]]]]:
    """Each batched kernel (align/collective_event.CollectiveEvent) with its batch's
    ops, or the reason it has none (see the module docstring). ``plain_ids``: the
    External ids of the rank's plain send/recv kernels, whose ``record_param_comms``
    (the same id) launched their own kernel and are no batch's op."""
    calls = [c for c in calls if c.ext is None or c.ext not in plain_ids]
    gpu = sorted((m for m in marks if m.gpu), key=lambda m: (m.ts_ns, m.end_ns))
    starts = [m.ts_ns for m in gpu]
    cpu_by_ext: Dict[Any, List[CoalescedMark]] = {}
    cpu_by_tid: Dict[Any, List[int]] = {}
    for m in marks:
        if not m.gpu:
            cpu_by_ext.setdefault(m.ext, []).append(m)
            cpu_by_tid.setdefault(m.tid, []).append(m.ts_ns)
    for v in cpu_by_tid.values():
        v.sort()
    gpu_per_ext = Counter(m.ext for m in gpu)
    by_tid: Dict[Any, List[CommsCall]] = {}
    for c in sorted(calls, key=lambda c: c.ts_ns):
        by_tid.setdefault(c.tid, []).append(c)
    call_ts = {tid: [c.ts_ns for c in cs] for tid, cs in by_tid.items()}
    around: List[Union[str, CoalescedMark]] = []
    held: Counter = Counter()
    for k in kernels:
        i = bisect.bisect_right(starts, k.ts_ns) - 1
        # back to back on the GPU, one annotation ends where the next kernel starts
        cands = [
            m for m in gpu[max(0, i - 1) : i + 1] if m.end_ns > k.ts_ns or m.end_ns == m.ts_ns == k.ts_ns
        ]
        if len(cands) == 1:
            held[cands[0]] += 1
        around.append(cands[0] if len(cands) == 1 else NO_GPU_MARK if not cands else SEVERAL_MARKS)
    out: List[Tuple[Any, Union[str, List[BatchedOp]]]] = []
    for k, mark in zip(kernels, around):
        if isinstance(mark, str):
            out.append((k, mark))
        elif held[mark] > 1:
            out.append((k, SHARED_MARK))
        elif len(cpu_by_ext.get(mark.ext, ())) != 1 or gpu_per_ext[mark.ext] != 1 or mark.ext is None:
            out.append((k, NO_CPU_MARK))
        else:
            out.append((k, _block_ops(cpu_by_ext[mark.ext][0], cpu_by_tid, by_tid, call_ts)))
    return out


def _block_ops(
    cpu: CoalescedMark,
    cpu_by_tid: Mapping[Any, List[int]],
    by_tid: Mapping[Any, List[CommsCall]],
    call_ts: Mapping[Any, List[int]],
) -> Union[str, List[BatchedOp]]:
    """The send/recv ops of the block ``cpu`` ends: on its thread, after the previous
    ``nccl:coalesced`` there started, up to its own start."""
    marks = cpu_by_tid[cpu.tid]
    j = bisect.bisect_left(marks, cpu.ts_ns)
    lo = marks[j - 1] if j > 0 else None
    ts = call_ts.get(cpu.tid, [])
    a = 0 if lo is None else bisect.bisect_right(ts, lo)
    b = bisect.bisect_right(ts, cpu.ts_ns)
    block = by_tid.get(cpu.tid, [])[a:b]
    if not block:
        return NO_OPS
    if any(c.peer is None for c in block):
        return NO_OP_PEER
    return [(c.op, c.peer, c.pg) for c in block]  # type: ignore[misc]


__all__ = [
    "COALESCED",
    "COMMS_OP",
    "REASONS",
    "BatchedOp",
    "CoalescedMark",
    "CommsCall",
    "BATCH_SELECTION",
    "attribute",
    "keep_batch_event",
    "read_batches",
    "coalesced_mark",
    "comms_call",
]
