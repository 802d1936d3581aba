"""Rendering one rank's events: :class:`_RankGen` lays the model's templates out in
time, step by step, with the rank's own speed and the run's shared id counters.

Why a class: the renderer keeps only counters (ids, Python ids, memory) and the
current step's state; events are rendered to text and written in small batches
(:data:`~tracefuse_synth.common.FLUSH_EVENTS`), so memory stays flat for GB files.
"""

from __future__ import annotations

import random
from typing import Dict, List, Optional, Sequence, Tuple

from tracefuse_synth.common import _US, COMM_STREAM, COMPUTE_STREAM, _j, _t
from tracefuse_synth.model import _Model
from tracefuse_synth.schedule import _StepPlan
from tracefuse_synth.sink import _Sink
from tracefuse_synth.templates import COMM, LAUNCH, MEM, NCCL, OP, PY, RT, UA, _comm_node, _Node


class _RankGen:
    """Renders one rank's events. Holds only counters and the current step's state."""

    def __init__(
        self,
        sink: _Sink,
        rank: int,
        seed: int,
        model: _Model,
        ids: Tuple[int, int, int, int],
        shift: int,
        kernel_jitter_ns: int,
        world_size: int,
    ) -> None:
        self.sink = sink
        self.rank = rank
        self.seed = seed
        self.model = model
        cpu_pid, main_tid, bwd_tid, device = ids  # ranktrace._process_ids
        self.cpu_pid = cpu_pid
        self.device = device
        self.shift = shift  # rank ts_ns = true_abs_ns + shift
        self.jitter = kernel_jitter_ns
        self.rng = random.Random(f"{seed}:rank:{rank}")
        self.jrng = random.Random(f"{seed}:jitter:{rank}")
        self.main_th = f'"pid": {cpu_pid}, "tid": {main_tid}'
        self.bwd_th = f'"pid": {cpu_pid}, "tid": {bwd_tid}'
        ids = random.Random(f"{seed}:ids")
        # Per-process counters, equal on every rank (same start, same structure).
        self.ext = 1
        self.corr = 1
        self.flow = 1
        self.py = 3  # 1 and 2: the <module> / main frames written at the end
        self.ev = 0
        self.seqno = ids.randrange(100, 2000)
        self.coll_seq = ids.randrange(1, 200)
        self.comms_id = ids.getrandbits(63) | (1 << 63)  # uint64 > int64, like Kineto 2026
        self.addr = 0x7F3A00000000 + (ids.getrandbits(20) << 12)
        self.allocated = 1 << 30
        self.free = {COMPUTE_STREAM: 0, COMM_STREAM: 0}
        self.fwd_stack: List[Tuple[int, int]] = []
        self.cur_bwd: Optional[Tuple[int, int]] = None
        self.cur_comm: Optional[Tuple[str, str, str, int]] = None
        self.mem_stack: List[int] = []
        self.world = world_size
        ranks_s = "[" + ", ".join(str(i) for i in range(world_size)) + "]"
        self.pg_common = (
            f'"Process Group Name": "0", "Process Group Description": "default_pg", '
            f'"Process Group Ranks": "{ranks_s}", "Group size": {world_size}, '
        )
        self.buf: List[str] = []
        self.counts: Dict[Tuple[str, str], int] = {}
        self.n_events = 0
        self.n_coll = 0
        self.kernel_span: List[int] = []  # [first start, last end] on the compute stream

    # ---- output ------------------------------------------------------------------------
    def count(self, ph: str, cat: str, n: int = 1) -> None:
        key = (ph, cat)
        self.counts[key] = self.counts.get(key, 0) + n

    def flush(self) -> None:
        if self.buf:
            text = ",\n".join(self.buf)
            if self.n_events:
                text = ",\n" + text
            self.n_events += len(self.buf)
            self.sink.write(text)
            self.buf = []

    # ---- event kinds -------------------------------------------------------------------
    def x_cpu(self, cat: str, name: str, th: str, t: int, d: int, args: str) -> None:
        self.buf.append(
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": {name}, {th},\n'
            f'    "ts": {_t(t)}, "dur": {_t(d)},\n    "args": {{\n      {args}\n    }}\n  }}'
        )
        self.count("X", cat)

    def emit(self, n: _Node, t: int, d: int, th: str, ext: int, od: int, pyp: int) -> None:
        """Render node ``n`` occupying [t, t+d) on thread ``th`` and lay out its children.
        ``ext``/``od``: External id and duration of the innermost enclosing op;
        ``pyp``: Python id of the innermost enclosing python frame (0 = none)."""
        k = n.kind
        if k == PY:
            self._emit_python(n, t, d, th, ext, od, pyp)
        elif k == OP or k == UA or k == COMM:
            self._emit_op(n, t, d, th, pyp)
        elif k == RT:
            self._emit_runtime(n, t, d, th, ext)
        elif k == LAUNCH or k == NCCL:
            self._emit_launch(n, t, d, th, ext, od)
        elif k == MEM:
            self._emit_memory(n, t, th)

    def _emit_python(self, n: _Node, t: int, d: int, th: str, ext: int, od: int, pyp: int) -> None:
        """A ``python_function`` frame (``with_stack``): its own Python id, parent's id."""
        pid_ = self.py
        self.py += 1
        self.x_cpu(
            "python_function",
            n.name,
            th,
            t,
            d,
            f'"Python parent id": {pyp if pyp else "null"}, "Python id": {pid_}, "Ev Idx": {self.ev}',
        )
        self.ev += 1
        self.kids(n, t, d, th, ext, od, pid_)

    def _sequence_args(self, seq: str, extra: str) -> Tuple[str, Optional[int], Optional[int]]:
        """``Sequence number`` args of a forward op / autograd node and the ``fwdbwd``
        flow it starts (``s``) or ends (``f``): ``(extra, flow_s, flow_f)``."""
        flow_s = None
        flow_f = None
        if seq == "fwd":
            sn = self.seqno
            self.seqno += 1
            flow_s = self.flow
            self.flow += 1
            self.fwd_stack.append((flow_s, sn))
            extra = f'"Sequence number": {sn}, "Fwd thread id": 0, ' + extra
        elif seq == "bwd_root":
            self.cur_bwd = self.fwd_stack.pop() if self.fwd_stack else None
            if self.cur_bwd is not None:
                extra = f'"Sequence number": {self.cur_bwd[1]}, "Fwd thread id": 1, ' + extra
        elif seq == "bwd" and self.cur_bwd is not None:
            flow_f = self.cur_bwd[0]
            extra = f'"Sequence number": {self.cur_bwd[1]}, "Fwd thread id": 1, ' + extra
            self.cur_bwd = None
        return extra, flow_s, flow_f

    def _emit_op(self, n: _Node, t: int, d: int, th: str, pyp: int) -> None:
        """An aten op, user annotation or ``record_param_comms`` (cpu_op), with the
        ``fwdbwd`` flow ends it carries; its children see its External id."""
        k = n.kind
        e = self.ext
        self.ext += 1
        extra = n.static
        if k == COMM:
            extra = self.cur_comm[0]
        flow_s = None
        flow_f = None
        if n.seq is not None:
            extra, flow_s, flow_f = self._sequence_args(n.seq, extra)
        self.x_cpu(
            "user_annotation" if k == UA else "cpu_op",
            n.name,
            th,
            t,
            d,
            f'"External id": {e},"Record function id": {e}, {extra}"Ev Idx": {self.ev}',
        )
        self.ev += 1
        if flow_s is not None:
            self.buf.append(
                f'  {{\n    "ph": "s", "id": {flow_s}, {th}, "ts": {_t(t)},\n'
                f'    "cat": "fwdbwd", "name": "fwdbwd"\n  }}'
            )
            self.count("s", "fwdbwd")
        if flow_f is not None:
            self.buf.append(
                f'  {{\n    "ph": "f", "id": {flow_f}, {th}, "ts": {_t(t)},\n'
                f'    "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"\n  }}'
            )
            self.count("f", "fwdbwd")
        self.kids(n, t, d, th, e, d, pyp)

    def _runtime_call(self, n: _Node, t: int, d: int, th: str, ext: int) -> Tuple[int, str]:
        """The ``cuda_runtime`` slice of a runtime call; returns (correlation, ts text)."""
        c = self.corr
        self.corr += 1
        ts = _t(t)
        self.buf.append(
            f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": {n.name}, {th},\n'
            f'    "ts": {ts}, "dur": {_t(d)},\n    "args": {{\n      "External id": {ext},'
            f'      "cbid": {n.cbid}, "correlation": {c}\n    }}\n  }}'
        )
        return c, ts

    def _emit_runtime(self, n: _Node, t: int, d: int, th: str, ext: int) -> None:
        """A runtime call without device work: Kineto links it by an ``f`` alone."""
        c, ts = self._runtime_call(n, t, d, th, ext)
        self.buf.append(
            f'  {{\n    "ph": "f", "id": {c}, {th}, "ts": {ts},\n'
            f'    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
        )
        self.count("X", "cuda_runtime")
        self.count("f", "ac2g")

    def _emit_launch(self, n: _Node, t: int, d: int, th: str, ext: int, od: int) -> None:
        """A launch (kernel, memcpy, memset or NCCL kernel): the runtime call, its
        ``ac2g`` flow and the device slice on its stream."""
        c, ts = self._runtime_call(n, t, d, th, ext)
        self.buf.append(
            f'  {{\n    "ph": "s", "id": {c}, {th}, "ts": {ts},\n    "cat": "ac2g", "name": "ac2g"\n  }}'
        )
        if n.kind == NCCL:
            cat, kname, stream, ks, kd, dargs = self._nccl_kernel(t, ext, c)
        else:
            cat, kname, stream, ks, kd, dargs = self._device_work(n, t, ext, od, c)
        dev = self.device
        kts = _t(ks)
        self.buf.append(
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": {kname}, "pid": {dev}, '
            f'"tid": {stream},\n    "ts": {kts}, "dur": {_t(kd)},\n    "args": {{\n'
            f"      {dargs}\n    }}\n  }}"
        )
        self.buf.append(
            f'  {{\n    "ph": "f", "id": {c}, "pid": {dev}, "tid": {stream}, "ts": {kts},\n'
            f'    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
        )
        self.count("X", "cuda_runtime")
        self.count("s", "ac2g")
        self.count("X", cat)
        self.count("f", "ac2g")

    def _nccl_kernel(self, t: int, ext: int, c: int) -> Tuple[str, str, int, int, int, str]:
        """The current collective's kernel on the comm stream, ending at its (jittered)
        common end: ``(cat, name, stream, start, duration, args)``."""
        _, kname, kargs, end = self.cur_comm
        stream = COMM_STREAM
        ks = max(t + 3000 + int(9000 * self.rng.random()), self.free[stream])
        if end - ks < 1000:  # only with a jitter larger than the kernel
            ks = end - 1000
        kd = end - ks
        self.free[stream] = end + 1000
        dargs = (
            f'"External id": {ext},      "queued": 0, "device": {self.device}, "context": 1,'
            f'      "stream": {stream}, "correlation": {c},      {kargs}'
        )
        return "kernel", kname, stream, ks, kd, dargs

    def _device_work(
        self, n: _Node, t: int, ext: int, od: int, c: int
    ) -> Tuple[str, str, int, int, int, str]:
        """A compute kernel, memcpy or memset after its launch, sized by the enclosing
        op's duration ``od``: ``(cat, name, stream, start, duration, args)``."""
        rnd = self.rng.random
        dev = self.device
        cat, kname, static, stream, factor = n.dev
        ks = max(t + 2000 + int(6000 * rnd()), self.free[stream])
        kd = int(od * factor * (0.5 + 0.4 * rnd())) + 500
        self.free[stream] = ks + kd + 1500 + int(2000 * rnd())
        if cat == "kernel":
            dargs = (
                f'"External id": {ext},      "queued": 0, "device": {dev}, "context": 1,'
                f'      "stream": {stream}, "correlation": {c},      {static}'
            )
        else:
            nbytes = 32768 if cat == "gpu_memcpy" else 4194304
            dargs = (
                f'"External id": {ext},      "device": {dev}, "context": 1,      '
                f'"stream": {stream}, "correlation": {c},      "bytes": {nbytes}, '
                f'"memory bandwidth (GB/s)": {nbytes / kd!r}'
            )
        span = self.kernel_span
        if span:
            span[1] = ks + kd
        else:
            span.extend((ks, ks + kd))
        return cat, kname, stream, ks, kd, dargs

    def _emit_memory(self, n: _Node, t: int, th: str) -> None:
        """A ``[memory]`` instant: an allocation (``n.mem`` > 0) or the free of the
        latest one."""
        if n.mem > 0:
            nbytes = n.mem
            self.mem_stack.append(nbytes)
        else:
            nbytes = -(self.mem_stack.pop() if self.mem_stack else 4096)
        self.allocated += nbytes
        self.addr += 0x200000
        self.buf.append(
            f'  {{\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", '
            f'{th},\n    "ts": {_t(t)},\n    "args": {{\n      "Total Reserved": '
            f'{(self.allocated >> 21 << 21) + (1 << 26)}, "Total Allocated": '
            f'{self.allocated}, "Bytes": {nbytes}, "Addr": {self.addr}, '
            f'"Device Id": {self.device}, "Device Type": 1, "Ev Idx": {self.ev}\n    }}\n  }}'
        )
        self.ev += 1
        self.count("i", "cpu_instant_event")

    def kids(self, n: _Node, t: int, d: int, th: str, ext: int, od: int, pyp: int) -> None:
        """Lay the children of ``n`` out sequentially inside [t, t+d): they always nest."""
        kids = n.kids
        if not kids:
            return
        rnd = self.rng.random
        a = d * (0.02 + 0.06 * rnd())
        inner = d - a - d * (0.02 + 0.06 * rnd())
        ws = [c.w * (0.8 + 0.4 * rnd()) for c in kids]
        tot = sum(ws) or 1.0
        used = inner * (0.75 + 0.2 * rnd())
        gap = (inner - used) / len(kids)
        scale = used / tot
        cur = t + a
        for c, w in zip(kids, ws):
            if c.kind == MEM:
                self.emit(c, int(cur), 0, th, ext, od, pyp)
                continue
            cd = int(w * scale)
            if cd < 1:
                cd = 1
            self.emit(c, int(cur), cd, th, ext, od, pyp)
            cur += w * scale + gap

    def layout(self, trees: Sequence[_Node], t0: int, window: int, th: str, pyp: int, frac: float) -> None:
        """Lay ``trees`` out one after another in the first ``frac`` of a window."""
        rnd = self.rng.random
        span = window * frac
        ws = [n.w * (0.7 + 0.6 * rnd()) for n in trees]
        scale = span * 0.9 / (sum(ws) or 1.0)
        gap = span * 0.1 / (len(trees) + 1)
        cur = t0 + gap * rnd()  # the last tree ends before t0 + span
        for n, w in zip(trees, ws):
            cd = max(1, int(w * scale))
            self.emit(n, int(cur), cd, th, 0, cd, pyp)
            cur += w * scale + gap

    def chain(self, names: Sequence[str], t: int, d: int, th: str, pyp: int) -> int:
        """Nested python frames (outermost first) over [t, t+d); returns the innermost id."""
        for name in names:
            pid_ = self.py
            self.py += 1
            self.x_cpu(
                "python_function",
                _j(name),
                th,
                t,
                d,
                f'"Python parent id": {pyp if pyp else "null"}, "Python id": {pid_}, "Ev Idx": {self.ev}',
            )
            self.ev += 1
            pyp = pid_
            t += 1000
            d -= 2000
        return pyp

    # ---- a training step ---------------------------------------------------------------
    def step(self, index: int, label: int, true_start: int, plan: _StepPlan) -> None:
        rnd = self.rng.random
        uni = self.rng.uniform
        m = self.model
        base = true_start + self.shift  # rank ts_ns of the step's common start
        mth, bth = self.main_th, self.bwd_th
        self.kernel_span = []
        ps_start = base + int(40 * _US * rnd())
        ps_ext = self.ext
        self.ext += 1
        self.x_cpu(
            "user_annotation",
            _j(f"ProfilerStep#{label}"),
            mth,
            ps_start,
            base + plan.length - 5 * _US - ps_start,
            f'"External id": {ps_ext},"Record function id": {ps_ext}, "Ev Idx": {self.ev}',
        )
        self.ev += 1
        ts_start = base + 45 * _US
        train = self.chain(["train.py(142): train_step"], ts_start, plan.length - 145 * _US, mth, 2)
        # zero_grad (memset), forward (memcpy, layers, loss) on the main thread
        z0, zl = plan.zero
        self.layout([m.zero_grad], base + z0, zl, mth, train, uni(0.55, 0.88))
        f0, fl = plan.fwd
        frac = uni(0.6, 0.88)
        inner = self.chain(m.model_frames, base + f0, int(fl * frac), mth, train)
        self.layout(m.fwd_groups, base + f0 + 3000, int(fl * frac) - 6000, mth, inner, 0.98)
        self.flush()
        # backward: python frames on the main thread, autograd work + DDP collectives on
        # the autograd thread; each segment ends with a collective
        b0 = plan.bwd_segments[0][0]
        last = plan.bwd_segments[-1]
        self.emit(m.backward_frames, base + b0, last[0] + last[1] - b0 - 20 * _US, mth, 0, 0, train)
        for (s0, sl, lo, hi), (coll, nelems, end) in zip(plan.bwd_segments, plan.colls):
            trees = [t for g in m.bwd_groups[lo:hi] for t in g]
            trees.append(self.comm_tree(coll, nelems, base + end))
            self.layout(trees, base + s0, sl, bth, 0, uni(0.55, 0.85))
            self.flush()
        o0, ol = plan.opt
        self.layout([m.optimizer], base + o0, ol, mth, train, uni(0.6, 0.9))
        # Kineto's GPU-side copy of the step annotation, over the step's compute kernels
        if self.kernel_span:
            k0, k1 = self.kernel_span
            self.buf.append(
                f'  {{\n    "ph": "X", "cat": "gpu_user_annotation", "name": '
                f'"ProfilerStep#{label}", "pid": {self.device}, "tid": {COMPUTE_STREAM},\n'
                f'    "ts": {_t(k0)}, "dur": {_t(k1 - k0)},\n    "args": {{\n'
                f'      "External id": {ps_ext}\n    }}\n  }}'
            )
            self.count("X", "gpu_user_annotation")
        self.flush()

    def comm_tree(self, coll: tuple, nelems: int, end_ts: int) -> _Node:
        """CPU side of one collective; sets the context its NCCL kernel is rendered from."""
        _, cname, op, ann, kname, kind = coll
        w = self.world
        if kind == "gather":
            nin, nout = nelems, nelems * w
        elif kind == "scatter":
            nin, nout = nelems * w, nelems
        else:
            nin = nout = nelems
        seq = self.coll_seq
        self.coll_seq += 1
        self.n_coll += 1
        sizes = (
            f'"In msg nelems": {nin}, "Out msg nelems": {nout}, "dtype": "Float", '
            f'"In split size": "[]", "Out split size": "[]", '
        )
        cpu_args = (
            self.pg_common + '"Global rank start": 0, "Global rank stride": 1, '
            f'"Collective name": "{cname}", ' + sizes + f'"Seq": {seq}, "Comms Id": {self.comms_id}, '
        )
        kargs = (
            '"registers per thread": 96,      "shared memory": 87568,      '
            '"blocks per SM": 0.060606,      "warps per SM": 1.030303,      '
            '"grid": [8, 1, 1],      "block": [544, 1, 1],      '
            f'"est. achieved occupancy %": 0, "Collective name": "{cname}", '
            + sizes
            + self.pg_common
            + f'"Seq": {seq}'
        )
        jitter = self.jrng.randint(-self.jitter, self.jitter) if self.jitter else 0
        self.cur_comm = (cpu_args, _j(kname), kargs, end_ts + jitter)
        return _comm_node(op, ann)
