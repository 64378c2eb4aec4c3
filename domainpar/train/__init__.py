"""Training: the loop, losses, metrics, checkpoints and process launch.

``from domainpar.train import train, load_config`` is the programmatic entry
point (``train(config) -> summary``); the submodules are imported lazily so
that ``domainpar.train.launch`` stays light.
"""

from __future__ import annotations

_LAZY = {
    "train": ("domainpar.train.run", "train"),
    "TrainConfig": ("domainpar.train.config", "TrainConfig"),
    "load_config": ("domainpar.train.config", "load_config"),
    "validate_config": ("domainpar.train.config", "validate_config"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'domainpar.train' has no attribute {name!r}")


__all__ = sorted(_LAZY)
