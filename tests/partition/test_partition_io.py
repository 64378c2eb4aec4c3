"""Plan directories: round trip, atomic replacement, and refusal of every damaged or mismatched plan."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fixtures import random_graph

from domainpar.errors import DomainparError
from domainpar.partition import partition_graph
from domainpar.partition.io import MANIFEST_NAME, load_plan, part_file_name, save_plan


@pytest.fixture(scope="module")
def graph():
    return random_graph(300, 1200, seed=11)


@pytest.fixture()
def saved(graph, tmp_path):
    plan = partition_graph(graph, 3, "metis", seed=2)
    return plan, save_plan(plan, tmp_path / "event000000011", graph)


def test_round_trip_keeps_every_array(graph, saved):
    plan, directory = saved
    loaded = load_plan(directory, graph, num_parts=3)
    assert (loaded.method, loaded.num_parts, loaded.graph_hash) == (plan.method, 3, graph.content_hash())
    assert np.array_equal(loaded.owner, plan.owner)
    assert loaded.num_cut_edges == plan.num_cut_edges
    for a, b in zip(plan.parts, loaded.parts):
        for name in ("owned_ids", "halo_ids", "recv_parts", "recv_offsets", "send_parts", "send_offsets",
                     "send_ids", "edge_index", "edge_ids", "edge_owned"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
            assert getattr(a, name).dtype == getattr(b, name).dtype, name
        assert (a.num_interior_edges, a.num_edges_global, a.num_positive_edges_global) == (
            b.num_interior_edges, b.num_edges_global, b.num_positive_edges_global)


def test_a_plan_is_refused_for_another_graph(saved):
    _, directory = saved
    other = random_graph(300, 1200, seed=12)
    with pytest.raises(DomainparError, match="plan was made from graph .* but must match the given graph"):
        load_plan(directory, other)


def test_a_truncated_part_file_is_refused(saved):
    _, directory = saved
    path = directory / part_file_name(1)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(DomainparError, match="part file must be .* bytes as its manifest records .* truncated"):
        load_plan(directory)


def test_a_corrupted_part_file_of_the_same_size_is_refused(saved):
    _, directory = saved
    path = directory / part_file_name(2)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DomainparError, match="part file checksum must match its manifest .* modified"):
        load_plan(directory)


def test_a_missing_part_file_is_refused(saved):
    _, directory = saved
    (directory / part_file_name(0)).unlink()
    with pytest.raises(DomainparError, match=r"plan must hold 3 part files \(found 2\)"):
        load_plan(directory)


def test_a_plan_of_another_part_count_is_refused(saved):
    _, directory = saved
    with pytest.raises(DomainparError, match=r"plan must have 4 parts \(got a plan of 3 parts\)"):
        load_plan(directory, num_parts=4)


def test_a_manifest_that_disagrees_with_its_files_is_refused(saved):
    _, directory = saved
    manifest = json.loads((directory / MANIFEST_NAME).read_text())
    manifest["num_parts"] = 2
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(DomainparError, match=r"manifest must list num_parts=2 part files \(got 3\)"):
        load_plan(directory)


def test_another_format_version_is_refused(saved):
    _, directory = saved
    manifest = json.loads((directory / MANIFEST_NAME).read_text())
    manifest["format_version"] = 99
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(DomainparError, match=r"plan format version must be 3 \(got 99\)"):
        load_plan(directory)


def test_a_directory_without_a_plan_is_refused(tmp_path):
    with pytest.raises(DomainparError, match="expected a plan directory with manifest.json"):
        load_plan(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(DomainparError, match="expected a JSON plan manifest"):
        load_plan(tmp_path)


def test_saving_replaces_an_old_plan_and_leaves_no_temporaries(graph, saved):
    _, directory = saved
    plan4 = partition_graph(graph, 4, "geometric")
    save_plan(plan4, directory, graph)
    assert load_plan(directory, graph).num_parts == 4
    assert sorted(p.name for p in directory.parent.iterdir()) == [directory.name]
    assert len(list(directory.glob("part_*.npz"))) == 4


def test_saving_over_a_foreign_directory_is_refused(graph, tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "notes.txt").write_text("keep me")
    with pytest.raises(DomainparError, match="found a non-empty directory without manifest.json"):
        save_plan(partition_graph(graph, 2, "metis"), tmp_path / "results", graph)
    assert (tmp_path / "results" / "notes.txt").read_text() == "keep me"
