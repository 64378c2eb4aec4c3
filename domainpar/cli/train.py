"""``domainpar train``: YAML config plus a flag for every option."""

from __future__ import annotations

import math
from pathlib import Path

import click

#: flag destination → dotted config field
_FIELDS = {
    "data": "data.train",
    "val": "data.val",
    "plans": "data.plans",
    "method": "data.method",
    "cache_events": "data.cache_events",
    "hidden": "model.hidden",
    "iterations": "model.iterations",
    "mlp_layers": "model.mlp_layers",
    "activation": "model.activation",
    "layer_norm": "model.layer_norm",
    "overlap": "model.overlap",
    "lr": "optim.lr",
    "weight_decay": "optim.weight_decay",
    "clip": "optim.clip",
    "pos_weight": "optim.pos_weight",
    "batch_events": "optim.batch_events",
    "schedule": "optim.schedule",
    "warmup": "optim.warmup",
    "lr_scaling": "optim.lr_scaling",
    "mode": "parallel.mode",
    "ranks": "parallel.ranks",
    "domain_size": "parallel.domain_size",
    "timeout": "parallel.timeout_s",
    "device": "parallel.device",
    "threads": "parallel.threads",
    "curves": "run.curves",
    "out": "run.out",
    "epochs": "run.epochs",
    "max_steps": "run.max_steps",
    "seed": "run.seed",
    "precision": "run.precision",
    "checkpointing": "run.checkpointing",
    "offload": "run.offload",
    "checkpoint_every": "run.checkpoint_every",
    "keep": "run.keep",
    "resume": "run.resume",
    "resume_from": "run.resume_from",
    "threshold": "run.threshold",
    "tensorboard": "run.tensorboard",
    "progress": "run.progress",
}


def _fmt(value) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


@click.command("train", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="YAML config (see examples/train_default.yaml); flags override it.")
@click.option("--data", help="Training graphs (*.npz dir or file) or a directory of raw TrackML events.")
@click.option("--val", help="Validation graphs or raw events (default: the training events).")
@click.option("--plans", help="Read domain-mode plans from `domainpar partition` output instead of partitioning on the fly.")
@click.option("--method", help="On-the-fly partitioner in domain mode: metis or geometric.")
@click.option("--cache-events", type=int, help="Events (graph + plan) kept in memory between epochs.")
@click.option("--mode", help="domain (halo exchange), sectors (naive, no halo) or single (one process).")
@click.option("--ranks", type=int, help="Local processes to spawn (ignored under torchrun/srun).")
@click.option("--domain-size", type=int, help="Ranks per domain group G (default: all ranks); world/G replicas.")
@click.option("--timeout", type=float, help="Process-group timeout in seconds (a dead rank stops the others within it).")
@click.option("--device", help="auto, cpu or cuda.")
@click.option("--threads", type=int, help="torch threads per rank (default: cores / local ranks).")
@click.option("--hidden", type=int, help="Hidden width of the Interaction Network.")
@click.option("--iterations", type=int, help="Message-passing iterations.")
@click.option("--mlp-layers", type=int, help="Linear layers per MLP.")
@click.option("--activation", help="silu, relu, tanh, gelu, elu or leaky_relu.")
@click.option("--layer-norm/--no-layer-norm", default=None, help="LayerNorm in the MLPs.")
@click.option("--overlap/--no-overlap", default=None, help="Overlap interior-edge compute with the halo exchange.")
@click.option("--epochs", type=int, help="Passes over the training events.")
@click.option("--max-steps", type=int, help="Stop after this many optimiser steps.")
@click.option("--lr", type=float, help="Peak learning rate (before replica scaling).")
@click.option("--weight-decay", type=float, help="AdamW weight decay.")
@click.option("--batch-events", type=int, help="Events per optimiser step over the whole world.")
@click.option("--schedule", help="cosine, step or constant (after warm-up).")
@click.option("--warmup", type=int, help="Linear warm-up steps.")
@click.option("--lr-scaling", help="Scale lr with the number of replicas: none, linear or sqrt.")
@click.option("--clip", type=float, help="Clip gradients to this global norm (0: off).")
@click.option("--pos-weight", type=float, help="Weight of true edges in the BCE.")
@click.option("--out", help="Output directory (checkpoints, metrics.jsonl, curves.png, model.pt).")
@click.option("--seed", type=int, help="Seed of weights, sampling and RNGs.")
@click.option("--precision", help="fp32 (default), bf16 (CUDA only) or fp64.")
@click.option("--checkpointing/--no-checkpointing", default=None, help="Activation checkpointing per iteration.")
@click.option("--offload/--no-offload", default=None, help="Keep saved activations in host memory.")
@click.option("--checkpoint-every", type=int, help="Also checkpoint every N steps (0: at epoch ends only).")
@click.option("--keep", type=int, help="Checkpoints to keep.")
@click.option("--resume/--no-resume", default=None, help="Continue from the newest checkpoint in --out.")
@click.option("--resume-from", help="Continue from this checkpoint file.")
@click.option("--threshold", type=float, help="Score threshold for efficiency and purity.")
@click.option("--tensorboard/--no-tensorboard", default=None, help="Also write TensorBoard scalars (needs tensorboard).")
@click.option("--progress/--no-progress", default=None, help="Progress bar on rank 0.")
@click.option("--curves/--no-curves", default=None, help="Redraw curves.png after every epoch.")
def train(config_path: Path | None, **options) -> None:
    """Train the edge classifier in domain, sectors or single mode.

    \b
    Examples:
      domainpar train --data graphs/ --mode domain --ranks 2 --epochs 5 --out runs/d2
      domainpar train --config examples/train_default.yaml --lr 3e-4
      torchrun --nproc-per-node 4 -m domainpar train --config run.yaml --domain-size 2
      srun -n 8 domainpar train --config run.yaml --domain-size 4
    """
    from domainpar.train.config import load_config
    from domainpar.train.run import train as run_training

    overrides = {_FIELDS[name]: value for name, value in options.items() if value is not None}
    config = load_config(config_path, overrides)
    summary = run_training(config)
    if summary.get("rank", 0) != 0:
        return
    final = summary.get("final") or {}
    click.echo(
        f"trained {summary['steps']} steps ({summary['epochs']} epochs) in {summary['mode']} mode on "
        f"{summary['world_size']} rank(s), domain size {summary['domain_size']}, {summary['num_replicas']} replica(s)"
    )
    keys = ("epoch", "train_loss", "val_loss", "efficiency", "purity", "auc", "seconds", "peak_memory_bytes", "halo_bytes")
    if final:
        width = max(len(k) for k in keys)
        for key in keys:
            click.echo(f"  {key:<{width}}  {_fmt(final.get(key))}")
    click.echo(f"model: {summary['model']}")
    click.echo(f"checkpoint: {summary['checkpoint']}")
    click.echo(f"metrics: {Path(summary['out']) / 'metrics.jsonl'}")
