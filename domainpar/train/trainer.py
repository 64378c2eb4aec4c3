"""The run loop of one rank (identical code in single, domain and sectors mode).

Per optimiser step, each replica (domain group) takes its slice of the step's
events (:class:`~domainpar.train.sampler.BucketSampler`, a pure function of
seed, epoch and sizes), the feeders bring this rank's parts of them
(:mod:`domainpar.train.feed`), the step runs (:mod:`domainpar.train.step`), and
rank 0 logs it (:mod:`domainpar.train.logs`). Each epoch ends with a
validation pass, an epoch record and, on schedule, a checkpoint
(:mod:`domainpar.train.state`). Every rank ends each step with the same
weights and position, which is why a checkpoint written by rank 0 serves any
number of ranks on resume.
"""

from __future__ import annotations

import dataclasses
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from domainpar.comm.collectives import broadcast_tensors, max_value
from domainpar.comm.failure import PeerFailed, publish_failure
from domainpar.comm.groups import Layout, make_layout
from domainpar.comm.watchdog import current as current_watchdog
from domainpar.data.graph_files import read_graph_description, read_graph_metadata
from domainpar.errors import MEMORY_ADVICE, MachineFault, fault_line
from domainpar.launch.ranks import device_for_local_rank
from domainpar.model.config import ModelConfig
from domainpar.model.registry import build_model, check_config
from domainpar.optim import AdamW
from domainpar.parallel.part import attach
from domainpar.progress import progress
from domainpar.train.checkpoint import (
    CHECKPOINT_FORMAT_VERSION,
    checkpoint_dir,
    remove_stale_checkpoint_temporaries,
    retire_newer_checkpoints,
    save_checkpoint,
    write_checkpoint,
)
from domainpar.train.config import TrainConfig, config_from_dict, domain_size_of, dump_config
from domainpar.train.events import EventParts, array_shape
from domainpar.train.feed import Feeder, PartCache
from domainpar.train.gate import GateRefused, wait_at_gate
from domainpar.train.logs import RunLogs, check_resumable_logs
from domainpar.train.preflight import resolve_defaults
from domainpar.train.memory import peak_memory_bytes, reset_peak_memory
from domainpar.train.sampler import BucketSampler, assign_round_robin
from domainpar.train.schedule import learning_rate
from domainpar.train.state import (
    Progress,
    agreed_checkpoint,
    check_resume,
    checkpoint_state,
    model_weights,
    restore,
    resumed_lr_replicas,
    training_inputs,
)
from domainpar.train.step import StepRunner, torch_dtype

def model_config_for(config: TrainConfig, node_features: int, edge_features: int) -> ModelConfig:
    """The run's :class:`~domainpar.model.config.ModelConfig` with the graphs' feature widths and every option of its
    model written out (what checkpoints record and loaders rebuild the model from)."""
    return check_config(dataclasses.replace(config.model, node_features=node_features, edge_features=edge_features))


def graph_widths(path: Path) -> tuple[int, int]:
    """(node, edge) feature columns of a training graph file, from its headers."""
    return array_shape(path, "x")[1], array_shape(path, "edge_attr")[1]


def check_run_model(config: TrainConfig, train_files: list[str], echo=None) -> ModelConfig:
    """Build the run's model once on the meta device, before any rank starts: a model that cannot be built for the
    graphs (a bad option, an import that fails, widths it cannot take) is one line now, not an error of every rank.

    Graphs without edge features (the Exa.TrkX layout) need no flag: the model is built for x and edge_index
    alone, and ``echo`` (e.g. ``print`` to stderr) says so in one line.

    Raises:
        DomainparError: the model cannot be built (the message names ``model.<key>`` or the file).
    """
    node_features, edge_features = graph_widths(Path(train_files[0]))
    model_config = model_config_for(config, node_features, edge_features)
    if edge_features == 0 and config.model.use_edge_features and echo is not None:
        echo(f"domainpar: {train_files[0]} and the run's other graphs have no edge features: "
             f"the {model_config.name} model reads x and edge_index only")  # fmt: skip
    with torch.device("meta"):
        build_model(model_config)
    return model_config


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    random.seed(seed)


class Trainer:
    """One rank's training run: the loop over epochs and steps around feeders, the step, logs and checkpoints.

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
        locality_gate: directory where the launcher writes the verdict of the model's locality check
            (:mod:`domainpar.train.gate`); the first step waits for it. None: no check pending.
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
        locality_gate: str | None = None,
    ) -> None:
        # An unset global batch is one event per replica (check_run resolved it already for launched runs).
        config = resolve_defaults(config, world_size)
        self.config = config
        self.device = device
        self.dtype = torch_dtype(config.run.precision)
        self.out = Path(config.run.out)
        group_size = domain_size_of(config, world_size)
        self.layout: Layout = make_layout(rank, world_size, group_size, config.parallel.timeout_s)
        part = self.layout.part
        self.train_parts = EventParts(train_files, group_size, part, train_plans if group_size > 1 else None)
        self.val_parts = EventParts(val_files, group_size, part, val_plans if group_size > 1 else None)
        # One byte budget for training and validation parts (GB = 1e9 bytes).
        self.cache = PartCache(int(config.data.cache_gb * 1e9))
        self._train_feed: Feeder | None = None
        self._val_feed: Feeder | None = None
        self.sampler = BucketSampler(self.train_parts.sizes, config.optim.batch_events, config.run.seed)
        steps = config.run.epochs * self.sampler.steps_per_epoch
        self.total_steps = steps if config.run.max_steps is None else min(steps, config.run.max_steps)

        _seed_everything(config.run.seed)

        self.model_config = model_config_for(config, *graph_widths(train_files[0]))
        # What the input columns are and how the graphs were built: exported with the model.
        self.data_description = read_graph_description(train_files[0])
        # How the training graphs were built (features, cuts, edge filter): inference rebuilds the same graph.
        self.graph_metadata = read_graph_metadata(train_files[0])
        # What the run trains on, recorded in checkpoints: a resume on other events or features is refused.
        self.inputs = training_inputs(self.train_parts.files, self.graph_metadata)
        self.model = build_model(self.model_config).to(device=device, dtype=self.dtype)
        # Seeded init is already identical; the broadcast makes that a guarantee (e.g. across CUDA/CPU init paths).
        broadcast_tensors(self.model.state_dict().values(), self.layout.world_group)
        o = config.optim
        # Replica count the learning rate is scaled for: this run's, or on a resume the checkpoint's.
        self.lr_replicas = self.layout.num_replicas
        self.optimizer = AdamW(
            self.model.parameters(),
            lr=learning_rate(0, self.total_steps, o, self.lr_replicas),
            betas=(o.beta1, o.beta2),
            eps=o.eps,
            weight_decay=o.weight_decay,
        )
        self.stepper = StepRunner(self.model, self.optimizer, config, self.layout, device, self.dtype)
        self.progress = Progress()
        self.logs: RunLogs | None = None
        self.resume_note: str | None = None
        self._resume_path: Path | None = None
        self._resume_logs: dict | None = None
        self._start_at = (0, 0)  # (step, epoch) where this run (re)started
        self._last_step: dict[str, float] = {"lr": 0.0, "data_wait": 0.0}
        self.val_data_wait = 0.0
        self._halo_warned = False
        self.locality_gate = locality_gate
        self.locality_wait_s = 0.0
        """Seconds this rank waited for the launcher's locality check before its first step."""
        self._doing = "starting the run"  # what the rank is doing, for the line that reports a machine fault

    # ------------------------------------------------------------- resume

    def _resume(self) -> Path | None:
        """Restore the checkpoint rank 0 chose (if the run resumes); returns its path."""
        path, state, _ = agreed_checkpoint(self.config, self.out, self.layout)
        if path is None:
            return None
        check_resume(path, state, self.config, self.model_config, self.total_steps, self.inputs)
        self.progress = restore(path, state, self.model, self.optimizer, self.config, self.device, self.dtype)
        self._resume_logs = state.get("logs")  # what the logs held at the checkpoint: rebuilt from it where they differ
        if self._resume_logs is None and self.layout.is_main:
            # An older checkpoint records no logs: the run's own must be whole up to it, checked before any step.
            check_resumable_logs(self.out, (self.progress.global_step, self.progress.epoch), path)
        self.lr_replicas, self.resume_note = resumed_lr_replicas(
            state, self.progress.global_step, self.total_steps, self.config, self.layout.num_replicas
        )
        return path

    # ------------------------------------------------------------- data feed

    def _train_order(self):
        """Every event index this rank will train on from the current position, in step order (for the prefetcher)."""
        p = self.progress
        epoch, step, global_step = p.epoch, p.step_in_epoch, p.global_step  # captured now, not when iterated
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

    def _parts(self, feed: Feeder, indices):
        """This rank's parts of events ``indices`` on the device with their exchanges, and the seconds waited for each.

        The group check and the exchange are collectives (more than one part): every rank of the
        group iterates the same events in the same order.
        """
        for index in indices:
            staged, waited = feed.next(index)
            yield attach(staged, self.layout.domain_group), waited

    def _preflight(self) -> None:
        """Load (and so validate) this rank's part of its first validation event now, not after an epoch of
        training; with the part cache on, this is the read the first validation would do anyway."""
        order = self._val_order()
        if len(order):
            self.cache.put(("val", int(order[0])), self.val_parts.load(int(order[0])))

    # ------------------------------------------------------------------ steps

    def train_step(self) -> tuple[float, float]:
        """One optimiser step at the current position; returns (mean event loss, gradient norm)."""
        p = self.progress
        events = self.sampler.replica_events(p.epoch, p.step_in_epoch, self.layout.replica, self.layout.num_replicas)
        if self._train_feed is None:
            self._train_feed = self._feeder(self.train_parts, self._train_order(), "train")
        lr = learning_rate(p.global_step, self.total_steps, self.config.optim, self.lr_replicas)
        self._doing = f"training step {p.global_step + 1}"
        result = self.stepper.train(self._parts(self._train_feed, events), lr)
        p.advance(result.loss, result.halo_bytes, self.config.optim.batch_events, result.data_wait)
        self._last_step = {"lr": result.lr, "data_wait": result.data_wait}
        return result.loss, result.grad_norm

    def validate(self):
        """Loss and edge metrics of the validation events, reduced over the whole world."""
        if self._val_feed is None:
            self._val_feed = self._feeder(self.val_parts, self._val_order(), "val")
        self._doing = f"validation after step {self.progress.global_step}"
        feed = self._val_feed
        metrics = self.stepper.validate(self._parts(feed, self._val_order()), self.config.run.threshold)
        self.val_data_wait = feed.wait_seconds
        feed.close()
        self._val_feed = None
        return metrics

    # ------------------------------------------------------------ outputs

    def _start_outputs(self) -> None:
        """Rank 0 starts the run directory: nothing is written to --out before the run has really started
        (its first step done, or a finished run's model to write), so a run refused on its inputs leaves
        no config.yaml, log or moved checkpoint behind."""
        if self.logs is not None or not self.layout.is_main:
            return
        config, resume_path = self.config, self._resume_path
        start_step, start_epoch = self._start_at
        self.out.mkdir(parents=True, exist_ok=True)
        dump_config(config, self.out / "config.yaml")
        if resume_path is not None and config.run.resume_from is not None:
            moved = retire_newer_checkpoints(checkpoint_dir(self.out), start_step, resume_path)
            if moved:
                print(
                    f"domainpar: resuming step {start_step} from {resume_path}: moved {len(moved)} newer "
                    f"checkpoint(s) aside to {moved[0].parent}",
                    file=sys.stderr,
                )
        self.logs = RunLogs(self.out, curves=config.run.curves, tensorboard=config.run.tensorboard)
        resumed_at = None if resume_path is None else (start_step, start_epoch)
        self.logs.start(resumed_at, self.progress.global_step, history=self._resume_logs, source=resume_path)

    def save(self) -> Path | None:
        """Rank 0 writes a checkpoint (every rank holds the same state)."""
        if not self.layout.is_main:
            return None
        self._doing = f"writing the checkpoint of step {self.progress.global_step}"
        self._start_outputs()
        state = checkpoint_state(
            self.progress, self.model, self.model_config, self.optimizer,
            total_steps=self.total_steps, lr_replicas=self.lr_replicas, config=self.config,
            data_description=self.data_description, layout=self.layout, inputs=self.inputs, graph=self.graph_metadata,
            logs=self.logs.history(),
        )  # fmt: skip
        return save_checkpoint(state, checkpoint_dir(self.out), self.config.run.keep)

    def save_model(self, record: dict | None) -> Path:
        """Final weights for evaluation: ``model.pt`` (same layout as a checkpoint's model entries)."""
        state = {
            "format_version": CHECKPOINT_FORMAT_VERSION,
            "step": self.progress.global_step,
            "model": model_weights(self.model),
            "model_config": self.model_config.to_dict(),
            "graph": dict(self.graph_metadata),
            "config": self.config.to_dict(),
            "data": self.data_description,
            "metrics": record or {},
        }
        path = self.out / "model.pt"
        self._doing = "writing model.pt"
        write_checkpoint(state, path)
        return path

    def _pause_due(self) -> bool:
        """``--stop-after-steps`` is reached before the end of the schedule."""
        pause = self.config.run.stop_after_steps
        return pause is not None and self.progress.global_step >= pause and self.progress.global_step < self.total_steps

    def _log_step(self, loss: float, grad_norm: float, seconds: float) -> None:
        """One ``steps.jsonl`` record: ``data_wait_seconds`` is the part of ``seconds`` the slowest rank waited for input."""
        self.logs.step(
            {
                "step": self.progress.global_step,
                "epoch": self.progress.epoch + 1,
                "loss": loss,
                "lr": self._last_step["lr"],
                "grad_norm": grad_norm,
                "seconds": seconds,
                "data_wait_seconds": self._last_step["data_wait"],
            }
        )

    def _epoch_record(self, metrics, val_seconds: float) -> dict[str, Any]:
        """The ``metrics.jsonl`` record of the epoch in progress (before its counters move on)."""
        config, layout, p = self.config, self.layout, self.progress
        sums = p.epoch_state
        peak = max_value(float(peak_memory_bytes(self.device)), layout.world_group, self.device)
        train_seconds = max(sums["seconds"], 1e-12)
        return {
            "epoch": p.epoch + 1,
            "train_loss": sums["loss_sum"] / max(sums["steps"], 1),
            "val_loss": metrics.loss,
            "efficiency": metrics.efficiency,
            "purity": metrics.purity,
            "auc": metrics.auc,
            "seconds": sums["seconds"] + val_seconds,
            "peak_memory_bytes": int(peak),
            "halo_bytes": int(sums["halo_bytes"]),
            "data_wait_fraction": sums["data_wait"] / train_seconds,
            "data_wait_seconds": sums["data_wait"],
            "val_data_wait_seconds": self.val_data_wait,
            "step": p.global_step,
            "steps": sums["steps"],
            "train_seconds": sums["seconds"],
            "val_seconds": val_seconds,
            "events_per_second": sums["events"] / train_seconds,
            "lr": float(self.optimizer.param_groups[0]["lr"]),
            "threshold": config.run.threshold,
            "val_events": metrics.num_events,
            "val_edges": metrics.num_edges,
            "mode": config.parallel.mode,
            "world_size": layout.world_size,
            "domain_size": layout.domain_size,
        }

    def _warn_if_no_halo(self, record: dict[str, Any]) -> None:
        """Say once when a domain group of several ranks exchanged nothing: its partitions cut no edge."""
        if self._halo_warned or self.config.parallel.mode != "domain" or self.layout.domain_size < 2:
            return
        if record["halo_bytes"] == 0 and record["steps"] > 0:
            self._halo_warned = True
            print(
                f"warning: halo_bytes 0 in epoch {record['epoch']}: the plans of these events cut no edge, so the "
                f"{self.layout.domain_size} ranks of a domain group exchanged nothing (METIS finds a 0 % cut on small "
                "or disconnected graphs); train on larger events, or use --method geometric, to exercise the halo exchange",
                file=sys.stderr,
            )

    # ------------------------------------------------------------------- run

    def run(self) -> dict[str, Any]:
        """Train to the end; rank 0 returns the summary (others a short one).

        Raises:
            MachineFault: this rank ran out of memory or disk space; the line names the step and what to try.
        """
        try:
            return self._run()
        except PeerFailed:
            raise  # another rank's failure (maybe its machine fault): named as that rank's, never as this one's
        except Exception as exc:
            line = fault_line(exc, where=self._doing, advice={"memory": MEMORY_ADVICE["train"]})
            if line is None:
                raise
            raise MachineFault(line) from exc

    def _run(self) -> dict[str, Any]:
        if self.layout.is_main:
            # One writer per --out: what a writer killed mid-write left behind is garbage now.
            remove_stale_checkpoint_temporaries(self.out)
        resume_path = self._resume()
        self._resume_path = resume_path
        # Where the run (re)starts: logs beyond it are dropped and newer checkpoints retired once outputs start.
        self._start_at = (self.progress.global_step, self.progress.epoch)
        if self.layout.is_main and self.resume_note is not None:
            print(f"domainpar: {self.resume_note}", file=sys.stderr)
        self._preflight()
        if self.locality_gate is not None:
            # No step before the launcher's verdict on the model's locality (it ran while this rank started).
            self._doing = "waiting for the locality check of the model"
            self.locality_wait_s = wait_at_gate(self.locality_gate)
            if self.layout.is_main and self.locality_wait_s >= 0.1:
                print(f"domainpar: the first step waited {self.locality_wait_s:.2f} s for the locality check", file=sys.stderr)
        run_start = time.perf_counter()
        try:
            return self._run_loop(resume_path, run_start)
        finally:
            self._close_feeds()
            if self.logs is not None:
                self.logs.close()

    def _run_loop(self, resume_path: Path | None, run_start: float) -> dict[str, Any]:
        config, layout, p = self.config, self.layout, self.progress
        main = layout.is_main

        # tqdm's default lock is a multiprocessing semaphore; a rank that is killed cannot release it and the
        # launcher's resource tracker then warns about leaked semaphores. One bar per process needs a thread lock.
        tqdm.set_lock(threading.RLock())
        steps_per_epoch = self.sampler.steps_per_epoch
        last_record: dict | None = None
        last_checkpoint: Path | None = resume_path
        steps_this_run = 0
        paused = self._pause_due()  # never at or past the end of the schedule
        stop = paused or p.global_step >= self.total_steps
        if not stop:
            self._train_feed = self._feeder(self.train_parts, self._train_order(), "train")
        while p.epoch < config.run.epochs and not stop:
            reset_peak_memory(self.device)
            # Validation parts are read while the epoch trains.
            self._val_feed = self._val_feed or self._feeder(self.val_parts, self._val_order(), "val")
            # A bar on a terminal; in a log (a batch job's output file) one plain line every 30 s.
            bar = progress(
                total=steps_per_epoch,
                initial=p.step_in_epoch,
                desc=f"epoch {p.epoch + 1}/{config.run.epochs}",
                unit="step",
                enabled=main and config.run.progress,
            )
            while p.step_in_epoch < steps_per_epoch:
                t0 = time.perf_counter()
                loss, grad_norm = self.train_step()
                seconds = time.perf_counter() - t0
                p.epoch_state["seconds"] += seconds
                steps_this_run += 1
                if main:
                    self._start_outputs()
                    self._log_step(loss, grad_norm, seconds)
                    bar.update(1)
                    wait = p.epoch_state["data_wait"] / max(p.epoch_state["seconds"], 1e-12)
                    bar.set_postfix(
                        loss=f"{loss:.4f}", events_per_s=f"{config.optim.batch_events / seconds:.2f}", data_wait=f"{wait:.0%}"
                    )
                stop = p.global_step >= self.total_steps
                if stop:
                    break
                paused = self._pause_due()
                if paused or (config.run.checkpoint_every and p.global_step % config.run.checkpoint_every == 0):
                    last_checkpoint = self.save() or last_checkpoint
                if paused:
                    break
            bar.close()
            if paused:
                # A pause is an interrupt by appointment: the epoch's validation and record come when it resumes.
                stop = True
                break
            t_val = time.perf_counter()
            metrics = self.validate()
            record = self._epoch_record(metrics, time.perf_counter() - t_val)
            last_record = record
            epoch_done = p.step_in_epoch >= steps_per_epoch
            if epoch_done:
                p.next_epoch()
            if main:
                self._start_outputs()
                self.logs.epoch(record)
                self._warn_if_no_halo(record)
            finished = stop or p.epoch >= config.run.epochs
            if finished or (epoch_done and p.epoch % config.run.checkpoint_every_epochs == 0):
                last_checkpoint = self.save() or last_checkpoint
        if main:
            self._start_outputs()
        if main and last_record is None and resume_path is not None:
            last_record = self.logs.metrics[-1] if self.logs.metrics else None  # resumed with nothing left to train
        model_path = self.save_model(last_record) if main and not paused else None
        wall = time.perf_counter() - run_start
        return {
            "rank": layout.rank,
            "out": str(self.out),
            "mode": config.parallel.mode,
            "world_size": layout.world_size,
            "domain_size": layout.domain_size,
            "num_replicas": layout.num_replicas,
            "steps": p.global_step,
            "total_steps": self.total_steps,
            "paused": paused,
            "steps_this_run": steps_this_run,
            "epochs": p.epoch,
            "final": last_record,
            "step_losses": list(p.step_losses),
            "checkpoint": None if last_checkpoint is None else str(last_checkpoint),
            "model": None if model_path is None else str(model_path),
            "seconds": wall,
            "steps_per_second": steps_this_run / wall if wall > 0 else float("nan"),
            "locality_wait_s": self.locality_wait_s,
        }


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
            locality_gate=payload.get("locality_gate"),
        )
        return trainer.run()
    except BaseException as exc:
        # The first failure of the job wins; a rank that only saw its consequence (a broken collective) names it.
        # A refusal every rank reached on its own (the launcher's gate) is each rank's own.
        if world_size == 1 or isinstance(exc, (PeerFailed, GateRefused)):
            raise
        watchdog = current_watchdog()
        first = watchdog.explain(exc) if watchdog is not None else publish_failure(exc)
        if first is None or first.rank == rank:
            raise
        raise PeerFailed(first, rank) from exc
    finally:
        torch.set_num_threads(threads_before)


__all__ = ["Trainer", "check_run_model", "graph_widths", "model_config_for", "run_rank"]
