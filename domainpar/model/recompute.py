"""Activation checkpointing of one region of the model: keep its inputs, recompute it in backward.

:func:`recompute` runs ``fn(*inputs)`` once without autograd, keeps only
``inputs`` for backward (``ctx.save_for_backward``, so
``torch.autograd.graph.save_on_cpu`` moves them to host memory when
offloading), and in backward runs ``fn`` again with autograd and
backpropagates through it. The region's parameters are inputs of the
autograd node, so their gradients come out of it like any other.

The recomputation runs the same kernels on the same inputs, so it reproduces
the forward values bitwise (the model has no randomness; the forward's autocast
state is restored). A region must not communicate: the halo exchange stays
outside every region.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch


def _autocast_state() -> tuple[bool, torch.dtype] | None:
    if not torch.cuda.is_available():
        return None
    return torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")


class _Recompute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, num_inputs: int, params: list, *tensors: torch.Tensor):  # type: ignore[override]
        inputs = tensors[:num_inputs]
        ctx.fn = fn
        ctx.params = params
        ctx.autocast = _autocast_state()
        ctx.input_requires_grad = [t.requires_grad for t in inputs]
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            outputs = fn(*inputs)
        ctx.single = isinstance(outputs, torch.Tensor)
        return outputs

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):  # type: ignore[override]
        inputs = [t.detach().requires_grad_(needs) for t, needs in zip(ctx.saved_tensors, ctx.input_requires_grad)]
        autocast = ctx.autocast
        with torch.enable_grad(), (
            torch.autocast("cuda", dtype=autocast[1], enabled=autocast[0]) if autocast else contextlib.nullcontext()
        ):
            outputs = ctx.fn(*inputs)
        outputs = (outputs,) if ctx.single else tuple(outputs)
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None and o.requires_grad]
        wrt = [t for t in inputs if t.requires_grad] + [p for p in ctx.params if p.requires_grad]
        got = iter(
            torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True)
            if pairs and wrt else [None] * len(wrt)
        )
        input_grads = [next(got) if t.requires_grad else None for t in inputs]
        param_grads = [next(got) if p.requires_grad else None for p in ctx.params]
        return (None, None, None, *input_grads, *param_grads)


def recompute(fn: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]], inputs: Sequence[torch.Tensor], params: Sequence[torch.Tensor]):
    """``fn(*inputs)``, keeping only ``inputs`` for backward and recomputing ``fn`` there.

    Args:
        fn: the region; tensors in, a tensor or a tuple of tensors out; no communication, no randomness.
        inputs: its tensor inputs (kept for backward).
        params: every parameter ``fn`` may use (their gradients leave through this node).

    Returns:
        What ``fn`` returns.
    """
    params = list(params)
    return _Recompute.apply(fn, len(inputs), params, *inputs, *params)
