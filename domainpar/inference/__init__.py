"""Inference on whole events: edge logits (one process or partitioned with halo exchange), tracks, figures.

* :mod:`~domainpar.inference.config`: :class:`EvaluateConfig`, what ``domainpar evaluate`` does;
* :mod:`~domainpar.inference.model_io`: restoring a trained model;
* :mod:`~domainpar.inference.events`: the events to score (raw TrackML events or graph files, with truth);
* :mod:`~domainpar.inference.infer`: edge logits of whole events;
* :mod:`~domainpar.inference.scoring`: edge metrics, tracks, TrackML score and tracking figures per event and overall;
* :mod:`~domainpar.inference.evaluation`: the whole evaluation and its outputs (submissions, plots).

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
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'domainpar.inference' has no attribute {name!r}")


__all__ = sorted(_LAZY)
