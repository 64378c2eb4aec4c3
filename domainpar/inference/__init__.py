"""Inference on whole events: edge logits (one process or partitioned with halo exchange), tracks, figures.

* :mod:`~domainpar.inference.config`: :class:`EvaluateConfig`, what ``domainpar evaluate`` does;
* :mod:`~domainpar.inference.model_io`: restoring a trained model;
* :mod:`~domainpar.inference.events`: the events to score (raw TrackML events or graph files, with truth);
* :mod:`~domainpar.inference.infer`: edge logits of whole events;
* :mod:`~domainpar.inference.scoring`: edge metrics, tracks, TrackML score and tracking figures per event and overall;
* :mod:`~domainpar.inference.evaluation`: the whole evaluation and its outputs (submissions, plots);
* :mod:`~domainpar.inference.pipeline`: the pipeline evaluate and reconstruct share (graph build, filter, GNN, tracks);
* :mod:`~domainpar.inference.domain`: partitioned inference of a stream of events on a long-lived domain group;
* :mod:`~domainpar.inference.sources`, :mod:`~domainpar.inference.products`: a reconstruction's inputs, read once,
  and its per-event outputs;
* :mod:`~domainpar.inference.reconstruct`: ``domainpar reconstruct``, the pipeline over a dataset without truth;
* :mod:`~domainpar.inference.measure`: its speed on one real event, stage by stage and chained.

Names are imported lazily so that ``import domainpar.inference`` stays light.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "EvaluateConfig": "domainpar.inference.config",
    "LoadedModel": "domainpar.inference.model_io",
    "load_model": "domainpar.inference.model_io",
    "infer_single": "domainpar.inference.infer",
    "infer_partitioned": "domainpar.inference.infer",
    "evaluate": "domainpar.inference.evaluation",
    "EvaluationReport": "domainpar.inference.evaluation",
    "write_outputs": "domainpar.inference.evaluation",
    "Pipeline": "domainpar.inference.pipeline",
    "load_pipeline": "domainpar.inference.pipeline",
    "ReconstructConfig": "domainpar.inference.reconstruct",
    "reconstruct": "domainpar.inference.reconstruct",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'domainpar.inference' has no attribute {name!r}")


__all__ = sorted(_LAZY)
