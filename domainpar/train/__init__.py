"""Training: the loop, losses, metrics and checkpoints (ranks are started by :mod:`domainpar.launch`).

``from domainpar.train import train, load_config`` is the programmatic entry
point (``train(config) -> summary``); the submodules are imported lazily so
that importing one of them does not import the whole training stack.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "train": ("domainpar.train.run", "train"),
    "TrainConfig": ("domainpar.train.config", "TrainConfig"),
    "load_config": ("domainpar.train.config", "load_config"),
    "validate_config": ("domainpar.train.config", "validate_config"),
}


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'domainpar.train' has no attribute {name!r}")


__all__ = sorted(_LAZY)
