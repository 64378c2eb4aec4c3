"""The exchange interface the model calls to complete its halo.

A model never talks to torch.distributed: it hands its owned node rows to an
:class:`Exchange` and gets back owned + halo rows. :class:`IdentityExchange`
is the single-process case (no halo); ``domainpar.comm.halo.HaloExchange`` is
the distributed one. Both must be differentiable: the backward of the halo
rows flows to the ranks that own them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class PendingExchange(Protocol):
    """An exchange in flight, returned by :meth:`Exchange.start`."""

    def wait(self) -> torch.Tensor:
        """Block until the halo rows arrived.

        Returns:
            (n_owned + n_halo, H) owned rows followed by halo rows, differentiable
            with respect to the ``x_owned`` given to ``start``.
        """
        ...


@runtime_checkable
class Exchange(Protocol):
    """Completes a part's node rows with its halo rows (one call per message-passing step)."""

    num_halo: int
    """Halo rows appended after the owned rows."""

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        """(n_owned, H) → (n_owned + n_halo, H), synchronously."""
        ...

    def start(self, x_owned: torch.Tensor) -> PendingExchange:
        """Start the exchange of (n_owned, H) rows; ``.wait()`` gives (n_owned + n_halo, H)."""
        ...


class CompletedExchange:
    """A pending exchange that is already complete."""

    def __init__(self, value: torch.Tensor) -> None:
        self._value = value

    def wait(self) -> torch.Tensor:
        return self._value


class IdentityExchange:
    """The single-process exchange: there is no halo, owned rows come back unchanged."""

    num_halo = 0

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        return x_owned

    def start(self, x_owned: torch.Tensor) -> PendingExchange:
        return CompletedExchange(x_owned)

    def __repr__(self) -> str:
        return "IdentityExchange()"
