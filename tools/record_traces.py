#!/usr/bin/env python3
"""Record small REAL Kineto traces with PyTorch on CPU (gloo) as test data.

torch is needed only here, for recording; the tracefuse_stream package never imports it.
Install the CPU build first: ``pip install torch==2.13.0`` (a +cpu wheel).

Usage (from the repository root)::

    python tools/record_traces.py --set ddp4 --out tests/data/recorded
    python tools/record_traces.py --set all --out tests/data/recorded --force
    python tools/record_traces.py --check tests/data/recorded/ddp4

Each set is written to ``OUT/<set>/``. The launcher starts one OS process per rank
(``subprocess``, the rank's environment has MASTER_ADDR=127.0.0.1, a free
MASTER_PORT, RANK, WORLD_SIZE) which runs this same file in worker mode
(``--worker-rank``). Seeds are fixed (model: SEED, data: SEED + 1000 + rank), so the
same set always trains the same numbers; timestamps, pids and file names of course
differ from run to run.

Sets:

ddp4            4 ranks, DDP, record_shapes + with_stack + profile_memory,
                schedule(wait=1, warmup=1, active=2), default worker names.
ddp4_samepid    like ddp4, but each rank is started as
                ``unshare --pid --fork --mount-proc python ...``: every rank is pid 1
                in its own pid namespace (container style), so all ranks share one pid.
ddp2_cycles     2 ranks, schedule(wait=1, warmup=1, active=2, repeat=2): one file per
                rank per cycle, all in one directory.
ddp8_straggler  8 ranks, rank 5 sleeps 0.2 s per step before backward (and so before
                the gradient all_reduce), with_stack, 2 active steps.
ddp4_subgroups  4 ranks, sub-groups [0,1] and [2,3]: DDP syncs the gradients inside the
                sub-group, plus one all_reduce of the loss on the world group per step.
natural_order   12 independent processes without torch.distributed, each exporting
                ``prof.export_chrome_trace("rank_<i>.json")`` (plain JSON), run in the
                order 11, 10, ..., 0 so that time order is the reverse of rank order.
                Each process wraps its work in record_function("rank_<i>").

The sets below use the profiler's DEFAULTS (no shapes, no stacks, no memory) and
schedule(wait=1, warmup=1, active=3): steps ProfilerStep#2, #3, #4 are recorded.

ddp8_subgroups_slow  8 ranks, ``dist.new_subgroups(2)`` ([0,1], [2,3], [4,5], [6,7]);
                DDP on the WORLD group; per step, in this order: DDP's gradient
                all_reduce (world), one all_reduce on the rank's sub-group, one
                all_reduce of the loss on the world group. Rank 5 sleeps 0.2 s every
                step before backward.
ddp4_two_stragglers  4 ranks, DDP on world; rank 1 sleeps 0.15 s and rank 3 sleeps
                0.06 s every step before backward.
ddp4_intermittent    4 ranks, DDP on world; rank 2 sleeps 0.2 s before backward in the
                2nd active step only (ProfilerStep#3); no sleep in any other step.
ddp4_balanced   4 ranks, DDP on world, nobody sleeps.
ddp4_subgroups_defaults_samepid  like ddp8_subgroups_slow with 4 ranks and no sleep,
                every rank started in its own pid namespace (all ranks pid 1).
ddp4_mild_straggler  4 ranks, DDP on world, schedule active=4 (ProfilerStep#2-#5);
                every rank sleeps 0.1 s per step before backward (the step's work),
                rank 2 0.015 s more: 15% of a step, every step.
ddp4_balanced_work   the same with nobody sleeping more than the others.

Pinned sets (rank r on CPU r % ncpu, os.sched_setaffinity; every 4+ rank set has
work_s=0.05; defaults, active=3 unless noted; the names say nothing of what differs):

ddp4_case_a     the work sleep is the first thing in each step (before data prep and
                forward, in no op); rank 1's is 0.12 s longer, every step.
ddp4_case_b     512-wide 3-layer MLP (2 DDP buckets); rank 2 batch 512, others 64.
ddp4_case_c     rank 3 calls torch.linalg.qr(128 x 128) 100 times after forward, every
                step; nobody else calls it.
ddp4_case_d     every rank: record_function("train_step") around data prep + forward;
                rank 1 sleeps 0.15 s inside it in ProfilerStep#3 only.
ddp4_case_e     ranks 1 and 3 sleep 0.15 s and 0.06 s more before backward, every step.
ddp2_case_f     2 ranks (one CPU each), nobody slower, no work sleep, active=6;
ddp2_case_f_again  the same, recorded again (the noise between two runs).
ddp4_case_f     4 ranks, nobody slower; ddp4_case_f_again the same again.
ddp8_case_g     8 ranks, 5 Linear layers, bucket_cap_mb=0.001: 4 gradient all_reduces
                per step, two at a time on gloo's two runloop threads; rank 6 sleeps
                0.15 s more before backward, every step.
ddp6_case_h     6 ranks, active=4; rank 4 sleeps 0.2 s more before backward in
                ProfilerStep#3 only.

Issue-35 sets (pinned, defaults, active=3; several process groups, a pipeline, two
causes at once; each sleep is a plain time.sleep in no op and no annotation of its own;
the names say nothing of the cause; README.md has the measured timelines):

mg4_pairs_a     kind "pairs": 4 ranks, groups [0,1] and [2,3] (dist.new_group, same
                order on every rank); the model's forward is Linear -> PairReduce (a
                custom autograd.Function: all_reduce of the activation on the rank's
                pair group in forward, of its grad in backward) -> ReLU -> Linear, DDP on
                the world group; work_s=0.05 before backward. Per step: pair all_reduce
                (forward), pair all_reduce (backward), DDP's world all_reduce. Rank 3
                sleeps 0.1 s inside forward right before the custom op, every step.
                Ground truth: root cause rank 3; rank 2 waits ~100 ms for it at the
                forward pair all_reduce and so reaches the world all_reduce ~100 ms late
                (delayed, not slow); ranks 0 and 1 wait ~100 ms at the world all_reduce.
mg4_pairs_b     the same with nobody slower (balanced multi-group control).
mg4_pairs_c     kind "pairs" as mg4_pairs_a; rank 0 sleeps 0.1 s inside forward right
                before the custom op, and rank 3 calls torch.linalg.qr(128 x 128) 90 times
                after forward (~40 ms, before its backward and so before the backward pair
                all_reduce), every step. Ground truth: two slow ranks in different groups:
                rank 1 waits ~100 ms for rank 0 at the forward pair all_reduce, rank 2
                ~40 ms for rank 3 at the backward one, and ranks 2 and 3 reach the world
                all_reduce ~60 ms before ranks 0 and 1: rank 0 sets the step, rank 3's
                extra time is off the critical path (fixing rank 0 saves ~60 ms, rank 3
                alone ~0, both together ~100 ms).
pp4_stages_a    kind "pipeline": 4 ranks, one Linear stage each, 4 micro-batches per step
                (GPipe-like: all forwards, then all backwards), activations rank s -> s+1
                and grads s+1 -> s by dist.send / dist.recv on the world group, then
                opt.step and an all_reduce of the step's loss (world). Every stage sleeps
                work_s=0.006 s per micro-batch in its forward and again in its backward;
                rank 2 sleeps 0.02 s more in each micro-batch's forward (after its recv,
                before its compute). Ground truth: root cause rank 2; rank 3 waits in
                gloo:recv for rank 2's activations (~40 ms for the first, ~20 ms for each
                next), ranks 0 and 1 are held in gloo:send (~20 ms per blocked send: a
                gloo send lasts until the peer has posted its recv) and later wait in
                recv for the grads; the per-step world all_reduce shows no spread.
mg6_three_groups_a  kind "chain": 6 ranks, groups A=[0,1], B=[1,2], C=[2,3]; per step,
                after forward, each rank all_reduces a copy of its loss on each group it
                is in, in the order A, B, C (rank 0: A; 1: A, B; 2: B, C; 3: C; 4, 5:
                none), then work_s=0.05 and backward (DDP, world). Rank 0 sleeps 0.1 s
                right before its A all_reduce, every step. Ground truth: root cause rank
                0; rank 1 waits ~100 ms for it at A and is late at B, rank 2 waits at B
                for rank 1 and is late at C, rank 3 waits at C for rank 2; ranks 0-3 reach
                the world all_reduce ~100 ms after ranks 4 and 5, who wait there.
mg6_three_groups_b  kind "chain" as mg6_three_groups_a, active=4 (ProfilerStep#2-#5);
                rank 3 sleeps 0.06 s right before its first group all_reduce (C) in
                ProfilerStep#3 only. Ground truth: root cause rank 3 in step 3 only (that
                step ~1.8x the others); rank 2 waits ~60 ms for it at C and reaches the
                world all_reduce late (delayed); the others wait at the world.
ddp4_two_b      4 ranks, DDP on world, work_s=0.05; rank 1 sleeps 0.12 s more before
                backward, rank 3 calls torch.linalg.qr(128 x 128) 90 times after forward
                (~40 ms), every step. Ground truth: two independent slow ranks, rank 1
                (~120 ms, outside any op) and rank 3 (~40 ms, in aten::linalg_qr).

Point-to-point sets (pinned, active=3, **record_shapes=True**: the c10d::send /
c10d::recv_ ops then carry their peer and tag, which link each send to its recv):

pp4_shapes_a    kind "pipeline" as pp4_stages_a (4 stages, 4 micro-batches, send/recv on
                the world group, work_s=0.006 per micro-batch forward and backward, one
                world all_reduce of the loss); rank 1 runs 2 x torch.mm of a fixed
                640 x 640 matrix in each micro-batch's forward (after its recv, before its
                compute), every step. Ground truth: root cause rank 1 (its extra compute,
                aten::mm); rank 2 waits in gloo:recv for rank 1, rank 3 for rank 2 (the
                cascade's origin: rank 1), rank 0 is held in gloo:send and waits in
                gloo:recv for rank 1.
pp4_shapes_b    the same with nobody slower (the pipeline control).
pp4_pure_a      a pure pipeline (``loss_all_reduce=False``: no collective in the step,
                send/recv only), otherwise as pp4_shapes_a; rank 2 runs 2 x torch.mm of
                the fixed 640 x 640 matrix in each micro-batch's forward (after its recv,
                before its compute). Ground truth: root cause rank 2; rank 3 waits in
                gloo:recv for rank 2, ranks 0 and 1 for rank 2's grads (cascade).
pp4_pure_b      the same pure pipeline with nobody slower (its control).
pp2x2_shapes    kind "pipeline" on sub-groups: groups [0, 2] and [1, 3] (dist.new_group);
                each is a 2-stage pipeline (stage = the rank's place in its group), 2
                micro-batches, send/recv on the group, then the world all_reduce of the
                loss; nobody slower. The send/recv peers in the trace are GROUP ranks
                (rank 0 sends to "1", i.e. global rank 2).
pp2x2_shapes_a  the same two pipelines; rank 3 (the second stage of [1, 3]) runs 2 x
                torch.mm of the fixed 640 x 640 matrix in each micro-batch's forward
                (after its recv, before its compute). Ground truth: root cause rank 3;
                rank 1 waits in gloo:recv for its grads, ranks 0 and 2 wait ~20 ms for
                the other pipeline at the world all_reduce. Each rank shows two gloo
                threads, the world's (the pair groups' send/recv run on the main
                thread), and the world all_reduce alternates between them step by step.

Issue-37 sets (pinned, defaults, active=3): run-vs-run pairs for ``tracefuse diff``.
All run one job (_RUN_A: a 256-wide MLP of 3 Linear layers, batch 512, work_s=0.05
before backward, DDP on world); each but the first changes one thing, and the names say
nothing of what:

ddp4_runs_a        the job.
ddp4_runs_a_again  the same job, recorded again.
ddp4_runs_b        every rank: hidden width 512 (every matmul larger).
ddp4_runs_c        rank 2: 20 x torch.linalg.svd(128 x 128) after forward, every step.
ddp4_runs_d        every rank: 0.06 s at the start of every step, in no op.
ddp4_runs_e        every rank: batch 256.

--check also prints the timeline tables of tests/data/recorded/README.md (timeline()).

While recording, each worker prints the OS thread ids of the ``pt_gloo_runloop``
threads each of its process groups started (``THREADS rank=R group=G tids=[...]``,
from /proc/self/task before and after the group is made): the ground truth of which
thread belongs to which group, which the traces themselves do not say.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SEED = 1234
HERE = Path(__file__).resolve()
REPO = HERE.parent.parent


@dataclass(frozen=True)
class TraceSet:
    name: str
    world_size: int
    distributed: bool = True
    wait: int = 1
    warmup: int = 1
    active: int = 2
    repeat: int = 1
    record_shapes: bool = False
    with_stack: bool = False
    profile_memory: bool = False
    samepid: bool = False
    straggler: int | None = None  # rank that sleeps before backward
    straggler_sleep_s: float = 0.2
    subgroups: tuple[tuple[int, ...], ...] = field(default_factory=tuple)
    # rank -> seconds slept before backward (in addition to `straggler`)
    sleeps: tuple[tuple[int, float], ...] = ()
    # loop indices (0-based training steps) in which `sleeps` apply; None = every step
    sleep_steps: tuple[int, ...] | None = None
    # seconds EVERY rank sleeps per step before backward: the step's "work", so that a
    # straggler's extra sleeps are a fraction of a step of realistic length (a sleep, not
    # compute: 4 ranks on 2 cores do not slow each other down)
    work_s: float = 0.0
    # >0: dist.new_subgroups(this size); DDP on world, plus a sub-group all_reduce and a
    # world all_reduce of the loss per step
    new_subgroups: int = 0
    # model / data size: keep the files small
    d_in: int = 8
    d_hidden: int = 16
    d_out: int = 4
    batch: int = 4
    # --- knobs of the sets recorded after ddp4_balanced_work (defaults: as before) ---
    # pin each rank to one CPU (os.sched_setaffinity): rank r on the r % ncpu-th CPU
    # the launcher may use
    pin: bool = False
    # where every rank's work_s sleep goes: "backward" (before backward, as before) or
    # "start" (first thing in the training step, before data prep and forward)
    work_at: str = "backward"
    # (rank, where, seconds): a sleep in no op and no annotation of its own; where is
    # "start" (first thing in the step, like work_at="start") or "annotated" (inside
    # the `annotate` record_function, between data prep and forward); kinds pairs and
    # chain: "comm", right before the rank's first group all_reduce of the step (pairs:
    # inside the model's forward, right before the custom op); pipeline: "micro_batch",
    # in each micro-batch's forward, after its recv, before the stage's compute
    pauses: tuple[tuple[int, str, float], ...] = ()
    # loop indices in which `pauses` apply; None = every step
    pause_steps: tuple[int, ...] | None = None
    # record_function name around each step's data prep + forward; None = none
    annotate: str | None = None
    # rank -> batch size (instead of `batch`)
    batches: tuple[tuple[int, int], ...] = ()
    # (rank, op, calls, n): after forward, before the work sleep, rank calls
    # op ("qr": torch.linalg.qr of an n x n matrix) `calls` times, every step
    rank_ops: tuple[tuple[int, str, int, int], ...] = ()
    # hidden Linear layers (1: Linear, ReLU, Linear as before)
    layers: int = 1
    # DDP bucket_cap_mb (None: DDP's default)
    bucket_cap_mb: float | None = None
    # --- knobs of the issue-35 sets (defaults: as before) ---
    # what a step does: "ddp" (as before); "pairs": DDP on world around a model whose
    # forward all_reduces its hidden activation on the rank's group of `groups` in a
    # custom autograd.Function (tensor-parallel style; its backward all_reduces the grad
    # on the same group); "chain": after forward, one all_reduce per group of `groups`
    # the rank is in (in the order of `groups`), then DDP on world; "pipeline": one stage
    # per rank, `micro_batches` forwards then as many backwards, activations and grads
    # by dist.send / dist.recv, then an all_reduce of the loss on world
    kind: str = "ddp"
    # process groups every rank makes with dist.new_group, in this order (pairs, chain)
    groups: tuple[tuple[int, ...], ...] = ()
    # pipeline: micro-batches per step (work_s is then slept per micro-batch, once in its
    # forward and once in its backward, on every stage); with `groups`, each group is
    # one pipeline (its members in rank order are its stages), send/recv on that group.
    # `rank_ops` of a pipeline run in each micro-batch's forward, after the recv, before
    # the stage's compute (instead of after forward)
    micro_batches: int = 0
    # --- knob of the issue-35 late-entry set (default: as before) ---
    # (rank, op, calls, n) as rank_ops, but run at the very end of each step (ddp: after
    # opt.step and the step's last collective, right before prof.step())
    tail_ops: tuple[tuple[int, str, int, int], ...] = ()
    # --- knob of the issue-35 pure-pipeline sets (default: as before) ---
    # pipeline: all_reduce the step's loss on world at the end of each step; False: a
    # pure pipeline (pipeline parallel without data parallel: send/recv only, no
    # collective in the step)
    loss_all_reduce: bool = True

    @property
    def steps(self) -> int:
        return (self.wait + self.warmup + self.active) * self.repeat

    def sleep_s(self, rank: int, step: int) -> float:
        """Seconds rank sleeps before backward in training step `step` (0-based)."""
        if self.straggler is not None and rank == self.straggler:
            return self.straggler_sleep_s
        if self.sleep_steps is not None and step not in self.sleep_steps:
            return self.work_s
        return self.work_s + dict(self.sleeps).get(rank, 0.0)

    def pause_s(self, rank: int, step: int, where: str) -> float:
        """Seconds rank sleeps at `where` ("start", "annotated") in loop step `step`."""
        out = 0.0
        if where == self.work_at == "start":
            out += self.work_s
        if self.pause_steps is None or step in self.pause_steps:
            out += sum(s for r, w, s in self.pauses if r == rank and w == where)
        return out

    def before_backward_s(self, rank: int, step: int) -> float:
        """Seconds rank sleeps before backward (the work sleep unless work_at moved it)."""
        s = self.sleep_s(rank, step)
        if self.work_at != "backward" and not (self.straggler is not None and rank == self.straggler):
            s -= self.work_s
        return s

    def batch_of(self, rank: int) -> int:
        return dict(self.batches).get(rank, self.batch)

    @property
    def ops_per_step(self) -> tuple[str, ...]:
        """The process group of each collective a step issues, in issue order."""
        if self.new_subgroups:
            return ("world", "sub", "world")
        if self.subgroups:
            return ("sub", "world")
        return ("world",)

    def ops_of(self, rank: int) -> tuple[str, ...]:
        """The group (its ranks as text, or "world") of each gloo:all_reduce `rank`
        issues per step, in issue order (kinds pairs, chain, pipeline)."""
        mine = [str(list(g)) for g in self.groups if rank in g]
        if self.kind == "pairs":
            return (mine[0], mine[0], "world")
        if self.kind == "chain":
            return (*mine, "world")
        return ("world",) if self.loss_all_reduce else ()


# the job of the issue-37 pairs (ddp4_runs_*): what each run changes goes on top
_RUN_A: dict = {"d_in": 256, "d_hidden": 256, "d_out": 256, "layers": 2, "batch": 512}


def _pipeline4(name: str, **knobs: Any) -> TraceSet:
    """The pipelines of 4 ranks (pp4_shapes_a/b, pp4_pure_a/b, pp2x2_shapes;
    record_shapes: the send/recv peers recorded), with ``knobs`` on top."""
    base: dict = {
        "active": 3,
        "pin": True,
        "record_shapes": True,
        "work_s": 0.006,
        "kind": "pipeline",
        "micro_batches": 4,
    }
    return TraceSet(name, 4, **{**base, **knobs})


SETS: dict[str, TraceSet] = {
    s.name: s
    for s in [
        TraceSet("ddp4", 4, record_shapes=True, with_stack=True, profile_memory=True),
        TraceSet("ddp4_samepid", 4, record_shapes=True, with_stack=True, profile_memory=True, samepid=True),
        TraceSet("ddp2_cycles", 2, repeat=2, record_shapes=True),
        TraceSet("ddp8_straggler", 8, with_stack=True, straggler=5),
        TraceSet("ddp4_subgroups", 4, record_shapes=True, subgroups=((0, 1), (2, 3))),
        TraceSet("natural_order", 12, distributed=False),
        TraceSet("ddp8_subgroups_slow", 8, active=3, new_subgroups=2, sleeps=((5, 0.2),)),
        TraceSet("ddp4_two_stragglers", 4, active=3, sleeps=((1, 0.15), (3, 0.06))),
        # loop index 3 = the 2nd active step (wait=1, warmup=1): ProfilerStep#3
        TraceSet("ddp4_intermittent", 4, active=3, sleeps=((2, 0.2),), sleep_steps=(3,)),
        TraceSet("ddp4_balanced", 4, active=3),
        TraceSet("ddp4_subgroups_defaults_samepid", 4, active=3, new_subgroups=2, samepid=True),
        # steps of ~0.1 s of "work"; rank 2 takes 15% longer in every step: a mild,
        # persistent straggler (what a throttled GPU or a rank that also logs looks like)
        TraceSet("ddp4_mild_straggler", 4, active=4, work_s=0.1, sleeps=((2, 0.015),)),
        TraceSet("ddp4_balanced_work", 4, active=4, work_s=0.1),
        # --- pinned sets (one CPU per rank, round-robin), profiler defaults, active=3
        # unless noted; names say nothing of what a rank does differently (README.md)
        # rank 1: 0.12 s more sleep at the start of every step, outside any op/annotation
        TraceSet(
            "ddp4_case_a", 4, active=3, pin=True, work_s=0.05, work_at="start", pauses=((1, "start", 0.12),)
        ),
        # rank 2: batch 512 instead of 64 on a 512-wide 3-layer MLP
        TraceSet(
            "ddp4_case_b",
            4,
            active=3,
            pin=True,
            work_s=0.05,
            d_in=512,
            d_hidden=512,
            d_out=512,
            layers=2,
            batch=64,
            batches=((2, 512),),
        ),
        # rank 3: 100 x torch.linalg.qr(128 x 128) after forward, every step
        TraceSet("ddp4_case_c", 4, active=3, pin=True, work_s=0.05, rank_ops=((3, "qr", 100, 128),)),
        # every rank: record_function("train_step") around data prep + forward; rank 1
        # sleeps 0.15 s inside it in ProfilerStep#3 (loop index 3) only
        TraceSet(
            "ddp4_case_d",
            4,
            active=3,
            pin=True,
            work_s=0.05,
            annotate="train_step",
            pauses=((1, "annotated", 0.15),),
            pause_steps=(3,),
        ),
        # ranks 1 and 3: 0.15 s and 0.06 s more before backward, every step
        TraceSet("ddp4_case_e", 4, active=3, pin=True, work_s=0.05, sleeps=((1, 0.15), (3, 0.06))),
        # balanced controls: 2 ranks without work (steps of a few ms), 6 active steps;
        # 4 ranks with work_s. Each recorded twice (the noise between two runs)
        TraceSet("ddp2_case_f", 2, active=6, pin=True),
        TraceSet("ddp2_case_f_again", 2, active=6, pin=True),
        TraceSet("ddp4_case_f", 4, active=3, pin=True, work_s=0.05),
        TraceSet("ddp4_case_f_again", 4, active=3, pin=True, work_s=0.05),
        # 8 ranks, 5 Linear layers, 1 KB buckets: several gradient all_reduces per step,
        # run concurrently by gloo's two runloop threads; rank 6: 0.15 s more before backward
        TraceSet(
            "ddp8_case_g",
            8,
            active=3,
            pin=True,
            work_s=0.05,
            d_hidden=32,
            layers=4,
            bucket_cap_mb=0.001,
            sleeps=((6, 0.15),),
        ),
        # 6 ranks, active=4 (#2-#5); rank 4: 0.2 s more before backward in ProfilerStep#3 only
        TraceSet("ddp6_case_h", 6, active=4, pin=True, work_s=0.05, sleeps=((4, 0.2),), sleep_steps=(3,)),
        # --- issue 35: several process groups, pipeline p2p, two different causes;
        # pinned, profiler defaults, active=3 (README.md says what each rank does)
        # pairs {0,1} {2,3} (custom op: all_reduce in forward and backward), DDP on world;
        # rank 3: 0.1 s in forward right before the custom op, every step
        TraceSet(
            "mg4_pairs_a",
            4,
            active=3,
            pin=True,
            work_s=0.05,
            kind="pairs",
            groups=((0, 1), (2, 3)),
            pauses=((3, "comm", 0.1),),
        ),
        # 4 stages, 4 micro-batches, send/recv; rank 2: 0.02 s more per micro-batch forward
        TraceSet(
            "pp4_stages_a",
            4,
            active=3,
            pin=True,
            work_s=0.006,
            kind="pipeline",
            micro_batches=4,
            pauses=((2, "micro_batch", 0.02),),
        ),
        # groups {0,1} {1,2} {2,3} one after the other, then DDP on world (6 ranks);
        # rank 0: 0.1 s before its first group all_reduce, every step
        TraceSet(
            "mg6_three_groups_a",
            6,
            active=3,
            pin=True,
            work_s=0.05,
            kind="chain",
            groups=((0, 1), (1, 2), (2, 3)),
            pauses=((0, "comm", 0.1),),
        ),
        # as mg6_three_groups_a, 4 active steps; rank 3: 0.06 s before its first group
        # all_reduce in ProfilerStep#3 (loop index 3) only
        TraceSet(
            "mg6_three_groups_b",
            6,
            active=4,
            pin=True,
            work_s=0.05,
            kind="chain",
            groups=((0, 1), (1, 2), (2, 3)),
            pauses=((3, "comm", 0.06),),
            pause_steps=(3,),
        ),
        # as pp4_stages_a with record_shapes (send/recv peers recorded); rank 1: 2 x
        # mm(640 x 640) in each micro-batch's forward; pp4_shapes_b: nobody slower
        _pipeline4(
            "pp4_shapes_a",
            rank_ops=((1, "mm", 2, 640),),
        ),
        _pipeline4(
            "pp4_shapes_b",
        ),
        # rank 2: 2 x mm(640 x 640) at the end of every step, after its last collective
        TraceSet(
            "ddp4_tail_a",
            4,
            active=3,
            pin=True,
            record_shapes=True,
            work_s=0.03,
            tail_ops=((2, "mm", 2, 640),),
        ),
        # pure pipelines (no loss all_reduce: send/recv only, no collective in the step),
        # otherwise as pp4_shapes_a/b; rank 2: 2 x mm(640 x 640) in each micro-batch's
        # forward; pp4_pure_b: nobody slower
        _pipeline4(
            "pp4_pure_a",
            rank_ops=((2, "mm", 2, 640),),
            loss_all_reduce=False,
        ),
        _pipeline4(
            "pp4_pure_b",
            loss_all_reduce=False,
        ),
        # two 2-stage pipelines on the groups [0, 2] and [1, 3] (send/recv peers: group ranks)
        _pipeline4("pp2x2_shapes", micro_batches=2, groups=((0, 2), (1, 3))),
        # the same; rank 3: 2 x mm(640 x 640) in each micro-batch's forward
        _pipeline4("pp2x2_shapes_a", micro_batches=2, groups=((0, 2), (1, 3)), rank_ops=((3, "mm", 2, 640),)),
        # as mg4_pairs_a, nobody slower
        TraceSet("mg4_pairs_b", 4, active=3, pin=True, work_s=0.05, kind="pairs", groups=((0, 1), (2, 3))),
        # rank 0: 0.1 s in forward right before the custom op; rank 3: 90 x qr(128 x 128) after forward
        TraceSet(
            "mg4_pairs_c",
            4,
            active=3,
            pin=True,
            work_s=0.05,
            kind="pairs",
            groups=((0, 1), (2, 3)),
            pauses=((0, "comm", 0.1),),
            rank_ops=((3, "qr", 90, 128),),
        ),
        # rank 1: 0.12 s more before backward; rank 3: 90 x qr(128 x 128) after forward
        TraceSet(
            "ddp4_two_b",
            4,
            active=3,
            pin=True,
            work_s=0.05,
            sleeps=((1, 0.12),),
            rank_ops=((3, "qr", 90, 128),),
        ),
        # --- issue 37: run-vs-run pairs (pinned, defaults, active=3; the names say
        # nothing of what differs; README.md says what each run does). All: a 256-wide
        # MLP (3 Linear layers), batch 512, work_s=0.05 before backward, DDP on world.
        TraceSet("ddp4_runs_a", 4, active=3, pin=True, work_s=0.05, **_RUN_A),
        # the same job recorded again
        TraceSet("ddp4_runs_a_again", 4, active=3, pin=True, work_s=0.05, **_RUN_A),
        # every rank: hidden width 512 (the matmuls of every layer larger)
        TraceSet("ddp4_runs_b", 4, active=3, pin=True, work_s=0.05, **{**_RUN_A, "d_hidden": 512}),
        # rank 2: 20 x torch.linalg.svd(128 x 128) after forward, every step
        TraceSet(
            "ddp4_runs_c", 4, active=3, pin=True, work_s=0.05, rank_ops=((2, "svd", 20, 128),), **_RUN_A
        ),
        # every rank: 0.06 s at the start of every step (before data prep and forward)
        TraceSet(
            "ddp4_runs_d",
            4,
            active=3,
            pin=True,
            work_s=0.05,
            pauses=tuple((r, "start", 0.06) for r in range(4)),
            **_RUN_A,
        ),
        # every rank: batch 256 (half the job's)
        TraceSet("ddp4_runs_e", 4, active=3, pin=True, work_s=0.05, **{**_RUN_A, "batch": 256}),
    ]
}


# --------------------------------------------------------------------------- worker
def run_worker(ts: TraceSet, rank: int, outdir: Path) -> None:
    if ts.pin:
        # before torch starts any thread: every thread of the rank inherits the CPU
        cpus = sorted(os.sched_getaffinity(0))
        cpu = cpus[rank % len(cpus)]
        os.sched_setaffinity(0, {cpu})
        print(f"PIN rank={rank} cpu={cpu} of {cpus}", flush=True)
    import contextlib

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.set_num_threads(1)
    print(f"[{ts.name}] rank {rank} os.getpid()={os.getpid()} host={socket.gethostname()}", flush=True)

    if not ts.distributed:
        # natural_order: a few ops, no torch.distributed -> no distributedInfo.
        torch.manual_seed(SEED + rank)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with record_function(f"rank_{rank}"):
                a = torch.full((2, 2), float(rank))
                b = a + a
                b.sum()
        prof.export_chrome_trace(str(outdir / f"rank_{rank}.json"))
        return

    from torch.nn.parallel import DistributedDataParallel as DDP

    before = _runloop_tids()
    dist.init_process_group("gloo", rank=rank, world_size=ts.world_size)
    dist.barrier()  # the default group's gloo backend is made (and its threads started)
    world_tids = _new_runloop_tids(before)
    print(f"THREADS rank={rank} group=world tids={sorted(world_tids)}", flush=True)
    if ts.kind != "ddp":
        _run_kind(ts, rank, outdir, before | world_tids)
        return
    group = None
    sub = None
    if ts.subgroups:
        # every rank must take part in every new_group call, in the same order
        groups = [dist.new_group(list(g)) for g in ts.subgroups]
        group = next(g for g, members in zip(groups, ts.subgroups) if rank in members)
    if ts.new_subgroups:
        sub, _ = dist.new_subgroups(ts.new_subgroups)
        dist.barrier(group=sub)
        sub_ranks = dist.get_process_group_ranks(sub)
        sub_tids = _new_runloop_tids(before | world_tids)
        print(f"THREADS rank={rank} group=sub{sub_ranks} tids={sorted(sub_tids)}", flush=True)

    torch.manual_seed(SEED)
    hidden: list[nn.Module] = []
    for _ in range(ts.layers - 1):
        hidden += [nn.Linear(ts.d_hidden, ts.d_hidden), nn.ReLU()]
    model = nn.Sequential(
        nn.Linear(ts.d_in, ts.d_hidden), nn.ReLU(), *hidden, nn.Linear(ts.d_hidden, ts.d_out)
    )
    if ts.bucket_cap_mb is None:
        ddp = DDP(model, process_group=group)
    else:
        ddp = DDP(model, process_group=group, bucket_cap_mb=ts.bucket_cap_mb)
    mats = {
        n: torch.randn(n, n, generator=torch.Generator().manual_seed(SEED))
        for _, _, _, n in ts.rank_ops + ts.tail_ops
    }
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()
    gen = torch.Generator().manual_seed(SEED + 1000 + rank)

    with _profiler(ts, outdir) as prof:
        batch = ts.batch_of(rank)
        for step in range(ts.steps):
            pause = ts.pause_s(rank, step, "start")
            if pause:
                time.sleep(pause)
            ctx = record_function(ts.annotate) if ts.annotate else contextlib.nullcontext()
            with ctx:
                x = torch.randn(batch, ts.d_in, generator=gen)
                y = torch.randn(batch, ts.d_out, generator=gen)
                opt.zero_grad()
                pause = ts.pause_s(rank, step, "annotated")
                if pause:
                    time.sleep(pause)
                loss = loss_fn(ddp(x), y)
            _rank_ops(ts, rank, mats)
            pause = ts.before_backward_s(rank, step)
            if pause:
                time.sleep(pause)
            loss.backward()  # DDP's gradient all_reduce runs here
            opt.step()
            if sub is not None:
                metric = loss.detach().reshape(1).repeat(2)
                dist.all_reduce(metric, group=sub)  # the rank's sub-group
            if ts.subgroups or sub is not None:
                world_loss = loss.detach().clone()
                dist.all_reduce(world_loss)  # world group
            _rank_ops(ts, rank, mats, ts.tail_ops)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def _rank_ops(ts: TraceSet, rank: int, mats: dict, ops: tuple = ()) -> None:
    """The extra ops of ``ts.rank_ops`` this rank runs after forward (pipeline: in each
    micro-batch's forward): ``qr`` is torch.linalg.qr, ``svd`` torch.linalg.svd, ``mm``
    torch.mm of the fixed n x n matrix with itself."""
    import torch

    for r, op, calls, n in ops or ts.rank_ops:
        if r != rank:
            continue
        fn = {"qr": torch.linalg.qr, "svd": torch.linalg.svd, "mm": lambda m: torch.mm(m, m)}[op]
        for _ in range(calls):
            fn(mats[n])


def _profiler(ts: TraceSet, outdir: Path):
    """The profiler every distributed set records with (tensorboard_trace_handler, gzip)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    handler = torch.profiler.tensorboard_trace_handler(str(outdir), use_gzip=True)
    return profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=ts.wait, warmup=ts.warmup, active=ts.active, repeat=ts.repeat),
        on_trace_ready=handler,
        record_shapes=ts.record_shapes,
        with_stack=ts.with_stack,
        profile_memory=ts.profile_memory,
    )


def _run_kind(ts: TraceSet, rank: int, outdir: Path, known: set[int]) -> None:
    """The steps of kinds pairs, chain and pipeline (see TraceSet.kind). Every sleep is
    a plain time.sleep in no op and no annotation of its own; no label is added."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    # every rank takes part in every new_group call, in the same order; a member waits
    # once on each of its groups (a barrier) so that the group's threads have started
    mine = {}
    for members in ts.groups:
        g = dist.new_group(list(members))
        if rank in members:
            mine[members] = g
            dist.barrier(group=g)
            tids = _new_runloop_tids(known)
            known |= tids
            print(f"THREADS rank={rank} group={list(members)} tids={sorted(tids)}", flush=True)

    class PairReduce(torch.autograd.Function):
        """Tensor-parallel style: all_reduce the activation in forward, the grad in backward."""

        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            y = x.clone()
            dist.all_reduce(y, group=group)
            return y

        @staticmethod
        def backward(ctx, grad):
            grad = grad.clone()
            dist.all_reduce(grad, group=ctx.group)
            return grad, None

    class Net(nn.Module):
        def __init__(self, group) -> None:
            super().__init__()
            self.fc1 = nn.Linear(ts.d_in, ts.d_hidden)
            self.fc2 = nn.Linear(ts.d_hidden, ts.d_out)
            self.group = group
            self.pause = 0.0

        def forward(self, x):
            h = self.fc1(x)
            if self.pause:
                time.sleep(self.pause)
            h = PairReduce.apply(h, self.group)
            return self.fc2(torch.relu(h))

    torch.manual_seed(SEED)
    loss_fn = nn.MSELoss()
    gen = torch.Generator().manual_seed(SEED + 1000 + rank)
    if ts.kind == "pipeline":
        _run_pipeline(ts, rank, outdir, next(iter(mine.values()), None))
        dist.barrier()
        dist.destroy_process_group()
        return
    net: nn.Module
    if ts.kind == "pairs":
        net = Net(next(iter(mine.values())))
    else:
        net = nn.Sequential(nn.Linear(ts.d_in, ts.d_hidden), nn.ReLU(), nn.Linear(ts.d_hidden, ts.d_out))
    ddp = DDP(net)
    mats = {n: torch.randn(n, n, generator=torch.Generator().manual_seed(SEED)) for _, _, _, n in ts.rank_ops}
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    with _profiler(ts, outdir) as prof:
        for step in range(ts.steps):
            pause = ts.pause_s(rank, step, "comm")
            x = torch.randn(ts.batch, ts.d_in, generator=gen)
            y = torch.randn(ts.batch, ts.d_out, generator=gen)
            opt.zero_grad()
            if ts.kind == "pairs":
                net.pause = pause  # slept inside forward, right before the custom op
            loss = loss_fn(ddp(x), y)
            if ts.kind == "chain":
                if pause:
                    time.sleep(pause)
                for g in mine.values():  # in the order of ts.groups
                    metric = loss.detach().reshape(1).clone()
                    dist.all_reduce(metric, group=g)
            _rank_ops(ts, rank, mats)
            pause = ts.before_backward_s(rank, step)
            if pause:
                time.sleep(pause)
            loss.backward()  # pairs: the custom op's grad all_reduce, then DDP's (world)
            opt.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def _run_pipeline(ts: TraceSet, rank: int, outdir: Path, group=None) -> None:
    """One stage per rank, GPipe-like: every micro-batch's forward (recv the activation
    from the stage before, compute, send to the next), then every micro-batch's
    backward (recv the grad from the next stage, backward, send the input's grad to the
    one before), opt.step, and an all_reduce of the step's loss on the world group.
    ``group``: the rank's pipeline (its members in rank order are the stages; send/recv
    on it); None: every rank, on the world group."""
    import torch
    import torch.distributed as dist
    from torch import nn

    members = list(range(ts.world_size)) if group is None else dist.get_process_group_ranks(group)
    me = members.index(rank)
    last = len(members) - 1
    prev_r = members[me - 1] if me > 0 else None
    next_r = members[me + 1] if me < last else None
    torch.manual_seed(SEED + rank)
    gen = torch.Generator().manual_seed(SEED + 1000 + rank)
    d_in = ts.d_in if me == 0 else ts.d_hidden
    d_out = ts.d_out if me == last else ts.d_hidden
    stage = nn.Sequential(nn.Linear(d_in, d_out), nn.ReLU()) if me < last else nn.Linear(d_in, d_out)
    opt = torch.optim.SGD(stage.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()
    mats = {n: torch.randn(n, n, generator=torch.Generator().manual_seed(SEED)) for _, _, _, n in ts.rank_ops}
    with _profiler(ts, outdir) as prof:
        for step in range(ts.steps):
            opt.zero_grad()
            ins, outs = [], []
            total = torch.zeros(1)
            for _ in range(ts.micro_batches):
                if prev_r is None:
                    x = torch.randn(ts.batch, d_in, generator=gen)
                else:
                    x = torch.empty(ts.batch, d_in)
                    dist.recv(x, prev_r, group=group)
                    x.requires_grad_()
                pause = ts.pause_s(rank, step, "micro_batch")
                if pause:
                    time.sleep(pause)
                _rank_ops(ts, rank, mats)
                out = stage(x)
                if ts.work_s:
                    time.sleep(ts.work_s)
                if next_r is not None:
                    dist.send(out.detach(), next_r, group=group)
                else:
                    out = loss_fn(out, torch.randn(ts.batch, d_out, generator=gen))
                    total += out.detach()
                ins.append(x)
                outs.append(out)
            for x, out in zip(ins, outs):
                if ts.work_s:
                    time.sleep(ts.work_s)
                if next_r is None:
                    out.backward()
                else:
                    grad = torch.empty_like(out)
                    dist.recv(grad, next_r, group=group)
                    out.backward(grad)
                if prev_r is not None:
                    dist.send(x.grad, prev_r, group=group)
            opt.step()
            if ts.loss_all_reduce:
                dist.all_reduce(total)  # the step's loss, on every rank (world)
            prof.step()


def _runloop_tids() -> set[int]:
    """OS thread ids of this process's ``pt_gloo_runloop`` threads (Linux /proc)."""
    out = set()
    for t in Path("/proc/self/task").iterdir():
        try:
            if (t / "comm").read_text().strip() == "pt_gloo_runloop":
                out.add(int(t.name))
        except OSError:
            pass  # the thread ended meanwhile
    return out


def _new_runloop_tids(known: set[int], want: int = 2, timeout: float = 10.0) -> set[int]:
    """The runloop threads started since `known`: a new group starts `want` (gloo's
    default, 2) and each names itself once running, so poll until all have."""
    deadline = time.monotonic() + timeout
    while True:
        new = _runloop_tids() - known
        if len(new) >= want or time.monotonic() > deadline:
            return new
        time.sleep(0.01)


# --------------------------------------------------------------------------- launcher
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(ts: TraceSet, out: Path, force: bool, timeout: float) -> Path:
    outdir = out / ts.name
    if outdir.exists() and any(p.name != "README.md" for p in outdir.iterdir()):
        if not force:
            sys.exit(f"{outdir} is not empty; pass --force to replace it")
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True, exist_ok=True)

    if ts.samepid and shutil.which("unshare") is None:
        sys.exit("unshare not found: cannot record ddp4_samepid")

    base_env = dict(os.environ)
    base_env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0", GLOO_SOCKET_IFNAME="lo")
    port = free_port()
    ranks = list(range(ts.world_size))
    if not ts.distributed:
        ranks = ranks[::-1]  # reverse: time order is the opposite of rank order
    procs = []
    for rank in ranks:
        cmd = [sys.executable, str(HERE), "--set", ts.name, "--out", str(out), "--worker-rank", str(rank)]
        if ts.samepid:
            cmd = ["unshare", "--pid", "--fork", "--mount-proc"] + cmd
        env = dict(base_env)
        if ts.distributed:
            env.update(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                RANK=str(rank),
                WORLD_SIZE=str(ts.world_size),
                LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(ts.world_size),
            )
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        if not ts.distributed:
            print(p.communicate(timeout=timeout)[0], end="", flush=True)
            if p.returncode != 0:
                sys.exit(f"rank {rank} failed with {p.returncode}")
        else:
            procs.append((rank, p))
    deadline = time.monotonic() + timeout
    failed = []
    threads = []
    for rank, p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            rc = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            text, rc = "", "timeout"
        print(text, end="", flush=True)
        threads += [line for line in text.splitlines() if line.startswith("THREADS ")]
        if rc != 0:
            failed.append((rank, rc))
    if threads:
        print(f"== {ts.name}: pt_gloo_runloop threads per group (from /proc, while recording)")
        print("\n".join(sorted(threads, key=lambda t: int(t.split("rank=")[1].split()[0]))), flush=True)
    if failed:
        sys.exit(f"{ts.name}: ranks failed: {failed}")
    return outdir


# --------------------------------------------------------------------------- check
def _load(path: Path):
    raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
    return raw, json.loads(raw)


def check(d: Path, expect_dist: bool | None = None) -> dict:
    """Validate every trace in d and print a summary; returns it as a dict."""
    files = sorted(p for p in d.iterdir() if p.name.endswith((".json", ".json.gz")))
    if not files:
        sys.exit(f"no traces in {d}")
    summary = {"dir": str(d), "files": []}
    for f in files:
        raw, doc = _load(f)
        ev = doc.get("traceEvents")
        assert isinstance(ev, list), f"{f}: no traceEvents array"
        keys = list(doc)
        info = doc.get("distributedInfo")
        if expect_dist is True:
            assert isinstance(info, dict) and "rank" in info, f"{f}: no distributedInfo.rank"
        if expect_dist is False:
            assert info is None, f"{f}: unexpected distributedInfo"
        ti = keys.index("traceEvents")
        base = "absent"
        if "baseTimeNanoseconds" in keys:
            base = "before" if keys.index("baseTimeNanoseconds") < ti else "after"
        cpu_pids = sorted({e.get("pid") for e in ev if e.get("ph") == "X" and isinstance(e.get("pid"), int)})
        tids = sorted({e.get("tid") for e in ev if e.get("ph") == "X"}, key=str)
        comms = {}
        for e in ev:
            n = e.get("name", "")
            if n.startswith("gloo:") or n == "record_param_comms":
                a = e.get("args", {})
                k = (
                    n,
                    a.get("Collective name"),
                    a.get("Process Group Name"),
                    a.get("Process Group Description"),
                    a.get("Group size"),
                )
                comms.setdefault(k, []).append(a.get("Seq"))
        steps = sorted({e["name"] for e in ev if e.get("name", "").startswith("ProfilerStep#")})
        entry = {
            "file": f.name,
            "bytes": f.stat().st_size,
            "raw_bytes": len(raw),
            "events": len(ev),
            "keys": keys,
            "baseTimeNanoseconds": base,
            "rank": info.get("rank") if info else None,
            "world_size": info.get("world_size") if info else None,
            "cpu_pids": cpu_pids,
            "tids": tids,
            "steps": steps,
            "comms": {" | ".join(map(str, k)): v for k, v in comms.items()},
        }
        summary["files"].append(entry)
        print(
            f"{f.name}: {entry['bytes']} B ({entry['raw_bytes']} B raw), "
            f"{entry['events']} events, rank={entry['rank']}/{entry['world_size']}, "
            f"pids={cpu_pids}, tids={tids}, steps={steps}, base {base} traceEvents, "
            f"keys={keys}"
        )
        for k, seqs in entry["comms"].items():
            print(f"    {k}: Seq {seqs}")
    total = sum(e["bytes"] for e in summary["files"])
    print(f"{d}: {len(files)} files, {total} B")
    return summary


# --------------------------------------------------------------------------- collectives
def _step_of(steps: list[dict], t: float) -> str | None:
    """The ProfilerStep#N (on this rank's main thread) whose span holds time t."""
    for e in steps:
        if e["ts"] <= t <= e["ts"] + e["dur"]:
            return e["name"]
    return None


def _my_groups(info: dict | None) -> dict[str, list[int]]:
    """'world' and 'sub' -> ranks, from distributedInfo.pg_config (this rank's groups)."""
    out: dict[str, list[int]] = {}
    for g in (info or {}).get("pg_config") or []:
        out["world" if g.get("pg_desc") == "default_pg" else "sub"] = g.get("ranks")
    return out


def collectives(d: Path, ops: tuple[str, ...] | None = None, ts: TraceSet | None = None) -> list[dict]:
    """Print, per file, the steps and every gloo:* / c10d::* event (tid, ts, dur), then
    a step x rank table of the gloo:all_reduce durations. Each rank's gloo:all_reduce
    events are numbered in time order within their ProfilerStep; ``ops`` (the set's
    issue order, e.g. world, sub, world) names the group of the k-th one. Returns one
    row per gloo:all_reduce: rank, step, k, group, tid, ts, dur (us). For the kinds
    other than ddp ``ts.ops_of(rank)`` names the groups instead (ranks issue different
    sequences), and `per_collective` prints the tables instead of `_table`."""
    multi = ts is not None and ts.kind != "ddp"
    rows: list[dict] = []
    for f in sorted(p for p in d.iterdir() if p.name.endswith((".json", ".json.gz"))):
        _, doc = _load(f)
        ev = doc["traceEvents"]
        info = doc.get("distributedInfo") or {}
        rank = info.get("rank")
        groups = _my_groups(info)
        if multi:
            assert ts is not None
            ops = ts.ops_of(rank)
            groups = {str(list(g)): list(g) for g in ts.groups} | {"world": list(range(ts.world_size))}
        steps = sorted(
            (e for e in ev if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"]
        )
        names = {
            e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"
        }
        pids = sorted({e["pid"] for e in ev if e.get("ph") == "X" and isinstance(e.get("pid"), int)})
        cfg = [(g.get("pg_name"), g.get("pg_desc"), g.get("ranks")) for g in info.get("pg_config") or []]
        print(f"{f.name}: rank {rank} pid {pids} pg_count {info.get('pg_count')} pg_config {cfg}")
        for e in steps:
            print(f"    {e['name']:<16} tid {e['tid']} ts {e['ts']} dur {e['dur']}")
        comms = sorted(
            (e for e in ev if e.get("ph") == "X" and e.get("name", "").startswith(("gloo:", "c10d::"))),
            key=lambda e: e["ts"],
        )
        k_in_step: dict[str | None, int] = {}
        for e in comms:
            step = _step_of(steps, e["ts"])
            line = (
                f"    {e['name']:<18} tid {e['tid']} ({names.get(e['tid'], '?')}) ts {e['ts']} dur {e['dur']}"
            )
            if e["name"] == "gloo:all_reduce":
                k = k_in_step.get(step, 0)
                k_in_step[step] = k + 1
                group = ops[k] if ops and k < len(ops) else "?"
                members = groups.get(group)
                rows.append(
                    dict(
                        rank=rank,
                        step=step,
                        k=k,
                        group=group,
                        ranks=members,
                        tid=e["tid"],
                        ts=e["ts"],
                        dur=e["dur"],
                        step_ts=next(st["ts"] for st in steps if st["name"] == step) if step else None,
                        j=sum(
                            1 for r in rows if r["rank"] == rank and r["step"] == step and r["group"] == group
                        ),
                    )
                )
                line += f"  [{step} #{k} {group}{members or ''}]"
            print(line)
    if multi:
        per_collective(rows)
    else:
        _table(rows)
    return rows


def per_collective(rows: list[dict]) -> None:
    """Kinds pairs, chain, pipeline: per step, one markdown table row per collective
    instance (the j-th all_reduce on a group within the step, in the order of its first
    start); per member rank `a [+s] w`: a = its gloo:all_reduce start after its own
    step's start, s = that start after the first member's, w = its duration minus the
    shortest member's (the wait); `last` = the member that started last. Times in ms;
    the steps of the ranks start at about the same time (the previous step ended with
    a collective of every rank)."""
    inst: dict[tuple, list[dict]] = {}
    for r in rows:
        inst.setdefault((str(r["step"]), r["group"], r["j"]), []).append(r)
    ranks = sorted({r["rank"] for r in rows})
    print(
        "\nper collective: a = start after the rank's step start [+ after the first member's "
        "start] w = dur minus the shortest member's (wait), ms:"
    )
    print("| step | collective | " + " | ".join(f"rank {k}" for k in ranks) + " | last |")
    print("|---|---|" + "---|" * (len(ranks) + 1))
    order = sorted(
        inst, key=lambda k: (int(k[0].split("#")[1]) if "#" in k[0] else 0, min(r["ts"] for r in inst[k]))
    )
    for key in order:
        rs = {r["rank"]: r for r in inst[key]}
        first = min(r["ts"] for r in rs.values())
        short = min(r["dur"] for r in rs.values())
        cells = []
        for k in ranks:
            r = rs.get(k)
            if r is None:
                cells.append("")
                continue
            a = (r["ts"] - r["step_ts"]) / 1000 if r["step_ts"] is not None else float("nan")
            cells.append(f"{a:.1f} [+{(r['ts'] - first) / 1000:.1f}] w{(r['dur'] - short) / 1000:.1f}")
        lastr = max(rs.values(), key=lambda r: r["ts"])["rank"]
        print(f"| {key[0]} | {key[1]} #{key[2]} | " + " | ".join(cells) + f" | {lastr} |")


def _table(rows: list[dict]) -> None:
    """Per (step, k, group members): each rank's gloo:all_reduce in ms, how much longer
    than the shortest of that instance (the wait), and the spread of the ends."""
    inst: dict[tuple, list[dict]] = {}
    for r in rows:
        inst.setdefault((str(r["step"]), r["k"], r["group"], str(r["ranks"])), []).append(r)
    if inst:
        print(
            "gloo:all_reduce per instance, per rank: dur ms (+ over the shortest = wait), "
            "start ms after the first start (arrival), @tid; spread of the ends"
        )
    for (step, k, group, members), rs in sorted(inst.items()):
        short = min(r["dur"] for r in rs)
        first = min(r["ts"] for r in rs)
        ends = [r["ts"] + r["dur"] for r in rs]
        cells = " ".join(
            f"r{r['rank']}={r['dur'] / 1000:.1f}(+{(r['dur'] - short) / 1000:.1f}"
            f" a{(r['ts'] - first) / 1000:.1f})@{r['tid']}"
            for r in sorted(rs, key=lambda r: r["rank"])
        )
        print(f"  {step} #{k} {group}{members}: {cells}; ends within {(max(ends) - min(ends)) / 1000:.1f} ms")


# --------------------------------------------------------------------------- timeline
def _union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _length(iv: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in iv)


def _intersect(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two unions of intervals."""
    tot = 0.0
    for a, b in x:
        for c, e in y:
            lo, hi = max(a, c), min(b, e)
            if hi > lo:
                tot += hi - lo
    return tot


#: ops whose count and total duration the timeline reports per rank and step
COMPUTE_OPS = ("aten::addmm", "aten::mm", "aten::linalg_qr")


def timeline(d: Path, annotate: str | None = None) -> list[dict]:
    """What the timeline says, per ProfilerStep and rank (times in ms, cross-rank times
    on the shared wall clock base + ts): the step's length; `first_op`, from the step's
    start to the first cpu_op on the main thread; `issue`, to the first c10d::allreduce_
    (the main thread hands the gradients over); `arrive`, to the first gloo:all_reduce
    (a runloop thread starts it); `arrive_abs`, that start after the earliest rank's;
    `gloo`, the union over the runloop threads of the gloo:* slices in the step (the
    time the rank spends inside collectives); `overlap`, how long two runloop threads
    were inside gloo:* at once; the count and total of COMPUTE_OPS; the `annotate`
    slice's length. Prints markdown tables and returns one row per (step, rank)."""
    files = sorted(p for p in d.iterdir() if p.name.endswith((".json", ".json.gz")))
    docs = [_load(f)[1] for f in files]
    b0 = min(doc.get("baseTimeNanoseconds", 0) for doc in docs)
    rows: list[dict] = []
    counts: dict[int, dict[str, int]] = {}
    for doc in docs:
        off = (doc.get("baseTimeNanoseconds", 0) - b0) / 1000.0
        rank = (doc.get("distributedInfo") or {}).get("rank")
        ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        steps = sorted((e for e in ev if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
        main_tid = steps[0]["tid"] if steps else None
        cnt: dict[str, int] = {}
        for e in ev:
            if e.get("cat") == "cpu_op":
                cnt[e["name"]] = cnt.get(e["name"], 0) + 1
        counts[rank] = cnt
        for st in steps:
            t0, t1 = st["ts"], st["ts"] + st["dur"]
            inside = [e for e in ev if t0 <= e["ts"] <= t1 and e is not st]
            main_ops = [e["ts"] for e in inside if e["tid"] == main_tid and e.get("cat") == "cpu_op"]
            issue = [e["ts"] for e in inside if e["name"] == "c10d::allreduce_"]
            gl = [e for e in inside if e["name"].startswith("gloo:")]
            ar = [e["ts"] for e in gl if e["name"] == "gloo:all_reduce"]
            per_tid: dict[int, list[tuple[float, float]]] = {}
            for e in gl:
                per_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
            unions = {t: _union(v) for t, v in per_tid.items()}
            total = _union([iv for v in unions.values() for iv in v])
            tids = sorted(unions)
            overlap = sum(_intersect(unions[a], unions[b]) for i, a in enumerate(tids) for b in tids[i + 1 :])
            row = dict(
                rank=rank,
                step=st["name"],
                dur=st["dur"] / 1000,
                first_op=(min(main_ops) - t0) / 1000 if main_ops else None,
                issue=(min(issue) - t0) / 1000 if issue else None,
                arrive=(min(ar) - t0) / 1000 if ar else None,
                arrive_at=(min(ar) + off) / 1000 if ar else None,
                gloo=_length(total) / 1000,
                overlap=overlap / 1000,
                n_all_reduce=len(ar),
                gloo_tids=tids,
            )
            for name in COMPUTE_OPS:
                ds = [e["dur"] for e in inside if e["name"] == name]
                row[name] = (len(ds), sum(ds) / 1000)
            if annotate:
                ann = [e["dur"] for e in inside if e["name"] == annotate]
                row[annotate] = sum(ann) / 1000 if ann else None
            rows.append(row)
    _timeline_tables(rows, annotate)
    ranks = sorted(counts)
    uneven = sorted(
        n for n in set().union(*map(set, counts.values())) if len({counts[r].get(n, 0) for r in ranks}) > 1
    )
    if uneven:
        print(
            "cpu_op counts that differ between ranks (whole file): "
            + "; ".join(f"{n} " + " ".join(f"r{r}={counts[r].get(n, 0)}" for r in ranks) for n in uneven)
        )
    return rows


def _timeline_tables(rows: list[dict], annotate: str | None) -> None:
    """One markdown table (step x rank) per measure of `timeline`."""

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    by_step: dict[str, dict[int, dict]] = {}
    for r in rows:
        by_step.setdefault(r["step"], {})[r["rank"]] = r
    order = sorted(by_step, key=lambda n: int(n.split("#")[1]))
    ranks = sorted({r["rank"] for r in rows})
    first = {s: min((r["arrive_at"] for r in by_step[s].values() if r["arrive_at"] is not None), default=0.0)
             for s in order}  # fmt: skip

    def arrival(r: dict) -> str:
        if r["arrive"] is None:
            return "-"
        return f"{r['arrive']:.1f} [+{r['arrive_at'] - first[r['step']]:.1f}]"

    measures = [
        ("step length (ProfilerStep dur)", lambda r: f(r["dur"])),
        ("first cpu_op on the main thread after the step's start", lambda r: f(r["first_op"])),
        ("first c10d::allreduce_ after the step's start", lambda r: f(r["issue"])),
        ("arrival: first gloo:all_reduce after the step's start [after the earliest rank's]", arrival),
        ("inside gloo:* (union over the runloop threads)", lambda r: f(r["gloo"])),
        ("gloo:all_reduce count / two runloop threads inside gloo:* at once", lambda r: f"{r['n_all_reduce']} / {r['overlap']:.1f}"),
    ]  # fmt: skip
    for n in COMPUTE_OPS:
        if any(r[n][0] for r in rows):
            measures.append((f"{n} count / total", lambda r, n=n: f"{r[n][0]} / {r[n][1]:.1f}"))
    if annotate:
        measures.append((f"{annotate} slice", lambda r: f(r[annotate])))
    for title, cell in measures:
        print(f"\n{title}, ms:")
        spread = title.startswith("arrival")
        print("| step | " + " | ".join(f"rank {k}" for k in ranks) + (" | spread |" if spread else " |"))
        print("|---|" + "---|" * (len(ranks) + spread))
        for s in order:
            rs = by_step[s]
            cells = [cell(rs[k]) if k in rs else "-" for k in ranks]
            if spread:
                at = [r["arrive_at"] for r in rs.values() if r["arrive_at"] is not None]
                cells.append(f(max(at) - min(at)) if at else "-")
            print(f"| {s} | " + " | ".join(cells) + " |")


# --------------------------------------------------------------------------- p2p
def p2p(d: Path) -> list[dict]:
    """Kind pipeline: per ProfilerStep and rank, the gloo:send and gloo:recv slices (on
    the main thread; a recv lasts until the data is there, a send until the peer has
    posted its recv): the
    count / total ms of each, and every recv's duration in time order (forward recvs
    from rank - 1 first, then backward recvs from rank + 1). Returns one row per
    (step, rank)."""
    files = sorted(p for p in d.iterdir() if p.name.endswith((".json", ".json.gz")))
    rows: list[dict] = []
    for f in files:
        doc = _load(f)[1]
        rank = (doc.get("distributedInfo") or {}).get("rank")
        ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        steps = sorted((e for e in ev if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
        for st in steps:
            t0, t1 = st["ts"], st["ts"] + st["dur"]
            inside = sorted((e for e in ev if t0 <= e["ts"] <= t1), key=lambda e: e["ts"])
            rows.append(
                dict(
                    rank=rank,
                    step=st["name"],
                    send=[e["dur"] / 1000 for e in inside if e["name"] == "gloo:send"],
                    recv=[e["dur"] / 1000 for e in inside if e["name"] == "gloo:recv"],
                    recv_at=[(e["ts"] - t0) / 1000 for e in inside if e["name"] == "gloo:recv"],
                )
            )
    by_step: dict[str, dict[int, dict]] = {}
    for r in rows:
        by_step.setdefault(r["step"], {})[r["rank"]] = r
    order = sorted(by_step, key=lambda n: int(n.split("#")[1]))
    ranks = sorted({r["rank"] for r in rows})
    for title, cell in [
        ("gloo:send count / total", lambda r: f"{len(r['send'])} / {sum(r['send']):.1f}"),
        ("gloo:recv count / total", lambda r: f"{len(r['recv'])} / {sum(r['recv']):.1f}"),
        ("gloo:recv durations in time order", lambda r: " ".join(f"{x:.1f}" for x in r["recv"]) or "-"),
    ]:
        print(f"\n{title}, ms:")
        print("| step | " + " | ".join(f"rank {k}" for k in ranks) + " |")
        print("|---|" + "---|" * len(ranks))
        for s_ in order:
            print(
                f"| {s_} | "
                + " | ".join(cell(by_step[s_][k]) if k in by_step[s_] else "-" for k in ranks)
                + " |"
            )
    return rows


# --------------------------------------------------------------------------- main
def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("Sets:", 1)[1],
    )
    ap.add_argument(
        "--set",
        action="append",
        choices=[*SETS, "all"],
        help="trace set to record (repeatable; 'all' for every set)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=REPO / "tests" / "data" / "recorded",
        help="parent folder; the set goes to OUT/<set>/",
    )
    ap.add_argument("--force", action="store_true", help="replace a non-empty OUT/<set>/")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per set")
    ap.add_argument(
        "--check",
        type=Path,
        nargs="*",
        metavar="DIR",
        help="only validate and summarise the traces in DIR(s)",
    )
    ap.add_argument("--worker-rank", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.check is not None:
        for d in args.check:
            name = d.resolve().name
            check(d, SETS[name].distributed if name in SETS else None)
            if name in SETS and SETS[name].distributed:
                collectives(d, SETS[name].ops_per_step, SETS[name])
                timeline(d, SETS[name].annotate)
                if SETS[name].kind == "pipeline":
                    p2p(d)
        return
    if not args.set:
        ap.error("--set NAME or --check DIR is required")
    names = list(SETS) if "all" in args.set else args.set

    if args.worker_rank is not None:
        run_worker(SETS[names[0]], args.worker_rank, args.out / names[0])
        return

    import torch  # noqa: F401  (fail early, before spawning ranks)

    print(f"torch {torch.__version__}", flush=True)
    for name in names:
        ts = SETS[name]
        t0 = time.monotonic()
        outdir = record(ts, args.out, args.force, args.timeout)
        print(f"== {name}: recorded in {time.monotonic() - t0:.1f} s", flush=True)
        check(outdir, ts.distributed)
        if ts.distributed:
            collectives(outdir, ts.ops_per_step, ts)
            timeline(outdir, ts.annotate)
            if ts.kind == "pipeline":
                p2p(outdir)


if __name__ == "__main__":
    main()
