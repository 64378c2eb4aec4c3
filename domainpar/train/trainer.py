"""The training loop of one rank (identical code in single, domain and sectors mode).

Per optimiser step, each replica (domain group) takes its slice of the step's
events. For every event each rank of the group runs the model on its part with
the halo exchange of its group (identity in single and sectors mode), and
back-propagates its share of the loss: BCE summed over the edges it *owns*,
divided by the event's global edge count (and by the events per replica), so
the shares of a group sum to the event loss. Then gradients are summed over
the domain group and averaged over replicas (:func:`all_reduce_gradients`),
clipped by their global norm (computed after the reduction, so it is the same
number on every rank), and AdamW steps. Every rank ends each step with the
same weights and optimiser state, which is why a checkpoint written by rank 0
serves any number of ranks on resume.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from domainpar.atomic import atomic_path
from domainpar.comm.collectives import broadcast_object, broadcast_tensors, max_value, sum_in_place, sum_values
from domainpar.comm.failure import PeerFailed, publish_failure
from domainpar.comm.groups import Layout, make_layout
from domainpar.comm.watchdog import current as current_watchdog
from domainpar.data.event_graph import read_graph_description
from domainpar.errors import DomainparError
from domainpar.train.checkpoint import (
    CHECKPOINT_FORMAT_VERSION,
    DIGEST_KEY,
    checkpoint_dir,
    latest_checkpoint,
    load_checkpoint,
    remove_stale_checkpoint_temporaries,
    retire_newer_checkpoints,
    rng_state,
    save_checkpoint,
    set_rng_state,
    write_checkpoint,
)
from domainpar.train.config import TrainConfig, config_from_dict, domain_size_of, dump_config
from domainpar.train.events import EventParts, array_shape
from domainpar.train.feed import Feeder, PartCache
from domainpar.train.metrics import EdgeCounter, EdgeMetrics
from domainpar.train.sampler import BucketSampler, assign_round_robin
from domainpar.train.schedule import learning_rate, replica_scale

#: Keys every metrics.jsonl record has (more may follow).
METRIC_KEYS = (
    "epoch",
    "train_loss",
    "val_loss",
    "efficiency",
    "purity",
    "auc",
    "seconds",
    "peak_memory_bytes",
    "halo_bytes",
    "data_wait_fraction",
)


def torch_dtype(precision: str) -> torch.dtype:
    """Parameter and input dtype of a precision (bf16 keeps fp32 master weights and autocasts)."""
    return torch.float64 if precision == "fp64" else torch.float32


def model_config_for(config: TrainConfig, node_features: int, edge_features: int):
    """The run's :class:`~domainpar.model.interaction_network.ModelConfig` with the graphs' feature widths."""
    import dataclasses

    return dataclasses.replace(config.model, node_features=node_features, edge_features=edge_features)


def _reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window (per epoch)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        # Linux: "5" resets the process's peak RSS (VmHWM) to its current RSS.
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_memory_bytes(device: torch.device) -> int:
    """Peak CUDA allocation of this rank, or on CPU the peak resident set size since the last reset.

    On CPU this is VmHWM of /proc/self/status (per address space, so a spawned rank does not report
    its parent's peak as ``ru_maxrss`` would), falling back to ``ru_maxrss`` elsewhere.
    """
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _read_jsonl(path: Path) -> list[dict]:
    """Complete JSON lines of ``path`` (a torn last line from a killed writer is skipped)."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _write_jsonl(path: Path, records: list[dict]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))


class Trainer:
    """One rank's view of a training run.

    Args:
        config: the run configuration (validated).
        train_files: graph files of the training events.
        val_files: graph files of the validation events.
        rank: global rank.
        world_size: number of ranks.
        device: this rank's device.
        train_plans: directory of the training events' plan directories (prepared by
            :mod:`domainpar.train.prepare`); needed when a domain group has more than one rank.
        val_plans: the same for the validation events.
    """

    def __init__(
        self,
        config: TrainConfig,
        train_files: list[Path],
        val_files: list[Path],
        rank: int,
        world_size: int,
        device: torch.device,
        train_plans: str | None = None,
        val_plans: str | None = None,
    ) -> None:
        self.config = config
        self.device = device
        self.dtype = torch_dtype(config.run.precision)
        self.out = Path(config.run.out)
        mode = config.parallel.mode
        group_size = domain_size_of(config, world_size)
        self.layout: Layout = make_layout(rank, world_size, group_size, config.parallel.timeout_s)
        d = config.data
        part = self.layout.part
        self.train_parts = EventParts(train_files, group_size, part, train_plans if group_size > 1 else None)
        self.val_parts = EventParts(val_files, group_size, part, val_plans if group_size > 1 else None)
        # One byte budget for training and validation parts (GB = 1e9 bytes).
        self.cache = PartCache(int(d.cache_gb * 1e9))
        self._train_feed: Feeder | None = None
        self._val_feed: Feeder | None = None
        self._last_data_wait = 0.0
        self.val_data_wait = 0.0
        self.sampler = BucketSampler(self.train_parts.sizes, config.optim.batch_events, config.run.seed)
        self.events_per_replica = config.optim.batch_events // self.layout.num_replicas
        steps = config.run.epochs * self.sampler.steps_per_epoch
        self.total_steps = steps if config.run.max_steps is None else min(steps, config.run.max_steps)

        self._seed_everything(config.run.seed)
        from domainpar.model.interaction_network import InteractionNetwork

        node_features = array_shape(train_files[0], "x")[1]
        edge_features = array_shape(train_files[0], "edge_attr")[1]
        self.model_config = model_config_for(config, node_features, edge_features)
        # What the input columns are and how the graphs were built: exported with the model.
        self.data_description = read_graph_description(train_files[0])
        self.model = InteractionNetwork(self.model_config).to(device=device, dtype=self.dtype)
        # Seeded init is already identical; the broadcast makes that a guarantee (e.g. across CUDA/CPU init paths).
        broadcast_tensors(self.model.state_dict().values(), self.layout.world_group)
        o = config.optim
        # Replica count the learning rate is scaled for: this run's, or on a resume the checkpoint's (see resume()).
        self.lr_replicas = self.layout.num_replicas
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=learning_rate(0, self.total_steps, o, self.lr_replicas),
            betas=(o.beta1, o.beta2),
            eps=o.eps,
            weight_decay=o.weight_decay,
        )
        self.global_step = 0
        self.epoch = 0
        self.step_in_epoch = 0
        self.epoch_state = _new_epoch_state()
        self.step_losses: list[float] = []
        self._tensorboard = None
        self.resume_note: str | None = None
        self._resume_path: Path | None = None
        self._outputs_started = False
        self._start_step = self._start_epoch = 0

    # ------------------------------------------------------------------ setup

    @staticmethod
    def _seed_everything(seed: int) -> None:
        torch.manual_seed(seed)
        np.random.seed(seed % (2**32))
        random.seed(seed)

    def resume(self, path: Path, expected_digest: str | None = None) -> dict[str, Any]:
        """Restore weights, optimiser, position, RNG and the epoch's running sums from a checkpoint.

        Args:
            path: the checkpoint (checksum and every entry are verified).
            expected_digest: the digest rank 0 loaded, when rank 0 chose the file for every rank.

        Returns:
            The loaded state (``state["sha256"]`` is its verified digest).
        """
        state = load_checkpoint(path, expected_digest)
        self._restore(path, state)
        return state

    def _restore(self, path: Path, state: dict[str, Any]) -> None:
        """Apply a loaded, verified checkpoint ``state`` (read from ``path``) to this trainer."""
        try:
            self.model.load_state_dict(state["model"])
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0]
            raise DomainparError(
                f"{path}: checkpoint weights do not fit this model ({first}); use the same --hidden/--iterations as the run that wrote it"
            ) from None
        self.model.to(device=self.device, dtype=self.dtype)
        try:
            self.optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as exc:
            raise DomainparError(
                f"{path}: checkpoint entry 'optimizer' does not fit this model's AdamW ({type(exc).__name__}: {str(exc)[:160]})"
            ) from None
        # load_state_dict does not compare shapes; a moment of the wrong shape would fail in the first step.
        for param, moments in self.optimizer.state.items():
            for name, value in moments.items():
                if torch.is_tensor(value) and value.dim() > 0 and value.shape != param.shape:
                    raise DomainparError(
                        f"{path}: checkpoint entry 'optimizer' holds a {name} of shape {tuple(value.shape)} for a parameter "
                        f"of shape {tuple(param.shape)}"
                    )
        saved = config_from_dict(state["config"], source=f"{path}: config")
        if saved.optim.batch_events != self.config.optim.batch_events:
            raise DomainparError(
                f"{path}: resuming needs the same --batch-events as the checkpoint ({saved.optim.batch_events}, "
                f"got {self.config.optim.batch_events}), or the event order changes"
            )
        self.global_step = int(state["step"])
        self.epoch = int(state["epoch"])
        self.step_in_epoch = int(state["step_in_epoch"])
        self.epoch_state = {**_new_epoch_state(), **dict(state.get("epoch_state", {}))}
        self.step_losses = [float(v) for v in state.get("step_losses", [])]
        if "rng" in state:
            set_rng_state(state["rng"], source=path)
        self._resume_learning_rate(state)

    def _resume_agreed(self) -> Path | None:
        """Resume from the checkpoint rank 0 chose (if the run resumes); returns its path.

        Only rank 0 lists ``checkpoints/`` (or takes ``--resume-from``): a file
        system that shows a new file to some ranks later than to others would
        otherwise let them resume from different steps. It sends the path and
        the content digest of what it loaded; every other rank loads that path
        and refuses a file whose digest differs.
        """
        config = self.config
        if config.run.resume_from is None and not config.run.resume:
            return None
        choice: tuple[str | None, str | None] = (None, None)
        state = None
        if self.layout.is_main:
            path = Path(config.run.resume_from) if config.run.resume_from is not None else latest_checkpoint(checkpoint_dir(self.out))
            if path is not None:
                state = load_checkpoint(path)
                choice = (str(path), state[DIGEST_KEY])
        path_text, digest = broadcast_object(choice, self.layout.world_group)
        if path_text is None:
            return None
        path = Path(path_text)
        if state is not None:
            self._restore(path, state)
        else:
            self.resume(path, expected_digest=digest)
        return path

    def _resume_learning_rate(self, state: dict[str, Any]) -> None:
        """Keep the checkpoint's replica scaling of the learning rate unless the user asked to rescale; say which."""
        saved_replicas = int(state.get("schedule", {}).get("num_replicas", self.layout.num_replicas))
        now = self.layout.num_replicas
        self.resume_note = None
        if saved_replicas == now:
            return
        o = self.config.optim
        keep_lr = learning_rate(self.global_step, self.total_steps, o, saved_replicas)
        new_lr = learning_rate(self.global_step, self.total_steps, o, now)
        if o.lr_scaling == "none":
            self.resume_note = (
                f"resuming step {self.global_step} on {now} replica(s) (checkpoint: {saved_replicas}); "
                f"--lr-scaling none, so the learning rate is unchanged ({keep_lr:.6g})"
            )
            return
        if o.rescale_lr_on_resume:
            self.lr_replicas = now
            self.resume_note = (
                f"resuming step {self.global_step} on {now} replica(s) (checkpoint: {saved_replicas}); "
                f"--lr-scaling {o.lr_scaling} with --rescale-lr-on-resume: learning rate {new_lr:.6g} "
                f"(peak {o.lr:g} x {replica_scale(o.lr_scaling, now):g}), was {keep_lr:.6g}"
            )
        else:
            self.lr_replicas = saved_replicas
            self.resume_note = (
                f"resuming step {self.global_step} on {now} replica(s) (checkpoint: {saved_replicas}); "
                f"--lr-scaling {o.lr_scaling}: keeping the checkpoint's learning rate {keep_lr:.6g} "
                f"(peak {o.lr:g} x {replica_scale(o.lr_scaling, saved_replicas):g}); "
                f"--rescale-lr-on-resume would use {new_lr:.6g}"
            )

    # ------------------------------------------------------------ primitives

    def _forward_context(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        if self.config.run.precision == "bf16":
            stack.enter_context(torch.autocast(device_type=self.device.type, dtype=torch.bfloat16))
        return stack

    # ------------------------------------------------------------- data feed

    def _train_order(self):
        """Every event index this rank will train on from the current position, in step order (for the prefetcher)."""
        epoch, step, global_step = self.epoch, self.step_in_epoch, self.global_step  # captured now, not when iterated
        sampler, epochs, total = self.sampler, self.config.run.epochs, self.total_steps
        replica, replicas = self.layout.replica, self.layout.num_replicas

        def order():
            nonlocal epoch, step, global_step
            while epoch < epochs and global_step < total:
                for s in range(step, sampler.steps_per_epoch):
                    if global_step >= total:
                        return
                    yield from sampler.replica_events(epoch, s, replica, replicas)
                    global_step += 1
                epoch, step = epoch + 1, 0

        return order()

    def _val_order(self) -> list[int]:
        return assign_round_robin(self.val_parts.sizes, self.layout.num_replicas)[self.layout.replica]

    def _feeder(self, parts: EventParts, order, kind: str) -> Feeder:
        return Feeder(
            parts.load, order, depth=self.config.data.prefetch, device=self.device, dtype=self.dtype, cache=self.cache, kind=kind
        )

    def _close_feeds(self) -> None:
        for feed in (self._train_feed, self._val_feed):
            if feed is not None:
                feed.close()
        self._train_feed = self._val_feed = None

    def _next_part(self, feed: Feeder, index: int):
        """This rank's part of event ``index`` on the device with its exchange, and the seconds waited for it.

        The group check and the exchange are collectives (more than one part): every rank of the
        group calls this for the same events in the same order.
        """
        from domainpar.parallel.part import attach

        staged, waited = feed.next(index)
        return attach(staged, self.layout.domain_group), waited

    def _event_loss(self, part):
        """Forward + this rank's loss share of one event (a :class:`~domainpar.parallel.part.RankPart`)."""
        from domainpar.model.loss import edge_loss

        with self._forward_context():
            logits = self.model(part.graph, part.exchange)
        loss = edge_loss(logits.float() if logits.dtype == torch.bfloat16 else logits, part.graph, self.config.optim.pos_weight)
        return loss, logits

    def _halo_bytes(self, exchange, backward: bool) -> float:
        if not hasattr(exchange, "bytes_per_exchange"):
            return 0.0
        dtype = torch.bfloat16 if self.config.run.precision == "bf16" else self.dtype
        per = exchange.bytes_per_exchange(self.config.model.hidden, dtype) * exchange.num_exchanges
        return float(per * (2 if backward else 1))

    # ------------------------------------------------------------------ steps

    def train_step(self) -> tuple[float, float]:
        """One optimiser step at the current position; returns (mean event loss, gradient norm).

        The step's parts come from the training feeder (opened by :meth:`run`, or here if needed).
        """
        from domainpar.comm.reduce import all_reduce_gradients

        events = self.sampler.replica_events(
            self.epoch, self.step_in_epoch, self.layout.replica, self.layout.num_replicas
        )
        if self._train_feed is None:
            self._train_feed = self._feeder(self.train_parts, self._train_order(), "train")
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_share = 0.0
        halo_bytes = 0.0
        offload = (
            torch.autograd.graph.save_on_cpu(pin_memory=self.device.type == "cuda")
            if self.config.run.offload
            else contextlib.nullcontext()
        )
        data_wait = 0.0
        for index in events:
            part, waited = self._next_part(self._train_feed, index)
            data_wait += waited
            with offload:
                loss, _ = self._event_loss(part)
            (loss / self.events_per_replica).backward()
            loss_share += float(loss.detach()) / self.events_per_replica
            halo_bytes += self._halo_bytes(part.exchange, backward=True)
            del part
        if self.layout.distributed:
            all_reduce_gradients(self.model, self.layout.domain_group, self.layout.replica_group)
        else:
            for param in self.model.parameters():
                if param.grad is None:
                    param.grad = torch.zeros_like(param)
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.config.optim.clip > 0:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.config.optim.clip))
        else:
            grad_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params])))
        lr = learning_rate(self.global_step, self.total_steps, self.config.optim, self.lr_replicas)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        total_loss, total_halo = sum_values([loss_share, halo_bytes], self.layout.world_group, self.device)
        # The step waits for its slowest rank's input: report the largest wait of the world.
        self._last_data_wait = max_value(data_wait, self.layout.world_group, self.device)
        self.epoch_state["data_wait"] += self._last_data_wait
        mean_loss = total_loss / self.layout.num_replicas
        self.global_step += 1
        self.step_in_epoch += 1
        self.epoch_state["loss_sum"] += mean_loss
        self.epoch_state["steps"] += 1
        self.epoch_state["halo_bytes"] += total_halo
        self.epoch_state["events"] += self.config.optim.batch_events
        self.step_losses.append(mean_loss)
        self._last_lr = lr
        return mean_loss, grad_norm

    @torch.no_grad()
    def validate(self) -> EdgeMetrics:
        """Loss and edge metrics of the validation events, reduced over the whole world."""
        self.model.eval()
        counter = EdgeCounter(self.config.run.threshold)
        if self._val_feed is None:
            self._val_feed = self._feeder(self.val_parts, self._val_order(), "val")
        feed = self._val_feed
        for index in self._val_order():
            part, _ = self._next_part(feed, index)
            loss, logits = self._event_loss(part)
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
        self.val_data_wait = feed.wait_seconds
        feed.close()
        self._val_feed = None
        counter.load_packed(sum_in_place(counter.packed().to(self.device), self.layout.world_group))
        return counter.summary()

    # ------------------------------------------------------------ bookkeeping

    def checkpoint_state(self) -> dict[str, Any]:
        return {
            "format_version": CHECKPOINT_FORMAT_VERSION,
            "step": self.global_step,
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "model_config": self.model_config.to_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": {
                "total_steps": self.total_steps,
                # The replica count the learning rate is scaled for (kept across resumes unless rescaled).
                "num_replicas": self.lr_replicas,
                "lr": float(self.optimizer.param_groups[0]["lr"]),
            },
            "rng": rng_state(),
            "epoch_state": dict(self.epoch_state),
            "step_losses": list(self.step_losses),
            "config": self.config.to_dict(),
            "data": self.data_description,
            "world_size": self.layout.world_size,
            "domain_size": self.layout.domain_size,
        }

    def _preflight(self) -> None:
        """Load (and so validate) this rank's part of its first validation event now, not after an epoch of
        training; with the part cache on, this is the read the first validation would do anyway."""
        order = self._val_order()
        if len(order):
            self.cache.put(("val", int(order[0])), self.val_parts.load(int(order[0])))

    def _start_outputs(self) -> None:
        """Rank 0 starts the run directory: nothing is written to --out before the run has really started
        (its first step done, or a finished run's model to write), so a run refused on its inputs leaves
        no config.yaml, log or moved checkpoint behind."""
        if self._outputs_started or not self.layout.is_main:
            return
        self._outputs_started = True
        config, resume_path = self.config, self._resume_path
        self.out.mkdir(parents=True, exist_ok=True)
        dump_config(config, self.out / "config.yaml")
        if resume_path is not None and config.run.resume_from is not None:
            moved = retire_newer_checkpoints(checkpoint_dir(self.out), self._start_step, resume_path)
            if moved:
                print(
                    f"domainpar: resuming step {self._start_step} from {resume_path}: moved {len(moved)} newer "
                    f"checkpoint(s) aside to {moved[0].parent}",
                    file=sys.stderr,
                )
        if resume_path is not None:
            self._trim_logs()
        else:
            for name in ("metrics.jsonl", "steps.jsonl"):
                (self.out / name).unlink(missing_ok=True)
        if config.run.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard = SummaryWriter(str(self.out / "tensorboard"), purge_step=self.global_step or None)

    def save(self) -> Path | None:
        """Rank 0 writes a checkpoint (every rank holds the same state)."""
        if not self.layout.is_main:
            return None
        self._start_outputs()
        return save_checkpoint(self.checkpoint_state(), checkpoint_dir(self.out), self.config.run.keep)

    def _trim_logs(self) -> None:
        """After a resume, drop log lines written after the checkpoint (they will be written again)."""
        metrics_path = self.out / "metrics.jsonl"
        records = [r for r in _read_jsonl(metrics_path) if r.get("epoch", 0) <= self._start_epoch]
        _write_jsonl(metrics_path, records)
        steps_path = self.out / "steps.jsonl"
        _write_jsonl(steps_path, [r for r in _read_jsonl(steps_path) if r.get("step", 0) <= self._start_step])

    def _log_step(self, loss: float, grad_norm: float, seconds: float) -> None:
        """One ``steps.jsonl`` record: ``data_wait_seconds`` is the part of ``seconds`` the slowest rank waited for input."""
        record = {
            "step": self.global_step,
            "epoch": self.epoch + 1,
            "loss": loss,
            "lr": self._last_lr,
            "grad_norm": grad_norm,
            "seconds": seconds,
            "data_wait_seconds": self._last_data_wait,
        }
        with open(self.out / "steps.jsonl", "a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self._tensorboard is not None:
            self._tensorboard.add_scalar("train/step_loss", loss, self.global_step)
            self._tensorboard.add_scalar("train/lr", self._last_lr, self.global_step)

    def _log_epoch(self, record: dict) -> None:
        metrics_path = self.out / "metrics.jsonl"
        with open(metrics_path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.config.run.curves:
            from domainpar.train.curves import plot_curves

            plot_curves(_read_jsonl(metrics_path), _read_jsonl(self.out / "steps.jsonl"), self.out / "curves.png")
        if self._tensorboard is not None:
            for key in ("train_loss", "val_loss", "efficiency", "purity", "auc"):
                value = record[key]
                if value is not None and math.isfinite(value):
                    self._tensorboard.add_scalar(f"epoch/{key}", value, record["epoch"])
            self._tensorboard.flush()

    def save_model(self, record: dict | None) -> Path:
        """Final weights for evaluation: ``model.pt`` (same layout as a checkpoint's model entries)."""
        state = {
            "format_version": CHECKPOINT_FORMAT_VERSION,
            "step": self.global_step,
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "model_config": self.model_config.to_dict(),
            "config": self.config.to_dict(),
            "data": self.data_description,
            "metrics": record or {},
        }
        path = self.out / "model.pt"
        write_checkpoint(state, path)
        return path

    # ------------------------------------------------------------------- run

    def run(self) -> dict[str, Any]:
        """Train to the end; rank 0 returns the summary (others a short one)."""
        config, layout = self.config, self.layout
        main = layout.is_main
        resume_path = None
        if main:
            # One writer per --out: what a writer killed mid-write left behind is garbage now.
            remove_stale_checkpoint_temporaries(self.out)
        resume_path = self._resume_agreed()
        self._resume_path = resume_path
        # Where the run (re)starts: logs beyond it are dropped and newer checkpoints retired once outputs start.
        self._start_step, self._start_epoch = self.global_step, self.epoch
        if main and self.resume_note is not None:
            print(f"domainpar: {self.resume_note}", file=sys.stderr)
        self._preflight()
        run_start = time.perf_counter()
        try:
            return self._run_loop(resume_path, run_start)
        finally:
            self._close_feeds()

    def _run_loop(self, resume_path: Path | None, run_start: float) -> dict[str, Any]:
        config, layout = self.config, self.layout
        main = layout.is_main
        from tqdm import tqdm

        # tqdm's default lock is a multiprocessing semaphore; a rank that is killed cannot release it and the
        # launcher's resource tracker then warns about leaked semaphores. One bar per process needs a thread lock.
        tqdm.set_lock(threading.RLock())
        steps_per_epoch = self.sampler.steps_per_epoch
        last_record: dict | None = None
        last_checkpoint: Path | None = resume_path
        steps_this_run = 0
        stop = self.global_step >= self.total_steps
        if not stop:
            self._train_feed = self._feeder(self.train_parts, self._train_order(), "train")
        while self.epoch < config.run.epochs and not stop:
            _reset_peak_memory(self.device)
            # Validation parts are read while the epoch trains.
            self._val_feed = self._val_feed or self._feeder(self.val_parts, self._val_order(), "val")
            bar = tqdm(
                total=steps_per_epoch,
                initial=self.step_in_epoch,
                desc=f"epoch {self.epoch + 1}/{config.run.epochs}",
                unit="step",
                disable=not (main and config.run.progress),
                file=sys.stderr,
                dynamic_ncols=True,
            )
            while self.step_in_epoch < steps_per_epoch:
                t0 = time.perf_counter()
                loss, grad_norm = self.train_step()
                seconds = time.perf_counter() - t0
                self.epoch_state["seconds"] += seconds
                steps_this_run += 1
                if main:
                    self._start_outputs()
                    self._log_step(loss, grad_norm, seconds)
                    bar.update(1)
                    wait = self.epoch_state["data_wait"] / max(self.epoch_state["seconds"], 1e-12)
                    bar.set_postfix(
                        loss=f"{loss:.4f}", events_per_s=f"{config.optim.batch_events / seconds:.2f}", data_wait=f"{wait:.0%}"
                    )
                stop = self.global_step >= self.total_steps
                if stop:
                    break
                if config.run.checkpoint_every and self.global_step % config.run.checkpoint_every == 0:
                    last_checkpoint = self.save() or last_checkpoint
            bar.close()
            t_val = time.perf_counter()
            metrics = self.validate()
            val_seconds = time.perf_counter() - t_val
            peak = max_value(float(_peak_memory_bytes(self.device)), self.layout.world_group, self.device)
            steps_done = max(self.epoch_state["steps"], 1)
            record = {
                "epoch": self.epoch + 1,
                "train_loss": self.epoch_state["loss_sum"] / steps_done,
                "val_loss": metrics.loss,
                "efficiency": metrics.efficiency,
                "purity": metrics.purity,
                "auc": metrics.auc,
                "seconds": self.epoch_state["seconds"] + val_seconds,
                "peak_memory_bytes": int(peak),
                "halo_bytes": int(self.epoch_state["halo_bytes"]),
                "data_wait_fraction": self.epoch_state["data_wait"] / max(self.epoch_state["seconds"], 1e-12),
                "data_wait_seconds": self.epoch_state["data_wait"],
                "val_data_wait_seconds": self.val_data_wait,
                "step": self.global_step,
                "steps": self.epoch_state["steps"],
                "train_seconds": self.epoch_state["seconds"],
                "val_seconds": val_seconds,
                "events_per_second": self.epoch_state["events"] / max(self.epoch_state["seconds"], 1e-12),
                "lr": float(self.optimizer.param_groups[0]["lr"]),
                "threshold": config.run.threshold,
                "val_events": metrics.num_events,
                "val_edges": metrics.num_edges,
                "mode": config.parallel.mode,
                "world_size": layout.world_size,
                "domain_size": layout.domain_size,
            }
            last_record = record
            epoch_done = self.step_in_epoch >= steps_per_epoch
            if epoch_done:
                self.epoch += 1
                self.step_in_epoch = 0
                self.epoch_state = _new_epoch_state()
            if main:
                self._start_outputs()
                self._log_epoch(record)
            finished = stop or self.epoch >= config.run.epochs
            if finished or (epoch_done and self.epoch % config.run.checkpoint_every_epochs == 0):
                last_checkpoint = self.save() or last_checkpoint
        if main:
            self._start_outputs()
        if main and last_record is None and resume_path is not None:
            records = _read_jsonl(self.out / "metrics.jsonl")
            last_record = records[-1] if records else None
        model_path = self.save_model(last_record) if main else None
        if self._tensorboard is not None:
            self._tensorboard.close()
        wall = time.perf_counter() - run_start
        return {
            "rank": layout.rank,
            "out": str(self.out),
            "mode": config.parallel.mode,
            "world_size": layout.world_size,
            "domain_size": layout.domain_size,
            "num_replicas": layout.num_replicas,
            "steps": self.global_step,
            "steps_this_run": steps_this_run,
            "epochs": self.epoch,
            "final": last_record,
            "step_losses": list(self.step_losses),
            "checkpoint": None if last_checkpoint is None else str(last_checkpoint),
            "model": None if model_path is None else str(model_path),
            "seconds": wall,
            "steps_per_second": steps_this_run / wall if wall > 0 else float("nan"),
        }


def _new_epoch_state() -> dict[str, float]:
    """Running sums of an epoch (checkpointed, so a resumed epoch reports the whole epoch)."""
    return {"loss_sum": 0.0, "steps": 0, "seconds": 0.0, "halo_bytes": 0.0, "events": 0, "data_wait": 0.0}


# ---------------------------------------------------------------- entry points


def run_rank(rank: int, world_size: int, payload: dict[str, Any]) -> dict[str, Any]:
    """Body of one rank (spawned, torchrun or the single process): build the trainer, run, report.

    Args:
        rank: global rank.
        world_size: number of ranks (the default process group exists when > 1).
        payload: ``{"config": dict, "train_files": [str], "val_files": [str], "device": "cpu"|"cuda"}``.
    """
    config = config_from_dict(payload["config"])
    threads_before = torch.get_num_threads()
    if config.parallel.threads is not None:
        torch.set_num_threads(config.parallel.threads)
    try:
        if payload["device"] == "cuda":
            from domainpar.train.launch import device_for_local_rank

            local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", rank)))
            device = device_for_local_rank(local_rank, "cuda")
        else:
            device = torch.device("cpu")
        trainer = Trainer(
            config,
            [Path(f) for f in payload["train_files"]],
            [Path(f) for f in payload["val_files"]],
            rank,
            world_size,
            device,
            train_plans=payload.get("train_plans"),
            val_plans=payload.get("val_plans"),
        )
        return trainer.run()
    except BaseException as exc:
        # The first failure of the job wins; a rank that only saw its consequence (a broken collective) names it.
        if world_size == 1 or isinstance(exc, PeerFailed):
            raise
        watchdog = current_watchdog()
        first = watchdog.explain(exc) if watchdog is not None else publish_failure(exc)
        if first is None or first.rank == rank:
            raise
        raise PeerFailed(first, rank) from exc
    finally:
        torch.set_num_threads(threads_before)




def run_rank_sequence(rank: int, world_size: int, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run several trainings one after the other in the same ranks (sweeps; tests amortising process start-up).

    Args:
        rank: global rank.
        world_size: number of ranks.
        payloads: one :func:`run_rank` payload per training.
    """
    return [run_rank(rank, world_size, payload) for payload in payloads]


__all__ = ["METRIC_KEYS", "Trainer", "model_config_for", "run_rank", "run_rank_sequence", "torch_dtype"]
