"""Training: the loop, losses, metrics and checkpoints (ranks are started by :mod:`domainpar.launch`).

``from domainpar.train.run import train`` is the programmatic entry point (``train(config) -> summary``).
"""
