"""Scores back to files: each evaluated event's graph, with its per-edge scores, for the stages after the GNN.

``domainpar evaluate --write-scores DIR`` writes every event's graph in the format it was read (so a PyG pipeline
reads it as it reads its own graphs): a domainpar graph file (``.npz``, also for raw events) gets
:data:`NPZ_SCORES` (E,) float32 ``sigmoid(logit)`` per edge of the graph scored (after the edge filter) and
:data:`NPZ_RECORD`; a PyG file keeps its own ``Data`` and gets :data:`PYG_SCORES` over the file's edges (an edge the
filter removed gets 0, :data:`PYG_SCORED` marks the scored ones) and :data:`PYG_RECORD`. The record names what
produced the scores (the checkpoint or exported model and its digest, the threshold, the partitioning, the input
file, the domainpar version).
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


__all__ = ["write_scored_graph"]
