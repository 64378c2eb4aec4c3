"""From training to production: trained edge classifiers as TorchScript or ONNX files.

``domainpar export`` turns a checkpoint into a single-graph model with the
calling convention of ACTS's ExaTrkX edge-classifier stage —
``forward(x, edge_index[, edge_attr]) -> logits`` — plus a sidecar JSON that
says how to build its inputs.

- :mod:`domainpar.export.deploy`: the deploy-time module, rebuilt from the training weights;
- :mod:`domainpar.export.source`: reading and checking the checkpoint;
- :mod:`domainpar.export.writer`: writing TorchScript / ONNX, checked against the training model;
- :mod:`domainpar.export.sidecar`: the sidecar JSON;
- :mod:`domainpar.export.runtime`: running an exported file (``domainpar evaluate --model``).
"""
