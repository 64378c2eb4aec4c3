"""Deliberately broken exchanges, to show that the exactness check can fail."""

from __future__ import annotations

import torch

from domainpar.errors import DomainparError
from domainpar.model.exchange import CompletedExchange, Exchange
from domainpar.verification.cases import FAULTS


class FaultyExchange:
    """Wraps an exchange and breaks it on purpose (every rank must use the same fault).

    ``zero_halo``: halo rows arrive as zeros. ``drop_halo_grad``: halo rows are
    right but their gradients never reach the owners.
    """

    def __init__(self, inner: Exchange, fault: str) -> None:
        if fault not in FAULTS:
            raise DomainparError(f"fault must be one of {', '.join(FAULTS)} (got {fault!r})")
        self.inner = inner
        self.fault = fault
        self.num_halo = inner.num_halo

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        return self.start(x_owned).wait()

    def start(self, x_owned: torch.Tensor) -> CompletedExchange:
        if self.fault == "drop_halo_grad":
            rows = self.inner(x_owned.detach())
            return CompletedExchange(torch.cat([x_owned, rows[x_owned.shape[0] :]]))
        rows = self.inner(x_owned)
        return CompletedExchange(torch.cat([rows[: x_owned.shape[0]], torch.zeros_like(rows[x_owned.shape[0] :])]))

