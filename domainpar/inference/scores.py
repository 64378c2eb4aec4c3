"""Scores back to files: each evaluated event's graph, with its per-edge scores, for the stages after the GNN.

``domainpar evaluate --write-scores DIR`` writes, for every event, its graph
in the format it was read (so a PyG pipeline — acorn's track building — reads
it as it reads its own graphs):

* a domainpar graph file (``.npz``, and graphs built from raw events): the
  graph scored — after the pipeline's edge filter, if it pruned it — plus
  ``edge_score`` (E,) float32, ``sigmoid(logit)`` per edge, and
  ``edge_score_record``, the JSON of what produced the scores;
* a PyG file: the file's own ``Data`` with every attribute kept, plus
  ``edge_scores`` (E,) float32 over the file's edges (an edge the edge
  filter removed was not scored by the classifier and gets 0, with
  ``edge_scored`` marking the scored ones), and ``edge_scores_record``.

The record names the checkpoint (path, content SHA-256, step) or the exported
model (path, SHA-256 of its file), the threshold, the partitioning, the input
file and the domainpar version, so a later stage can tell which model's scores
it reads. Every file is written to a temporary name and renamed
(:func:`domainpar.atomic.atomic_path`); the command publishes them together.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from domainpar.atomic import atomic_path
from domainpar.data.event_graph import save_graph
from domainpar.data.pyg_files import read_pyg_object
from domainpar.inference.scoring import EventEvaluation

#: Entries added to a domainpar graph file.
NPZ_SCORES, NPZ_RECORD = "edge_score", "edge_score_record"
#: Attributes added to a PyG Data.
PYG_SCORES, PYG_RECORD, PYG_SCORED = "edge_scores", "edge_scores_record", "edge_scored"


def write_scored_graph(evaluation: EventEvaluation, directory: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write one event's graph with its edge scores into ``directory`` (format as read; see the module docstring).

    Args:
        evaluation: the evaluated event (its scores and the input it came from).
        directory: where to write.
        record: what produced the scores (the model, its checksum, the threshold...); the input file is added.
    """
    event = evaluation.event
    # The input's own name, or event<id>.npz for a raw event.
    name = f"event{evaluation.event_id:09d}.npz" if event.source_format == "raw" else Path(event.source.path).name
    path = Path(directory) / name
    record = {**record, "event_id": int(evaluation.event_id), "input": str(event.source.path),
              "score": "sigmoid(logit) of the edge classifier"}  # fmt: skip
    scores = evaluation.scores.astype(np.float32)
    if event.source_format == "pyg":
        data = read_pyg_object(event.source.path)
        full = scores
        if event.kept is not None:
            full = np.zeros(event.kept.shape[0], dtype=np.float32)
            full[event.kept] = scores
            data[PYG_SCORED] = torch.from_numpy(event.kept.copy())
        data[PYG_SCORES] = torch.from_numpy(full)
        data[PYG_RECORD] = json.dumps(record, sort_keys=True)
        with atomic_path(path) as tmp:
            torch.save(data, tmp)
        return path
    extra = {NPZ_SCORES: scores, NPZ_RECORD: np.array(json.dumps(record, sort_keys=True), dtype=np.str_)}
    return save_graph(evaluation.graph, path, extra=extra)


def read_scores(path: str | os.PathLike) -> tuple[np.ndarray, dict[str, Any]]:
    """(E,) float32 scores and their record from a file written by :func:`write_scored_graph`."""
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as npz:
            return npz[NPZ_SCORES], json.loads(str(npz[NPZ_RECORD]))
    data = read_pyg_object(path)
    return data[PYG_SCORES].numpy(), json.loads(data[PYG_RECORD])


__all__ = ["read_scores", "write_scored_graph"]
