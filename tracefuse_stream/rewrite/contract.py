"""The output contract's numbers, in one place: the pid, tid and id rules' constants,
the table of args that link events inside a rank, and the inverses a reader of a
merged trace needs (which rank an output pid or id belongs to, the original id).

Everything that writes, checks or reads merged traces imports these (the rewriter,
labels, verify, the collective links); docs/OUTPUT_FORMAT.md states the same rules.
"""

from __future__ import annotations

from typing import Dict, Tuple

PID_STRIDE = 10000
PID_DEVICE_LIMIT = 5000
MAX_RANK = (2**31 - PID_STRIDE) // PID_STRIDE - 1  # 214746: the last slot stays < 2**31
ID_BITS = 32
ID_LIMIT = 1 << ID_BITS
MAX_ID_RANK = (1 << (53 - ID_BITS)) - 1
SYNTH_TID_BASE = 1_000_000_000
UINT32 = 1 << 32
# Args that link events *inside one rank*: per-process counters, so every rank uses the
# same numbers, and a tool joining on them across a merged file (TraceLens, HTA, a
# script) would join rank 0's op to rank 3's kernel. Each is rewritten with the flow-id
# rule r * 2**32 + id. The one table, key -> why (names as Kineto writes them; checked
# against Kineto's output_json / CudaMetadataFields, HTA and TraceLens):
LINK_ID_ARGS: Dict[str, str] = {
    "correlation": "CUPTI/roctracer correlation id: runtime launch <-> GPU activity; equals the ac2g flow id",
    "External id": "profiler op id: cpu_op <-> its runtime launches <-> their kernels (TraceLens, HTA join on it)",
    "external id": "the same link as 'External id', as PyTorch 1.8/1.9 spelled it",
    "wait_on_cuda_event_record_corr_id": (
        "cuda_sync (Stream Wait Event / Event Sync) -> correlation of the cudaEventRecord it waits on "
        "(HTA's stream dependencies); -1 = unknown, kept"
    ),
    "wait_on_cuda_event_id": "CUPTI CUDA event id: pairs a wait with the record of the same event",
    "Python id": "python_function node id: the python call tree (TraceLens, HTA call stacks)",
    "Python parent id": "the parent node's 'Python id' in that tree",
}
# Not in the table, on purpose: "Ev Idx", "Record function id", "Profiler Event Index"
# (an event's own index, joined on by nothing), "Sequence number" / "Fwd thread id"
# (autograd numbering; its forward->backward link is the fwdbwd flow, whose id is
# rewritten), "Python module id" (a module's instance number), "cbid"/"cid" (API ids,
# the same on every rank by design), "stream"/"device"/"wait_on_stream" (resources).
#: links whose value must be an id (else the strict merge stops: the link would escape
#: its rank); the other keys carry sentinels (-1) and non-ids, which stay as they are.
STRICT_LINK_ARGS = frozenset({"correlation", "External id", "external id"})
LINK_ARGS = tuple(LINK_ID_ARGS)
ARG_IDS = LINK_ARGS  # older name
COMMON_LINK_ARGS = ("correlation", "External id")
_RARE_LINK_KEYS = frozenset(LINK_ID_ARGS) - frozenset(COMMON_LINK_ARGS)
# flow v1 phases: they bind by (cat, name, id), so an id is required
FLOW_PHASES = frozenset("stf")
GPU_CATS = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy", "Memset"}
)


def output_pid(rank: int, slot: int) -> int:
    """The output pid for slot ``slot`` of ``rank`` (see module docstring)."""
    return (rank + 1) * PID_STRIDE + slot


def rank_of_pid(pid: int) -> int:
    """Inverse of the pid rule: the rank an output pid belongs to."""
    return pid // PID_STRIDE - 1


def original_id(out_id: int) -> Tuple[int, int]:
    """``(rank, original id)`` of a rewritten flow/correlation id."""
    return out_id >> ID_BITS, out_id & (ID_LIMIT - 1)
