"""Learning-rate schedule: linear warm-up, then cosine, step or constant; replica scaling."""

from __future__ import annotations

import math

from domainpar.train.sections import OptimConfig


def replica_scale(lr_scaling: str, num_replicas: int) -> float:
    """Factor applied to the base rate for ``num_replicas`` data-parallel replicas (none, linear, sqrt)."""
    if lr_scaling == "linear":
        return float(num_replicas)
    if lr_scaling == "sqrt":
        return math.sqrt(num_replicas)
    return 1.0


def learning_rate(step: int, total_steps: int, optim: OptimConfig, num_replicas: int = 1) -> float:
    """Learning rate of optimiser step ``step`` (0-based) of ``total_steps``.

    Warm-up ramps linearly to the peak over ``optim.warmup`` steps (step 0 uses
    peak / warmup); afterwards cosine decays to ``min_lr_ratio * peak`` at the
    last step, step multiplies by ``gamma`` every ``step_size`` steps and
    constant keeps the peak.
    """
    peak = optim.lr * replica_scale(optim.lr_scaling, num_replicas)
    if step < optim.warmup:
        return peak * (step + 1) / optim.warmup
    after = step - optim.warmup
    if optim.schedule == "cosine":
        span = max(1, total_steps - optim.warmup - 1)
        progress = min(1.0, after / span)
        return peak * (optim.min_lr_ratio + (1 - optim.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
    if optim.schedule == "step":
        return peak * optim.gamma ** (after // optim.step_size)
    return peak
