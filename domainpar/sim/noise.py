"""Noise hits: hits that belong to no particle, at the real event's rate and spread over the volumes as in it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from domainpar.sim.config import SimulationConfig

#: Share of noise hits per volume. Pixels (7, 8, 9): the real event 21000's pixel truth (763, 2,178 and 821 of
#: its 17,851 noise hits); strips: the rest, shared as in the real labelled event 1 (829 noise hits).
NOISE_VOLUME_FRACTIONS = {7: 0.0427, 8: 0.1220, 9: 0.0460, 12: 0.0629, 13: 0.2868, 14: 0.0571, 16: 0.0280, 17: 0.3102, 18: 0.0443}


def noise_count(config: SimulationConfig, num_signal: int) -> int:
    """Noise hits of an event with ``num_signal`` particle hits: ``noise_fraction`` of all its hits."""
    return int(round(config.noise_fraction / (1.0 - config.noise_fraction) * num_signal))


def noise_hits(rng: np.random.Generator, num_noise: int, modules: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Noise hits: a volume by the real per-volume shares, a module uniformly, a point uniformly on it.

    Returns:
        ``(rows, position)``: (K,) module row in ``modules`` and (K, 3) position of every noise hit, mm.
    """
    volumes = np.array(list(NOISE_VOLUME_FRACTIONS))
    shares = np.array(list(NOISE_VOLUME_FRACTIONS.values()))
    volume_of = rng.choice(volumes, num_noise, p=shares / shares.sum())
    module_volume = modules["volume_id"].to_numpy()
    rows = np.empty(num_noise, dtype=np.int64)
    for volume in volumes:
        mask = volume_of == volume
        candidates = np.flatnonzero(module_volume == volume)
        rows[mask] = candidates[rng.integers(0, candidates.size, int(mask.sum()))]
    centre = modules[["cx", "cy", "cz"]].to_numpy()[rows]
    u = rng.uniform(-1.0, 1.0, num_noise) * modules["module_minhu"].to_numpy()[rows]
    v = rng.uniform(-1.0, 1.0, num_noise) * modules["module_hv"].to_numpy()[rows]
    position = centre + u[:, None] * modules[["rot_xu", "rot_yu", "rot_zu"]].to_numpy()[rows]
    position += v[:, None] * modules[["rot_xv", "rot_yv", "rot_zv"]].to_numpy()[rows]
    return rows, position


def noise_directions(position: np.ndarray) -> np.ndarray:
    """(K, 3) unit directions of the crossings whose clusters the noise hits at ``position`` (K, 3) leave: a straight
    track from the beam spot, as the real noise clusters are (long along z at large |z|, not single pixels)."""
    return position / np.maximum(np.linalg.norm(position, axis=1, keepdims=True), 1e-9)


__all__ = ["NOISE_VOLUME_FRACTIONS", "noise_count", "noise_directions", "noise_hits"]
