"""``torch.compile`` for row-wise tensor functions: when it is used, and one compiled callable per static variant.

The model's row-wise pieces (LayerNorm + activation chains, the gathers that
feed them) are memory-bound: eager PyTorch runs them as several kernels, each
reading and writing whole tensors. Inductor fuses each chain into one kernel
per direction.

* :func:`use_compile`: the setting (``"auto"``, ``"on"``, ``"off"``) for a
  given tensor. ``auto`` compiles CUDA tensors when Triton is importable;
  everything else runs eagerly. ``on`` compiles on any device (the CPU
  backend generates C++: how the tests check the compiled math without a
  GPU). Fake, meta and traced/exported tensors never compile.
* :func:`compiled`: ``fn(static, *tensors)`` compiled once per ``static``:
  each variant gets its own code object, so dynamo's per-code cache never
  evicts one variant for another.

Compiled and eager results agree to rounding, not bitwise (fused
reductions associate differently); both are deterministic run to run.
"""

from __future__ import annotations

import functools
import shutil
import sys
import types
from typing import Callable, Hashable

import torch

#: Accepted values of a compile setting.
SETTINGS = ("auto", "on", "off")


@functools.lru_cache(maxsize=None)
def _triton_available() -> bool:
    try:
        # Private torch module, absent from some builds: probed when asked.
        from torch.utils._triton import has_triton
    except ImportError:  # pragma: no cover - very old torch
        return False
    return bool(has_triton())


@functools.lru_cache(maxsize=None)
def _cxx_available() -> bool:
    return any(shutil.which(name) for name in ("g++", "c++", "clang++"))


def available(device_type: str) -> bool:
    """Whether Inductor can generate code for tensors on ``device_type`` here."""
    if sys.platform == "win32":  # pragma: no cover - Inductor's Windows support is partial
        return False
    if device_type == "cuda":
        return _triton_available()
    if device_type == "cpu":
        return _cxx_available()
    return False


def _tracing() -> bool:
    if torch.jit.is_tracing() or torch.jit.is_scripting():
        return True
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and (compiler.is_compiling() or getattr(compiler, "is_exporting", lambda: False)()):
        return True
    onnx = getattr(torch, "onnx", None)
    return bool(onnx is not None and getattr(onnx, "is_in_onnx_export", lambda: False)())


def use_compile(setting: str, tensor: torch.Tensor) -> bool:
    """Whether to run the compiled variant for ``tensor`` under ``setting`` (see the module docstring)."""
    if setting == "off" or type(tensor) is not torch.Tensor or tensor.is_meta or _tracing():
        return False
    if setting == "on":
        return True
    return tensor.device.type == "cuda" and available("cuda")


_CACHE: dict[tuple[str, Hashable], Callable] = {}


def _bind(fn: Callable, static: Hashable, serial: int) -> Callable:
    def variant(*tensors):
        return fn(static, *tensors)

    # A fresh code object per variant: dynamo caches compiled frames per code object, with a small limit.
    code = variant.__code__.replace(co_name=f"{fn.__name__}_variant_{serial}")
    return types.FunctionType(code, variant.__globals__, code.co_name, None, variant.__closure__)


def compiled(fn: Callable, static: Hashable) -> Callable:
    """``lambda *tensors: fn(static, *tensors)``, compiled with Inductor (built on first use, then cached).

    Args:
        fn: a function of ``(static, *tensors)`` written with ordinary torch ops.
        static: hashable values the compiled code may specialise on (never tensors).
    """
    key = (f"{fn.__module__}.{fn.__qualname__}", static)
    found = _CACHE.get(key)
    if found is None:
        found = torch.compile(_bind(fn, static, len(_CACHE)))
        _CACHE[key] = found
    return found


def rows_dynamic(*tensors: torch.Tensor | None) -> None:
    """Mark the row dimension of each tensor dynamic (chunks and graphs of any length share a kernel)."""
    for tensor in tensors:
        if tensor is not None and tensor.ndim >= 1 and tensor.shape[0] > 1:
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
