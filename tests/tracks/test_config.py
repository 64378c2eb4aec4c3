"""The settings of track building (:class:`~domainpar.tracks.config.TrackConfig`): every bad value named."""

from __future__ import annotations

import pytest

from domainpar.errors import DomainparError
from domainpar.tracks.config import TrackConfig


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("method", "best", "tracks.method: expected one of"),
        ("threshold", 1.0, "tracks.threshold: expected a number in"),
        ("threshold", float("nan"), "tracks.threshold"),
        ("sigma_hit", 0.0, "tracks.sigma_hit: expected a number > 0"),
        ("ms", -1.0, "tracks.ms: expected a number >= 0"),
        ("field", True, "tracks.field"),
    ],
)
def test_track_config_names_the_bad_field(field, value, message):
    with pytest.raises(DomainparError, match=message):
        TrackConfig(**{field: value})


@pytest.mark.parametrize(
    "field, value",
    [("seeds_per_hit", 0), ("window", 2), ("min_hits", 2), ("max_shared", -1), ("max_per_layer", True), ("refine", 1),
     ("hole_ratio", -0.5), ("seed_bucket", 1.5), ("gate", 0.0), ("short_layers", -1), ("short_layers", 1.5),
     ("short_min_score", 1.5), ("short_min_pt", -0.1), ("short_max_chi2_ndf", 0.0), ("free_pass", 1),
     ("free_dphi", 4.0), ("free_z0_max", 0.0), ("free_pt_min", -0.1), ("free_dtheta", 0.0), ("free_dkappa", 0.0),
     ("free_dkappa_relative", -0.1), ("free_cluster_cut", float("nan")), ("free_cluster_relative", -1.0),
     ("free_max_chi2_ndf", 0.0), ("free_min_hits", 3), ("free_twins", "yes"), ("free_twin_pt_min", 0.0),
     ("free_twin_max_chi2_ndf", -1.0)],
)  # fmt: skip
def test_every_stage_setting_is_checked(field, value):
    with pytest.raises(DomainparError, match=rf"tracks\.{field}: expected"):
        TrackConfig(**{field: value})

