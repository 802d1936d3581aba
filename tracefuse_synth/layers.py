"""One transformer layer's parts as event templates: linear, layer norm, attention,
GELU and residual add, each a forward tree and its autograd (backward) trees.

Why a module of its own: these are the bulk of the templates (shapes, kernels, the
``with_stack`` frames of ``module(x)``); model.py only assembles them into blocks.
"""

from __future__ import annotations

from typing import List, Tuple

from tracefuse_synth.templates import (
    _K_ADD,
    _K_FLASH,
    _K_FLASH_BWD,
    _K_GELU,
    _K_GELU_BWD,
    _K_GEMM,
    _K_GEMM_BWD,
    _K_LN,
    _K_LN_BWD,
    _K_LN_GAMMA,
    OP,
    PY,
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
