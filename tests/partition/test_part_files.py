"""Self-sufficient part files: round trip, reproducible bytes, and refusal of every damaged, hostile or mismatched part.

Also the plan invariants as code: ``PartPlan.validate`` / ``PartitionPlan.validate``
reject broken plans that ``build_plan`` never makes, and plan arrays are read-only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil

import numpy as np
import pytest
from fixtures import random_graph
from plan_oracle import assert_plan_invariants

from domainpar.errors import DomainparError
from domainpar.npzfile import read_npz, write_npz
from domainpar.partition import build_plan, partition_graph
from domainpar.partition.io import load_part, load_plan, part_file_name, save_plan
from domainpar.partition.part_data import cut_part, whole_graph_part
from domainpar.partition.plan import PART_ARRAY_DTYPES

FEATURES = ("x", "edge_attr", "y", "hit_id")


@pytest.fixture(scope="module")
def graph():
    return random_graph(300, 1500, seed=21)  # event 21


@pytest.fixture()
def plan_dir(graph, tmp_path):
    plan = partition_graph(graph, 3, "metis", seed=1)
    return plan, save_plan(plan, tmp_path / "event000000021", graph)


def reseal(directory):
    """Record the part files' current sizes and digests in the manifest: what the field checks under the
    digest see when someone rewrites a plan's manifest along with its parts."""
    manifest_path = directory / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["part_files"]:
        content = (directory / entry["name"]).read_bytes()
        entry["bytes"], entry["sha256"] = len(content), hashlib.sha256(content).hexdigest()
    manifest_path.write_text(json.dumps(manifest))


def _assert_same_part(a, b):
    for name in PART_ARRAY_DTYPES:
        x, y = getattr(a.plan, name), getattr(b.plan, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    for name in FEATURES + ("dropped_y",):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and np.array_equal(x, y), name
    for name in ("event_id", "graph_hash", "plan_hash", "method", "drops_cut_edges", "num_edges_graph"):
        assert getattr(a, name) == getattr(b, name), name


def test_round_trip_every_part_holds_what_the_rank_needs(graph, plan_dir):
    plan, directory = plan_dir
    for p in range(3):
        loaded = load_part(directory / part_file_name(p), part=p, num_parts=3, event_id=graph.event_id, plan_hash=plan.plan_hash)
        _assert_same_part(loaded, cut_part(graph, plan, p))
        # The part's features are the graph's rows of its owned nodes and local edges.
        assert np.array_equal(loaded.x, graph.x[loaded.plan.owned_ids])
        assert np.array_equal(loaded.edge_attr, graph.edge_attr[loaded.plan.edge_ids])
        assert np.array_equal(loaded.y, graph.y[loaded.plan.edge_ids])
        assert np.array_equal(loaded.hit_id, graph.hit_id[loaded.plan.owned_ids])
        assert loaded.graph_hash == graph.content_hash() and loaded.num_edges_graph == graph.num_edges
    whole = load_plan(directory, graph, num_parts=3)
    assert whole.plan_hash == plan.plan_hash and np.array_equal(whole.owner, plan.owner)
    assert_plan_invariants(whole, graph.edge_index, graph.y)


def test_a_rank_reads_only_its_own_part(graph, plan_dir):
    plan, directory = plan_dir
    for p in (0, 2):
        (directory / part_file_name(p)).unlink()
    loaded = load_part(directory / part_file_name(1), part=1, num_parts=3)
    assert loaded.plan.num_owned == plan.parts[1].num_owned
    # O(E/P): the part holds its local edges only, not the event's.
    assert loaded.edge_attr.shape[0] == plan.parts[1].num_local_edges < graph.num_edges


def test_the_same_plan_gives_the_same_bytes(graph, plan_dir, tmp_path):
    plan, directory = plan_dir
    again = save_plan(partition_graph(graph, 3, "metis", seed=1), tmp_path / "again", graph)
    for name in ["manifest.json", "owner.npz"] + [part_file_name(p) for p in range(3)]:
        assert (directory / name).read_bytes() == (again / name).read_bytes(), name


def test_sectors_parts_carry_the_labels_of_the_cut_edges_they_would_own(graph, tmp_path):
    plan = partition_graph(graph, 3, "sectors")
    directory = save_plan(plan, tmp_path / "sectors", graph)
    dropped = [load_part(directory / part_file_name(p)).dropped_y for p in range(3)]
    cut = plan.owner[graph.edge_index[0]] != plan.owner[graph.edge_index[1]]
    # Every dropped edge exactly once over the parts: the rank owning its dst counts it.
    assert sum(d.size for d in dropped) == int(cut.sum()) > 0
    assert sum(float(d.sum()) for d in dropped) == float(graph.y[cut].sum())


def test_the_whole_graph_is_the_one_part_plan_without_copies(graph):
    whole = whole_graph_part(graph)
    assert whole.plan.num_parts == 1 and whole.plan.num_halo == 0 and whole.plan.num_interior_edges == graph.num_edges
    assert np.shares_memory(whole.edge_attr, graph.edge_attr) and np.shares_memory(whole.plan.edge_index, graph.edge_index)
    plan = build_plan(graph.edge_index, np.zeros(graph.num_nodes, np.int64), 1, y=graph.y)
    assert_plan_invariants(plan, graph.edge_index, graph.y)
    plan.validate()
    assert np.array_equal(plan.parts[0].edge_index, whole.plan.edge_index)
    assert np.array_equal(whole.y, graph.y) and np.array_equal(whole.x, graph.x)


# ----------------------------------------------------------------------------------- mismatched parts


def test_a_part_of_another_event_is_refused_naming_the_file(graph, plan_dir, tmp_path):
    _, directory = plan_dir
    other = dataclasses.replace(random_graph(300, 1500, seed=22), event_id=22)
    other_dir = save_plan(partition_graph(other, 3, "metis", seed=1), tmp_path / "event000000022", other)
    shutil.copy(other_dir / part_file_name(1), directory / part_file_name(1))
    path = directory / part_file_name(1)
    # The manifest's digest catches the copy first ...
    with pytest.raises(DomainparError, match=rf"^{path}: part file must be \d+ bytes as its manifest records|^{path}: part file checksum"):
        load_part(path, part=1, num_parts=3, event_id=21)
    # ... and a manifest rewritten to match still holds a part of another event.
    reseal(directory)
    with pytest.raises(DomainparError, match=rf"^{path}: part file must be of event 21 \(got 22\)") as info:
        load_part(path, part=1, num_parts=3, event_id=21)
    assert "\n" not in str(info.value)


def test_a_part_of_another_plan_is_refused_naming_the_file(graph, plan_dir, tmp_path):
    plan, directory = plan_dir
    other = save_plan(partition_graph(graph, 3, "metis", seed=7), tmp_path / "seed7", graph)
    path = other / part_file_name(2)
    with pytest.raises(DomainparError, match=rf"^{path}: part file must be of plan {plan.plan_hash} \(got [0-9a-f]{{16}}\)"):
        load_part(path, part=2, num_parts=3, plan_hash=plan.plan_hash)


def test_a_part_of_a_plan_with_another_part_count_is_refused_naming_the_file(graph, tmp_path):
    directory = save_plan(partition_graph(graph, 4, "geometric"), tmp_path / "p4", graph)
    path = directory / part_file_name(1)
    with pytest.raises(DomainparError, match=rf"^{path}: part file must be of a plan with num_parts 2 \(got 4\)"):
        load_part(path, part=1, num_parts=2)
    with pytest.raises(DomainparError, match=rf"^{path}: part file must be part 0 \(got 1\)"):
        load_part(path, part=0, num_parts=4)


# ------------------------------------------------------------------------------- damaged and hostile


def test_a_corrupted_part_file_is_refused_naming_the_file(plan_dir):
    _, directory = plan_dir
    path = directory / part_file_name(0)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of some array's data
    path.write_bytes(bytes(data))
    with pytest.raises(DomainparError, match=rf"^{path}: part file checksum must match its manifest .*modified"):
        load_part(path)


def test_a_part_edited_into_another_valid_archive_never_loads(plan_dir):
    """Labels rewritten into a perfectly valid part file (CRCs and fields intact): only the manifest's digest knows."""
    _, directory = plan_dir
    path = directory / part_file_name(0)
    arrays = read_npz(path)
    arrays["y"] = 1.0 - arrays["y"]
    write_npz(path, arrays)
    with pytest.raises(DomainparError, match=rf"^{path}: part file checksum must match its manifest"):
        load_part(path)
    with pytest.raises(DomainparError, match=rf"^{path}: part file checksum must match its manifest"):
        load_plan(directory)


def test_a_part_file_without_its_manifest_is_refused(plan_dir, tmp_path):
    _, directory = plan_dir
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(directory / part_file_name(0), lone / part_file_name(0))
    with pytest.raises(DomainparError, match=r"expected a plan directory with manifest.json"):
        load_part(lone / part_file_name(0))


@pytest.mark.parametrize("cut", [10, 1000, -100])
def test_a_truncated_part_file_is_refused_naming_the_file(plan_dir, cut):
    _, directory = plan_dir
    path = directory / part_file_name(0)
    data = path.read_bytes()
    path.write_bytes(data[:cut])
    with pytest.raises(DomainparError, match=rf"^{path}: "):
        load_part(path)


def _rewrite(path, **changes):
    arrays = read_npz(path)
    for name, value in changes.items():
        if value is None:
            del arrays[name]
        else:
            arrays[name] = value
    write_npz(path, arrays)


@pytest.mark.parametrize(
    "field, make, message",
    [
        ("edge_index", lambda a: a["edge_index"] + 10**6, r"edge_index must be local ids within"),
        ("edge_index", lambda a: a["edge_index"].astype(np.int32), r"edge_index must be of dtype int64 \(got int32\)"),
        ("send_ids", lambda a: np.full_like(a["send_ids"], -1), r"send_ids must be owned rows within"),
        ("owned_ids", lambda a: a["owned_ids"][::-1].copy(), r"owned_ids must be strictly ascending"),
        ("edge_owned", lambda a: ~a["edge_owned"], r"edge_owned must be true exactly for the edges whose dst is owned"),
        ("num_interior_edges", lambda a: np.int64(a["num_interior_edges"] + 1), r"interior edges .* first"),
        ("x", lambda a: np.full_like(a["x"], np.nan), r"x must be finite"),
        ("x", lambda a: a["x"][:-1], r"x must have \d+ rows, one per owned node"),
        ("y", lambda a: a["y"] * 3, r"y must hold labels in \[0, 1\]"),
        ("edge_attr", lambda a: a["edge_attr"].astype(np.float64), r"edge_attr must be a 2-dimensional float32 array"),
        ("plan_hash", lambda a: np.str_("not-a-hash"), r"plan_hash must be 16 hex digits"),
        ("format_version", lambda a: np.int64(1), r"part file format version must be 3 \(got 1\)"),
        ("format_version", lambda a: np.str_("2"), r"format_version must be a scalar"),
        ("recv_offsets", lambda a: a["recv_offsets"][:-1], r"recv_offsets must be of shape"),
        ("edge_ids", None, r"part file is missing entries \['edge_ids'\]"),
        ("part", lambda a: np.int64(7), r"part must be in \[0, num_parts=3\)"),
    ],
)
def test_a_hostile_field_is_refused_naming_file_and_field(plan_dir, field, make, message):
    _, directory = plan_dir
    path = directory / part_file_name(1)
    arrays = read_npz(path)
    _rewrite(path, **{field: None if make is None else make(arrays)})
    with pytest.raises(DomainparError, match=rf"^{path}: part file (checksum must match|must be \d+ bytes as) its manifest"):
        load_part(path)
    reseal(directory)  # the field checks hold under a manifest rewritten along with the part
    with pytest.raises(DomainparError, match=rf"^{path}: .*{message}") as info:
        load_part(path)
    assert "\n" not in str(info.value)


def test_an_object_array_is_never_unpickled(plan_dir):
    _, directory = plan_dir
    path = directory / part_file_name(1)
    arrays = read_npz(path)
    arrays["x"] = np.array([{"evil": 1}], dtype=object)
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, value in arrays.items():
            with archive.open(f"{name}.npy", "w") as fh:
                np.lib.format.write_array(fh, value, allow_pickle=True)
    reseal(directory)
    with pytest.raises(DomainparError, match=rf"^{path}: expected an intact part file .*object"):
        load_part(path)


# ---------------------------------------------------------------------------------- plan invariants


def test_plan_arrays_are_read_only(graph):
    plan = partition_graph(graph, 3, "metis", seed=1)
    for part in plan.parts:
        for name in PART_ARRAY_DTYPES:
            assert not getattr(part, name).flags.writeable, name
    assert not plan.owner.flags.writeable
    with pytest.raises(ValueError):
        plan.parts[0].send_ids[0] = 0


def test_plan_validate_accepts_real_plans_and_names_broken_ones(graph):
    plan = partition_graph(graph, 3, "metis", seed=1)
    assert plan.validate() is plan
    parts = list(plan.parts)
    # A send list that is a permutation of the right rows: every part alone is fine, the pair is not.
    p = next(p for p in parts if p.send_ids.size > 1)
    swapped = p.send_ids.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    parts[p.part] = dataclasses.replace(p, send_ids=swapped)
    broken = dataclasses.replace(plan, parts=tuple(parts))
    broken.parts[p.part].validate()
    with pytest.raises(DomainparError, match=r"halo block from part .* must be exactly the rows part .* sends"):
        broken.validate()
    # Owners that disagree with the parts.
    owner = plan.owner.copy()
    owner[plan.parts[0].owned_ids[0]] = 1
    with pytest.raises(DomainparError, match=r"owned_ids must be exactly the nodes whose owner is 0"):
        dataclasses.replace(plan, owner=owner, plan_hash="").validate()
    # A plan hash that does not name the owners.
    with pytest.raises(DomainparError, match=r"plan_hash must be"):
        dataclasses.replace(plan, plan_hash="0" * 16).validate()
