"""Event templates: one :class:`_Node` per event of a training step, built once.

Why: a step renders thousands of events; their names, static args (shapes, kernel
launch parameters) and the tree they nest in do not depend on the rank or the step,
so they are rendered to JSON text once, here, and the rank renderer (rankgen.py) only
fills in times and ids.
"""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence, Tuple

from tracefuse_synth.common import COMPUTE_STREAM, _j

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
