"""The per-run model: a small transformer trained with DDP, as event templates.

Why: the event *structure* of a step must depend only on the run (``layers``), never
on the rank, so that every rank uses the same id counters like real Kineto traces;
the model is built once per rank trace from the templates of templates.py.
"""

from __future__ import annotations

from typing import List, Tuple

from tracefuse_synth.layers import _add_group, _attention_group, _gelu_group, _layernorm_group, _linear_group
from tracefuse_synth.templates import (
    _D_MEMCPY,
    _D_MEMSET,
    _K_FOREACH,
    _K_NLL,
    _K_SOFTMAX,
    OP,
    PY,
    UA,
    _bwd,
    _launch,
    _mem,
    _Node,
    _shapes,
)


def _blocks(layers: int, b: int, s: int, h: int, heads: int) -> Tuple[List[_Node], List[List[_Node]]]:
    """The transformer blocks: one forward tree per block (its module frames around
    ten groups) and the backward group of every forward group, in forward order."""
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
    return fwd, bwd


def _input_copy(b: int, s: int) -> _Node:
    """Input copy at the start of the forward pass (gpu_memcpy)."""
    return _Node(
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


def _loss(b: int, s: int) -> _Node:
    """Cross-entropy loss at the end of the forward pass (starts a fwdbwd flow)."""
    return _Node(
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
                        [_Node(OP, "aten::_log_softmax", 1, [_mem(b * s * 1000 * 4), _launch(_K_SOFTMAX)])],
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


def _loss_backward() -> List[_Node]:
    """The loss's two autograd nodes; one fwdbwd flow: the first takes it."""
    return _bwd("NllLossBackward0", [_Node(OP, "aten::nll_loss_backward", 1, [_launch(_K_NLL)])]) + _bwd(
        "LogSoftmaxBackward0",
        [_Node(OP, "aten::_log_softmax_backward_data", 1, [_launch(_K_SOFTMAX)])],
        flow=False,
    )


def _zero_grad() -> _Node:
    """``optimizer.zero_grad()`` at the start of a step (a memset)."""
    return _Node(
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


def _optimizer() -> _Node:
    """``optimizer.step()`` (AdamW, multi-tensor foreach kernels) at the end of a step."""
    foreach = (
        "aten::_foreach_mul_",
        "aten::_foreach_add_",
        "aten::_foreach_addcmul_",
        "aten::_foreach_sqrt",
        "aten::_foreach_div_",
        "aten::_foreach_addcdiv_",
    )
    return _Node(
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


def _backward_frames() -> _Node:
    """The python frames of ``loss.backward()`` on the main thread."""
    return _Node(
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


class _Model:
    """The per-run model: forward groups (main thread), their backward groups in
    reverse order (autograd thread), plus the fixed per-step prologue/epilogue trees.
    Depends on ``layers`` only, so every rank has the same event structure."""

    def __init__(self, layers: int) -> None:
        b, s, h, heads = 8, 512, 1024, 16
        fwd, bwd = _blocks(layers, b, s, h, heads)
        self.fwd_groups: List[_Node] = [_input_copy(b, s)] + fwd + [_loss(b, s)]
        self.n_fwd = 10 * layers + 2  # forward groups, for the phase length
        # Backward groups: one list of trees per forward group, in reverse order. The
        # loss has two autograd nodes but one fwdbwd flow: the first takes it.
        self.bwd_groups: List[List[_Node]] = [_loss_backward()] + list(reversed(bwd))
        self.model_frames = (
            "torch/nn/modules/module.py(1773): _wrapped_call_impl",
            "torch/nn/modules/module.py(1784): _call_impl",
            "model.py(112): forward",
        )
        self.zero_grad = _zero_grad()
        self.optimizer = _optimizer()
        self.backward_frames = _backward_frames()
