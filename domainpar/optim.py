"""torch's AdamW, without importing ``torch._dynamo`` in a process that never compiles.

Four methods of ``torch.optim.Optimizer`` (``add_param_group``, ``zero_grad``, ``state_dict``,
``load_state_dict``) and every ``step`` sit behind wrappers that import ``torch._dynamo`` on their first call,
which costs seconds of CPU in every rank although nothing in it runs: those wrappers only matter inside a frame
that ``torch.compile`` traces, and no optimizer method of ours ever runs in one.

:class:`AdamW` is ``torch.optim.AdamW`` with those five methods called unwrapped: the same arithmetic bit for bit,
the same ``state_dict``; step hooks and schedulers work as before.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` (same arguments, results and state) that leaves ``torch._dynamo`` unimported.

    Each method calls torch's own function from under its decorators (``inspect.unwrap``: they keep what they
    wrap as ``__wrapped__``).
    """

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        inspect.unwrap(torch.optim.Optimizer.add_param_group)(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        inspect.unwrap(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return inspect.unwrap(torch.optim.Optimizer.state_dict)(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        inspect.unwrap(torch.optim.Optimizer.load_state_dict)(self, state_dict)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        # What torch's wrapper does around its step, less the graph breaks: gradients off unless the optimizer
        # is differentiable (ours never is), restored afterwards. (Step hooks still run: the constructor wraps
        # this method with them, as it wraps torch's.)
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return inspect.unwrap(torch.optim.AdamW.step)(self, closure)


__all__ = ["AdamW"]
