"""Inference on whole events: one chain from raw event to tracks, whatever command runs it.

Read in this order:

* :mod:`~domainpar.inference.spec`: :class:`PipelineSpec`, what a trained pipeline is asked to do (the options
  ``evaluate`` and ``reconstruct`` share), and each command's config;
* :mod:`~domainpar.inference.pipeline`: :func:`load_pipeline`, the pipeline restored, the checkpoint's records
  deciding (:mod:`~domainpar.inference.model_io` restores a checkpoint's model);
* :mod:`~domainpar.inference.sources`, :mod:`~domainpar.inference.graphs`, :mod:`~domainpar.inference.events`:
  the events of a run, each read once and made into the model's graph (:func:`prepare_event`);
* :mod:`~domainpar.inference.runner`: the chain, prepared event → logits → scores → tracks (:class:`EventRunner`),
  in one process or partitioned (:mod:`~domainpar.inference.partitioned`: one host/rank protocol with halo
  exchange);
* :mod:`~domainpar.inference.scoring`, :mod:`~domainpar.inference.evaluation`, :mod:`~domainpar.inference.scores`:
  ``domainpar evaluate``, the chain judged against the truth, its plots, submissions and scored graphs;
* :mod:`~domainpar.inference.products`, :mod:`~domainpar.inference.preparer`, :mod:`~domainpar.inference.manifest`,
  :mod:`~domainpar.inference.reconstruct`: ``domainpar reconstruct``, the chain over a dataset without truth as a
  production job.

Its speed, stage by stage and chained, is measured outside the package: ``python -m bench.tools.measure``.

Names are imported lazily so that ``import domainpar.inference`` stays light.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "PipelineSpec": "domainpar.inference.spec",
    "EvaluateConfig": "domainpar.inference.spec",
    "ReconstructConfig": "domainpar.inference.spec",
    "LoadedModel": "domainpar.inference.model_io",
    "load_model": "domainpar.inference.model_io",
    "Pipeline": "domainpar.inference.pipeline",
    "load_pipeline": "domainpar.inference.pipeline",
    "prepare_event": "domainpar.inference.events",
    "EventRunner": "domainpar.inference.runner",
    "LocalGroup": "domainpar.inference.partitioned",
    "evaluate": "domainpar.inference.evaluation",
    "EvaluationReport": "domainpar.inference.evaluation",
    "write_outputs": "domainpar.inference.evaluation",
    "reconstruct": "domainpar.inference.reconstruct",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'domainpar.inference' has no attribute {name!r}")


__all__ = sorted(_LAZY)
