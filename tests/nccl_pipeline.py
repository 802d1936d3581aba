"""A GPU pipeline on NCCL, as Kineto writes it, with a KNOWN slow stage (tests only).

Why a generator: no NCCL point-to-point trace is among the fixtures, and the project
has no GPU here to record one. What PyTorch's profiler writes for one is public
(``torch/csrc/profiler/util.cpp``, ``saveNcclMeta``): the kernel of a ``dist.send`` /
``dist.recv`` carries the ``record_param_comms`` args, ``Collective name`` ``send`` /
``recv``, ``Rank`` (the *peer's* rank in the group), ``Dst Rank`` / ``Src Rank`` (the
peer's global rank) and ``Seq`` (the rank's own point-to-point counter, not shared
with the peer). The kernel is NCCL's ``ncclDevKernel_SendRecv``, the one all-to-all
also runs in.

The job: ``stages`` ranks, one pipeline stage each, GPipe-like (every micro-batch's
forward: recv from the previous stage, compute, send to the next; then every
micro-batch's backward the other way), then, unless ``pure``, one world all-reduce of
the step (``Seq`` counted per group, as NCCL collectives are). The GPU of each rank is
simulated: kernels on one stream in issue order; a send and its recv both end
``XFER_NS`` after the later of the two starts (NCCL's rendezvous), an all-reduce
``ALLREDUCE_NS`` after its last member starts. The CPU launches the step's kernels at
its start and synchronises at its end (``ProfilerStep#N`` spans the GPU work). The slow
stage runs one more compute kernel of ``extra_ns`` in each micro-batch's forward, with
an ordinary GEMM name: nothing in the trace names the cause.

``batched=True``: Megatron's 1F1B schedule (warm-up forwards, one forward one backward,
cool-down backwards) through ``batch_isend_irecv`` (``send_forward_recv_backward`` and
the like), as PyTorch writes it on NCCL (align/coalesced.py): per op of a batch a CPU
``record_param_comms`` (send / recv, its peer) launching nothing, then a CPU
``nccl:coalesced`` annotation around the launch of ONE ``ncclDevKernel_SendRecv`` with
no collective args, and the GPU-side ``nccl:coalesced`` (``gpu_user_annotation``, same
``External id``) around that kernel. A batch ends ``XFER_NS`` after the latest start of
the batches it exchanges with. ``late``: rank -> ns its every step starts later (the CPU
and with it the GPU work).
"""

from __future__ import annotations

import copy
import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

BASE_NS = 1_790_000_000_000_000_000
XFER_NS = 40_000
ALLREDUCE_NS = 90_000
FWD_NS = 400_000
BWD_NS = 800_000
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"  # noqa: E501
EXTRA = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"  # noqa: E501
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
COMPUTE_STREAM, NCCL_STREAM = 7, 20


@dataclass
class Op:
    kind: str  # "compute" | "send" | "recv" | "allreduce" | "batch"
    name: str
    dur_ns: int = 0
    peer: Optional[int] = None
    start: Optional[int] = None
    end: Optional[int] = None
    subs: List[Tuple[str, int]] = field(default_factory=list)  # a batch's (send|recv, peer)


@dataclass
class Truth:
    """What the generator did: the slow stage, its extra per step, the steps."""

    slow: Optional[int]
    extra_per_step_ns: int
    steps: List[int]
    pairs: int  # send/recv pairs written, every step
    allreduces: int
    step_ns: Dict[Tuple[int, int], int] = field(default_factory=dict)  # (rank, step) -> its span
    #: batched: step -> how much earlier its last op ends without the slow stage's extra
    #: kernels (the same plan simulated again without them)
    saves_ns: Dict[int, int] = field(default_factory=dict)
    batches: int = 0  # batched SendRecv kernels written, all ranks and steps


def _ops(rank: int, stages: int, micro: int, slow: Optional[int], extra_ns: int, pure: bool, rng: random.Random) -> List[Op]:  # fmt: skip
    def jitter(ns: int) -> int:
        return ns + rng.randrange(-2_000, 2_001)

    stage = rank % stages  # pipelines side by side: ranks [p * stages, (p + 1) * stages)
    ops: List[Op] = []
    for _m in range(micro):
        if stage > 0:
            ops.append(Op("recv", SENDRECV, peer=rank - 1))
        if rank == slow:
            ops.append(Op("compute", EXTRA, extra_ns))
        ops.append(Op("compute", GEMM, jitter(FWD_NS)))
        if stage < stages - 1:
            ops.append(Op("send", SENDRECV, peer=rank + 1))
    for _m in range(micro):
        if stage < stages - 1:
            ops.append(Op("recv", SENDRECV, peer=rank + 1))
        ops.append(Op("compute", GEMM, jitter(BWD_NS)))
        if stage > 0:
            ops.append(Op("send", SENDRECV, peer=rank - 1))
    if not pure:
        ops.append(Op("allreduce", ALLREDUCE))
    return ops


def _ops_1f1b(rank: int, stages: int, micro: int, slow: Optional[int], extra_ns: int, pure: bool, rng: random.Random) -> List[Op]:  # fmt: skip
    """Megatron's non-interleaved 1F1B, every exchange a batch (its ops in the order
    Megatron's ``_batched_p2p_ops`` issues them)."""
    stage = rank % stages
    prev = rank - 1 if stage > 0 else None
    nxt = rank + 1 if stage < stages - 1 else None
    ops: List[Op] = []

    def batch(*subs: Tuple[str, Optional[int]]) -> None:
        kept = [(k, p) for k, p in subs if p is not None]
        if kept:
            ops.append(Op("batch", SENDRECV, subs=kept))  # type: ignore[arg-type]

    def fwd() -> None:
        if rank == slow:
            ops.append(Op("compute", EXTRA, extra_ns))
        ops.append(Op("compute", GEMM, FWD_NS + rng.randrange(-2_000, 2_001)))

    def bwd() -> None:
        ops.append(Op("compute", GEMM, BWD_NS + rng.randrange(-2_000, 2_001)))

    warm = min(stages - stage - 1, micro)
    for _m in range(warm):
        batch(("recv", prev))
        fwd()
        batch(("send", nxt))
    if micro > warm:
        batch(("recv", prev))
    for i in range(micro - warm):
        fwd()
        batch(("send", nxt), ("recv", nxt))
        bwd()
        if i == micro - warm - 1:
            batch(("send", prev))
        else:
            batch(("send", prev), ("recv", prev))
    for _m in range(warm):
        batch(("recv", nxt))
        bwd()
        batch(("send", prev))
    if not pure:
        ops.append(Op("allreduce", ALLREDUCE))
    return ops


def _simulate_batched(plans: Dict[int, List[Op]], ready: Dict[int, int]) -> None:
    """Time every op of one step (in place): streams in order; a batch ends
    ``XFER_NS`` after the latest start among it and the batches its ops meet."""
    at = {r: 0 for r in plans}
    free = dict(ready)
    posted: Dict[Tuple[str, int, int, int], int] = {}  # (op, src, dst, n) -> its batch's start
    seen: Dict[Tuple[str, int, int], int] = {}
    wants: Dict[int, List[Tuple[str, int, int, int]]] = {}  # id(batch) -> the other sides
    arrived_ar: Dict[int, Op] = {}
    progress = True
    while progress:
        progress = False
        for r, ops in plans.items():
            while at[r] < len(ops):
                op = ops[at[r]]
                if op.kind == "compute":
                    op.start, op.end = free[r], free[r] + op.dur_ns
                elif op.kind == "batch":
                    if op.start is None:
                        op.start = free[r]
                        wants[id(op)] = []
                        for kind, peer in op.subs:
                            src, dst = (r, peer) if kind == "send" else (peer, r)
                            n = seen.get((kind, src, dst), 0)
                            seen[(kind, src, dst)] = n + 1
                            posted[(kind, src, dst, n)] = op.start
                            wants[id(op)].append(("recv" if kind == "send" else "send", src, dst, n))
                    if not all(w in posted for w in wants[id(op)]):
                        break
                    op.end = max([op.start] + [posted[w] for w in wants[id(op)]]) + XFER_NS
                else:
                    if op.start is None:
                        op.start = free[r]
                        arrived_ar[r] = op
                    if len(arrived_ar) == len(plans):
                        end = max(o.start for o in arrived_ar.values()) + ALLREDUCE_NS  # type: ignore[type-var]
                        for o in arrived_ar.values():
                            o.end = end
                        arrived_ar = {}
                    if op.end is None:
                        break
                free[r] = op.end  # type: ignore[assignment]
                at[r] += 1
                progress = True
    assert all(at[r] == len(plans[r]) for r in plans), "the pipeline deadlocked"


def _simulate(plans: Dict[int, List[Op]], ready: Dict[int, int]) -> None:
    """Time every op of one step (in place): streams in order, rendezvous at p2p and
    all-reduce."""
    at = {r: 0 for r in plans}
    free = dict(ready)
    waiting: Dict[Tuple[str, int, int, int], Tuple[int, Op]] = {}
    seen: Dict[Tuple[str, int, int], int] = {}
    arrived_ar: Dict[int, Op] = {}
    progress = True
    while progress:
        progress = False
        for r, ops in plans.items():
            while at[r] < len(ops):
                op = ops[at[r]]
                if op.kind == "compute":
                    op.start, op.end = free[r], free[r] + op.dur_ns
                    free[r] = op.end
                elif op.kind in ("send", "recv"):
                    if op.start is None:
                        src, dst = (r, op.peer) if op.kind == "send" else (op.peer, r)
                        n = seen.get((op.kind, src, dst), 0)  # type: ignore[arg-type]
                        seen[(op.kind, src, dst)] = n + 1  # type: ignore[index]
                        op.start = free[r]
                        other = ("recv" if op.kind == "send" else "send", src, dst, n)
                        if other in waiting:
                            r2, op2 = waiting.pop(other)
                            op.end = op2.end = max(op.start, op2.start) + XFER_NS  # type: ignore[type-var,operator]
                            free[r2] = op2.end
                        else:
                            waiting[(op.kind, src, dst, n)] = (r, op)  # type: ignore[index]
                    if op.end is None:
                        break
                    free[r] = op.end
                else:
                    if op.start is None:
                        op.start = free[r]
                        arrived_ar[r] = op
                    if len(arrived_ar) == len(plans):
                        end = max(o.start for o in arrived_ar.values()) + ALLREDUCE_NS  # type: ignore[type-var]
                        for r2, o in arrived_ar.items():
                            o.end = end
                            free[r2] = end
                        arrived_ar = {}
                    if op.end is None:
                        break
                    free[r] = op.end
                at[r] += 1
                progress = True
    assert all(at[r] == len(plans[r]) for r in plans), "the pipeline deadlocked"


def _us(ns: int) -> float:
    return ns / 1000  # relative times of a few seconds: the float's repr is the exact 3 decimals


def _kernel(rank: int, op: Op, corr: int, stream: int, group: List[int], seq: int) -> Dict[str, Any]:
    args: Dict[str, Any] = {"External id": corr, "device": rank % 8, "stream": stream, "correlation": corr}
    if op.kind in ("send", "recv", "allreduce"):
        args.update({
            "Collective name": "allreduce" if op.kind == "allreduce" else op.kind,
            "In msg nelems": 1_048_576, "Out msg nelems": 1_048_576, "Group size": len(group),
            "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]",
            "Process Group Name": "0", "Process Group Description": "default_pg",
            "Process Group Ranks": str(group),
        })  # fmt: skip
        if op.kind == "allreduce":
            args.update({"Rank": rank, "Seq": seq})
        else:
            args.update(
                {"Rank": op.peer, "Dst Rank" if op.kind == "send" else "Src Rank": op.peer, "Seq": seq}
            )
    return {"ph": "X", "cat": "kernel", "name": op.name, "pid": rank % 8, "tid": stream,
            "ts": _us(op.start), "dur": _us(op.end - op.start), "args": args}  # type: ignore[operator]  # fmt: skip


def _last_end(plans: Dict[int, List[Op]]) -> int:
    return max(o.end for ops in plans.values() for o in ops)  # type: ignore[type-var, return-value]


def _batch_events(rank: int, op: Op, corr: int, launch: int, group: List[int], seq: Dict[int, int]) -> List[Dict[str, Any]]:  # fmt: skip
    """A batch as PyTorch writes it (module docstring): its ops' record_param_comms, the
    CPU nccl:coalesced around the launch, the one SendRecv kernel, the GPU nccl:coalesced."""
    tid, ext = 100 + rank, 1_000_000 + corr  # the annotation's External id, apart from the launches'
    out: List[Dict[str, Any]] = []
    for j, (kind, peer) in enumerate(op.subs):
        seq[rank] += 1
        args = {"External id": ext - 500_000 + j * 1_000, "Collective name": kind, "Rank": peer,
                "Dst Rank" if kind == "send" else "Src Rank": peer, "Seq": seq[rank],
                "In msg nelems": 1_048_576, "Out msg nelems": 1_048_576, "Group size": len(group),
                "dtype": "BFloat16", "Process Group Name": "0", "Process Group Description": "default_pg",
                "Process Group Ranks": str(group)}  # fmt: skip
        out.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 100 + rank, "tid": tid,
                    "ts": _us(launch - 1_500 + j * 300), "dur": _us(200), "args": args})  # fmt: skip
    out.append({"ph": "X", "cat": "user_annotation", "name": "nccl:coalesced", "pid": 100 + rank, "tid": tid,
                "ts": _us(launch - 300), "dur": _us(4_600), "args": {"External id": ext}})  # fmt: skip
    out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100 + rank, "tid": tid,
                "ts": _us(launch), "dur": _us(4_000), "args": {"correlation": corr, "External id": ext}})  # fmt: skip
    gpu = {"pid": rank % 8, "tid": NCCL_STREAM, "ts": _us(op.start), "dur": _us(op.end - op.start)}  # type: ignore[operator]
    out.append({"ph": "X", "cat": "kernel", "name": op.name, **gpu,
                "args": {"External id": ext, "device": rank % 8, "stream": NCCL_STREAM, "correlation": corr}})  # fmt: skip
    out.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "nccl:coalesced",
            **gpu,
            "args": {"External id": ext},
        }
    )
    return out


def build(
    out: Path,
    stages: int = 4,
    micro: int = 4,
    steps: Tuple[int, ...] = (5, 6, 7),
    slow: Optional[int] = 2,
    extra_ns: int = 300_000,
    pure: bool = False,
    seed: int = 0,
    pipelines: int = 1,
    batched: bool = False,
    late: Optional[Dict[int, int]] = None,
) -> Truth:
    """Write one ``rank<r>.json.gz`` per stage into ``out`` (``pipelines`` of ``stages``
    ranks each, side by side: the all-reduce, unless ``pure``, spans them all); the
    ground truth back. ``batched``, ``late``: see the module docstring."""
    rng = random.Random(seed)
    group = list(range(stages * pipelines))
    events: Dict[int, List[Dict[str, Any]]] = {r: [] for r in group}
    truth = Truth(slow, micro * extra_ns if slow is not None else 0, list(steps), 0, 0)
    cpu_at = {r: 1_000_000 + rng.randrange(0, 5_000) for r in group}
    corr = {r: 1 for r in group}
    p2p_seq = {r: 0 for r in group}
    for k, step in enumerate(steps):
        for r in group:
            cpu_at[r] += (late or {}).get(r, 0)
        plan = _ops_1f1b if batched else _ops
        plans = {r: plan(r, stages, micro, slow, extra_ns, pure, rng) for r in group}
        if batched:
            without = {r: [copy.copy(o) for o in ops if o.name != EXTRA] for r, ops in plans.items()}
            _simulate_batched(without, {r: cpu_at[r] + 30_000 for r in group})
            _simulate_batched(plans, {r: cpu_at[r] + 30_000 for r in group})
            truth.saves_ns[step] = _last_end(plans) - _last_end(without)
        else:
            _simulate(plans, {r: cpu_at[r] + 30_000 for r in group})
        for r, ops in plans.items():
            t = cpu_at[r]
            end = max(o.end for o in ops) + 15_000  # type: ignore[type-var]
            tid = 100 + r
            ev = events[r]
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 100 + r,
                       "tid": tid, "ts": _us(t), "dur": _us(end - t), "args": {"External id": corr[r]}})  # fmt: skip
            for i, op in enumerate(ops):
                c = corr[r] = corr[r] + 1
                launch = t + 2_000 + i * 6_000
                if op.kind == "batch":
                    truth.batches += 1
                    ev += _batch_events(r, op, c, launch, group, p2p_seq)
                    continue
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100 + r, "tid": tid,
                           "ts": _us(launch), "dur": _us(4_000), "args": {"correlation": c}})  # fmt: skip
                stream = COMPUTE_STREAM if op.kind == "compute" else NCCL_STREAM
                if op.kind in ("send", "recv"):
                    p2p_seq[r] += 1
                ev.append(_kernel(r, op, c, stream, group, p2p_seq[r] if op.kind != "allreduce" else k + 1))
            sync = t + 2_000 + len(ops) * 6_000
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 100 + r,
                       "tid": tid, "ts": _us(sync), "dur": _us(end - 5_000 - sync)})  # fmt: skip
            truth.step_ns[(r, step)] = end - t
            cpu_at[r] = end + 200_000
        truth.pairs += sum(1 for r in group for o in plans[r] if o.kind == "send")
        truth.pairs += sum(1 for r in group for o in plans[r] for sub in o.subs if sub[0] == "send")
        truth.allreduces += 0 if pure else 1
    out.mkdir(parents=True, exist_ok=True)
    for r in group:
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [
                {"id": r % 8, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_000_000_000}
            ],
            "distributedInfo": {
                "backend": "nccl",
                "rank": r,
                "world_size": len(group),
                "pg_count": 1,
                "pg_config": [
                    {
                        "pg_name": "0",
                        "pg_desc": "default_pg",
                        "backend_config": "cuda:nccl",
                        "pg_size": len(group),
                        "ranks": group,
                    }
                ],
            },  # fmt: skip
            "host_name": "node0",
            "trace_id": f"{seed:08X}{r:024X}",
            "traceEvents": sorted(events[r], key=lambda e: (e["pid"], e["tid"], e["ts"])),
            "baseTimeNanoseconds": BASE_NS,
            "traceName": f"rank{r}.json",
        }
        with gzip.open(out / f"rank{r}.json.gz", "wt", encoding="utf-8") as f:
            json.dump(doc, f)
    return truth
