"""Events restricted to detector volumes: the pixel-only copy of an event is an event like any other."""

from __future__ import annotations

import numpy as np
import pytest

from domainpar.data.subset import PIXEL_VOLUMES, check_volumes, subset_event, write_volume_subset
from domainpar.data.trackml import load_event
from domainpar.errors import DomainparError

from fixtures import EVENT1, TRACKML_DIR


def test_pixel_copy_holds_exactly_the_pixel_hits_with_their_cells_truth_and_counts(tmp_path):
    hits, cells, particles, truth = load_event(EVENT1, parts=("hits", "cells", "particles", "truth"))
    (prefix,) = write_volume_subset(TRACKML_DIR, tmp_path, PIXEL_VOLUMES)
    s_hits, s_cells, s_particles, s_truth = load_event(prefix, parts=("hits", "cells", "particles", "truth"))
    pixel = hits[hits["volume_id"].isin(PIXEL_VOLUMES)]
    assert 0 < len(s_hits) == len(pixel) < len(hits)  # not vacuous: the event has hits outside the pixels
    np.testing.assert_array_equal(s_hits["hit_id"].to_numpy(), pixel["hit_id"].to_numpy())
    np.testing.assert_array_equal(s_hits[["x", "y", "z"]].to_numpy(), pixel[["x", "y", "z"]].to_numpy())
    assert set(s_truth["hit_id"]) == set(s_hits["hit_id"]) and set(s_cells["hit_id"]) <= set(s_hits["hit_id"])
    assert len(s_cells) == int(cells["hit_id"].isin(pixel["hit_id"]).sum())
    # Every particle is kept; its hit count is the pixel hits it left.
    assert len(s_particles) == len(particles)
    counts = s_truth["particle_id"].value_counts()
    expected = s_particles["particle_id"].map(counts).fillna(0).astype(int)
    np.testing.assert_array_equal(s_particles["nhits"].to_numpy(), expected.to_numpy())
    assert (s_particles["nhits"].to_numpy() < particles["nhits"].to_numpy()).any()


def test_a_subset_graph_is_the_pixel_part_of_the_whole_graph(tmp_path):
    from domainpar.data.graph import GraphConfig, build_event_graph

    whole, _ = build_event_graph(EVENT1, GraphConfig())
    part, _ = build_event_graph(subset_event(EVENT1, tmp_path, PIXEL_VOLUMES), GraphConfig())
    pixel_hits = set(part.hit_id.tolist())
    inside = np.array([h in pixel_hits for h in whole.hit_id])
    ends = whole.hit_id[whole.edge_index]
    both = inside[whole.edge_index[0]] & inside[whole.edge_index[1]]
    assert {tuple(e) for e in ends[:, both].T} == {tuple(e) for e in part.hit_id[part.edge_index].T}


@pytest.mark.parametrize(
    ("volumes", "message"),
    [([], "non-empty list"), ([8, 8], "distinct volume ids"), ([8, 99], "distinct volume ids of the detector"), ("8", "list of volume ids")],
)
def test_bad_volumes_are_one_line(volumes, message):
    with pytest.raises(DomainparError, match=message) as caught:
        check_volumes(volumes, "volumes")
    assert "\n" not in str(caught.value)


def test_an_event_without_hits_in_the_volumes_is_refused(tmp_path):
    (prefix,) = write_volume_subset(TRACKML_DIR, tmp_path / "pixel", PIXEL_VOLUMES)
    with pytest.raises(DomainparError, match=r"expected hits in volumes \[13\] \(found none\)"):
        subset_event(prefix, tmp_path / "strips", [13])
