"""Deterministic, streaming generator of realistic Kineto-shaped multi-rank traces.

Why this exists: the merger must be tested and benchmarked on inputs that look like
what PyTorch's profiler (Kineto) really writes -- per-process id counters that collide
across ranks, ``ac2g``/``fwdbwd`` flows, string pids, metadata at the end, three
top-level key orders, gzip/zstd -- at sizes (GBs) and rank counts that no committed
fixture can have. Everything here is derived from seeded ``random.Random`` instances
(no clock, no ``hash()``), so the same arguments always give byte-identical files,
and the committed ``fixtures/sample_run`` can be checked against a regeneration.

Streaming: events are rendered one by one with templates and written in small
batches (at most :data:`FLUSH_EVENTS` strings are held); memory stays flat however
large ``target_bytes`` is. Nothing but a few per-step counters is kept.

Time model (what makes the ranks of one run consistent with each other):

* A *common* schedule -- step boundaries, phase lengths, the collectives of each step
  and their "true" end times -- is derived from ``(seed, step index)`` only, never from
  the rank, in an absolute "true" clock (epoch ns).
* Each rank lays its CPU work out inside those phase windows with its own speed
  (rank-seeded RNG), so ops, launches and collective *starts* (arrival times) differ.
* A collective kernel ends at ``true_end + jitter + clock_offset_ns`` where ``jitter``
  is uniform in ``[-kernel_jitter_ns, kernel_jitter_ns]`` from a separate rank-seeded
  RNG. Every other timestamp of the rank is shifted by ``clock_offset_ns`` too, as a
  host whose clock is off would do.
* ``ts`` is written relative to ``baseTimeNanoseconds``: ``abs = base + ts*1000``
  where ``abs`` is the rank's (offset) clock; times are integers in ns internally and
  printed with exactly three decimals.

Ids (correlation, External id, flow ids, Python ids, Sequence numbers) are
per-process counters that start at the same small values on every rank, and the
event *structure* of a step depends only on ``(seed, step)``: all ranks therefore
use the same numbers, like real traces, which is what a merger must disambiguate.

Run ``python -m tracefuse_stream.synth --help`` for the command line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO, Dict, List, Optional, Sequence, Tuple, Union

import orjson

try:  # optional fast deflate (a project dependency on the usual platforms)
    from isal import igzip as _igzip
except ImportError:  # pragma: no cover - exercised only without isal
    _igzip = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_BASE_TIME_NS",
    "KEY_ORDERS",
    "write_rank_trace",
    "write_run",
    "sample_run",
    "main",
]

#: 1790857026 s = 227 periods of 7,889,238 s: a base Kineto could really write.
DEFAULT_BASE_TIME_NS = 1790857026000000000
KEY_ORDERS = ("base_first", "base_after", "distinfo_after")
COMPRESSIONS = (None, "gzip", "zstd")
#: Flush the pending event strings to the file after this many (bounds memory).
FLUSH_EVENTS = 2048
#: Largest ts (in us) that Kineto-style floats keep exact to the nanosecond.
MAX_TS_US = 2**43
#: CUDA streams: compute and NCCL.
COMPUTE_STREAM = 7
COMM_STREAM = 20
GPU_SORT_BASE = 16777216
SPANS_SORT_INDEX = 536870912

PathLike = Union[str, "os.PathLike[str]"]

_US = 1000  # ns per microsecond


def _j(s: str) -> str:
    """JSON string literal (names are rendered once per template, not per event)."""
    return orjson.dumps(s).decode()


def _t(ns: int) -> str:
    """Integer nanoseconds -> microseconds with exactly three decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"


# --------------------------------------------------------------------------------------
# Model templates: a small transformer (layer norm, attention, MLP) trained with DDP.
# A node is one event (and, for launches, its device work). Weights split a parent's
# time among its children; the tree is laid out top-down, so children always nest.
# --------------------------------------------------------------------------------------
PY, OP, UA, RT, LAUNCH, MEM, COMM, NCCL = range(8)


class _Node:
    """One template event. ``dev`` = (cat, name_json, static_args, stream, factor) for
    launches; ``seq`` marks the forward op that starts a ``fwdbwd`` flow ("fwd"), the
    evaluate_function wrapper that takes it ("bwd_root") and the backward op on which
    it ends ("bwd")."""

    __slots__ = ("kind", "name", "w", "kids", "static", "cbid", "dev", "seq", "mem")

    def __init__(
        self,
        kind: int,
        name: str,
        w: float = 1.0,
        kids: Sequence[_Node] = (),
        static: str = "",
        cbid: int = 0,
        dev: Optional[tuple] = None,
        seq: Optional[str] = None,
        mem: int = 0,
    ) -> None:
        self.kind = kind
        self.name = _j(name)
        self.w = w
        self.kids = tuple(kids)
        self.static = static
        self.cbid = cbid
        self.dev = dev
        self.seq = seq
        self.mem = mem


def _shapes(dims: List[list], types: List[str]) -> str:
    """Static ``record_shapes`` args of an op, rendered once."""
    strides = []
    for d in dims:
        s, acc = [], 1
        for x in reversed(d):
            s.append(acc)
            acc *= x
        strides.append(list(reversed(s)))
    return (
        f'"Concrete Inputs": {json.dumps([""] * len(dims))}, '
        f'"Input type": {json.dumps(types)}, '
        f'"Input Strides": {json.dumps(strides)}, '
        f'"Input Dims": {json.dumps(dims)}, '
    )


def _kernel(
    name: str,
    regs: int,
    smem: int,
    grid: Tuple[int, int, int],
    block: Tuple[int, int, int],
    factor: float,
    stream: int = COMPUTE_STREAM,
) -> tuple:
    static = (
        f'"registers per thread": {regs},      "shared memory": {smem},      '
        f'"blocks per SM": {grid[0] * grid[1] / 132:.6f},      '
        f'"warps per SM": {grid[0] * grid[1] * block[0] / 32 / 132:.6f},      '
        f'"grid": [{grid[0]}, {grid[1]}, {grid[2]}],      '
        f'"block": [{block[0]}, {block[1]}, {block[2]}],      '
        f'"est. achieved occupancy %": {min(100, regs // 3)}'
    )
    return ("kernel", _j(name), static, stream, factor)


_K_GEMM = _kernel(
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas",
    168,
    213248,
    (8, 32, 1),
    (384, 1, 1),
    0.85,
)
_K_GEMM_BWD = _kernel(
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas",
    168,
    213248,
    (4, 32, 1),
    (384, 1, 1),
    0.85,
)
_K_LN = _kernel(
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
    "(int, float, float const*, float const*, float const*, float*, float*, float*)",
    28,
    0,
    (4096, 1, 1),
    (256, 1, 1),
    0.6,
)
_K_LN_BWD = _kernel(
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized"
    "<float, float>(float const*, float const*, float const*, float const*, "
    "float const*, float*, int)",
    40,
    1024,
    (4096, 1, 1),
    (128, 1, 1),
    0.4,
)
_K_LN_GAMMA = _kernel(
    "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32"
    "<float, float>(long, long, float const*, float const*, float const*, "
    "float const*, float*, float*)",
    32,
    8448,
    (32, 1, 1),
    (32, 32, 1),
    0.4,
)
_K_FLASH = _kernel(
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, "
    "false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, "
    "cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
    "(pytorch_flash::Flash_fwd_params)",
    255,
    49152,
    (8, 16, 8),
    (128, 1, 1),
    0.85,
)
_K_FLASH_BWD = _kernel(
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<"
    "Flash_bwd_kernel_traits<64, 128, 128, 8, 2, 4, 2, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 8, "
    "cutlass::bfloat16_t> >, false, true, false, false, false, true, false, "
    "false>(pytorch_flash::Flash_bwd_params)",
    255,
    98304,
    (4, 16, 8),
    (256, 1, 1),
    0.85,
)
_K_GELU = _kernel(
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
    "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const"
    "::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >"
    "(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()"
    "() const::{lambda(float)#1}, std::array<char*, 2ul>)",
    24,
    0,
    (8192, 1, 1),
    (128, 1, 1),
    0.6,
)
_K_GELU_BWD = _kernel(
    "void at::native::vectorized_elementwise_kernel<4, at::native::"
    "GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
    "::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::"
    "{lambda(float, float)#1}, std::array<char*, 3ul> >(int, ...)",
    26,
    0,
    (8192, 1, 1),
    (128, 1, 1),
    0.6,
)
_K_ADD = _kernel(
    "void at::native::vectorized_elementwise_kernel<4, at::native::"
    "CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, "
    "at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
    20,
    0,
    (8192, 1, 1),
    (128, 1, 1),
    0.6,
)
_K_SOFTMAX = _kernel(
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, "
    "float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, "
    "float const*, int)",
    32,
    0,
    (4096, 1, 1),
    (512, 1, 1),
    0.45,
)
_K_NLL = _kernel(
    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d"
    "<float, float, long>(float*, float*, float const*, long const*, float const*, "
    "bool, long, long, long, long)",
    30,
    2048,
    (1, 1, 1),
    (32, 1, 1),
    0.3,
)
_K_FOREACH = _kernel(
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)"
    "::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native"
    "::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous "
    "namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)",
    36,
    0,
    (640, 1, 1),
    (512, 1, 1),
    0.85,
)
_D_MEMCPY = ("gpu_memcpy", _j("Memcpy HtoD (Pageable -> Device)"), "", COMPUTE_STREAM, 0.7)
_D_MEMSET = ("gpu_memset", _j("Memset (Device)"), "", COMPUTE_STREAM, 0.5)


def _launch(dev: tuple, w: float = 0.5) -> _Node:
    name, cbid = "cudaLaunchKernel", 211
    if dev[0] == "gpu_memcpy":
        name, cbid = "cudaMemcpyAsync", 41
    elif dev[0] == "gpu_memset":
        name, cbid = "cudaMemsetAsync", 51
    return _Node(LAUNCH, name, w, cbid=cbid, dev=dev)


def _rt(name: str, cbid: int, w: float = 0.08) -> _Node:
    return _Node(RT, name, w, cbid=cbid)


def _mem(nbytes: int) -> _Node:
    return _Node(MEM, "[memory]", 0.0, mem=nbytes)


def _getattr() -> _Node:
    """The cheap leaf python calls that make up much of a ``with_stack`` trace."""
    return _Node(PY, "torch/nn/modules/module.py(1962): __getattr__", 0.04)


def _module_frames(module_file: str, line: int, func: str, inner: _Node) -> _Node:
    """``with_stack`` frames of ``module(x)`` around an aten op."""
    return _Node(
        PY,
        "torch/nn/modules/module.py(1773): _wrapped_call_impl",
        1,
        [
            _Node(
                PY,
                "torch/nn/modules/module.py(1784): _call_impl",
                1,
                [
                    _Node(
                        PY, "<built-in method _get_tracing_state of PyCapsule object at 0x7f3a91c2e4c0>", 0.03
                    ),
                    _getattr(),
                    _Node(
                        PY,
                        f"{module_file}({line}): forward",
                        1,
                        [
                            _getattr(),
                            _getattr(),
                            _Node(PY, "<built-in method dim of Tensor object at 0x7f3a0c1d2e80>", 0.03),
                            _Node(PY, f"<built-in function {func}>", 1, [inner]),
                        ],
                    ),
                ],
            )
        ],
    )


def _bwd(name: str, kids: Sequence[_Node], accumulate: bool = False, flow: bool = True) -> List[_Node]:
    """An autograd node: evaluate_function wrapper + backward op (fwdbwd flow end when
    ``flow``); the backward op frees the activation its forward op allocated."""
    out = [
        _Node(
            OP,
            f"autograd::engine::evaluate_function: {name}",
            1,
            [_Node(OP, name, 1, [_mem(-1)] + list(kids), seq="bwd" if flow else None)],
            seq="bwd_root" if flow else None,
        )
    ]
    if accumulate:
        out.append(
            _Node(
                OP,
                "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                0.35,
                [_Node(OP, "torch::autograd::AccumulateGrad", 1, [_Node(OP, "aten::detach", 1)])],
            )
        )
    return out


def _linear_group(b: int, s: int, fin: int, fout: int) -> Tuple[_Node, List[_Node]]:
    x = [b * s, fin]
    fwd = _module_frames(
        "torch/nn/modules/linear.py",
        125,
        "linear",
        _Node(
            OP,
            "aten::linear",
            1,
            [
                _Node(
                    OP,
                    "aten::t",
                    0.25,
                    [_Node(OP, "aten::transpose", 1, [_Node(OP, "aten::as_strided", 1)])],
                    static=_shapes([[fout, fin]], ["float"]),
                ),
                _Node(
                    OP,
                    "aten::addmm",
                    1,
                    [_mem(b * s * fout * 4), _launch(_K_GEMM)],
                    static=_shapes(
                        [[fout], x, [fin, fout], [], []], ["float", "float", "float", "Scalar", "Scalar"]
                    ),
                ),
            ],
            static=_shapes([x, [fout, fin], [fout]], ["float", "float", "float"]),
            seq="fwd",
        ),
    )
    bwd = _bwd(
        "AddmmBackward0",
        [
            _Node(
                OP,
                "aten::mm",
                1,
                [_launch(_K_GEMM_BWD)],
                static=_shapes([[b * s, fout], [fout, fin]], ["float", "float"]),
            ),
            _Node(
                OP,
                "aten::mm",
                1,
                [_launch(_K_GEMM_BWD)],
                static=_shapes([[fout, b * s], x], ["float", "float"]),
            ),
            _Node(
                OP,
                "aten::sum",
                0.4,
                [_launch(_K_ADD, 0.6)],
                static=_shapes([[b * s, fout], [], [], []], ["float", "ScalarList", "Scalar", ""]),
            ),
        ],
        accumulate=True,
    )
    return fwd, bwd


def _layernorm_group(b: int, s: int, h: int) -> Tuple[_Node, List[_Node]]:
    fwd = _module_frames(
        "torch/nn/modules/normalization.py",
        217,
        "layer_norm",
        _Node(
            OP,
            "aten::layer_norm",
            1,
            [
                _Node(
                    OP,
                    "aten::native_layer_norm",
                    1,
                    [_mem(b * s * h * 4), _launch(_K_LN)],
                    static=_shapes(
                        [[b, s, h], [], [h], [h], []], ["float", "ScalarList", "float", "float", "Scalar"]
                    ),
                )
            ],
            static=_shapes(
                [[b, s, h], [], [h], [h], [], []],
                ["float", "ScalarList", "float", "float", "Scalar", "Scalar"],
            ),
            seq="fwd",
        ),
    )
    bwd = _bwd(
        "NativeLayerNormBackward0",
        [_Node(OP, "aten::native_layer_norm_backward", 1, [_launch(_K_LN_BWD), _launch(_K_LN_GAMMA)])],
        accumulate=True,
    )
    return fwd, bwd


def _attention_group(b: int, s: int, h: int, heads: int) -> Tuple[_Node, List[_Node]]:
    q = [b, heads, s, h // heads]
    fwd = _Node(
        PY,
        "model.py(61): forward",
        1,
        [
            _Node(PY, "<built-in method view of Tensor object at 0x7f3a0c1d3f10>", 0.03),
            _Node(PY, "<built-in method transpose of Tensor object at 0x7f3a0c1d3f10>", 0.03),
            _Node(PY, "<built-in method view of Tensor object at 0x7f3a0c1d4a60>", 0.03),
            _Node(PY, "<built-in method transpose of Tensor object at 0x7f3a0c1d4a60>", 0.03),
            _Node(
                PY,
                "<built-in function scaled_dot_product_attention>",
                1,
                [
                    _Node(
                        OP,
                        "aten::scaled_dot_product_attention",
                        1,
                        [
                            _Node(
                                OP,
                                "aten::_scaled_dot_product_flash_attention",
                                1,
                                [
                                    _Node(
                                        OP,
                                        "aten::_flash_attention_forward",
                                        1,
                                        [_mem(b * s * h * 4), _launch(_K_FLASH)],
                                        static=_shapes([q, q, q], ["float", "float", "float"]),
                                    )
                                ],
                            )
                        ],
                        static=_shapes(
                            [q, q, q, [], [], [], []], ["float", "float", "float", "", "Scalar", "Scalar", ""]
                        ),
                        seq="fwd",
                    )
                ],
            ),
        ],
    )
    bwd = _bwd(
        "ScaledDotProductFlashAttentionBackward0",
        [
            _Node(
                OP,
                "aten::_scaled_dot_product_flash_attention_backward",
                1,
                [_Node(OP, "aten::_flash_attention_backward", 1, [_launch(_K_FLASH_BWD)])],
            )
        ],
    )
    return fwd, bwd


def _gelu_group(b: int, s: int, h: int) -> Tuple[_Node, List[_Node]]:
    fwd = _module_frames(
        "torch/nn/modules/activation.py",
        734,
        "gelu",
        _Node(
            OP,
            "aten::gelu",
            1,
            [_mem(b * s * h * 4), _launch(_K_GELU)],
            static=_shapes([[b, s, h]], ["float"]),
            seq="fwd",
        ),
    )
    bwd = _bwd(
        "GeluBackward0",
        [
            _Node(
                OP,
                "aten::gelu_backward",
                1,
                [_launch(_K_GELU_BWD)],
                static=_shapes([[b, s, h], [b, s, h]], ["float", "float"]),
            )
        ],
    )
    return fwd, bwd


def _add_group(b: int, s: int, h: int) -> Tuple[_Node, List[_Node]]:
    fwd = _Node(
        PY,
        "model.py(88): forward",
        1,
        [
            _Node(
                OP,
                "aten::add",
                1,
                [_mem(b * s * h * 4), _launch(_K_ADD)],
                static=_shapes([[b, s, h], [b, s, h], []], ["float", "float", "Scalar"]),
                seq="fwd",
            )
        ],
    )
    bwd = _bwd("AddBackward0", [])
    return fwd, bwd


class _Model:
    """The per-run model: forward groups (main thread), their backward groups in
    reverse order (autograd thread), plus the fixed per-step prologue/epilogue trees.
    Depends on ``layers`` only, so every rank has the same event structure."""

    def __init__(self, layers: int) -> None:
        b, s, h, heads = 8, 512, 1024, 16
        fwd: List[_Node] = []
        bwd: List[List[_Node]] = []
        for _ in range(layers):
            block: List[_Node] = []
            for f, bw in (
                _layernorm_group(b, s, h),
                _linear_group(b, s, h, 3 * h),
                _attention_group(b, s, h, heads),
                _linear_group(b, s, h, h),
                _add_group(b, s, h),
                _layernorm_group(b, s, h),
                _linear_group(b, s, h, 4 * h),
                _gelu_group(b, s, 4 * h),
                _linear_group(b, s, 4 * h, h),
                _add_group(b, s, h),
            ):
                block.append(f)
                bwd.append(bw)
            # the transformer block's own module frames around its ten groups
            fwd.append(
                _Node(
                    PY,
                    "torch/nn/modules/module.py(1773): _wrapped_call_impl",
                    10,
                    [
                        _Node(
                            PY,
                            "torch/nn/modules/module.py(1784): _call_impl",
                            1,
                            [_Node(PY, "model.py(74): forward", 1, block)],
                        )
                    ],
                )
            )
        # Input copy at the start of the forward pass (gpu_memcpy).
        copy = _Node(
            PY,
            "train.py(131): to_device",
            0.8,
            [
                _Node(
                    PY,
                    "<built-in method to of Tensor object at 0x7f3a0c1a0b30>",
                    1,
                    [
                        _Node(
                            OP,
                            "aten::to",
                            1,
                            [
                                _Node(
                                    OP,
                                    "aten::_to_copy",
                                    1,
                                    [
                                        _Node(OP, "aten::empty_strided", 0.2),
                                        _Node(
                                            OP,
                                            "aten::copy_",
                                            1,
                                            [_launch(_D_MEMCPY, 0.8)],
                                            static=_shapes(
                                                [[b, s], [b, s], []], ["long int", "long int", "Scalar"]
                                            ),
                                        ),
                                    ],
                                )
                            ],
                            static=_shapes(
                                [[b, s], [], [], [], [], []],
                                ["long int", "", "Scalar", "", "Scalar", "Scalar"],
                            ),
                        )
                    ],
                )
            ],
        )
        loss = _Node(
            PY,
            "torch/nn/functional.py(3494): cross_entropy",
            1,
            [
                _Node(
                    OP,
                    "aten::cross_entropy_loss",
                    1,
                    [
                        _Node(
                            OP,
                            "aten::log_softmax",
                            1,
                            [
                                _Node(
                                    OP, "aten::_log_softmax", 1, [_mem(b * s * 1000 * 4), _launch(_K_SOFTMAX)]
                                )
                            ],
                        ),
                        _Node(
                            OP,
                            "aten::nll_loss_nd",
                            1,
                            [
                                _Node(
                                    OP,
                                    "aten::nll_loss",
                                    1,
                                    [_Node(OP, "aten::nll_loss_forward", 1, [_launch(_K_NLL)])],
                                )
                            ],
                        ),
                    ],
                    static=_shapes(
                        [[b * s, 1000], [b * s], [], [], [], []],
                        ["float", "long int", "", "Scalar", "Scalar", "Scalar"],
                    ),
                    seq="fwd",
                )
            ],
        )
        self.fwd_groups: List[_Node] = [copy] + fwd + [loss]
        self.n_fwd = 10 * layers + 2  # forward groups, for the phase length
        bwd_loss = _bwd(
            "NllLossBackward0", [_Node(OP, "aten::nll_loss_backward", 1, [_launch(_K_NLL)])]
        ) + _bwd(
            "LogSoftmaxBackward0",
            [_Node(OP, "aten::_log_softmax_backward_data", 1, [_launch(_K_SOFTMAX)])],
            flow=False,
        )
        # Backward groups: one list of trees per forward group, in reverse order. The
        # loss has two autograd nodes but one fwdbwd flow: the first takes it.
        self.bwd_groups: List[List[_Node]] = [bwd_loss] + list(reversed(bwd))
        self.model_frames = (
            "torch/nn/modules/module.py(1773): _wrapped_call_impl",
            "torch/nn/modules/module.py(1784): _call_impl",
            "model.py(112): forward",
        )
        self.zero_grad = _Node(
            UA,
            "Optimizer.zero_grad#AdamW.zero_grad",
            1,
            [
                _Node(
                    PY,
                    "torch/optim/optimizer.py(987): zero_grad",
                    1,
                    [
                        _Node(PY, "torch/_tensor.py(1587): __torch_function__", 0.1),
                        _Node(OP, "aten::zero_", 1, [_Node(OP, "aten::fill_", 1, [_launch(_D_MEMSET)])]),
                    ],
                )
            ],
        )
        foreach = (
            "aten::_foreach_mul_",
            "aten::_foreach_add_",
            "aten::_foreach_addcmul_",
            "aten::_foreach_sqrt",
            "aten::_foreach_div_",
            "aten::_foreach_addcdiv_",
        )
        self.optimizer = _Node(
            PY,
            "torch/optim/optimizer.py(485): wrapper",
            1,
            [
                _Node(
                    UA,
                    "Optimizer.step#AdamW.step",
                    1,
                    [
                        _Node(
                            PY,
                            "torch/optim/adamw.py(209): step",
                            1,
                            [
                                _Node(PY, "torch/optim/optimizer.py(131): _get_value", 0.02),
                                _Node(
                                    PY,
                                    "torch/optim/adamw.py(127): _init_group",
                                    0.1,
                                    [
                                        _Node(PY, "torch/optim/optimizer.py(131): _get_value", 0.2),
                                        _Node(
                                            PY,
                                            "<built-in method is_complex of type object at 0x7f3b2a6c4f40>",
                                            0.2,
                                        ),
                                    ],
                                ),
                                _Node(
                                    PY,
                                    "torch/optim/adamw.py(770): _multi_tensor_adamw",
                                    1,
                                    [
                                        _Node(
                                            PY,
                                            f"<built-in function {name[6:]}>",
                                            1,
                                            [_Node(OP, name, 1, [_launch(_K_FOREACH)])],
                                        )
                                        for name in foreach
                                    ],
                                ),
                            ],
                        )
                    ],
                )
            ],
        )
        self.backward_frames = _Node(
            PY,
            "torch/_tensor.py(648): backward",
            1,
            [
                _Node(
                    PY,
                    "torch/autograd/__init__.py(354): backward",
                    1,
                    [_Node(PY, "torch/autograd/graph.py(824): _engine_run_backward", 1)],
                )
            ],
        )


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


# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------
_H100 = (
    '"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936,\n'
    '      "computeMajor": 9, "computeMinor": 0,\n'
    '      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
    '      "regsPerBlock": 65536, "warpSize": 32,\n'
    '      "sharedMemPerBlock": 49152, "numSms": 132\n'
    '    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, '
    '"sharedMemPerMultiprocessor": 233472'
)


def _device_properties(n: int) -> str:
    items = [f'    {{\n      "id": {i}, {_H100}\n    }}' for i in range(n)]
    return "[\n" + ",\n".join(items) + "\n  ]"


class _Sink:
    """Uncompressed byte counter in front of a plain/gzip/zstd file (deterministic)."""

    def __init__(self, path: Path, compress: Optional[str], level: Optional[int]) -> None:
        self.raw: BinaryIO = open(path, "wb")
        self.bytes = 0
        self._closers: List[Any] = []
        if compress is None:
            self.f: Any = self.raw
        elif compress == "gzip":
            # mtime=0 and an empty name: the header carries nothing time- or path-dependent.
            # ISA-L (level 2) deflates ~5x faster than zlib -6, which matters for GB-sized
            # benchmark inputs; an explicit ``level`` means zlib's 1..9 scale.
            if level is None and _igzip is not None:
                self.f = _igzip.IGzipFile(filename="", mode="wb", fileobj=self.raw, mtime=0, compresslevel=2)
            else:
                self.f = gzip.GzipFile(
                    filename="",
                    mode="wb",
                    fileobj=self.raw,
                    mtime=0,
                    compresslevel=6 if level is None else level,
                )
            self._closers.append(self.f)
        elif compress == "zstd":
            import zstandard

            cctx = zstandard.ZstdCompressor(level=3 if level is None else level)
            self.f = cctx.stream_writer(self.raw, closefd=False)
            self._closers.append(self.f)
        else:
            raise ValueError(f"compress must be None, 'gzip' or 'zstd', not {compress!r}")

    def write(self, s: str) -> None:
        b = s.encode()
        self.bytes += len(b)
        self.f.write(b)

    def close(self) -> None:
        for c in self._closers:
            c.close()
        self.raw.close()


class _RankGen:
    """Renders one rank's events. Holds only counters and the current step's state."""

    def __init__(
        self,
        sink: _Sink,
        *,
        rank: int,
        seed: int,
        model: _Model,
        cpu_pid: int,
        main_tid: int,
        bwd_tid: int,
        device: int,
        shift: int,
        kernel_jitter_ns: int,
        world_size: int,
    ) -> None:
        self.sink = sink
        self.rank = rank
        self.seed = seed
        self.model = model
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
        buf = self.buf
        if k == PY:
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
        elif k == OP or k == UA or k == COMM:
            e = self.ext
            self.ext += 1
            seq = n.seq
            extra = n.static
            if k == COMM:
                extra = self.cur_comm[0]
            flow_s = None
            flow_f = None
            if seq is not None:
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
                buf.append(
                    f'  {{\n    "ph": "s", "id": {flow_s}, {th}, "ts": {_t(t)},\n'
                    f'    "cat": "fwdbwd", "name": "fwdbwd"\n  }}'
                )
                self.count("s", "fwdbwd")
            if flow_f is not None:
                buf.append(
                    f'  {{\n    "ph": "f", "id": {flow_f}, {th}, "ts": {_t(t)},\n'
                    f'    "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"\n  }}'
                )
                self.count("f", "fwdbwd")
            self.kids(n, t, d, th, e, d, pyp)
        elif k == RT:
            c = self.corr
            self.corr += 1
            ts = _t(t)
            buf.append(
                f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": {n.name}, {th},\n'
                f'    "ts": {ts}, "dur": {_t(d)},\n    "args": {{\n      "External id": {ext},'
                f'      "cbid": {n.cbid}, "correlation": {c}\n    }}\n  }}'
            )
            # Kineto links runtime calls without device work by an "f" alone.
            buf.append(
                f'  {{\n    "ph": "f", "id": {c}, {th}, "ts": {ts},\n'
                f'    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
            )
            self.count("X", "cuda_runtime")
            self.count("f", "ac2g")
        elif k == LAUNCH or k == NCCL:
            c = self.corr
            self.corr += 1
            ts = _t(t)
            rnd = self.rng.random
            buf.append(
                f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": {n.name}, {th},\n'
                f'    "ts": {ts}, "dur": {_t(d)},\n    "args": {{\n      "External id": {ext},'
                f'      "cbid": {n.cbid}, "correlation": {c}\n    }}\n  }}'
            )
            buf.append(
                f'  {{\n    "ph": "s", "id": {c}, {th}, "ts": {ts},\n    "cat": "ac2g", "name": "ac2g"\n  }}'
            )
            dev = self.device
            if k == NCCL:
                _, kname, kargs, end = self.cur_comm
                stream = COMM_STREAM
                ks = max(t + 3000 + int(9000 * rnd()), self.free[stream])
                if end - ks < 1000:  # only with a jitter larger than the kernel
                    ks = end - 1000
                kd = end - ks
                self.free[stream] = end + 1000
                dargs = (
                    f'"External id": {ext},      "queued": 0, "device": {dev}, "context": 1,'
                    f'      "stream": {stream}, "correlation": {c},      {kargs}'
                )
                cat = "kernel"
            else:
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
            kts = _t(ks)
            buf.append(
                f'  {{\n    "ph": "X", "cat": "{cat}", "name": {kname}, "pid": {dev}, '
                f'"tid": {stream},\n    "ts": {kts}, "dur": {_t(kd)},\n    "args": {{\n'
                f"      {dargs}\n    }}\n  }}"
            )
            buf.append(
                f'  {{\n    "ph": "f", "id": {c}, "pid": {dev}, "tid": {stream}, "ts": {kts},\n'
                f'    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
            )
            self.count("X", "cuda_runtime")
            self.count("s", "ac2g")
            self.count("X", cat)
            self.count("f", "ac2g")
        elif k == MEM:
            if n.mem > 0:
                nbytes = n.mem
                self.mem_stack.append(nbytes)
            else:
                nbytes = -(self.mem_stack.pop() if self.mem_stack else 4096)
            self.allocated += nbytes
            self.addr += 0x200000
            buf.append(
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


_COMM_NODES: Dict[Tuple[str, str], _Node] = {}


def _comm_node(op: str, ann: str) -> _Node:
    node = _COMM_NODES.get((op, ann))
    if node is None:
        node = _Node(
            OP,
            op,
            2.0,
            [
                _Node(
                    COMM,
                    "record_param_comms",
                    1,
                    [
                        _Node(UA, ann, 0.4),
                        _rt("cudaStreamIsCapturing", 317),
                        _rt("cudaEventRecord", 135),
                        _rt("cudaStreamWaitEvent", 147),
                        _Node(NCCL, "cudaLaunchKernelExC", 0.25, cbid=430),
                        _rt("cudaEventRecord", 135),
                    ],
                )
            ],
        )
        _COMM_NODES[(op, ann)] = node
    return node


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------
def _start_offset_ns(seed: int) -> int:
    """Seed-derived offset of the profiling window from the base (1e12..5e12 us)."""
    r = random.Random(f"{seed}:start")
    return r.randrange(1_000_000, 5_000_000) * 1_000_000_000 + r.randrange(1_000_000_000)


def write_rank_trace(
    path: PathLike,
    rank: int,
    world_size: int,
    *,
    target_bytes: Optional[int] = None,
    steps: Optional[int] = None,
    seed: int = 0,
    key_order: str = "base_first",
    base_time_ns: int = DEFAULT_BASE_TIME_NS,
    clock_offset_ns: int = 0,
    host_name: str = "node0",
    gpus_per_host: int = 8,
    compress: Optional[str] = None,
    kernel_jitter_ns: int = 0,
    first_step: int = 0,
    same_pid: bool = False,
    cpu_pid: Optional[int] = None,
    device: Optional[int] = None,
    start_ns: Optional[int] = None,
    layers: int = 4,
    trace_name: Optional[str] = None,
    compresslevel: Optional[int] = None,
) -> Dict[str, Any]:
    """Stream one rank's Kineto-shaped trace to ``path`` and return a small summary.

    Give ``steps`` (number of training steps) or ``target_bytes`` (approximate
    uncompressed size: steps are added until it is reached). Same arguments give a
    byte-identical file, compressed ones included.

    ``start_ns`` is the absolute true (epoch ns) start of the profiling window shared
    by all ranks of a run; by default ``base_time_ns`` + a seed-derived offset, so pass
    it explicitly when ranks get different ``base_time_ns``. ``clock_offset_ns`` shifts
    every event of this rank (a host whose clock is off); ``kernel_jitter_ns`` moves the
    collective kernel ends by a seeded uniform amount in ``[-j, j]``. ``first_step``
    numbers ``ProfilerStep#N`` (profilers started at different times label the same
    training step differently). ``device`` defaults to ``rank % gpus_per_host``;
    ``same_pid`` gives every rank the CPU pid 542 (containers).

    The summary has ``path``, ``rank``, ``n_steps``, ``n_collectives``, ``bytes``
    (uncompressed), ``file_bytes``, ``events`` and counts ``by_ph`` / ``by_cat`` /
    ``by_ph_cat`` (key "ph/cat"; metadata has cat "").
    """
    if (target_bytes is None) == (steps is None):
        raise ValueError("give exactly one of target_bytes and steps")
    if steps is not None and steps < 1:
        raise ValueError("steps must be >= 1")
    if target_bytes is not None and target_bytes < 1:
        raise ValueError("target_bytes must be >= 1")
    if key_order not in KEY_ORDERS:
        raise ValueError(f"key_order must be one of {KEY_ORDERS}, not {key_order!r}")
    if compress not in COMPRESSIONS:
        raise ValueError(f"compress must be None, 'gzip' or 'zstd', not {compress!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
    if layers < 1 or gpus_per_host < 1 or kernel_jitter_ns < 0:
        raise ValueError("layers and gpus_per_host must be >= 1, kernel_jitter_ns >= 0")
    path = Path(path)
    if device is None:
        device = rank % gpus_per_host
    if cpu_pid is None:
        cpu_pid = 542 if same_pid else 11777 + rank
    main_tid = cpu_pid
    bwd_tid = 639 if same_pid else cpu_pid + 9503
    if start_ns is None:
        start_ns = base_time_ns + _start_offset_ns(seed)
    shift = clock_offset_ns - base_time_ns
    if trace_name is None:
        trace_name = f"/tmp/tmp{random.Random(f'{seed}:name:{rank}').getrandbits(40):010x}.json"

    model = _Model(layers)
    rank_rng = random.Random(f"{seed}:window:{rank}")
    win_start = start_ns + int(300 * _US * rank_rng.random()) + shift
    if win_start < 0:
        raise ValueError("events would have a negative ts: start_ns is before base_time_ns")

    tmp = path.with_name(path.name + ".tracefuse-tmp")
    sink = _Sink(tmp, compress, compresslevel)
    try:
        dist = {
            "backend": "nccl",
            "rank": rank,
            "world_size": world_size,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": world_size,
                    "ranks": list(range(world_size)),
                }
            ],
            "nccl_version": "2.21.5",
        }
        ident = random.Random(f"{seed}:trace_id:{rank}").getrandbits(128)
        head = [
            '{\n  "schemaVersion": 1,\n',
            f'  "deviceProperties": {_device_properties(gpus_per_host)},\n',
            f'  "trace_id": "{ident:032X}",\n  "with_stack": 1,\n  "profile_memory": 1,\n'
            f'  "record_shapes": 1,\n',
        ]
        dist_s = f'  "distributedInfo": {json.dumps(dist)},\n'
        host_s = f'  "host_name": {_j(host_name)},\n'
        time_s = f'  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {base_time_ns},\n'
        name_s = f'  "traceName": {_j(trace_name)}'
        if key_order == "base_first":
            head += [dist_s, host_s, time_s]
            tail = ["\n  ],\n", name_s, "\n}\n"]
        elif key_order == "base_after":
            head += [dist_s, host_s]
            tail = ["\n  ],\n", name_s, ",\n", time_s.rstrip(",\n"), "\n}\n"]
        else:  # distinfo_after: on-demand traces
            head += [host_s]
            tail = ["\n  ],\n", dist_s, name_s, ",\n", time_s.rstrip(",\n"), "\n}\n"]
        sink.write("".join(head) + '  "traceEvents": [\n')

        g = _RankGen(
            sink,
            rank=rank,
            seed=seed,
            model=model,
            cpu_pid=cpu_pid,
            main_tid=main_tid,
            bwd_tid=bwd_tid,
            device=device,
            shift=shift,
            kernel_jitter_ns=kernel_jitter_ns,
            world_size=world_size,
        )
        # A kernel whose launch predates the window: an "f" with no "s" (as in real traces).
        g.corr += 1
        k0 = win_start + 20 * _US
        g.buf.append(
            f'  {{\n    "ph": "X", "cat": "kernel", "name": {_K_ADD[1]}, "pid": {device}, '
            f'"tid": {COMPUTE_STREAM},\n    "ts": {_t(k0)}, "dur": {_t(7808)},\n    "args": {{\n'
            f'      "External id": 0,      "queued": 0, "device": {device}, "context": 1,'
            f'      "stream": {COMPUTE_STREAM}, "correlation": 1,      {_K_ADD[2]}\n    }}\n  }}'
        )
        g.buf.append(
            f'  {{\n    "ph": "f", "id": 1, "pid": {device}, "tid": {COMPUTE_STREAM}, '
            f'"ts": {_t(k0)},\n    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
        )
        g.count("X", "kernel")
        g.count("f", "ac2g")
        g.free[COMPUTE_STREAM] = k0 + 7808 + 1000

        true_t = start_ns + START_LEAD_NS
        n = 0
        while True:
            plan = _StepPlan(seed, n, model)
            g.step(n, first_step + n, true_t, plan)
            true_t += plan.length
            n += 1
            if steps is not None:
                if n >= steps:
                    break
            elif sink.bytes >= target_bytes:
                break
        end = true_t + shift
        if end // 1000 >= MAX_TS_US:
            raise ValueError("ts would exceed 2**43 us; use fewer steps or an earlier start_ns")

        # Top-level python frames (ids 1 and 2), then Kineto's trailer: metadata for the
        # CPU process and for every visible GPU, the profiler span and window markers.
        mth = g.main_th
        for pid_, parent, name, a in (
            (1, "null", "train.py(212): <module>", 30),
            (2, 1, "train.py(188): main", 35),
        ):
            g.x_cpu(
                "python_function",
                _j(name),
                mth,
                win_start + a * _US,
                end + (100 - a) * _US - win_start - a * _US,
                f'"Python parent id": {parent}, "Python id": {pid_}, "Ev Idx": {g.ev}',
            )
            g.ev += 1
        mts = _t(win_start + 150 * _US)

        def meta(name: str, pid: Any, tid: Any, args: str) -> None:
            g.buf.append(
                f'  {{\n    "name": "{name}", "ph": "M", "ts": {mts}, "pid": {pid}, '
                f'"tid": {tid},\n    "args": {{\n      {args}\n    }}\n  }}'
            )
            g.count("M", "")

        meta("process_name", cpu_pid, 0, '"name": "python3"')
        meta("process_labels", cpu_pid, 0, '"labels": "CPU"')
        meta("process_sort_index", cpu_pid, 0, f'"sort_index": {cpu_pid}')
        for dv in range(gpus_per_host):
            meta("process_name", dv, 0, '"name": "python3"')
            meta("process_labels", dv, 0, f'"labels": "GPU {dv}"')
            meta("process_sort_index", dv, 0, f'"sort_index": {GPU_SORT_BASE + dv}')
        for stream in (COMPUTE_STREAM, COMM_STREAM):
            meta("thread_name", device, stream, f'"name": "stream {stream} "')
            meta("thread_sort_index", device, stream, f'"sort_index": {stream}')
        for tid, tname in ((main_tid, "python3"), (bwd_tid, "python3"), (bwd_tid, "pt_autograd_0")):
            meta("thread_name", cpu_pid, tid, f'"name": "thread {tid} ({tname})"')
            meta("thread_sort_index", cpu_pid, tid, f'"sort_index": {tid}')
        ws = _t(win_start)
        g.buf.append(
            f'  {{\n    "ph": "X", "cat": "Trace", "ts": {ws}, "dur": {_t(end - win_start)},\n'
            f'    "pid": "Spans", "tid": "PyTorch Profiler",\n'
            f'    "name": "PyTorch Profiler (0)",\n    "args": {{\n      "Op count": 0\n    }}\n  }}'
        )
        g.count("X", "Trace")
        g.buf.append(
            f'  {{\n    "name": "process_sort_index", "ph": "M", "ts": {ws},\n'
            f'    "pid": "Spans", "tid": 0,\n    "args": {{\n      "sort_index": '
            f"{SPANS_SORT_INDEX}\n    }}\n  }}"
        )
        g.count("M", "")
        g.buf.append(
            f'  {{\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
            f'    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {ws}\n  }}'
        )
        g.buf.append(
            f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
            f'    "pid": "", "tid": "", "ts": {_t(end + 300 * _US)}\n  }}'
        )
        g.count("i", "", 2)
        g.flush()
        sink.write("".join(tail))
    except BaseException:
        sink.close()
        tmp.unlink()
        raise
    sink.close()
    os.replace(tmp, path)

    by_ph: Dict[str, int] = {}
    by_cat: Dict[str, int] = {}
    by_ph_cat: Dict[str, int] = {}
    for (ph, cat), c in sorted(g.counts.items()):
        by_ph[ph] = by_ph.get(ph, 0) + c
        by_cat[cat] = by_cat.get(cat, 0) + c
        by_ph_cat[f"{ph}/{cat}"] = c
    return {
        "path": str(path),
        "rank": rank,
        "n_steps": n,
        "n_collectives": g.n_coll,
        "bytes": sink.bytes,
        "file_bytes": path.stat().st_size,
        "events": g.n_events,
        "by_ph": by_ph,
        "by_cat": by_cat,
        "by_ph_cat": by_ph_cat,
    }


_EXT = {None: "", "gzip": ".gz", "zstd": ".zst"}


def _per_rank(value: Any, world_size: int, name: str) -> List[Any]:
    """Expand a scalar or a sequence cycled over ranks."""
    if value is None or isinstance(value, (str, int)):
        return [value] * world_size
    seq = list(value)
    if not seq:
        raise ValueError(f"{name} must not be empty")
    return [seq[r % len(seq)] for r in range(world_size)]


def _write_one(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    return write_rank_trace(**kwargs)


def write_run(
    out_dir: PathLike,
    world_size: int,
    *,
    mb_per_rank: Optional[float] = None,
    steps: Optional[int] = None,
    seed: int = 0,
    compress: Union[None, str, Sequence[Optional[str]]] = None,
    key_orders: Optional[Sequence[str]] = None,
    hosts: int = 1,
    host_clock_offsets_ns: Optional[Sequence[int]] = None,
    file_pattern: str = "{host}_{pid}.{rank}.pt.trace.json",
    kernel_jitter_ns: int = 0,
    gpus_per_host: Optional[int] = None,
    same_pid: bool = False,
    first_steps: Optional[Sequence[int]] = None,
    base_time_ns: int = DEFAULT_BASE_TIME_NS,
    rank_base_times_ns: Optional[Sequence[int]] = None,
    layers: int = 4,
    jobs: int = 1,
    compresslevel: Optional[int] = None,
    summaries: Optional[List[Dict[str, Any]]] = None,
) -> List[Path]:
    """Write one trace per rank of a ``world_size`` job into ``out_dir``; return the
    paths in rank order.

    Ranks are split evenly over ``hosts`` (``host_name`` "node{h}", local GPU = rank's
    index on its host, host h's clock off by ``host_clock_offsets_ns[h]``).
    ``compress``, ``key_orders`` and ``first_steps`` may be sequences cycled over the
    ranks. With ``mb_per_rank`` rank 0 runs until it reaches the size and the other
    ranks then write the same number of steps, so every collective exists on every
    rank. ``file_pattern`` may use ``{host}``, ``{pid}``, ``{rank}``, ``{local_rank}``
    and ``{time_ns}`` (a per-rank pseudo time, for tensorboard-like names without the
    rank); ``.gz``/``.zst`` is appended for compressed files. ``jobs`` > 1 writes
    ranks in parallel processes (same bytes). ``summaries``, if given, receives each
    rank's summary dict.
    """
    if (mb_per_rank is None) == (steps is None):
        raise ValueError("give exactly one of mb_per_rank and steps")
    if world_size < 1 or hosts < 1 or world_size % hosts:
        raise ValueError("world_size must be a positive multiple of hosts")
    per_host = world_size // hosts
    if gpus_per_host is None:
        gpus_per_host = max(8, per_host)
    if per_host > gpus_per_host:
        raise ValueError(f"{per_host} ranks per host do not fit on {gpus_per_host} GPUs")
    offsets = list(host_clock_offsets_ns or [0] * hosts)
    if len(offsets) != hosts:
        raise ValueError("host_clock_offsets_ns needs one value per host")
    comps = _per_rank(compress, world_size, "compress")
    orders = _per_rank(list(key_orders) if key_orders else "base_first", world_size, "key_orders")
    firsts = _per_rank(list(first_steps) if first_steps else 0, world_size, "first_steps")
    bases = (
        _per_rank(list(rank_base_times_ns), world_size, "rank_base_times_ns")
        if rank_base_times_ns
        else [base_time_ns] * world_size
    )
    if len(set(bases)) == 1:
        start_ns = bases[0] + _start_offset_ns(seed)
    else:
        # Processes that started on two sides of a base period boundary: the profiled
        # window comes minutes after the latest base, in every rank's range.
        start_ns = max(bases) + random.Random(f"{seed}:start").randrange(60, 600) * 10**9
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    all_kwargs = []
    for r in range(world_size):
        h, local = divmod(r, per_host)
        pid = 542 if same_pid else 11777 + r
        host = f"node{h}"
        name = file_pattern.format(
            host=host, pid=pid, rank=r, local_rank=local, time_ns=start_ns + 1_000_003 * (r + 1) * 7919
        )
        all_kwargs.append(
            dict(
                path=out / (name + _EXT[comps[r]]),
                rank=r,
                world_size=world_size,
                seed=seed,
                key_order=orders[r],
                base_time_ns=bases[r],
                clock_offset_ns=offsets[h],
                host_name=host,
                gpus_per_host=gpus_per_host,
                compress=comps[r],
                kernel_jitter_ns=kernel_jitter_ns,
                first_step=firsts[r],
                same_pid=same_pid,
                cpu_pid=pid,
                device=local,
                start_ns=start_ns,
                layers=layers,
                compresslevel=compresslevel,
            )
        )
    if len({str(k["path"]) for k in all_kwargs}) != world_size:
        raise ValueError(f"file_pattern {file_pattern!r} gives the same name to two ranks")
    results: List[Dict[str, Any]] = []
    if mb_per_rank is not None:
        first = write_rank_trace(**all_kwargs[0], target_bytes=int(mb_per_rank * 1_000_000))
        results.append(first)
        steps = first["n_steps"]
        rest = all_kwargs[1:]
    else:
        rest = all_kwargs
    for k in rest:
        k["steps"] = steps
    if jobs > 1 and len(rest) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(jobs, len(rest))) as ex:
            results.extend(ex.map(_write_one, rest))
    else:
        results.extend(_write_one(k) for k in rest)
    if summaries is not None:
        summaries.extend(results)
    return [Path(k["path"]) for k in all_kwargs]


#: The bundled sample (``fixtures/sample_run``): 4 ranks on 2 hosts, host 1's clock
#: 1.2 ms ahead, .json and .json.gz, all three key orders, a little kernel jitter.
SAMPLE = dict(
    world_size=4,
    steps=3,
    layers=1,
    hosts=2,
    host_clock_offsets_ns=[0, 1_200_000],
    compress=[None, "gzip", None, "gzip"],
    key_orders=["base_first", "base_after", "distinfo_after", "base_first"],
    kernel_jitter_ns=1500,
    gpus_per_host=8,
)


def sample_run(out_dir: PathLike, seed: int = 0) -> List[Path]:
    """Regenerate the bundled sample run (see ``fixtures/README.md``)."""
    return write_run(out_dir, seed=seed, **SAMPLE)  # type: ignore[arg-type]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line: ``python -m tracefuse_stream.synth OUT_DIR --ranks 8 --mb-per-rank 64``."""
    p = argparse.ArgumentParser(
        prog="python -m tracefuse_stream.synth",
        description="Write a deterministic synthetic multi-rank Kineto trace run.",
    )
    p.add_argument("out_dir")
    p.add_argument("--ranks", type=int, default=None, help="world size (default 8)")
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--mb-per-rank", type=float, default=None, help="approximate uncompressed MB (1e6 bytes) per rank"
    )
    size.add_argument("--steps", type=int, default=None, help="training steps per rank")
    comp = p.add_mutually_exclusive_group()
    comp.add_argument("--gzip", action="store_const", dest="compress", const="gzip")
    comp.add_argument("--zstd", action="store_const", dest="compress", const="zstd")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hosts", type=int, default=1)
    p.add_argument(
        "--host-offset-us",
        type=float,
        default=0.0,
        help="clock offset of host h = h * this many microseconds",
    )
    p.add_argument(
        "--jitter-us", type=float, default=0.0, help="collective kernel end jitter, uniform in +-this"
    )
    p.add_argument(
        "--key-order",
        action="append",
        choices=KEY_ORDERS,
        default=None,
        help="top-level key order; repeat to cycle over ranks",
    )
    p.add_argument("--layers", type=int, default=4, help="transformer layers (events per step)")
    p.add_argument("--same-pid", action="store_true", help="every rank has CPU pid 542")
    p.add_argument("--gpus-per-host", type=int, default=None)
    p.add_argument("--pattern", default="{host}_{pid}.{rank}.pt.trace.json")
    p.add_argument("--jobs", type=int, default=1, help="parallel processes")
    p.add_argument(
        "--sample",
        action="store_true",
        help="write the bundled fixtures/sample_run recipe (ignores size options)",
    )
    p.add_argument("-q", "--quiet", action="store_true")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    summaries: List[Dict[str, Any]] = []
    try:
        if a.sample:
            paths = write_run(a.out_dir, seed=a.seed, summaries=summaries, **SAMPLE)  # type: ignore[arg-type]
        else:
            if a.mb_per_rank is None and a.steps is None:
                p.error("give --mb-per-rank or --steps (or --sample)")
            world = 8 if a.ranks is None else a.ranks
            paths = write_run(
                a.out_dir,
                world,
                mb_per_rank=a.mb_per_rank,
                steps=a.steps,
                seed=a.seed,
                compress=a.compress,
                key_orders=a.key_order,
                hosts=a.hosts,
                host_clock_offsets_ns=[int(round(h * a.host_offset_us * 1000)) for h in range(a.hosts)],
                file_pattern=a.pattern,
                kernel_jitter_ns=int(round(a.jitter_us * 1000)),
                gpus_per_host=a.gpus_per_host,
                same_pid=a.same_pid,
                layers=a.layers,
                jobs=a.jobs,
                summaries=summaries,
            )
    except (ValueError, OSError) as e:
        print(f"synth: error: {e}", file=sys.stderr)
        return 2
    dt = time.perf_counter() - t0
    if not a.quiet:
        total = sum(s["bytes"] for s in summaries)
        for s in sorted(summaries, key=lambda s: s["rank"]):
            print(
                f"rank {s['rank']}: {s['path']}  {s['n_steps']} steps, {s['events']} events, "
                f"{s['bytes'] / 1e6:.1f} MB json, {s['file_bytes'] / 1e6:.1f} MB on disk"
            )
        print(
            f"{len(paths)} files, {total / 1e6:.1f} MB uncompressed in {dt:.1f} s "
            f"({total / 1e6 / max(dt, 1e-9):.1f} MB/s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
