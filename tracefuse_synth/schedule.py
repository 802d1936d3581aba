"""The common (rank-independent) schedule of each training step.

Why: what makes the ranks of one run consistent with each other is that step
boundaries, phase lengths, the collectives of a step and their "true" end times come
from ``(seed, step index)`` only, never from the rank.
"""

from __future__ import annotations

import random

from tracefuse_synth.common import _US
from tracefuse_synth.model import _Model

# --------------------------------------------------------------------------------------
# The common (rank-independent) schedule.
# --------------------------------------------------------------------------------------
_COLLECTIVES = (
    # weight, Collective name, c10d op, annotation, kernel name, out/in ratio kind
    (
        6,
        "allreduce",
        "c10d::allreduce_",
        "nccl:all_reduce",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "same",
    ),
    (
        2,
        "allgather",
        "c10d::_allgather_base_",
        "nccl:_all_gather_base",
        "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "gather",
    ),
    (
        1,
        "_reduce_scatter_base",
        "c10d::_reduce_scatter_base_",
        "nccl:_reduce_scatter_base",
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "scatter",
    ),
    (
        1,
        "broadcast",
        "c10d::broadcast_",
        "nccl:broadcast",
        "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "same",
    ),
)
_COLL_WEIGHTS = [c[0] for c in _COLLECTIVES]

LEAD_NS = 60 * _US  # step start -> zero_grad
FWD_GROUP_NS = 70 * _US  # window per forward group
BWD_GROUP_NS = 90 * _US  # window per backward group
COMM_SEG_NS = 300 * _US  # extra window per collective segment
ZERO_NS = 250 * _US
OPT_NS = 600 * _US
TAIL_NS = 150 * _US
START_LEAD_NS = 800 * _US  # profiler start -> first step
WINDOW_SPREAD_NS = 300 * _US  # the ranks' profilers start up to this far apart (default)


class _StepPlan:
    """Common schedule of one training step, relative to the step's true start."""

    __slots__ = ("length", "zero", "fwd", "bwd_segments", "opt", "colls")

    def __init__(self, seed: int, index: int, model: _Model) -> None:
        r = random.Random(f"{seed}:step:{index}")
        u = r.uniform
        n_coll = r.choice((1, 2, 2, 3))
        t = LEAD_NS
        zero = int(ZERO_NS * u(0.9, 1.1))
        self.zero = (t, zero)
        t += zero
        fwd = int(FWD_GROUP_NS * model.n_fwd * u(0.9, 1.1))
        self.fwd = (t, fwd)
        t += fwd
        nb = len(model.bwd_groups)
        segs = []
        for k in range(n_coll):
            lo, hi = k * nb // n_coll, (k + 1) * nb // n_coll
            length = int((BWD_GROUP_NS * (hi - lo) + COMM_SEG_NS) * u(0.9, 1.1))
            segs.append((t, length, lo, hi))
            t += length
        self.bwd_segments = segs
        opt = int(OPT_NS * u(0.9, 1.1))
        self.opt = (t, opt)
        t += opt + TAIL_NS
        self.length = t
        colls = []
        for s0, length, _, _ in segs:
            c = r.choices(_COLLECTIVES, _COLL_WEIGHTS)[0]
            nelems = r.randrange(1 << 18, 1 << 24)
            end = s0 + int(length * u(0.955, 0.975))  # common "true" end
            colls.append((c, nelems, end))
        self.colls = colls
