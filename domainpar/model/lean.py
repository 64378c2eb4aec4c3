"""The MLP tail as one autograd node: fused row kernels on CPU, and a memory-lean mode.

The rest of an MLP after its first Linear,

    a_1 = act(LN_1(z_1)),  z_i = W_i a_{i-1} + b_i,  a_i = act(LN_i(z_i)),  i = 2..L,

saved the usual way keeps, per layer, the LayerNorm input z_i and the
activation output a_i (also the next Linear's input). :func:`lean_tail` keeps
z_1 … z_L only and recomputes LN_i and the activation from z_i in backward (a
row-wise pass, no matrix product), halving the activation memory of every edge MLP.

On CPU :func:`mlp_tail` runs every ``act(LN(z))`` and its backward as
single-pass row kernels (:mod:`domainpar.kernels.rownorm`), ``lean`` choosing
whether a_i is kept or recomputed from z_i. Where the caller asks for it the
tail is :func:`tail_math` compiled by Inductor (:mod:`domainpar.kernels.compile`).
Elsewhere the lean mode is :func:`lean_tail` on PyTorch's own kernels and the
plain mode is ordinary autograd.

Gradients are those of the plain formulation; the recomputed a_i are bitwise
the ones of the forward, because the same kernels run on the same z_i.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from domainpar.kernels import compile as compiler
from domainpar.kernels import rownorm


def activate_(module: nn.Module, y: torch.Tensor) -> torch.Tensor:
    """``module(y)``, in place on ``y`` where the activation has an in-place kernel (no autograd use)."""
    if isinstance(module, nn.ReLU):
        return torch.relu_(y)
    if isinstance(module, nn.SiLU):
        return F.silu(y, inplace=True)
    if isinstance(module, nn.Tanh):
        return torch.tanh_(y)
    if isinstance(module, nn.ELU):
        return F.elu(y, module.alpha, inplace=True)
    if isinstance(module, nn.LeakyReLU):
        return F.leaky_relu(y, module.negative_slope, inplace=True)
    return module(y)


def _normalise(norm: nn.Module, z: torch.Tensor) -> torch.Tensor:
    if isinstance(norm, nn.LayerNorm):
        return F.layer_norm(z, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
    return z.clone() if isinstance(norm, nn.Identity) else norm(z)


def _layer_params(mlp: nn.Module) -> list[torch.Tensor]:
    """Parameters of the tail in a fixed order: per layer i, the norm's (weight, bias) then, for i ≥ 2, Linear_i's."""
    params: list[torch.Tensor] = []
    for i, norm in enumerate(mlp.norms):
        params += list(norm.parameters())
        if i > 0:
            params += [mlp.linears[i].weight, mlp.linears[i].bias]
    return params


class _LeanTail(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, z1: torch.Tensor, mlp: nn.Module, *params: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        zs = [z1]
        a = activate_(mlp.activation, _normalise(mlp.norms[0], z1))
        for linear, norm in zip(mlp.linears[1:], mlp.norms[1:]):
            z = torch.addmm(linear.bias, a, linear.weight.t()) if a.ndim == 2 else F.linear(a, linear.weight, linear.bias)
            del a
            zs.append(z)
            a = activate_(mlp.activation, _normalise(norm, z))
        ctx.mlp = mlp
        ctx.num_params = len(params)
        ctx.save_for_backward(*zs)
        return a

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        mlp = ctx.mlp
        zs = ctx.saved_tensors
        depth = len(zs)
        layer_grads: list[list[torch.Tensor | None]] = [[] for _ in range(depth)]

        def rebuild(i: int) -> tuple[torch.Tensor, torch.Tensor]:
            # a_i = act(LN_i(z_i)) again, with a graph back to z_i and the norm's parameters.
            with torch.enable_grad():
                z = zs[i].detach().requires_grad_(True)
                return z, mlp.activation(_normalise(mlp.norms[i], z))

        grad_a = grad
        z, a = rebuild(depth - 1)
        for i in range(depth - 1, -1, -1):
            norm_params = list(mlp.norms[i].parameters())
            grads = torch.autograd.grad(a, [z, *norm_params], grad_a)
            grad_z, norm_grads = grads[0], list(grads[1:])
            del z, a, grads
            if i == 0:
                layer_grads[0] = norm_grads
                grad_a = grad_z
                break
            linear = mlp.linears[i]
            z, a = rebuild(i - 1)  # the next layer down needs this graph anyway: build it once
            with torch.no_grad():
                grad_weight = grad_z.t().mm(a.detach())
                grad_bias = grad_z.sum(0)
                grad_a = grad_z.mm(linear.weight)
            del grad_z
            layer_grads[i] = norm_grads + [grad_weight, grad_bias]
        flat = [g for layer in layer_grads for g in layer]
        assert len(flat) == ctx.num_params, "lean tail: parameter gradients out of step with _layer_params"
        return (grad_a, None, *flat)


def lean_tail(mlp: nn.Module, z1: torch.Tensor) -> torch.Tensor:
    """The MLP after its first Linear, from that Linear's output ``z1`` (rows, H), saving only the z_i.

    Args:
        mlp: a :class:`~domainpar.model.interaction_network.MLP` (``linears``, ``norms``, ``activation``).
        z1: (rows, H) output of ``mlp.linears[0]`` (computed by the caller, e.g. project-then-gather).

    Returns:
        (rows, H), equal to ``mlp.tail(z1)``.
    """
    return _LeanTail.apply(z1, mlp, *_layer_params(mlp))


# ----------------------------------------------------------------------------- fused CPU tail

def _code(mlp: nn.Module) -> tuple[int, float] | None:
    """The row kernel's activation code and parameter, or None where PyTorch's own kernels are faster.

    Only the piecewise-linear activations: numba has no vectorised exp/erf here, so for SiLU, GELU, ELU
    and tanh PyTorch's vectorised kernels beat a fused scalar loop.
    """
    act = mlp.activation
    if type(act) is nn.ReLU:
        return rownorm.ACTIVATION_CODES["relu"], 0.0
    if type(act) is nn.LeakyReLU:
        return rownorm.ACTIVATION_CODES["leaky_relu"], float(act.negative_slope)
    return None


def _norm_arrays(norm: nn.Module) -> tuple:
    if isinstance(norm, nn.LayerNorm) and norm.elementwise_affine and norm.bias is not None:
        return norm.weight.detach().numpy(), norm.bias.detach().numpy(), float(norm.eps)
    return None, None, 0.0


def fusable(mlp: nn.Module, z: torch.Tensor, compiled: bool = False) -> bool:
    """Whether :func:`mlp_tail` runs ``mlp``'s tail on ``z`` as the fused CPU row kernels (then
    :func:`fused_tail_forward` and :func:`fused_tail_backward` compute it without autograd)."""
    if compiled and tail_static(mlp) is not None and z.ndim == 2 and z.shape[0] >= 2:
        return False  # mlp_tail runs the compiled tail
    if type(z) is not torch.Tensor or z.device.type != "cpu" or z.dtype not in (torch.float32, torch.float64) or z.ndim != 2:
        return False
    if _code(mlp) is None or torch.is_autocast_enabled("cpu"):
        return False
    for norm in mlp.norms:
        if isinstance(norm, nn.LayerNorm):
            if not (norm.elementwise_affine and norm.bias is not None and norm.weight.dtype == z.dtype and len(norm.normalized_shape) == 1):
                return False
        elif not isinstance(norm, nn.Identity):
            return False
    return all(linear.weight.dtype == z.dtype for linear in mlp.linears)


def _row_forward(mlp: nn.Module, i: int, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    code, param = _code(mlp)
    gamma, beta, eps = _norm_arrays(mlp.norms[i])
    out = torch.empty_like(z) if out is None else out
    rownorm.ln_act_forward(z.detach().numpy(), gamma, beta, eps, code, param, out.numpy())
    return out


def fused_tail_forward(
    mlp: nn.Module, z1: torch.Tensor, keep: bool, last: bool = True, out: torch.Tensor | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor | None]:
    """The tail on ``z1`` by the row kernels, without autograd (``fusable(mlp, z1)`` must hold).

    Args:
        mlp: the MLP.
        z1: (rows, H) contiguous output of its first Linear.
        keep: keep a_1 … a_{L-1} (the next Linears' inputs) for :func:`fused_tail_backward` (else it recomputes them).
        last: compute the output a_L (False: only what backward needs, z_1 … z_L).
        out: (rows, H) contiguous tensor to write a_L into (None: a new one).

    Returns:
        (z_1 … z_L, the kept a_i, a_L or None).
    """
    zs, kept = [z1], []
    depth = len(mlp.linears)
    a = _row_forward(mlp, 0, z1, out if depth == 1 else None) if depth > 1 or last else None
    for i in range(1, depth):
        linear = mlp.linears[i]
        z = torch.addmm(linear.bias, a, linear.weight.t())
        if keep:
            kept.append(a)
        del a
        zs.append(z)
        a = _row_forward(mlp, i, z, out if i == depth - 1 else None) if i < depth - 1 or last else None
    return zs, kept, a


def fused_tail_backward(
    mlp: nn.Module, zs: list[torch.Tensor], kept: list[torch.Tensor], grad: torch.Tensor,
) -> tuple[torch.Tensor, list[torch.Tensor | None], torch.Tensor]:
    """Backward of :func:`fused_tail_forward` by the row kernels, without autograd.

    Args:
        mlp: the MLP.
        zs: (rows, H) z_1 … z_L of the forward.
        kept: a_1 … a_{L-1} of the forward, or empty (recomputed from the z_i).
        grad: (rows, H) gradient of a_L.

    Returns:
        ((rows, H) gradient of z_1, the tail's parameter gradients in :func:`_layer_params` order,
        (H,) column sums of the gradient of z_1: the first Linear's bias gradient, summed in float64).
    """
    depth = len(zs)
    code, param = _code(mlp)
    grad_a = grad.contiguous()
    layer_grads: list[list[torch.Tensor | None]] = [[] for _ in range(depth)]
    for i in range(depth - 1, -1, -1):
        norm = mlp.norms[i]
        gamma, beta, eps = _norm_arrays(norm)
        z = zs[i]
        grad_z = torch.empty_like(z)
        g_gamma, g_beta, g_bias = rownorm.ln_act_backward(
            z.numpy(), gamma, beta, eps, code, param, grad_a.numpy(), grad_z.numpy()
        )
        norm_grads = [] if gamma is None else [torch.from_numpy(g_gamma), torch.from_numpy(g_beta)]
        if i == 0:
            layer_grads[0] = norm_grads
            grad_a = grad_z
            break
        linear = mlp.linears[i]
        a_prev = kept[i - 1] if kept else _row_forward(mlp, i - 1, zs[i - 1])
        grad_weight = grad_z.t().mm(a_prev)
        del a_prev
        grad_a = grad_z.mm(linear.weight)
        del grad_z
        layer_grads[i] = norm_grads + [grad_weight, torch.from_numpy(g_bias)]
    flat = [g for layer in layer_grads for g in layer]
    return grad_a, flat, torch.from_numpy(g_bias)


class _FusedTail(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z1: torch.Tensor, mlp: nn.Module, lean: bool, *params: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        zs, kept, a = fused_tail_forward(mlp, z1.contiguous(), keep=not lean)
        ctx.mlp, ctx.depth, ctx.num_params = mlp, len(zs), len(params)
        ctx.save_for_backward(*zs, *kept)
        return a

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        saved = ctx.saved_tensors
        grad_z1, flat, _ = fused_tail_backward(ctx.mlp, list(saved[: ctx.depth]), list(saved[ctx.depth :]), grad)
        assert len(flat) == ctx.num_params, "fused tail: parameter gradients out of step with _layer_params"
        return (grad_z1, None, None, *flat)


# ----------------------------------------------------------------------------- compiled tail

#: Activation module type → (static name, attribute holding its parameter or None).
_COMPILABLE = {nn.ReLU: ("relu", None), nn.SiLU: ("silu", None), nn.Tanh: ("tanh", None), nn.ELU: ("elu", "alpha"),
               nn.LeakyReLU: ("leaky_relu", "negative_slope"), nn.GELU: ("gelu", "approximate")}


def tail_static(mlp: nn.Module) -> tuple | None:
    """What :func:`tail_math` specialises on for ``mlp`` (activation, its parameter, norms, eps), or None if it cannot."""
    entry = _COMPILABLE.get(type(mlp.activation))
    if entry is None:
        return None
    name, attribute = entry
    param = getattr(mlp.activation, attribute) if attribute else None
    norms = []
    for norm in mlp.norms:
        if isinstance(norm, nn.LayerNorm):
            if not (norm.elementwise_affine and norm.bias is not None and len(norm.normalized_shape) == 1):
                return None
            norms.append(float(norm.eps))
        elif isinstance(norm, nn.Identity):
            norms.append(None)
        else:
            return None
    return name, param, tuple(norms)


def _activate(name: str, param, y: torch.Tensor) -> torch.Tensor:
    if name == "relu":
        return F.relu(y)
    if name == "silu":
        return F.silu(y)
    if name == "tanh":
        return torch.tanh(y)
    if name == "elu":
        return F.elu(y, param)
    if name == "leaky_relu":
        return F.leaky_relu(y, param)
    return F.gelu(y, approximate=param)


def tail_math(static: tuple, z: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
    """``mlp.tail(z)`` in plain torch ops from ``tail_static(mlp)`` and ``_layer_params(mlp)`` (the compiled form)."""
    name, param, norms = static
    k = 0
    a = z
    for i, eps in enumerate(norms):
        if i > 0:
            z = F.linear(a, params[k + (2 if eps is not None else 0)], params[k + (3 if eps is not None else 1)])
        if eps is not None:
            y = F.layer_norm(z, (z.shape[-1],), params[k], params[k + 1], eps)
            k += 2
        else:
            y = z
        if i > 0:
            k += 2
        a = _activate(name, param, y)
    return a


def compiled_tail(mlp: nn.Module, z1: torch.Tensor) -> torch.Tensor | None:
    """``mlp.tail(z1)`` through Inductor (differentiable; fused kernels), or None where ``mlp`` cannot be compiled."""
    static = tail_static(mlp)
    if static is None or z1.ndim != 2 or z1.shape[0] < 2:
        return None
    compiler.rows_dynamic(z1)
    return compiler.compiled(tail_math, static)(z1, *_layer_params(mlp))


def mlp_tail(mlp: nn.Module, z1: torch.Tensor, lean: bool, compiled: bool = False) -> torch.Tensor:
    """The MLP after its first Linear, from that Linear's output ``z1`` (rows, H), as one autograd node.

    Args:
        mlp: a :class:`~domainpar.model.interaction_network.MLP`.
        z1: (rows, H) output of ``mlp.linears[0]``.
        lean: keep only the z_i for backward (recompute LN and activation there) instead of z_i and a_i.
        compiled: run the Inductor-compiled tail (the caller decided, :func:`domainpar.kernels.compile.use_compile`);
            it chooses what to keep itself.

    Returns:
        (rows, H), equal to ``mlp.tail(z1)`` (bitwise between the two modes; to rounding against PyTorch's kernels).
    """
    if compiled:
        out = compiled_tail(mlp, z1)
        if out is not None:
            return out
    if fusable(mlp, z1):
        return _FusedTail.apply(z1, mlp, lean, *_layer_params(mlp))
    return lean_tail(mlp, z1) if lean else mlp.tail(z1)
