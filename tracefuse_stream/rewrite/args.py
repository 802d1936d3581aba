"""``--args all|slim|none``: which event args a merge keeps. The one list, with reasons.

Args are most of what the viewer holds. Perfetto's JSON importer makes one arg row per
*leaf* of an arg (``Input Dims: [[512, 1], [], []]`` is five rows plus its key text), so
shape, stride and concrete-input lists cost far more memory and load time than their
bytes suggest. Measured with trace_processor v58.2 on a real 8-rank merge (issue 12):
all args 225 MB / 1.70 s, only small readable args 122 MB / 0.56 s, none 93 MB / 0.32 s.

* ``all`` (default) — every arg as the profiler wrote it.
* ``slim`` — what a person reads in the UI's details panel and what links events:
  :data:`SLIM_ARGS` below. Every slice and every flow stays (flows are bound by the
  event ``id``, not by args).
* ``none`` — only what links and labels need: the link ids of
  :data:`~tracefuse_stream.rewrite.rules.LINK_ID_ARGS` (so TraceLens/HTA joins and
  ``ac2g id == correlation`` still hold) and ``rank`` (the output contract: every event
  carries ``args.rank``). Nothing descriptive.

Metadata events (``ph: "M"``: process/thread names and sort indexes) are never trimmed:
their args *are* the labels.

Keys are matched exactly as Kineto writes them (checked on the real GPU traces in
``../shared/fixtures/real`` and the recorded CPU traces in ``tests/data/recorded``). A
key not in the list is dropped by ``slim``: the list says what is worth its memory,
not what is worthless.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Literal, Optional, Tuple

from tracefuse_stream.rewrite.rules import LINK_ID_ARGS

ArgsMode = Literal["all", "slim", "none"]
ARGS_CHOICES: Tuple[str, ...] = ("all", "slim", "none")

#: what ``none`` keeps: links (each with its reason in LINK_ID_ARGS) and the rank tag.
NONE_ARGS: Dict[str, str] = {
    **LINK_ID_ARGS,
    "rank": "added by the merge to every event: which rank it came from (the output contract)",
}

#: what ``slim`` keeps, key -> why. Everything of NONE_ARGS, plus small readable facts.
SLIM_ARGS: Dict[str, str] = {
    **NONE_ARGS,
    # autograd: the forward op of a backward op (the UI shows them side by side)
    "Sequence number": "autograd sequence number: pairs a backward op with its forward op by eye",
    "Fwd thread id": "thread of the forward op a backward op belongs to",
    # GPU kernels / memcpy / memset: small numbers a person reads to judge a kernel
    "device": "GPU index of a kernel, memcpy or memset",
    "stream": "GPU stream: which queue the work ran on",
    "context": "CUDA context of the GPU work",
    "grid": "kernel launch grid [x, y, z]",
    "block": "kernel launch block [x, y, z]",
    "registers per thread": "kernel resource use (occupancy limiter)",
    "shared memory": "kernel shared memory in bytes (occupancy limiter)",
    "est. achieved occupancy %": "the occupancy Kineto estimates for a kernel",
    "kind": "memcpy direction (HtoD, DtoD, ...), memset target, ROCm dispatch kind",
    "bytes": "bytes a memcpy/memset moved",
    "memory bandwidth (GB/s)": "memcpy/memset bandwidth",
    "size": "bytes of a runtime copy call",
    "wait_on_stream": "cuda_sync: the stream a Stream Wait Event waits on",
    # collectives (record_param_comms and NCCL kernels): what was communicated, with whom
    "Collective name": "allreduce, allgather, ...",
    "Process Group Name": "process group id ('0' = world)",
    "Process Group Description": "process group description (default_pg, ...)",
    "Process Group Ranks": "global ranks of the process group",
    "Group size": "ranks in the process group",
    "Rank": "the rank inside the collective's group",
    "Global rank start": "first global rank of the group",
    "Global rank stride": "stride of the group's global ranks",
    "In msg nelems": "elements sent",
    "Out msg nelems": "elements received",
    "In split size": "all_to_all input splits",
    "Out split size": "all_to_all output splits",
    "dtype": "element type of the message",
    "Seq": "collective sequence number in its group: matches one collective across ranks",
    "Comms Id": "collective id (uint64 in 2026 Kineto): matches one collective across ranks",
    # memory events ([memory] instants with profile_memory)
    "Bytes": "allocation size (negative: a free)",
    "Total Allocated": "allocator total after the event",
    "Total Reserved": "allocator reserve after the event",
    "Device Type": "memory device type (0 CPU, 1 CUDA, ...)",
    "Device Id": "memory device index (-1: CPU)",
    "Addr": "block address: pairs an allocation with its free (memory-timeline tools join on it)",
    # the profiler span
    "Op count": "ops recorded in the profiler span (one event per file)",
}

#: Dropped by ``slim``, and why (for the documentation and the tests; not used to drop:
#: ``slim`` drops every key that is not in SLIM_ARGS).
SLIM_DROPS: Dict[str, str] = {
    "Input Dims": "shape lists: one viewer arg row per dimension, the largest single cost",
    "Input Strides": "stride lists, as large as the shapes",
    "Concrete Inputs": "lists of scalar inputs as text",
    "Input type": "lists of dtype names",
    "Ev Idx": "the event's own index in the profiler: joined on by nothing",
    "Record function id": "the RecordFunction handle: joined on by nothing in the trace",
    "Profiler Event Index": "an event index, as Ev Idx",
    "Python module id": "instance number of an nn.Module: joined on by nothing",
    "Trace name": "'PyTorch Profiler' on every op",
    "Trace iteration": "the profiler cycle, the same on every op",
    "Module Hierarchy": "module path text (often long)",
    "Call stack": "TorchScript call stack text (often long)",
    "kernel": "a ROCm launch's copy of its kernel's (long) name; the ac2g arrow leads to the kernel",
    "cbid": "CUPTI callback id of the runtime API: the event name already says which API",
    "cid": "roctracer API id: the event name already says which API",
    "src": "memcpy source pointer",
    "dst": "memcpy destination pointer",
    "blocks per SM": "derived from grid and the device's SM count",
    "warps per SM": "derived from block and the device's SM count",
    "queued": "always 0 in Kineto's output",
    "finished": "memory event flag, always false in recorded traces",
    "CallFrom": "call site text of a python_function",
}

SLIM_KEYS: FrozenSet[str] = frozenset(SLIM_ARGS)
NONE_KEYS: FrozenSet[str] = frozenset(NONE_ARGS)


def kept_keys(mode: str) -> Optional[FrozenSet[str]]:
    """The arg keys kept by ``mode``; ``None`` for ``all`` (nothing is trimmed)."""
    if mode == "all":
        return None
    if mode == "slim":
        return SLIM_KEYS
    if mode == "none":
        return NONE_KEYS
    raise ValueError(f"--args must be one of {', '.join(ARGS_CHOICES)}, not {mode!r}")


__all__ = ["ARGS_CHOICES", "ArgsMode", "NONE_ARGS", "SLIM_ARGS", "SLIM_DROPS", "kept_keys"]
