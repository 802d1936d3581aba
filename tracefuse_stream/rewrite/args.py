"""``--args all|slim|none``: which event args a merge keeps. The one list, with reasons.

Args are much of what the viewer holds. Perfetto's JSON importer keeps each event's raw
args text until the whole file is sorted, then makes one arg row per *leaf* of an arg
(``Input Dims: [[512, 1], [], []]`` is five rows plus its key text), so shape, stride and
concrete-input lists cost far more memory and load time than their bytes suggest.
Measured with trace_processor v58.2 (``benchmarks/viewer.py``; peak RSS above the empty
trace): on the real 8-rank merge of issue 12 (64 MB, shapes recorded) all args 201 MB,
only small readable args 98 MB, none 69 MB. With this list (``benchmarks/viewer.py``,
commit f34c496) slim / all is 0.46-0.58x on merges with shapes or stacks (the shared
4-rank job as 8 ranks 0.57x, the recorded 8-rank job 0.55x) but 0.85x on 8 copies of a
real A100 NCCL trace: there what stays (link ids on every op, launch and kernel,
``rank`` on every event) is most of the args, and slices, flows and the file's text
are most of the rest (benchmarks/README.md, *Where trace_processor's peak goes*).

* ``all`` (default) — every arg as the profiler wrote it.
* ``slim`` — what a person reads in the UI's details panel and what links events:
  :data:`SLIM_ARGS` below. Every slice and every flow stays (flows are bound by the
  event ``id``, not by args).
* ``none`` — only what links and labels need: the link ids of
  :data:`~tracefuse_stream.rewrite.rules.LINK_ID_ARGS` but the python tree's (so
  TraceLens/HTA joins and ``ac2g id == correlation`` still hold) and ``rank`` (the
  output contract: every event carries ``args.rank``). Nothing descriptive.

``Python id`` / ``Python parent id`` are link ids (rewritten per rank under ``all``, as
every link) but ``slim`` and ``none`` drop them: the python call tree they encode is
what the UI already draws (python_function slices nest by time on their thread), and in
CPU traces recorded with stacks they are the largest args after the shape lists (two
arg rows on every python_function slice). Tools that rebuild the tree from the ids
(TraceLens, HTA call stacks) need ``--args all``.

Metadata events (``ph: "M"``: process/thread names and sort indexes) are never trimmed:
their args *are* the labels.

Keys are matched exactly as Kineto writes them (checked on the real GPU traces in
``../shared/fixtures/real`` and the recorded CPU traces in ``tests/data/recorded``). A
key not in the list is dropped by ``slim``: the list says what is worth its memory,
not what is worthless.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Literal, Optional, Tuple

from tracefuse_stream.rewrite.contract import LINK_ID_ARGS

ArgsMode = Literal["all", "slim", "none"]
ARGS_CHOICES: Tuple[str, ...] = ("all", "slim", "none")

#: link ids that ``slim`` and ``none`` drop (see the module docstring), key -> why
TREE_IDS: Dict[str, str] = {
    "Python id": "the python call tree's node id: the UI draws that tree as nested slices",
    "Python parent id": "the parent's node id, as Python id",
}

#: what ``none`` keeps: links (each with its reason in LINK_ID_ARGS) but the python
#: tree's, and the rank tag.
NONE_ARGS: Dict[str, str] = {
    **{k: why for k, why in LINK_ID_ARGS.items() if k not in TREE_IDS},
    "rank": "added by the merge to every event: which rank it came from (the output contract)",
}

#: what ``slim`` keeps, key -> why. Everything of NONE_ARGS, plus small readable facts.
SLIM_ARGS: Dict[str, str] = {
    **NONE_ARGS,
    # autograd: the forward op of a backward op (the UI shows them side by side)
    "Sequence number": "autograd sequence number: pairs a backward op with its forward op by eye",
    "Fwd thread id": "thread of the forward op a backward op belongs to",
    # GPU kernels / memcpy / memset: the launch configuration <<<grid, block, shared
    # memory, stream>>> and where the work ran; derived figures and resources are dropped
    "device": "GPU index of a kernel, memcpy or memset",
    "stream": "GPU stream: which queue the work ran on (launch parameter)",
    "grid": "kernel launch grid [x, y, z] (launch parameter)",
    "block": "kernel launch block [x, y, z] (launch parameter)",
    "shared memory": "a kernel's shared memory in bytes (launch parameter)",
    "kind": "memcpy direction (HtoD, DtoD, ...), memset target, ROCm dispatch kind",
    "bytes": "bytes a memcpy/memset moved",
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
    "Addr": "block address: pairs an allocation with its free (a link nothing else in the UI shows)",
    # the profiler span
    "Op count": "ops recorded in the profiler span (one event per file)",
}

#: Dropped by ``slim``, and why (for the documentation and the tests; not used to drop:
#: ``slim`` drops every key that is not in SLIM_ARGS).
SLIM_DROPS: Dict[str, str] = {
    **TREE_IDS,
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
    "est. achieved occupancy %": "Kineto's estimate, derived from the launch parameters and registers",
    "registers per thread": "a compiled kernel's attribute, not a launch parameter",
    "context": "CUDA context id: the same on every kernel of a device",
    "memory bandwidth (GB/s)": "derived: bytes / dur of the memcpy or memset",
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


__all__ = ["ARGS_CHOICES", "ArgsMode", "NONE_ARGS", "SLIM_ARGS", "SLIM_DROPS", "TREE_IDS", "kept_keys"]
