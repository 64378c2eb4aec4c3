"""A part's halo without the other ranks, for measuring one rank alone.

A part of a P-way plan can be run by itself when its halo rows come from a
stand-in: a fixed tensor of the right shape appended to the owned rows. The
values do not change the memory or the work; with ``requires_grad`` the
backward still computes the halo gradients a real exchange would send back.
This is what lets a 2-core machine measure the per-rank cost of 8 parts.
"""

from __future__ import annotations

import torch

from domainpar.model.exchange import IdentityExchange, PendingExchange


class StandInExchange:
    """Fixed halo rows appended to the owned rows (the :class:`~domainpar.model.exchange.Exchange` protocol).

    Args:
        num_halo: halo rows of the part.
        hidden: row width H.
        dtype: row dtype.
        device: where the rows live (``"meta"`` for shape-only accounting).
        requires_grad: make the halo a leaf that requires grad (the backward then
            computes the gradients a real exchange would return to the owners).
        random: fill the rows with seeded normal values (CPU only); False: zeros.

    Created inside a ``FakeTensorMode`` the rows are fake tensors too.
    """

    def __init__(
        self, num_halo: int, hidden: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
        requires_grad: bool = True, random: bool = True,
    ) -> None:
        self.num_halo = num_halo
        if random and torch.device(device).type == "cpu":
            generator = torch.Generator().manual_seed(num_halo)
            halo = torch.randn(num_halo, hidden, generator=generator, dtype=dtype)
        else:
            halo = torch.zeros(num_halo, hidden, dtype=dtype, device=device)
        self.halo = halo.requires_grad_(requires_grad)

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        """(n_owned, H) → (n_owned + n_halo, H)."""
        return torch.cat([x_owned, self.halo.to(x_owned.dtype)]) if self.num_halo else x_owned

    def start(self, x_owned: torch.Tensor) -> PendingExchange:
        """The stand-in is synchronous: an exchange that is already complete."""
        return IdentityExchange().start(self(x_owned))
