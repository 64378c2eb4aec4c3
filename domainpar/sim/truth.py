"""Truth weights of the TrackML challenge: how much every hit counts in the score."""

from __future__ import annotations

import numpy as np

#: Hit-order weights of the TrackML score for a 9-hit track; other lengths interpolate it.
ORDER_WEIGHT_REFERENCE = np.array([10.0, 8.0, 6.0, 5.0, 3.0, 3.0, 3.0, 5.0, 6.0])


def order_weights(num_hits: np.ndarray, order: np.ndarray) -> np.ndarray:
    """TrackML hit-order weight of the hit at position ``order`` on a track of ``num_hits`` hits."""
    position = np.where(num_hits > 1, order * (len(ORDER_WEIGHT_REFERENCE) - 1) / np.maximum(num_hits - 1, 1), 0.0)
    return np.interp(position, np.arange(len(ORDER_WEIGHT_REFERENCE)), ORDER_WEIGHT_REFERENCE)


def pt_weight(pt: np.ndarray) -> np.ndarray:
    """TrackML particle weight: 0.2 below 0.5 GeV, linear up to 1 at 3 GeV, 1 above."""
    return np.clip(0.2 + 0.8 * (np.asarray(pt) - 0.5) / 2.5, 0.2, 1.0)


def rank_within(group: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run of equal consecutive values of ``group``."""
    if len(group) == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    run_of = np.cumsum(np.r_[True, group[1:] != group[:-1]]) - 1
    return np.arange(len(group)) - starts[run_of]


def truth_weights(part: np.ndarray, pt: np.ndarray, secondary: np.ndarray, num_noise: int) -> tuple[np.ndarray, np.ndarray]:
    """The challenge's weight of every hit, and the hits of every particle.

    A particle weighs :func:`pt_weight` of its pT (zero below 4 hits and for
    secondaries of interactions in the material, as in the challenge's truth:
    decay daughters count), split over its hits by :func:`order_weights` of their order
    along the track; noise hits weigh nothing; the weights sum to 1.

    Args:
        part: (K,) particle row of every particle hit, grouped by particle in order along the track.
        pt: (P,) transverse momentum of every particle, GeV.
        secondary: (P,) whether the particle is a secondary of an interaction in the material.
        num_noise: noise hits, which follow the K particle hits.

    Returns:
        ``(weight, nhits)``: (K + num_noise,) weights, and (P,) hits per particle.
    """
    num_particles = pt.size
    # Order along the track among detected hits (the order weight counts measured hits).
    hit_order = rank_within(part)
    nhits = np.bincount(part, minlength=num_particles)
    particle_weight = pt_weight(pt) * (nhits >= 4) * ~secondary
    order_weight = order_weights(nhits[part], hit_order)
    order_sum = np.bincount(part, weights=order_weight, minlength=num_particles)
    signal_weight = particle_weight[part] * order_weight / np.maximum(order_sum[part], 1e-12)
    weight = np.concatenate([signal_weight, np.zeros(num_noise)])
    if weight.sum() > 0:
        weight /= weight.sum()
    return weight, nhits


__all__ = ["ORDER_WEIGHT_REFERENCE", "order_weights", "pt_weight", "rank_within", "truth_weights"]
