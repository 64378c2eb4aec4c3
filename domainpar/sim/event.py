"""One simulated event, step by step: particles, tracks through the layers, hits, clusters, measurements, tables."""

from __future__ import annotations

import numpy as np
import pandas as pd

from domainpar.errors import DomainparError
from domainpar.sim.clusters import cluster_cells, varied_cluster_models
from domainpar.sim.config import SimulationConfig
from domainpar.sim.geometry import detector_geometry
from domainpar.sim.interactions import transport
from domainpar.sim.measurement import measured_positions
from domainpar.sim.noise import noise_count, noise_directions, noise_hits
from domainpar.sim.particles import INTERNAL_COLUMNS, generate_particles
from domainpar.sim.sensors import detect, land_on_modules
from domainpar.sim.truth import truth_weights


def simulate_event(config: SimulationConfig, event_id: int, seed: int) -> dict[str, pd.DataFrame]:
    """Simulate one event.

    Args:
        config: physics and detector response.
        event_id: the event number (only mixed into the random stream).
        seed: base seed; the same (seed, event_id, config) gives identical tables.

    Returns:
        ``{"hits", "cells", "particles", "truth"}`` DataFrames in the TrackML
        layout and dtypes; hits are ordered by volume, layer, module and
        numbered from 1; particles include ``particle_type``.
    """
    if event_id < 0 or seed < 0:
        raise DomainparError(f"event_id and seed must be non-negative (got event_id={event_id}, seed={seed})")
    # One random stream, drawn from in this order: the steps below must keep it for events to stay the same.
    rng = np.random.default_rng([seed, event_id])
    geometry = detector_geometry()
    modules = geometry.modules
    particles, crossings = transport(rng, generate_particles(rng, config), config, geometry)
    crossings = land_on_modules(rng, crossings, config, geometry)
    signal = detect(rng, crossings, config, geometry.layers)
    noise_rows, noise_position = noise_hits(rng, noise_count(config, len(signal)), modules)

    # Every hit: the particles' (grouped by particle, in order along the track), then the noise.
    num_noise = len(noise_rows)
    rows = np.concatenate([signal.module_row, noise_rows])
    particle_id = np.concatenate([particles["particle_id"].to_numpy()[signal.part], np.zeros(num_noise, dtype=np.int64)])
    true_position = np.concatenate([signal.position, noise_position])
    true_momentum = np.concatenate([signal.direction * signal.p[:, None], np.zeros((num_noise, 3))])
    true_direction = np.concatenate([signal.direction, noise_directions(noise_position)])
    pt = np.hypot(particles["px"].to_numpy(), particles["py"].to_numpy())
    # As in the challenge's truth (event 1), secondaries of interactions weigh nothing; decay daughters count.
    weight, nhits = truth_weights(signal.part, pt, particles["generation"].to_numpy() > 0, num_noise)

    # From here on every hit is in file order: hit k has hit_id k + 1.
    order = _file_order(rng, modules, rows)
    rows, particle_id, true_position, true_momentum, true_direction, weight = (
        a[order] for a in (rows, particle_id, true_position, true_momentum, true_direction, weight)
    )
    hit_id = np.arange(1, len(rows) + 1, dtype=np.int32)
    # Clusters first (from the true crossing), then the measured position, whose error depends on the
    # cluster's size: a noise hit is measured where it is.
    cluster_models = varied_cluster_models(rng, config.cluster_variation) if config.cluster_variation > 0 else None
    cells = cluster_cells(rng, hit_id, rows, true_position, true_direction, modules, cluster_models)
    measured = measured_positions(rng, config, modules, rows, true_position, particle_id != 0, cells)
    return {
        "hits": _hits_table(hit_id, measured, modules, rows),
        "cells": cells,
        "particles": _particles_table(particles, nhits),
        "truth": _truth_table(hit_id, particle_id, true_position, true_momentum, weight),
    }


def _file_order(rng: np.random.Generator, modules: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The order of hits in the files: by volume, layer and module like the challenge's files, ties broken at random."""
    volume_id = modules["volume_id"].to_numpy()[rows]
    layer_id = modules["layer_id"].to_numpy()[rows]
    module_id = modules["module_id"].to_numpy()[rows]
    return np.lexsort((rng.random(len(rows)), module_id, layer_id, volume_id))


def _hits_table(hit_id: np.ndarray, measured: np.ndarray, modules: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "hit_id": hit_id,
            "x": measured[:, 0].astype(np.float32),
            "y": measured[:, 1].astype(np.float32),
            "z": measured[:, 2].astype(np.float32),
            "volume_id": modules["volume_id"].to_numpy()[rows].astype(np.int32),
            "layer_id": modules["layer_id"].to_numpy()[rows].astype(np.int32),
            "module_id": modules["module_id"].to_numpy()[rows].astype(np.int32),
        }
    )


def _truth_table(
    hit_id: np.ndarray, particle_id: np.ndarray, true_position: np.ndarray, true_momentum: np.ndarray, weight: np.ndarray
) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "hit_id": hit_id,
            "particle_id": particle_id,
            "tx": true_position[:, 0].astype(np.float32),
            "ty": true_position[:, 1].astype(np.float32),
            "tz": true_position[:, 2].astype(np.float32),
            "tpx": true_momentum[:, 0].astype(np.float32),
            "tpy": true_momentum[:, 1].astype(np.float32),
            "tpz": true_momentum[:, 2].astype(np.float32),
            "weight": weight.astype(np.float32),
        }
    )


def _particles_table(particles: pd.DataFrame, nhits: np.ndarray) -> pd.DataFrame:
    table = particles.drop(columns=list(INTERNAL_COLUMNS)).assign(nhits=nhits.astype(np.int32))
    return table.astype({column: np.float32 for column in ("vx", "vy", "vz", "px", "py", "pz")})


__all__ = ["simulate_event"]
