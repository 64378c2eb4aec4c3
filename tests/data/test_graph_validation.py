"""Graph files at the boundary: any entry of the wrong type, dtype or shape, or non-finite content, is one line."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from domainpar.data.event_graph import EventGraph, save_graph
from domainpar.data.graph_files import inspect_graph, load_graph
from domainpar.errors import DomainparError


@pytest.fixture
def graph_path(tmp_path) -> Path:
    rng = np.random.default_rng(0)
    n, e = 12, 20
    graph = EventGraph(
        event_id=3,
        x=rng.normal(size=(n, 3)).astype(np.float32),
        pos=rng.normal(size=(n, 3)).astype(np.float32),
        hit_id=np.arange(1, n + 1, dtype=np.int64),
        layer=np.zeros(n, np.int64),
        edge_index=rng.integers(0, n, (2, e)).astype(np.int64),
        edge_attr=rng.normal(size=(e, 4)).astype(np.float32),
        y=(rng.random(e) < 0.5).astype(np.float32),
        particle_id=np.arange(n, dtype=np.int64),
        particle_pt=np.ones(n, np.float32),
    )
    return save_graph(graph, tmp_path / "event000000003.npz")


def _rewrite(path: Path, edit) -> Path:
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    edit(arrays)
    target = path.with_name("edited.npz")
    with open(target, "wb") as fh:
        np.savez(fh, **arrays)
    return target


CASES = [
    (lambda a: a.__setitem__("format_version", np.array("1")), r"entry format_version must be an int64 scalar \(got a str32 scalar\)"),
    (lambda a: a.__setitem__("format_version", np.array([1, 1])), r"entry format_version must be an int64 scalar \(got a int64 array of shape \(2,\)\)"),
    (lambda a: a.__setitem__("event_id", np.int32(1)), r"entry event_id must be an int64 scalar \(got a int32 scalar\)"),
    (lambda a: a.__setitem__("format_version", np.int64(7)), r"graph format version must be one of \[1, 2\] \(got 7\)"),
    (lambda a: a.pop("format_version"), r"found no format_version entry"),
    (lambda a: a.__setitem__("event_id", np.int64(-1)), r"event_id must be a non-negative integer \(got -1\)"),
    (lambda a: a.__setitem__("x", np.float32(1)), r"x must be 2-dimensional \(N, F\) \(got shape \(\)\)"),
    (lambda a: a.__setitem__("x", a["x"][:, 0].copy()), r"x must be 2-dimensional \(N, F\) \(got shape \(12,\)\)"),
    (lambda a: a.__setitem__("x", a["x"].astype(np.float64)), r"x must be of dtype float32 \(got float64\)"),
    (lambda a: a.__setitem__("x", a["x"].astype(str)), r"x must be of dtype float32 \(got str"),
    (lambda a: a.__setitem__("x", np.zeros((12, 0), np.float32)), r"x must be of at least one feature column"),
    (lambda a: a["x"].__setitem__((2, 1), np.nan), r"x must be finite numbers \(got nan at \[2, 1\]\)"),
    (lambda a: a["pos"].__setitem__((0, 2), np.inf), r"pos must be finite numbers \(got inf at \[0, 2\]\)"),
    (lambda a: a.__setitem__("pos", a["pos"][:, :2].copy()), r"pos must be of shape \(12, 3\) \(got \(12, 2\)\)"),
    (lambda a: a["edge_attr"].__setitem__((4, 0), -np.inf), r"edge_attr must be finite numbers \(got -inf at \[4, 0\]\)"),
    (lambda a: a.__setitem__("edge_attr", a["edge_attr"][:-1].copy()), r"edge_attr must be of shape \(20, F\) \(got \(19, 4\)\)"),
    (lambda a: a["edge_index"].__setitem__((1, 3), 12), r"edge_index must be within \[0, 12\) \(got values in \[0, 12\]\)"),
    (lambda a: a.__setitem__("edge_index", a["edge_index"].astype(np.float32)), r"edge_index must be of dtype int64 \(got float32\)"),
    (lambda a: a.__setitem__("y", a["y"][:-1].copy()), r"y must be of shape \(20,\) \(got \(19,\)\)"),
    (lambda a: a["y"].__setitem__(5, 0.5), r"y must be edge labels 0 or 1 \(got 0.5 at \[5\]\)"),
    (lambda a: a["hit_id"].__setitem__(4, 1), r"hit_id must be unique hit ids \(got 1 more than once\)"),
    (lambda a: a["particle_pt"].__setitem__(0, -2.0), r"particle_pt must be non-negative GeV"),
    (lambda a: a.__setitem__("x", np.array([None, 1], dtype=object)), r"entry x must be a numeric array \(got an array of Python objects\)"),
    (lambda a: a.pop("layer"), r"graph file is missing entries \['layer'\]"),
]


@pytest.mark.parametrize("edit, message", CASES)
def test_damaged_graph_entries_are_refused_in_one_line(graph_path, edit, message):
    path = _rewrite(graph_path, edit)
    with pytest.raises(DomainparError, match=message) as info:
        load_graph(path)
    assert "\n" not in str(info.value) and str(info.value).startswith(str(path))


def test_header_check_refuses_structure_without_reading_data(graph_path, monkeypatch):
    """inspect_graph (what train runs on every file before writing anything) sees dtype/shape damage."""
    header = inspect_graph(graph_path)
    assert (header.event_id, header.num_nodes, header.num_edges, header.node_features, header.edge_features, header.has_labels) == (3, 12, 20, 3, 4, True)
    damaged = _rewrite(graph_path, lambda a: a.__setitem__("x", np.float32(1)))
    monkeypatch.setattr(np.lib.format, "read_array", lambda *a, **k: pytest.fail("inspect_graph must not read array data"))
    with pytest.raises(DomainparError, match=r"x must be 2-dimensional"):
        inspect_graph(damaged)


def test_a_header_promising_a_huge_array_is_refused_before_allocating(graph_path, tmp_path):
    """A crafted .npy header (shape (10^12, 3)) in a tiny file: refused, nothing allocated."""
    target = tmp_path / "bomb.npz"
    with zipfile.ZipFile(graph_path) as source, zipfile.ZipFile(target, "w") as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "x.npy":
                data = data.replace(b"(12, 3)", b"(1000000000000, 3)")
            out.writestr(info.filename, data)
    with pytest.raises(DomainparError, match=r"entry x declares 12,000,000,000,000 bytes but holds"):
        load_graph(target)


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04" + b"\0" * 50, b"not a zip\n"])
def test_unreadable_files_are_one_line(tmp_path, content):
    path = tmp_path / "g.npz"
    path.write_bytes(content)
    with pytest.raises(DomainparError, match=r"expected a domainpar graph file \(.npz\), could not read it") as info:
        load_graph(path)
    assert "\n" not in str(info.value)


def test_flipped_bytes_in_a_graph_are_refused(graph_path, tmp_path):
    """A damaged member fails its zip CRC-32 (np.load reads members through zipfile)."""
    data = bytearray(graph_path.read_bytes())
    with zipfile.ZipFile(graph_path) as archive:
        info = archive.getinfo("edge_attr.npy")
    start = info.header_offset + 30 + len(info.filename) + 40
    for i in range(start, start + 8):
        data[i] ^= 0xFF
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(bytes(data))
    with pytest.raises(DomainparError, match=r"could not read it"):
        load_graph(damaged)
