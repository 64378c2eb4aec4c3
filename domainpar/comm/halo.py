"""Halo exchange between the ranks of a domain group, as an autograd Function.

Forward: every rank sends the owned rows its neighbours store as halo (``send_ids``, already in the receiver's
halo order) and receives its own halo rows straight into the output tensor. Backward: the gradient of every halo
row travels back to the row's owner, which adds it into the owned row's gradient (``index_add``).

Only point-to-point messages between neighbours are posted (``batch_isend_irecv``); receive sizes come from the
plan, so there is no per-step size handshake. Part ``p`` of the plan is rank ``p`` of ``group``. The same code
runs on gloo (CPU tensors) and NCCL (CUDA tensors). :meth:`HaloExchange.start` posts the messages and returns at
once, so the model can compute interior edges before :meth:`PendingHalo.wait`.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from domainpar.errors import DomainparError
from domainpar.partition.plan import PartPlan

#: Message tags: forward rows and backward gradients never share a tag (gloo matches on it; NCCL ignores it).
_TAG_FORWARD = 11
_TAG_BACKWARD = 12


class PendingHalo:
    """An exchange in flight; :meth:`wait` returns (n_owned + n_halo, H) rows with autograd attached."""

    def __init__(self, exchange: "HaloExchange", x_owned: torch.Tensor, output: torch.Tensor, works: list) -> None:
        self._exchange = exchange
        self._x_owned = x_owned
        self.output = output
        self._works = works
        self._done = False

    def wait(self) -> torch.Tensor:
        if self._done:
            raise RuntimeError("PendingHalo.wait() called twice on the same exchange")
        for work in self._works:
            work.wait()
        self._done = True
        self._exchange._in_flight = False
        return _HaloFunction.apply(self._x_owned, self)


class _HaloFunction(torch.autograd.Function):
    """Identity on owned rows + received halo rows; backward returns halo gradients to their owners."""

    @staticmethod
    def forward(ctx, x_owned: torch.Tensor, pending: PendingHalo) -> torch.Tensor:  # type: ignore[override]
        ctx.exchange = pending._exchange
        output = pending.output
        pending.output = None  # the handle must not keep the activation alive
        return output

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):  # type: ignore[override]
        return ctx.exchange._backward(grad_output), None


class HaloExchange:
    """Neighbour-only halo exchange of one part of a domain group.

    Args:
        part: this rank's :class:`PartPlan`; ``part.part`` must be this rank's index in ``group`` and
            ``part.num_parts`` the group size.
        group: the domain group (None: the default group).
        device: device of the plan's index tensors and the size check (default: the current CUDA device for an
            NCCL group, else CPU).
        validate: check once, with one small all-reduce, that every rank's send sizes match its neighbours'
            receive sizes.
    """

    def __init__(
        self,
        part: PartPlan,
        group: dist.ProcessGroup | None = None,
        device: torch.device | str | None = None,
        *,
        validate: bool = True,
    ) -> None:
        if not dist.is_initialized():
            raise DomainparError("HaloExchange needs an initialised process group (got none); use IdentityExchange for one process")
        group_size = dist.get_world_size(group)
        group_rank = dist.get_rank(group)
        if group_size != part.num_parts:
            raise DomainparError(f"plan has {part.num_parts} parts, so the domain group must have {part.num_parts} ranks (got {group_size})")
        if group_rank != part.part:
            raise DomainparError(f"rank {group_rank} of the domain group must be given part {group_rank} (got part {part.part})")
        self.part = part
        self.group = group
        if device is None:
            # NCCL collectives need CUDA tensors; gloo takes CPU ones.
            nccl = "nccl" in str(dist.get_backend(group))
            device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        self.device = torch.device(device)
        self.num_owned = part.num_owned
        self.num_halo = part.num_halo
        # A copy: plan arrays are read-only and small next to the rows they index.
        self._send_ids = torch.tensor(part.send_ids, dtype=torch.int64, device=self.device)
        self._send_ids_by_device = {self._send_ids.device: self._send_ids}
        self._sends = [
            (self._peer(int(q)), part.send_slice(i)) for i, q in enumerate(part.send_parts)
        ]
        self._recvs = [
            (self._peer(int(q)), part.recv_slice(i)) for i, q in enumerate(part.recv_parts)
        ]
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._in_flight = False
        self.num_exchanges = 0
        """Forward exchanges done (for halo traffic accounting)."""
        self.bytes_sent = 0
        """Bytes this rank sent in its forward exchanges so far, at the width and dtype of each (the backward sends as
        many back)."""
        if validate:
            self._validate_sizes()

    def _peer(self, group_rank: int) -> int:
        if self.group is None or self.group is dist.group.WORLD:
            return group_rank
        return dist.get_global_rank(self.group, group_rank)

    @property
    def num_send_rows(self) -> int:
        """Rows sent per forward exchange (the same number of gradient rows come back)."""
        return int(self._send_ids.shape[0])

    def bytes_per_exchange(self, hidden: int, dtype: torch.dtype = torch.float32) -> int:
        """Bytes this rank sends in one forward exchange of width ``hidden`` (the backward sends as many)."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        return self.num_send_rows * hidden * itemsize

    def _validate_sizes(self) -> None:
        num_parts = self.part.num_parts
        sizes = torch.zeros(2, num_parts, num_parts, dtype=torch.int64, device=self.device)
        p = self.part.part
        for i, q in enumerate(self.part.send_parts):
            sl = self.part.send_slice(i)
            sizes[0, p, int(q)] = sl.stop - sl.start
        for i, q in enumerate(self.part.recv_parts):
            sl = self.part.recv_slice(i)
            sizes[1, int(q), p] = sl.stop - sl.start
        dist.all_reduce(sizes, group=self.group)
        mismatch = (sizes[0] != sizes[1]).nonzero()
        if mismatch.numel():
            src, dst = (int(v) for v in mismatch[0])
            raise DomainparError(
                f"halo plan mismatch: part {src} sends {int(sizes[0, src, dst])} rows to part {dst}, "
                f"which expects {int(sizes[1, src, dst])}; all ranks must use parts of one partition plan"
            )

    def _send_ids_on(self, device: torch.device) -> torch.Tensor:
        ids = self._send_ids_by_device.get(device)
        if ids is None:
            ids = self._send_ids_by_device[device] = self._send_ids.to(device)
        return ids

    def _buffer(self, kind: str, hidden: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (kind, hidden, dtype, device)
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = torch.empty(self.num_send_rows, hidden, dtype=dtype, device=device)
            self._buffers[key] = buffer
        return buffer

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        """Synchronous exchange: (n_owned, H) → (n_owned + n_halo, H)."""
        return self.start(x_owned).wait()

    def start(self, x_owned: torch.Tensor) -> PendingHalo:
        """Post the sends and receives of (n_owned, H) rows and return the handle."""
        if x_owned.ndim != 2 or x_owned.shape[0] != self.num_owned:
            raise DomainparError(
                f"x_owned must have shape ({self.num_owned}, H) for part {self.part.part} (got {tuple(x_owned.shape)})"
            )
        if self._in_flight:
            raise RuntimeError("HaloExchange.start() called while a previous exchange is still in flight")
        hidden, dtype = int(x_owned.shape[1]), x_owned.dtype
        rows = x_owned.detach()
        output = torch.empty(self.num_owned + self.num_halo, hidden, dtype=dtype, device=rows.device)
        output[: self.num_owned].copy_(rows)
        ops = []
        if self._sends:
            send_buffer = self._buffer("send", hidden, dtype, rows.device)
            torch.index_select(rows, 0, self._send_ids_on(rows.device), out=send_buffer)
            ops += [dist.P2POp(dist.isend, send_buffer[sl], peer, self.group, _TAG_FORWARD) for peer, sl in self._sends]
        ops += [
            dist.P2POp(dist.irecv, output[self.num_owned + sl.start : self.num_owned + sl.stop], peer, self.group, _TAG_FORWARD)
            for peer, sl in self._recvs
        ]
        works = dist.batch_isend_irecv(ops) if ops else []
        self._in_flight = True
        self.num_exchanges += 1
        self.bytes_sent += self.num_send_rows * hidden * rows.element_size()
        return PendingHalo(self, x_owned, output, works)

    def _backward(self, grad_output: torch.Tensor) -> torch.Tensor:
        grad_output = grad_output.contiguous()
        grad_owned = grad_output[: self.num_owned].clone()
        if not self._sends and not self._recvs:
            return grad_owned
        hidden, dtype = int(grad_output.shape[1]), grad_output.dtype
        ops = [
            dist.P2POp(dist.isend, grad_output[self.num_owned + sl.start : self.num_owned + sl.stop], peer, self.group, _TAG_BACKWARD)
            for peer, sl in self._recvs
        ]
        received = None
        if self._sends:
            received = self._buffer("grad", hidden, dtype, grad_output.device)
            ops += [dist.P2POp(dist.irecv, received[sl], peer, self.group, _TAG_BACKWARD) for peer, sl in self._sends]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        if received is not None:
            grad_owned.index_add_(0, self._send_ids_on(received.device), received)
        return grad_owned

    def __repr__(self) -> str:
        return (
            f"HaloExchange(part={self.part.part}/{self.part.num_parts}, owned={self.num_owned}, "
            f"halo={self.num_halo}, send_rows={self.num_send_rows}, neighbours={len(self._recvs)})"
        )
