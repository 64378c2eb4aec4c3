"""One optimiser step and one validation pass of a rank, given the parts it runs.

The step is where the exactness argument of training lives (docs/design.md):
each rank back-propagates the loss of the edges it *owns*, divided by the
event's global edge count and by the events per replica, so the shares of a
domain group sum to the event loss; gradients are summed over the group and
averaged over replicas (:func:`~domainpar.comm.reduce.all_reduce_gradients`),
clipped by their global norm — computed after the reduction, so it is the same
number on every rank — and AdamW steps. Every rank ends the step with the same
weights and optimiser state.

What events a step takes, where its parts come from and what is logged is the
run loop's business (:mod:`domainpar.train.trainer`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterable

import torch

from domainpar.comm.collectives import max_value, sum_in_place, sum_values
from domainpar.comm.groups import Layout
from domainpar.comm.reduce import all_reduce_gradients
from domainpar.model.loss import edge_loss, part_weights
from domainpar.train.config import TrainConfig
from domainpar.train.metrics import EdgeCounter, EdgeMetrics


def torch_dtype(precision: str) -> torch.dtype:
    """Parameter and input dtype of a precision (bf16 keeps fp32 master weights and autocasts)."""
    return torch.float64 if precision == "fp64" else torch.float32


@dataclass(frozen=True)
class StepResult:
    """What one optimiser step reports (the same on every rank)."""

    loss: float
    """Mean event loss of the step's events (all replicas)."""
    grad_norm: float
    """Global gradient norm before clipping."""
    lr: float
    """Learning rate the step used."""
    halo_bytes: float
    """Halo bytes sent by all ranks in the step, forward and backward."""
    data_wait: float
    """Seconds the slowest rank waited for its input parts."""


class StepRunner:
    """Runs the model of one rank on its parts: the optimiser step and the validation pass.

    Args:
        model: this rank's replica of the model (same weights on every rank).
        optimizer: its AdamW.
        config: the run configuration (optimiser, precision and offload settings are read).
        layout: this rank's process groups.
        device: this rank's device.
        dtype: parameter and input dtype.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        config: TrainConfig,
        layout: Layout,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.config = config
        self.layout = layout
        self.device = device
        self.dtype = dtype
        self.events_per_replica = config.optim.batch_events // layout.num_replicas
        """Events each replica takes per step (the loss of each is divided by it)."""

    def event_loss(self, part) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward + this rank's loss share of one event.

        Args:
            part: a :class:`~domainpar.parallel.part.RankPart` with labels.

        Returns:
            (scalar loss share, (E_local,) logits).
        """
        bf16 = self.config.run.precision == "bf16"
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            logits = self.model(part.graph, part.exchange)
        logits_for_loss = logits.float() if logits.dtype == torch.bfloat16 else logits
        if self.config.loss.weighting == "pos_weight":
            loss = edge_loss(logits_for_loss, part.graph, self.config.optim.pos_weight)
            return loss, logits
        # Target weighting: normalised by the event's weight sum, reduced over the domain group (every rank of the
        # group runs the same events in the same order, so this collective is matched).
        weights = part_weights(self.config.loss, part.data)
        weight_sum = sum_values([float(weights.sum())], self.layout.domain_group, self.device)[0]
        weights_t = torch.as_tensor(weights, dtype=logits_for_loss.dtype, device=logits_for_loss.device)
        return edge_loss(logits_for_loss, part.graph, weights=weights_t, weight_sum=weight_sum), logits

    def train(self, parts: Iterable[tuple[object, float]], lr: float) -> StepResult:
        """One optimiser step over this rank's parts of the step's events.

        Args:
            parts: (part, seconds waited for it) per event, in the step's order (every rank of a
                domain group iterates the same events: building a part's exchange is a collective).
            lr: learning rate of this step.
        """
        model, layout = self.model, self.layout
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_share = halo_bytes = data_wait = 0.0
        offload = (
            torch.autograd.graph.save_on_cpu(pin_memory=self.device.type == "cuda")
            if self.config.run.offload
            else contextlib.nullcontext()
        )
        for part, waited in parts:
            data_wait += waited
            with offload:
                loss, _ = self.event_loss(part)
            (loss / self.events_per_replica).backward()
            loss_share += float(loss.detach()) / self.events_per_replica
            # What the exchange really sent (any model: rows of any width and dtype), twice with the backward pass.
            halo_bytes += float(getattr(part.exchange, "bytes_sent", 0) * 2)
            del part  # the next event's activations need the room
        if layout.distributed:
            all_reduce_gradients(model, layout.domain_group, layout.replica_group)
        else:
            for param in model.parameters():
                if param.grad is None:
                    param.grad = torch.zeros_like(param)
        params = [p for p in model.parameters() if p.requires_grad]
        if self.config.optim.clip > 0:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.config.optim.clip))
        else:
            grad_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params])))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        total_loss, total_halo = sum_values([loss_share, halo_bytes], layout.world_group, self.device)
        # The step waits for its slowest rank's input: report the largest wait of the world.
        slowest_wait = max_value(data_wait, layout.world_group, self.device)
        return StepResult(
            loss=total_loss / layout.num_replicas, grad_norm=grad_norm, lr=lr, halo_bytes=total_halo, data_wait=slowest_wait
        )

    @torch.no_grad()
    def validate(self, parts: Iterable[tuple[object, float]], threshold: float) -> EdgeMetrics:
        """Loss and edge metrics of this rank's validation parts, reduced over the whole world.

        Args:
            parts: (part, seconds waited) per validation event of this rank's replica.
            threshold: edge score above which an edge is selected.
        """
        self.model.eval()
        counter = EdgeCounter(threshold)
        for part, _ in parts:
            loss, logits = self.event_loss(part)
            graph = part.graph
            owned = graph.edge_owned
            counter.add_edges(torch.sigmoid(logits[owned].float()), graph.y[owned])
            # The group's loss shares add up to the event loss; count the event once (on part 0).
            counter.add_loss(float(loss), events=1 if self.layout.part == 0 else 0)
            dropped = part.data.dropped_y
            if dropped is not None and dropped.size:
                # Sectors mode never scores cut edges: they count as rejected (score 0), each on the part owning its dst.
                labels = torch.tensor(dropped)
                counter.add_edges(torch.zeros(labels.shape[0], dtype=torch.float64), labels)
        counter.load_packed(sum_in_place(counter.packed().to(self.device), self.layout.world_group))
        return counter.summary()


__all__ = ["StepResult", "StepRunner", "torch_dtype"]
