"""Row-wise LayerNorm + activation, forward and backward in one pass over the rows (numba, CPU).

An MLP layer of the Interaction Network is ``a = act(LN(z))`` on (rows, H)
tensors with H ≈ 64: on a CPU its cost is memory traffic, and PyTorch runs it
as several kernels, each reading and writing whole tensors. Here each
direction is one pass: a row is read once, its outputs written once.

* :func:`ln_act_forward`: ``a = act(LN(z))`` (LN optional).
* :func:`ln_act_backward`: from ``z`` and ``grad_a``: ``grad_z``, the
  gradients of the norm's weight and bias, and the column sums of ``grad_z``
  (the gradient of the bias of the Linear that produced ``z``).
* :func:`layer_norm_rows`: ``LN(z + shift)`` in place, serial and ``nogil``,
  for inference that shares its chunks over its own threads.

Column sums are reduced over fixed blocks of rows, each block sequentially
(in float64), then the blocks in order: the result does not depend on the
thread count. Row statistics are computed in the data type (as PyTorch
does), with vectorised (reassociated) sums. Activations by code:
:data:`ACTIVATION_CODES`.

Every (kernel, activation) pair is a kernel of its own, made from one
template with the activation bound as a global (:func:`_kernel_for`), so that
numba's on-disk cache serves it to every later process: an activation passed
as an argument puts its dispatcher's type, keyed by the object's identity,
into the cache key, which then never matches in another process
(``tests/kernels/test_numba_cache.py``).
"""

from __future__ import annotations

import math
import types

import numba
import numpy as np
from numba import njit, prange

from domainpar.kernels.threads import follow_torch_threads

#: Activation name → kernel code.
ACTIVATION_CODES = {"relu": 0, "silu": 1, "tanh": 2, "gelu": 3, "elu": 4, "leaky_relu": 5}
#: Rows per block of the column sums (fixed, so sums do not depend on the thread count).
BLOCK_ROWS = 2048

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
#: Floating-point liberties the kernels take: reassociated sums (vectorised row reductions; fixed per
#: build, so results stay bitwise reproducible run to run) but no NaN/inf assumptions.
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}


# Activations and their derivatives, bound into one kernel per activation (see _kernel_for): numba inlines them,
# so the row loops vectorise.
# "not (y <= 0)" rather than "y > 0": a NaN passes through, as in torch.

@njit(inline="always", cache=True)
def _relu(y, p):  # pragma: no cover - compiled
    return y if not (y <= 0) else y * 0


@njit(inline="always", cache=True)
def _relu_grad(y, p):  # pragma: no cover - compiled
    return 1 if not (y <= 0) else 0


@njit(inline="always", cache=True)
def _silu(y, p):  # pragma: no cover - compiled
    return y / (1 + math.exp(-y))


@njit(inline="always", cache=True)
def _silu_grad(y, p):  # pragma: no cover - compiled
    s = 1 / (1 + math.exp(-y))
    return s * (1 + y * (1 - s))


@njit(inline="always", cache=True)
def _tanh(y, p):  # pragma: no cover - compiled
    return math.tanh(y)


@njit(inline="always", cache=True)
def _tanh_grad(y, p):  # pragma: no cover - compiled
    t = math.tanh(y)
    return 1 - t * t


@njit(inline="always", cache=True)
def _gelu(y, p):  # pragma: no cover - compiled
    return 0.5 * y * (1 + math.erf(y * _INV_SQRT2))


@njit(inline="always", cache=True)
def _gelu_grad(y, p):  # pragma: no cover - compiled
    return 0.5 * (1 + math.erf(y * _INV_SQRT2)) + y * _INV_SQRT_2PI * math.exp(-0.5 * y * y)


@njit(inline="always", cache=True)
def _elu(y, p):  # pragma: no cover - compiled
    return y if not (y <= 0) else p * (math.exp(y) - 1)


@njit(inline="always", cache=True)
def _elu_grad(y, p):  # pragma: no cover - compiled
    return 1 if not (y <= 0) else p * math.exp(y)


@njit(inline="always", cache=True)
def _leaky(y, p):  # pragma: no cover - compiled
    return y if not (y <= 0) else p * y


@njit(inline="always", cache=True)
def _leaky_grad(y, p):  # pragma: no cover - compiled
    return 1 if not (y <= 0) else p


#: Kernel code → (activation, derivative).
_FUNCTIONS = {0: (_relu, _relu_grad), 1: (_silu, _silu_grad), 2: (_tanh, _tanh_grad), 3: (_gelu, _gelu_grad),
              4: (_elu, _elu_grad), 5: (_leaky, _leaky_grad)}


@njit(inline="always", cache=True)
def _stats(z, r, width, eps, zero):  # pragma: no cover - compiled
    mean = zero
    for j in range(width):
        mean += z[r, j]
    mean /= width
    var = zero
    for j in range(width):
        d = z[r, j] - mean
        var += d * d
    var /= width
    return mean, 1 / np.sqrt(var + eps)


def _forward(z, gamma, beta, eps, norm, param, zero, out):  # pragma: no cover - a template: _kernel_for binds act
    rows, width = z.shape
    for r in prange(rows):
        if norm:
            mean, rstd = _stats(z, r, width, eps, zero)
            for j in range(width):
                out[r, j] = act((z[r, j] - mean) * rstd * gamma[j] + beta[j], param)  # noqa: F821 (bound by _kernel_for)
        else:
            for j in range(width):
                out[r, j] = act(z[r, j], param)  # noqa: F821


def _backward(z, gamma, beta, eps, norm, param, zero, grad_a, grad_z, part_gamma, part_beta, part_bias, block):  # pragma: no cover - a template
    rows, width = z.shape
    blocks = part_bias.shape[0]
    for b in prange(blocks):
        g = np.empty(width, dtype=z.dtype)
        xhat = np.empty(width, dtype=z.dtype)
        acc_gamma = np.zeros(width, dtype=np.float64)
        acc_beta = np.zeros(width, dtype=np.float64)
        acc_bias = np.zeros(width, dtype=np.float64)
        for r in range(b * block, min(rows, (b + 1) * block)):
            if norm:
                mean, rstd = _stats(z, r, width, eps, zero)
                for j in range(width):
                    xh = (z[r, j] - mean) * rstd
                    gy = grad_a[r, j] * act_grad(xh * gamma[j] + beta[j], param)  # noqa: F821
                    acc_gamma[j] += gy * xh
                    acc_beta[j] += gy
                    g[j] = gy * gamma[j]
                    xhat[j] = xh
                s1 = zero
                s2 = zero
                for j in range(width):
                    s1 += g[j]
                    s2 += g[j] * xhat[j]
                s1 /= width
                s2 /= width
                for j in range(width):
                    v = rstd * (g[j] - s1 - xhat[j] * s2)
                    grad_z[r, j] = v
                    acc_bias[j] += v
            else:
                for j in range(width):
                    v = grad_a[r, j] * act_grad(z[r, j], param)  # noqa: F821
                    grad_z[r, j] = v
                    acc_bias[j] += v
        for j in range(width):
            part_gamma[b, j] = acc_gamma[j]
            part_beta[b, j] = acc_beta[j]
            part_bias[b, j] = acc_bias[j]


def _kernel_for(template, activation: str, binding: str, function) -> numba.core.registry.CPUDispatcher:
    """``template`` compiled with ``function`` bound to the global name ``binding``, as a kernel of its own.

    The copy shares the template's bytecode and source file but has its own name (numba's cache files are named
    by the qualified name, and hold one index per name) and its own globals, in which ``binding`` is
    ``function``: numba resolves it at compile time and inlines it, and the kernel's signature holds only
    arrays and scalars, so its cache key is the same in every process.
    """
    name = f"{template.__name__}_{activation}"
    code = template.__code__.replace(co_name=name, co_qualname=name)
    scope = {**template.__globals__, binding: function}
    copy = types.FunctionType(code, scope, name, template.__defaults__, template.__closure__)
    copy.__qualname__ = name
    copy.__module__ = template.__module__
    copy.__doc__ = template.__doc__
    return njit(parallel=True, cache=True, fastmath=_FASTMATH)(copy)


#: Kernel code → forward kernel with that activation; code → backward kernel with its derivative.
_FORWARD = {code: _kernel_for(_forward, name, "act", _FUNCTIONS[code][0]) for name, code in ACTIVATION_CODES.items()}
_BACKWARD = {code: _kernel_for(_backward, name, "act_grad", _FUNCTIONS[code][1]) for name, code in ACTIVATION_CODES.items()}


@njit(cache=True)
def _sum_blocks(part, out):  # pragma: no cover - compiled
    for b in range(part.shape[0]):
        for j in range(part.shape[1]):
            out[j] += part[b, j]


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _layer_norm_rows(z, shift, gamma, beta, eps, zero, inv_width):  # pragma: no cover - compiled
    # Statistics in the data type throughout: an int (the width, a literal 1) would promote float32 to float64, and
    # the loops would run at half the vector width.
    rows, width = z.shape
    one = inv_width / inv_width
    for r in range(rows):
        mean = zero
        for j in range(width):
            v = z[r, j] + shift[j]
            z[r, j] = v
            mean += v
        mean *= inv_width
        var = zero
        for j in range(width):
            d = z[r, j] - mean
            var += d * d
        rstd = one / np.sqrt(var * inv_width + eps)
        for j in range(width):
            z[r, j] = (z[r, j] - mean) * rstd * gamma[j] + beta[j]


def layer_norm_rows(z: np.ndarray, shift: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> None:
    """``z = LN(z + shift)`` row by row, in place, on the calling thread (the GIL released).

    ``shift`` is the bias of the Linear before the norm (``torch.mm`` and this spare ``torch.addmm``'s pass for the
    bias). The statistics are the data type's, with reassociated (vectorised) sums, so values differ from torch's by
    float rounding only.

    Args:
        z: (rows, H) C-contiguous float array, overwritten.
        shift, gamma, beta: (H,) the bias added first, the norm's weight and bias, of ``z``'s type.
        eps: the norm's epsilon.
    """
    _layer_norm_rows(z, shift, gamma, beta, z.dtype.type(eps), z.dtype.type(0), z.dtype.type(1.0 / z.shape[1]))


def ln_act_forward(z: np.ndarray, gamma: np.ndarray | None, beta: np.ndarray | None, eps: float, code: int, param: float,
                   out: np.ndarray) -> np.ndarray:
    """``out = act(LN(z))`` row by row into ``out`` (same shape, not ``z``); ``gamma`` None: no LayerNorm, ``out = act(z)``."""
    norm = gamma is not None
    width = z.shape[1]
    gamma = gamma if norm else np.ones(width, z.dtype)
    beta = beta if norm else np.zeros(width, z.dtype)
    follow_torch_threads()
    zero = z.dtype.type(0)
    _FORWARD[code](z, gamma, beta, z.dtype.type(eps), norm, z.dtype.type(param), zero, out)
    return out


def ln_act_backward(z: np.ndarray, gamma: np.ndarray | None, beta: np.ndarray | None, eps: float, code: int, param: float,
                    grad_a: np.ndarray, grad_z: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray]:
    """Backward of :func:`ln_act_forward`: fills ``grad_z`` and returns (grad gamma, grad beta, column sums of grad_z)."""
    norm = gamma is not None
    rows, width = z.shape
    gamma_ = gamma if norm else np.ones(width, z.dtype)
    beta_ = beta if norm else np.zeros(width, z.dtype)
    blocks = max(1, -(-rows // BLOCK_ROWS))
    # Partial sums in float64 whatever the data type: a long column sum in float32 would lose digits.
    part_gamma = np.zeros((blocks, width), np.float64)
    part_beta = np.zeros((blocks, width), np.float64)
    part_bias = np.zeros((blocks, width), np.float64)
    follow_torch_threads()
    zero = z.dtype.type(0)
    _BACKWARD[code](z, gamma_, beta_, z.dtype.type(eps), norm, z.dtype.type(param), zero, grad_a, grad_z,
              part_gamma, part_beta, part_bias, BLOCK_ROWS)
    sums = [np.zeros(width, np.float64) for _ in range(3)]
    for part, total in zip((part_gamma, part_beta, part_bias), sums):
        _sum_blocks(part, total)
    sums = [total.astype(z.dtype) for total in sums]
    return (sums[0] if norm else None), (sums[1] if norm else None), sums[2]
