"""Save and load partition plans: one directory per event, no pickle.

Layout of a plan directory::

    manifest.json       format_version, method, num_parts, graph_hash, counts,
                        timings, and for every file its name, size and sha256
    owner.npz           (N,) owner of every node
    part_00000.npz      one file per part: the arrays of a PartPlan
    ...

The directory is written under a temporary name beside the destination and
renamed into place, so a reader never sees half a plan. Loading checks the
format version, that every listed part file is present with the recorded size
and checksum (a truncated or corrupted file is refused), that the parts are
consistent with the manifest, and — given the graph — that the plan was made
from this graph (same content hash, same node count).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError, one_line
from domainpar.partition.plan import PartitionPlan, PartPlan

#: Bumped whenever the on-disk layout changes; plans of another version are refused.
PLAN_FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
OWNER_NAME = "owner.npz"

_PART_ARRAYS = (
    "owned_ids",
    "halo_ids",
    "recv_parts",
    "recv_offsets",
    "send_parts",
    "send_offsets",
    "send_ids",
    "edge_index",
    "edge_ids",
    "edge_owned",
)
_PART_SCALARS = ("num_interior_edges", "num_nodes_global", "num_edges_global", "num_positive_edges_global")


def part_file_name(part: int) -> str:
    return f"part_{part:05d}.npz"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> dict[str, object]:
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    return {"name": path.name, "bytes": path.stat().st_size, "sha256": _sha256(path)}


def save_plan(plan: PartitionPlan, directory: str | os.PathLike) -> Path:
    """Write ``plan`` to ``directory`` atomically (an existing plan there is replaced).

    Returns:
        The plan directory.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    if directory.exists() and not (directory / MANIFEST_NAME).is_file() and any(directory.iterdir()):
        raise DomainparError(f"{directory}: expected a plan directory or a new path, found a non-empty directory without {MANIFEST_NAME}")
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    # mkdtemp creates 0700; a plan is read by every rank (maybe another user), so use the umask.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)
    try:
        files = {"owner": _write_npz(staging / OWNER_NAME, {"owner": plan.owner})}
        part_files = []
        for part in plan.parts:
            arrays = {name: getattr(part, name) for name in _PART_ARRAYS}
            arrays.update({name: np.int64(getattr(part, name)) for name in _PART_SCALARS})
            arrays["part"] = np.int64(part.part)
            part_files.append(_write_npz(staging / part_file_name(part.part), arrays))
        manifest = {
            "format_version": PLAN_FORMAT_VERSION,
            "method": plan.method,
            "num_parts": plan.num_parts,
            "graph_hash": plan.graph_hash,
            "num_nodes": plan.num_nodes,
            "drops_cut_edges": plan.drops_cut_edges,
            "num_cut_edges": plan.num_cut_edges,
            "num_true_cut_edges": plan.num_true_cut_edges,
            "seconds_partition": plan.seconds_partition,
            "seconds_plan": plan.seconds_plan,
            "owner_file": files["owner"],
            "part_files": part_files,
        }
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")
        if directory.exists():
            # Two renames: the old plan moves aside, the new one into place, then the old is removed.
            retired = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
            os.replace(directory, retired / "plan")
            os.replace(staging, directory)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return directory


def _read_npz(directory: Path, entry: object, what: str) -> dict[str, np.ndarray]:
    if not isinstance(entry, dict) or not {"name", "bytes", "sha256"} <= set(entry):
        raise DomainparError(f"{directory / MANIFEST_NAME}: {what} entry must have name, bytes and sha256 (got {entry!r})")
    path = directory / str(entry["name"])
    if not path.is_file():
        raise DomainparError(f"{path}: {what} file listed in the manifest is missing")
    size = path.stat().st_size
    if size != entry["bytes"]:
        raise DomainparError(f"{path}: {what} file must be {entry['bytes']} bytes as recorded (got {size}); it is truncated or was modified")
    if _sha256(path) != entry["sha256"]:
        raise DomainparError(f"{path}: {what} file checksum must match the manifest (got a different sha256); the file is corrupted")
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise DomainparError(f"{path}: expected a plan part file (.npz), could not read it ({exc})") from None


def load_plan(
    directory: str | os.PathLike, graph: EventGraph | None = None, *, num_parts: int | None = None
) -> PartitionPlan:
    """Read a plan written by :func:`save_plan` and validate it.

    Args:
        directory: the plan directory.
        graph: if given, the plan must have been made from this graph (content hash and node count).
        num_parts: if given, the plan must have exactly this many parts (e.g. the domain group size).

    Raises:
        DomainparError: missing/unreadable manifest, other format version, missing,
            truncated or corrupted part file, wrong number of parts, or a plan of another graph.
    """
    directory = Path(directory)
    manifest_path = directory / MANIFEST_NAME
    if not manifest_path.is_file():
        raise DomainparError(f"{directory}: expected a plan directory with {MANIFEST_NAME}, found none")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DomainparError(f"{manifest_path}: expected a JSON plan manifest, could not parse it ({one_line(exc)})") from None
    if not isinstance(manifest, dict) or "format_version" not in manifest:
        raise DomainparError(f"{manifest_path}: expected a plan manifest with a format_version entry")
    if manifest["format_version"] != PLAN_FORMAT_VERSION:
        raise DomainparError(
            f"{manifest_path}: plan format version must be {PLAN_FORMAT_VERSION} (got {manifest['format_version']}); "
            "re-run `domainpar partition`"
        )
    missing = [k for k in ("method", "num_parts", "graph_hash", "num_nodes", "owner_file", "part_files") if k not in manifest]
    if missing:
        raise DomainparError(f"{manifest_path}: plan manifest is missing entries {missing}")
    stored_parts = int(manifest["num_parts"])
    if len(manifest["part_files"]) != stored_parts:
        raise DomainparError(
            f"{manifest_path}: manifest must list num_parts={stored_parts} part files (got {len(manifest['part_files'])})"
        )
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

    owner = _read_npz(directory, manifest["owner_file"], "owner").get("owner")
    num_nodes = int(manifest["num_nodes"])
    if owner is None or owner.shape != (num_nodes,):
        raise DomainparError(f"{directory / OWNER_NAME}: owner must have shape ({num_nodes},)")
    parts = []
    for p, entry in enumerate(manifest["part_files"]):
        arrays = _read_npz(directory, entry, f"part {p}")
        absent = [k for k in _PART_ARRAYS + _PART_SCALARS + ("part",) if k not in arrays]
        if absent:
            raise DomainparError(f"{directory / str(entry['name'])}: part file is missing entries {absent}")
        if int(arrays["part"]) != p:
            raise DomainparError(f"{directory / str(entry['name'])}: part index must be {p} (got {int(arrays['part'])})")
        parts.append(
            PartPlan(
                part=p,
                num_parts=stored_parts,
                **{k: arrays[k] for k in _PART_ARRAYS},
                **{k: int(arrays[k]) for k in _PART_SCALARS},
            )
        )
    return PartitionPlan(
        method=str(manifest["method"]),
        num_parts=stored_parts,
        graph_hash=str(manifest["graph_hash"]),
        owner=owner.astype(np.int64, copy=False),
        parts=tuple(parts),
        drops_cut_edges=bool(manifest.get("drops_cut_edges", False)),
        num_cut_edges=int(manifest.get("num_cut_edges", 0)),
        num_true_cut_edges=int(manifest.get("num_true_cut_edges", 0)),
        seconds_partition=float(manifest.get("seconds_partition", 0.0)),
        seconds_plan=float(manifest.get("seconds_plan", 0.0)),
    )
