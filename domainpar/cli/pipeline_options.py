"""The options of a trained pipeline, one set for ``evaluate`` and ``reconstruct``: :func:`pipeline_options`.

Both commands run the same pipeline (:class:`~domainpar.inference.spec.PipelineSpec`), so they take the same
flags with the same types, defaults and help: the model (``--checkpoint`` or ``--model``), its ``--filter``,
``--threshold`` and ``--tracks`` (each defaulting to what the checkpoint records), and how every event is split
(``--parts``, ``--method``, ``--seed``, ``--timeout``, ``--skip-locality-check``). The spec checks what the
types cannot (exactly one model, ``--parts 1`` with an exported model).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from domainpar.cli.checks import METIS_SEED, FiniteFloat, local_ranks, timeout_seconds
from domainpar.inference.spec import PARTITION_METHODS
from domainpar.tracks.methods import DEFAULT_METHOD, METHODS

#: Every option this module adds, by destination (each a PipelineSpec field of the same name).
PIPELINE_OPTIONS = ("checkpoint", "model", "edge_filter", "threshold", "track_method", "num_parts", "method", "seed",
                    "timeout_s", "skip_locality_check")  # fmt: skip

_OPTIONS = (
    click.option("--checkpoint", type=click.Path(path_type=Path), default=None,
                 help="A training checkpoint (checkpoints/step-*.pt) or the final model.pt of `domainpar train`."),
    click.option("--model", type=click.Path(path_type=Path), default=None,
                 help="Instead of --checkpoint: a model written by `domainpar export` (.onnx, or TorchScript .pt) with its "
                      "sidecar JSON beside it; run as deployed (ONNX Runtime / torch.jit, one process), with the graph "
                      "build and edge filter its sidecar records."),
    click.option("--filter", "edge_filter", type=click.Path(path_type=Path), default=None,
                 help="With --checkpoint: the edge filter (filter.pt of a recipe run) the model's training graphs were "
                      "pruned with; it prunes graphs built from raw events and unpruned graph files."),
    click.option("--threshold", type=FiniteFloat(0, 1, min_open=True, max_open=True), default=None,
                 help="Edge score cut (probability) of the edge metrics and of the components and walk track "
                      "builders (ckf and ambiguity have their own cuts: reconstruct refuses it with them); default: the "
                      "checkpoint's training threshold (else 0.5), or the sidecar's."),
    click.option("--tracks", "track_method", type=click.Choice(list(METHODS)), default=None,
                 help=f"Track building from edge scores (docs/tracks.md); default: the builder the checkpoint records, "
                      f"else {DEFAULT_METHOD}."),
    click.option("--parts", "num_parts", type=local_ranks(), default=None,
                 help="Split every event into this many parts, scored by as many processes with halo exchange (exact). "
                      "Default 1."),
    click.option("--method", type=click.Choice(list(PARTITION_METHODS)), default="metis", show_default=True,
                 help="Partitioner when --parts > 1."),
    click.option("--seed", type=METIS_SEED, default=0, show_default=True, help="METIS seed."),
    click.option("--timeout", "timeout_s", type=timeout_seconds(), default=1800.0, show_default=True,
                 help="Seconds a process group of partitioned inference waits in one exchange before it is declared hung."),
    click.option("--skip-locality-check", is_flag=True,
                 help="With --parts > 1 and a model that is not a built-in: skip the check that the model is local (its "
                      "outputs on a split slice of the first event equal one process's; docs/models.md), for a model "
                      "checked with `domainpar verify`."),
)  # fmt: skip


def pipeline_options(function: Callable) -> Callable:
    """Decorate a click command with the pipeline's options (destinations: :data:`PIPELINE_OPTIONS`)."""
    for option in reversed(_OPTIONS):
        function = option(function)
    return function


def pipeline_fields(options: dict[str, Any], num_parts: int) -> dict[str, Any]:
    """The :class:`~domainpar.inference.spec.PipelineSpec` fields of a command's pipeline options (``num_parts``: the
    parts the command settled on from ``--parts`` and its own ``--ranks``)."""
    fields = {name: options[name] for name in PIPELINE_OPTIONS if name != "num_parts"}
    return {**fields, "num_parts": num_parts}


__all__ = ["PIPELINE_OPTIONS", "pipeline_fields", "pipeline_options"]
