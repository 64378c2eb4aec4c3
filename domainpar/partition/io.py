"""Plan directories and self-sufficient part files: the on-disk layout of partitioned events, no pickle.

Layout of a plan directory (one per event; ``domainpar partition`` writes
``<out>/event<id:09d>/`` for each graph of a directory)::

    manifest.json       format_version, event_id, method, num_parts, graph_hash,
                        plan_hash, graph sizes, feature widths and names, the
                        digest of the graph file it was made from
                        (graph_digest, :func:`domainpar.npzfile.archive_digest`),
                        cut counts, and for every file its name, size and sha256
    owner.npz           (N,) owner part of every node
    part_00000.npz      one self-sufficient file per part (below)
    ...

A **part file** holds everything one rank needs to run its part of the event,
so a rank reads only its own file — O(E/P) bytes — and never the graph:

=========================  ==============  ===========================================
member                     dtype, shape    meaning
=========================  ==============  ===========================================
format_version             int64 ()        :data:`PLAN_FORMAT_VERSION`
event_id                   int64 ()        TrackML event number
part, num_parts            int64 ()        this part, of how many
method                     str ()          partitioner
graph_hash, plan_hash      str ()          the event graph's and the plan's hashes
drops_cut_edges            bool ()         sectors plan (cut edges dropped, no halo)
num_edges_graph            int64 ()        edges of the whole graph
num_interior_edges, ...    int64 ()        the scalar fields of a PartPlan
owned_ids ... edge_owned   see PartPlan    the arrays of a PartPlan
x                          float32 (n_o,F) owned nodes' features
hit_id                     int64 (n_o,)    owned nodes' TrackML hit ids
edge_attr                  float32 (E_l,Fe) local edges' features
y                          float32 (E_l,)  local edges' labels (absent without truth)
dropped_y                  float32 (k,)    sectors: labels of the dropped cut edges this part owns
particle_pt                float32 (n_o,)  owned nodes' particle pT, GeV (absent without truth)
particle_nhits             int64 (n_o,)    owned nodes' particle hit counts (absent when the graph has none)
particle_vertex            float32 (n_o,3) owned nodes' particle production vertex, mm (likewise)
=========================  ==============  ===========================================

Files are written reproducibly (:func:`domainpar.npzfile.write_npz`: the same
plan gives the same bytes) into a temporary directory beside the destination
that is renamed into place, so a reader never sees half a plan.

Loading: :func:`load_part` reads one part file and refuses, with one line
naming the file, anything that is not what the rank expects, the file's
SHA-256 compared with the manifest's on every read (so a part edited into
another valid archive, or copied from another plan, never trains).
:func:`load_plan` reads a whole plan for tools.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from domainpar.atomic import aside_prefix, name_destination, temporary_prefix, write_target
from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError, not_a_file, one_line, reraise_fault, shorten
from domainpar.npzfile import file_sha256, read_npz, write_npz
from domainpar.parsing import parse_json
from domainpar.partition.part_data import PartData, cut_part
from domainpar.partition.plan import PART_ARRAY_DTYPES, PART_SCALARS, PartitionPlan, PartPlan

#: Bumped whenever the on-disk layout changes; plans of another version are refused.
#: 2: self-sufficient part files (features, labels, hit ids, hashes), reproducible bytes.
#: 3: the manifest records the digest and feature names of the graph file the plan was made from.
PLAN_FORMAT_VERSION = 3
MANIFEST_NAME = "manifest.json"
OWNER_NAME = "owner.npz"
#: Largest manifest read (one of 10,000 parts is ~1.5 MB).
_MANIFEST_BYTES = 16 * 2**20

#: Integer scalars of a part file besides the PartPlan ones.
_INT_SCALARS = ("format_version", "event_id", "part", "num_parts", "num_edges_graph") + PART_SCALARS
_STR_SCALARS = ("method", "graph_hash", "plan_hash")
_FEATURES = {"x": np.float32, "hit_id": np.int64, "edge_attr": np.float32}
_OPTIONAL = {"y": np.float32, "dropped_y": np.float32, "particle_pt": np.float32, "particle_nhits": np.int64,
             "particle_vertex": np.float32}  # fmt: skip
_REQUIRED = _INT_SCALARS + _STR_SCALARS + ("drops_cut_edges",) + tuple(PART_ARRAY_DTYPES) + tuple(_FEATURES)


def part_file_name(part: int) -> str:
    """File name of part ``part`` in a plan directory: ``part_00003.npz``."""
    return f"part_{part:05d}.npz"


def plan_dir_name(event_id: int) -> str:
    """Directory name of an event's plan in ``domainpar partition`` output: ``event000001000``."""
    return f"event{event_id:09d}"


def _entry(path: Path) -> dict[str, object]:
    return {"name": path.name, "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def part_arrays(data: PartData) -> dict[str, np.ndarray]:
    """The members of ``data``'s part file (see the module docstring), in file order."""
    plan = data.plan
    arrays: dict[str, np.ndarray] = {
        "format_version": np.int64(PLAN_FORMAT_VERSION),
        "event_id": np.int64(data.event_id),
        "part": np.int64(plan.part),
        "num_parts": np.int64(plan.num_parts),
        "method": np.str_(data.method),
        "graph_hash": np.str_(data.graph_hash),
        "plan_hash": np.str_(data.plan_hash),
        "drops_cut_edges": np.bool_(data.drops_cut_edges),
        "num_edges_graph": np.int64(data.num_edges_graph),
    }
    arrays.update({name: np.int64(getattr(plan, name)) for name in PART_SCALARS})
    arrays.update({name: getattr(plan, name) for name in PART_ARRAY_DTYPES})
    arrays.update({name: getattr(data, name) for name in _FEATURES})
    arrays.update({name: getattr(data, name) for name in _OPTIONAL if getattr(data, name) is not None})
    return arrays


def save_plan(
    plan: PartitionPlan, directory: str | os.PathLike, graph: EventGraph, *, compress: bool = False,
    graph_digest: str | None = None,
) -> Path:
    """Write ``plan`` of ``graph`` to ``directory`` atomically: manifest, owners, one self-sufficient part file per part.

    An existing plan at ``directory`` is replaced; any other non-empty directory is refused.

    Args:
        plan: the plan.
        directory: the plan directory to create or replace.
        graph: the graph the plan was made from (its arrays go into the part files).
        compress: deflate the part files (about half the bytes; reading a part takes about 2x longer).
        graph_digest: :func:`~domainpar.npzfile.archive_digest` of the graph file ``graph`` was read from,
            recorded so that a run can tell whether the graphs it is given are the ones the plan was made of
            (None: a graph not read from a file; such a plan is refused by ``train --plans``).

    Returns:
        The plan directory.

    Raises:
        DomainparError: the plan was made from another graph, or ``directory`` holds something else.
    """
    asked = Path(directory)
    directory = write_target(asked)
    graph_hash = graph.content_hash()
    if plan.graph_hash and plan.graph_hash != graph_hash:
        raise DomainparError(
            f"{directory}: plan was made from graph {plan.graph_hash}, not from the given graph "
            f"(event {graph.event_id}, hash {graph_hash})"
        )
    directory.parent.mkdir(parents=True, exist_ok=True)
    if directory.exists() and not (directory / MANIFEST_NAME).is_file() and any(directory.iterdir()):
        raise DomainparError(f"{directory}: expected a plan directory or a new path, found a non-empty directory without {MANIFEST_NAME}")
    staging = Path(tempfile.mkdtemp(prefix=temporary_prefix(directory.name), dir=directory.parent))
    try:
        # mkdtemp creates 0700; a plan is read by every rank (maybe another user), so use the umask.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)
        write_npz(staging / OWNER_NAME, {"owner": plan.owner})
        part_files = []
        for p in range(plan.num_parts):
            data = cut_part(graph, plan, p, graph_hash=graph_hash)
            part_files.append(_entry(write_npz(staging / part_file_name(p), part_arrays(data), compress=compress)))
        manifest = {
            "format_version": PLAN_FORMAT_VERSION,
            "event_id": int(graph.event_id),
            "method": plan.method,
            "num_parts": plan.num_parts,
            "graph_hash": graph_hash,
            "plan_hash": plan.plan_hash,
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "node_features": int(graph.x.shape[1]),
            "edge_features": int(graph.edge_attr.shape[1]),
            "node_feature_names": None if graph.node_features is None else list(graph.node_features),
            "edge_feature_names": None if graph.edge_features is None else list(graph.edge_features),
            "graph_digest": graph_digest,
            "has_labels": graph.y is not None,
            "drops_cut_edges": plan.drops_cut_edges,
            "num_cut_edges": plan.num_cut_edges,
            "num_true_cut_edges": plan.num_true_cut_edges,
            "compressed": bool(compress),
            "owner_file": _entry(staging / OWNER_NAME),
            "part_files": part_files,
        }
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")
        if directory.exists():
            # Two renames: the old plan moves aside, the new one into place, then the old is removed.
            retired = Path(tempfile.mkdtemp(prefix=aside_prefix(directory.name), dir=directory.parent))
            os.replace(directory, retired / "plan")
            os.replace(staging, directory)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, directory)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        name_destination(exc, {staging: asked})
        raise
    return asked


# ----------------------------------------------------------------------------------------------- reading


def _read_members(path: Path, names: tuple[str, ...], what: str, content: bytes | None = None) -> dict[str, np.ndarray]:
    """Members ``names`` of an .npz file (those present), CRC-checked; any damage is one line naming the file.

    ``content``: the file's bytes, already read (and digest-checked); parsed from memory, not read again.
    """
    if content is None and not path.is_file():
        raise not_a_file(path, what)
    try:
        if content is not None:
            # The SHA-256 of these very bytes matched the manifest: the per-member CRCs add nothing.
            return read_npz(io.BytesIO(content), names, verify=False, missing_ok=True)
        return read_npz(path, names, missing_ok=True)
    except Exception as exc:  # noqa: BLE001 - a damaged or hostile file fails in any of zipfile's or numpy's parsers
        reraise_fault(exc)
        raise DomainparError(f"{path}: expected an intact {what} (.npz), could not read it ({one_line(exc)}); re-run `domainpar partition`") from None


def _manifest_entry(path: Path) -> dict[str, Any]:
    """The manifest's record (name, bytes, sha256) of the part file ``path``, from the plan directory it is in."""
    manifest = read_manifest(path.parent)
    for index, entry in enumerate(manifest["part_files"]):
        if isinstance(entry, dict) and entry.get("name") == path.name:
            _entry_fields(path.parent, entry, f"part {index}")
            return entry
    raise DomainparError(
        f"{path}: expected a part file listed in {path.parent / MANIFEST_NAME} (it lists {shorten([e.get('name') if isinstance(e, dict) else e for e in manifest['part_files']])}); "
        "copy whole plan directories, or re-run `domainpar partition`"
    )


def _read_verified(path: Path, what: str) -> bytes:
    """The bytes of ``path``, which must be the ones its plan's manifest recorded (size and SHA-256)."""
    entry = _manifest_entry(path)
    if not path.is_file():
        raise not_a_file(path, what)
    content = path.read_bytes()
    if len(content) != entry["bytes"]:
        raise DomainparError(
            f"{path}: {what} must be {entry['bytes']} bytes as its manifest records (got {len(content)}); it is truncated "
            "or was modified; re-run `domainpar partition`"
        )
    digest = hashlib.sha256(content).hexdigest()
    if digest != entry["sha256"]:
        raise DomainparError(
            f"{path}: {what} checksum must match its manifest (sha256 {digest[:12]}…, manifest {str(entry['sha256'])[:12]}…); "
            "the file was modified or comes from another plan; re-run `domainpar partition`"
        )
    return content


def _scalar(arrays: dict[str, np.ndarray], path: Path, name: str, kind: str, what: str) -> Any:
    value = arrays[name]
    if value.shape != () or value.dtype.kind not in kind:
        raise DomainparError(f"{path}: {what} entry {name} must be a scalar of kind {kind!r} (got dtype {value.dtype}, shape {value.shape})")
    return value.item()


def _expect(path: Path, what: str, expected: object, found: object, hint: str) -> None:
    if expected is not None and expected != found:
        raise DomainparError(f"{path}: part file must be {what} {expected} (got {found}); {hint}")


def load_part(
    path: str | os.PathLike,
    *,
    part: int | None = None,
    num_parts: int | None = None,
    event_id: int | None = None,
    plan_hash: str | None = None,
    num_nodes: int | None = None,
    num_edges: int | None = None,
) -> PartData:
    """Read and validate one part file; optionally check it is the part the caller expects.

    Only this file (and its plan's small manifest) is read: O(E/P) bytes for a P-part plan of an
    event with E edges. Its size and SHA-256 must be those the manifest beside it records, on every read.

    Args:
        path: the part file.
        part: expected part index (the rank's index in its domain group).
        num_parts: expected number of parts (the domain group size).
        event_id: expected event.
        plan_hash: expected plan (e.g. the manifest's, or another rank's).
        num_nodes: expected node count of the whole graph (e.g. from the graph file's header).
        num_edges: expected edge count of the whole graph.

    Returns:
        The validated :class:`~domainpar.partition.part_data.PartData` (read-only arrays).

    Raises:
        DomainparError: one line naming ``path``: missing, unreadable or damaged file, no manifest or one
            recording other bytes, another format version, a field of the wrong dtype/shape/range, or a part
            other than expected.
    """
    path = Path(path)
    what = "part file"
    content = _read_verified(path, what)
    arrays = _read_members(path, _REQUIRED + tuple(_OPTIONAL), what, content)
    if "format_version" not in arrays:
        raise DomainparError(f"{path}: expected a domainpar part file, found no format_version entry")
    version = _scalar(arrays, path, "format_version", "iu", what)
    if version != PLAN_FORMAT_VERSION:
        raise DomainparError(
            f"{path}: part file format version must be {PLAN_FORMAT_VERSION} (got {version}); re-run `domainpar partition`"
        )
    missing = [name for name in _REQUIRED if name not in arrays]
    if missing:
        raise DomainparError(f"{path}: part file is missing entries {missing}")
    ints = {name: int(_scalar(arrays, path, name, "iu", what)) for name in _INT_SCALARS}
    strs = {name: str(_scalar(arrays, path, name, "U", what)) for name in _STR_SCALARS}
    drops = bool(_scalar(arrays, path, "drops_cut_edges", "b", what))
    hint = "the plans must come from one `domainpar partition` run with --parts equal to the domain size"
    _expect(path, "of event", event_id, ints["event_id"], "the plan directory holds another event's part")
    _expect(path, "of a plan with num_parts", num_parts, ints["num_parts"], hint)
    _expect(path, "part", part, ints["part"], "each rank must read the part of its own index")
    _expect(path, "of plan", plan_hash, strs["plan_hash"], "the parts of one event must come from one plan")
    _expect(path, "of a graph with num_nodes", num_nodes, ints["num_nodes_global"], "the plan was made from another graph")
    _expect(path, "of a graph with num_edges", num_edges, ints["num_edges_graph"], "the plan was made from another graph")
    plan = PartPlan(
        part=ints["part"],
        num_parts=ints["num_parts"],
        **{name: arrays[name] for name in PART_ARRAY_DTYPES},
        **{name: ints[name] for name in PART_SCALARS},
    )
    data = PartData(
        plan=plan,
        event_id=ints["event_id"],
        graph_hash=strs["graph_hash"],
        plan_hash=strs["plan_hash"],
        method=strs["method"],
        drops_cut_edges=drops,
        num_edges_graph=ints["num_edges_graph"],
        source=str(path),
        **{name: arrays[name] for name in _FEATURES},
        **{name: arrays.get(name) for name in _OPTIONAL},
    )
    return data.validate()


def read_manifest(directory: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a plan directory, checked for the format version and the entries every reader needs.

    Raises:
        DomainparError: missing or unparsable manifest, another format version, missing entries.
    """
    directory = Path(directory)
    manifest_path = directory / MANIFEST_NAME
    if not manifest_path.is_file():
        raise DomainparError(f"{directory}: expected a plan directory with {MANIFEST_NAME}, found none")
    size = manifest_path.stat().st_size
    if size > _MANIFEST_BYTES:
        raise DomainparError(f"{manifest_path}: expected a plan manifest of at most {_MANIFEST_BYTES:,} bytes (got {size:,})")
    try:
        manifest = parse_json(manifest_path.read_bytes().decode("utf-8"), str(manifest_path), "a JSON plan manifest")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DomainparError(f"{manifest_path}: expected a JSON plan manifest, could not parse it ({one_line(exc)})") from None
    if not isinstance(manifest, dict) or "format_version" not in manifest:
        raise DomainparError(f"{manifest_path}: expected a plan manifest with a format_version entry")
    if manifest["format_version"] != PLAN_FORMAT_VERSION:
        raise DomainparError(
            f"{manifest_path}: plan format version must be {PLAN_FORMAT_VERSION} (got {manifest['format_version']!r:.40}); "
            "re-run `domainpar partition`"
        )
    keys = ("event_id", "method", "num_parts", "graph_hash", "plan_hash", "num_nodes", "num_edges", "owner_file", "part_files",
            "graph_digest", "node_feature_names", "edge_feature_names")  # fmt: skip
    missing = [k for k in keys if k not in manifest]
    if missing:
        raise DomainparError(f"{manifest_path}: plan manifest is missing entries {missing}")
    digest = manifest["graph_digest"]
    if digest is not None and not (isinstance(digest, str) and re.fullmatch(r"(zip|sha256):[0-9a-f]{64}", digest)):
        raise DomainparError(f"{manifest_path}: manifest entry graph_digest must be a digest like 'zip:<64 hex digits>' (got {shorten(digest)})")
    for key in ("node_feature_names", "edge_feature_names"):
        names = manifest[key]
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise DomainparError(f"{manifest_path}: manifest entry {key} must be a list of names or null (got {shorten(names)})")
    for key in ("event_id", "num_parts", "num_nodes", "num_edges"):
        value = manifest[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key == "num_parts" else 0):
            raise DomainparError(f"{manifest_path}: manifest entry {key} must be a non-negative integer (got {value!r:.40})")
    if not isinstance(manifest["part_files"], list) or len(manifest["part_files"]) != manifest["num_parts"]:
        found = len(manifest["part_files"]) if isinstance(manifest["part_files"], list) else type(manifest["part_files"]).__name__
        raise DomainparError(f"{manifest_path}: manifest must list num_parts={manifest['num_parts']} part files (got {found})")
    return manifest


def _entry_fields(directory: Path, entry: object, what: str) -> None:
    """A manifest's file record must be ``{"name": plain file name, "bytes": int >= 0, "sha256": 64 hex digits}``."""
    if not isinstance(entry, dict) or not {"name", "bytes", "sha256"} <= set(entry):
        raise DomainparError(f"{directory / MANIFEST_NAME}: {what} entry must have name, bytes and sha256 (got {shorten(entry)})")
    name = entry["name"]
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise DomainparError(f"{directory / MANIFEST_NAME}: {what} file name must be a plain file name (got {shorten(name)})")
    size = entry["bytes"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise DomainparError(f"{directory / MANIFEST_NAME}: {what} entry bytes must be a non-negative integer (got {shorten(size)})")
    if not isinstance(entry["sha256"], str) or not re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]):
        raise DomainparError(f"{directory / MANIFEST_NAME}: {what} entry sha256 must be 64 hex digits (got {shorten(entry['sha256'])})")


def _check_entry(directory: Path, entry: object, what: str) -> Path:
    _entry_fields(directory, entry, what)
    name = str(entry["name"])
    path = directory / name
    if not path.is_file():
        raise DomainparError(f"{path}: {what} file listed in the manifest is missing")
    size = path.stat().st_size
    if size != entry["bytes"]:
        raise DomainparError(f"{path}: {what} file must be {entry['bytes']} bytes as recorded (got {size}); it is truncated or was modified")
    if file_sha256(path) != entry["sha256"]:
        raise DomainparError(f"{path}: {what} file checksum must match the manifest (got a different sha256); the file is corrupted")
    return path


def load_plan(
    directory: str | os.PathLike, graph: EventGraph | None = None, *, num_parts: int | None = None
) -> PartitionPlan:
    """Read a whole plan written by :func:`save_plan` and validate it (for tools; a rank reads :func:`load_part`).

    Args:
        directory: the plan directory.
        graph: if given, the plan must have been made from this graph (content hash and node count).
        num_parts: if given, the plan must have exactly this many parts (e.g. the domain group size).

    Raises:
        DomainparError: missing/unreadable manifest, other format version, missing,
            truncated or corrupted file, wrong number of parts, a plan of another graph,
            or a plan that breaks an invariant (:meth:`PartitionPlan.validate`).
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    stored_parts = int(manifest["num_parts"])
    on_disk = sorted(p.name for p in directory.glob("part_*.npz"))
    if len(on_disk) != stored_parts:
        raise DomainparError(f"{directory}: plan must hold {stored_parts} part files (found {len(on_disk)})")
    if num_parts is not None and stored_parts != num_parts:
        raise DomainparError(f"{directory}: plan must have {num_parts} parts (got a plan of {stored_parts} parts)")
    if graph is not None:
        if manifest["graph_hash"] != graph.content_hash():
            raise DomainparError(
                f"{directory}: plan was made from graph {manifest['graph_hash']} but must match the given graph "
                f"(event {graph.event_id}, hash {graph.content_hash()}); re-run `domainpar partition` on this graph"
            )
        if int(manifest["num_nodes"]) != graph.num_nodes:
            raise DomainparError(f"{directory}: plan must cover {graph.num_nodes} nodes (got {manifest['num_nodes']})")

    owner_path = _check_entry(directory, manifest["owner_file"], "owner")
    owner = _read_members(owner_path, ("owner",), "owner file").get("owner")
    if owner is None:
        raise DomainparError(f"{owner_path}: owner file must have an owner entry (found none)")
    num_nodes = int(manifest["num_nodes"])
    if owner.shape != (num_nodes,) or owner.dtype != np.int64:
        raise DomainparError(f"{owner_path}: owner must be an int64 array of shape ({num_nodes},) (got {owner.dtype} {owner.shape})")
    parts = []
    for p, entry in enumerate(manifest["part_files"]):
        _entry_fields(directory, entry, f"part {p}")
        path = directory / entry["name"]  # its size and sha256 are checked against the manifest as it is read
        data = load_part(
            path, part=p, num_parts=stored_parts, event_id=int(manifest["event_id"]), plan_hash=str(manifest["plan_hash"]),
            num_nodes=num_nodes, num_edges=int(manifest["num_edges"]),
        )
        parts.append(data.plan)
    plan = PartitionPlan(
        method=str(manifest["method"]),
        num_parts=stored_parts,
        graph_hash=str(manifest["graph_hash"]),
        owner=owner,
        parts=tuple(parts),
        drops_cut_edges=bool(manifest.get("drops_cut_edges", False)),
        num_cut_edges=int(manifest.get("num_cut_edges", 0)),
        num_true_cut_edges=int(manifest.get("num_true_cut_edges", 0)),
        plan_hash=str(manifest["plan_hash"]),
    )
    return plan.validate(str(directory))
