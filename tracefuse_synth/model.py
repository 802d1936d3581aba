"""The per-run model: a small transformer trained with DDP, as event templates.

Why: the event *structure* of a step must depend only on the run (``layers``), never
on the rank, so that every rank uses the same id counters like real Kineto traces;
the model is built once per rank trace from the templates of templates.py.
"""

from __future__ import annotations

from typing import List, Tuple

from tracefuse_synth.templates import (
    _D_MEMCPY,
    _D_MEMSET,
    _K_ADD,
    _K_FLASH,
    _K_FLASH_BWD,
    _K_FOREACH,
    _K_GELU,
    _K_GELU_BWD,
    _K_GEMM,
    _K_GEMM_BWD,
    _K_LN,
    _K_LN_BWD,
    _K_LN_GAMMA,
    _K_NLL,
    _K_SOFTMAX,
    OP,
    PY,
    UA,
    _bwd,
    _launch,
    _mem,
    _module_frames,
    _Node,
    _shapes,
)


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
