"""The edge filter: prune the hit graph with a per-edge classifier before the GNN.

The geometric cuts of :mod:`domainpar.data.graph` keep every segment a
particle above ~0.15 GeV could make, so most candidate edges are fakes. Most
of them can be told from true segments by the two hits alone — their
positions and, above all, their clusters: a pixel cluster's length along z
measures the track's polar angle, its width along u the crossing angle, and
a segment whose direction contradicts its hits' clusters is a fake. The
filter is that test, learned: an MLP on ``[x_src, x_dst, edge_attr]`` (the
graph's own node and edge features, standardised with the training edges'
mean and spread), trained on simulated truth, applied with a threshold chosen
on held-out training events so that it keeps a set fraction of the true
segments (overall, and of particles above 1 GeV). As in the Exa.TrkX and
GNN4ITk pipelines, the GNN then trains and runs on a graph several times
purer and smaller, at the same efficiency.

``FilterConfig.node_features`` / ``edge_features`` choose, by name, what the
filter reads. The threshold is a tail cut (it keeps 99.5 % of the true
segments of simulated events), so a feature whose tails the simulation does
not reproduce moves real true segments below it; a filter trained on
simulation and applied to real events should read only features whose
simulated distributions agree with the real ones out to their tails.

The filter is a row-wise function of each edge, so a filtered graph is a
graph like any other: partitioning, halo exchange and the exactness of
domain-parallel training do not change. A filtered graph records the
filter's threshold, target and content hash in its build configuration.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from domainpar.atomic import atomic_path
from domainpar.data.event_graph import EventGraph, require_edges
from domainpar.data.graph_files import inspect_graph, load_graph, read_graph_metadata
from domainpar.errors import DomainparError, not_a_file, one_line, reraise_fault, shorten
from domainpar.kernels import chunks
from domainpar.optim import AdamW
from domainpar.parsing import parse_json

#: Bumped whenever the saved layout changes.
FILTER_FORMAT_VERSION = 1


@dataclass(frozen=True)
class FilterConfig:
    """How the edge filter is built, trained and thresholded."""

    hidden: int = 64
    """Width of every hidden layer of the MLP."""
    layers: int = 3
    """Hidden layers of the MLP."""
    steps: int = 1500
    """Optimiser steps (each a random batch of edges from all training graphs)."""
    batch_edges: int = 8192
    """Edges per step."""
    lr: float = 3e-3
    """Peak learning rate (one-cycle schedule, AdamW)."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    efficiency: float = 0.995
    """Fraction of the true edges of the held-out training events the threshold keeps."""
    efficiency_pt1: float = 0.998
    """... and of the true edges of particles above 1 GeV (the lower of the two thresholds is used)."""
    holdout_every: int = 5
    """Every n-th training graph is held out to choose the threshold (not trained on)."""
    seed: int = 0
    """Seed of weights and batches."""
    node_features: tuple[str, ...] | None = None
    """Node features the filter reads, by name, for both ends of an edge (None: every node feature of the graph)."""
    edge_features: tuple[str, ...] | None = None
    """Edge features the filter reads, by name (None: every edge feature of the graph)."""
    negative_fraction: float = 1.0
    """Share of each training graph's false edges kept for training (a seeded draw; the classes are balanced in the
    loss either way): a full event has ~3M candidate edges, 97 % of them false."""

    def __post_init__(self) -> None:
        for name in ("node_features", "edge_features"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, str) or not all(isinstance(v, str) for v in value) or len(set(value)) != len(value):
                raise DomainparError(f"filter.{name} must be a list of distinct feature names (got {value!r})")
            object.__setattr__(self, name, tuple(value))
        checks = {
            "hidden": isinstance(self.hidden, int) and self.hidden >= 1,
            "layers": isinstance(self.layers, int) and self.layers >= 1,
            "steps": isinstance(self.steps, int) and self.steps >= 1,
            "batch_edges": isinstance(self.batch_edges, int) and self.batch_edges >= 1,
            "lr": self.lr > 0,
            "weight_decay": self.weight_decay >= 0,
            "efficiency": 0 < self.efficiency <= 1,
            "efficiency_pt1": 0 < self.efficiency_pt1 <= 1,
            "holdout_every": isinstance(self.holdout_every, int) and self.holdout_every >= 2,
            "negative_fraction": isinstance(self.negative_fraction, (int, float)) and 0 < self.negative_fraction <= 1,
        }
        for name, ok in checks.items():
            if not ok:
                raise DomainparError(f"filter.{name} is out of range (got {getattr(self, name)!r})")

    @classmethod
    def from_dict(cls, values: dict, source: str = "filter") -> "FilterConfig":
        """From a plain mapping (a YAML section); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise DomainparError(f"{source}: unknown filter settings {unknown} (expected a subset of {sorted(known)})")
        return cls(**values)


class FilterNet(nn.Module):
    """Standardise ``[x_src, x_dst, edge_attr]``, then an MLP to one logit per edge."""

    def __init__(self, num_inputs: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(num_inputs))
        self.register_buffer("scale", torch.ones(num_inputs))
        blocks: list[nn.Module] = []
        width = num_inputs
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden), nn.LayerNorm(hidden), nn.SiLU()]
            width = hidden
        blocks.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*blocks)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """(E, num_inputs) → (E,) logits."""
        return self.mlp((inputs - self.mean) / self.scale).squeeze(-1)

    def score_rows(self, rows: torch.Tensor, scratch: tuple[torch.Tensor, torch.Tensor], out: np.ndarray) -> None:
        """``out`` = the logits of standardised ``rows``: :meth:`forward`'s network for inference (under no_grad).

        Each product is written into ``scratch`` without its bias (``torch.mm``: ``addmm``'s bias is a pass of its
        own), each LayerNorm adds it and normalises in place (:func:`~domainpar.kernels.rownorm.layer_norm_rows`),
        each SiLU runs in place, and the last Linear is a dot product per row
        (:func:`~domainpar.kernels.filter_rows.logit_rows`); docs/performance.md has the timings. The logits
        equal :meth:`forward`'s to float32 rounding (the kernels' sums are vectorised), not to the bit.

        Args:
            rows: (n, num_inputs) float32 standardised inputs.
            scratch: two C-contiguous (>= n, hidden) float32 tensors.
            out: (n,) float32 array for the logits.
        """
        from domainpar.kernels.filter_rows import logit_rows  # numba loads where graphs are scored
        from domainpar.kernels.rownorm import layer_norm_rows

        layers = list(self.mlp)
        for block in range(len(layers) // 3):
            linear, norm = layers[3 * block], layers[3 * block + 1]
            rows = torch.mm(rows, linear.weight.t(), out=scratch[block % 2][: rows.shape[0]])
            layer_norm_rows(rows.numpy(), linear.bias.detach().numpy(), norm.weight.detach().numpy(),
                            norm.bias.detach().numpy(), norm.eps)
            nn.functional.silu(rows, inplace=True)
        last = layers[-1]
        logit_rows(rows.numpy(), last.weight.detach()[0].numpy(), np.float32(last.bias.item()), out)


def edge_inputs(graph: EventGraph, node_columns: np.ndarray | None = None, edge_columns: np.ndarray | None = None,
                rows: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """(E, 2 F + F_e) float32: source node features, destination node features, edge features.

    Args:
        graph: the graph.
        node_columns, edge_columns: the columns of ``x`` / ``edge_attr`` to read (None: all), so F and F_e are
            their lengths.
        rows: (R,) int64 the edges wanted, in that order (None: every edge); then (R, 2 F + F_e).
    """
    src, dst = graph.edge_index if rows is None else graph.edge_index[:, rows]
    x = graph.x if node_columns is None else graph.x[:, node_columns]
    edge_attr = graph.edge_attr if rows is None else graph.edge_attr[rows]
    edge_attr = edge_attr if edge_columns is None else edge_attr[:, edge_columns]
    return np.concatenate([x[src], x[dst], edge_attr], axis=1).astype(np.float32, copy=False)


def feature_columns(wanted: tuple[str, ...] | None, have: tuple[str, ...] | None, kind: str, source: str) -> np.ndarray | None:
    """Columns of the ``kind`` ("node"/"edge") features named ``wanted`` among a graph's ``have`` (None: all).

    Raises:
        DomainparError: a wanted name the graph does not have, or a selection on a graph without feature names.
    """
    if wanted is None:
        return None
    if have is None:
        raise DomainparError(f"{source}: filter.{kind}_features selects by name, but the graph's {kind} features are unnamed")
    missing = [name for name in wanted if name not in have]
    if missing:
        raise DomainparError(f"{source}: filter.{kind}_features {missing} are not {kind} features of the graph (it has {list(have)})")
    return np.array([list(have).index(name) for name in wanted], dtype=np.int64)


def _columns(config: FilterConfig, graph: EventGraph, source: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    return (
        feature_columns(config.node_features, graph.node_features, "node", source),
        feature_columns(config.edge_features, graph.edge_features, "edge", source),
    )


@dataclass
class EdgeFilter:
    """A trained edge filter: network, threshold and the features it expects."""

    net: FilterNet
    """The classifier (eval mode, CPU)."""
    threshold: float
    """Edges whose logit is below it are dropped."""
    node_features: tuple[str, ...] | None
    """Names of the node features it was trained on (None: unnamed graphs of that width)."""
    edge_features: tuple[str, ...] | None
    """Names of the edge features it was trained on."""
    config: FilterConfig
    """How it was trained."""
    record: dict
    """What training measured (held-out efficiency and purity before/after, timings)."""

    @property
    def content_hash(self) -> str:
        """Hash of weights and threshold: what a filtered graph records."""
        digest = hashlib.sha256()
        for name, tensor in sorted(self.net.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().numpy().tobytes())
        digest.update(np.float64(self.threshold).tobytes())
        return digest.hexdigest()[:16]

    def check_graph(self, graph: EventGraph, source: str) -> None:
        """Refuse a graph whose features are not the ones the filter was trained on."""
        for name, expected, found in (
            ("node", self.node_features, graph.node_features),
            ("edge", self.edge_features, graph.edge_features),
        ):
            if expected is not None and found is not None and tuple(found) != tuple(expected):
                raise DomainparError(f"{source}: {name} features must be {list(expected)} for this filter (got {list(found)})")
        node_columns, edge_columns = self.columns(graph, source)
        width = self.net.mean.numel()
        found = 2 * (graph.x.shape[1] if node_columns is None else node_columns.size) + (
            graph.edge_attr.shape[1] if edge_columns is None else edge_columns.size
        )
        if found != width:
            raise DomainparError(f"{source}: the filter expects {width} inputs per edge (2 × node + edge features), got {found}")

    def columns(self, graph: EventGraph, source: str) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The node and edge feature columns of ``graph`` the filter reads (None: all)."""
        return _columns(self.config, graph, source)

    def logits(self, graph: EventGraph, chunk: int = 1 << 13) -> np.ndarray:
        """(E,) float32 logits of every edge of ``graph``.

        ``chunk`` edges at a time: their activations (chunk x hidden floats, 2 MB at hidden 64) stay in the CPU's
        cache through every layer. The network is :meth:`FilterNet.score_rows`: :meth:`FilterNet.forward`'s logits
        to float32 rounding.

        The chunks are shared out, whole, over :func:`domainpar.kernels.chunks.build_threads` threads, each running
        its chunks on torch's intra-op count (one in the event chain): every chunk is the same rows through the same
        code on any number of threads, so the logits are the same bits.
        """
        from domainpar.kernels.filter_rows import standardised_rows  # numba loads where graphs are scored

        source = f"event {graph.event_id}"
        self.check_graph(graph, source)
        node_columns, edge_columns = self.columns(graph, source)
        # One array type per argument (C-contiguous, writable: a copy only of a read-only array) so numba compiles once.
        x = np.require(graph.x if node_columns is None else graph.x[:, node_columns], np.float32, ["C", "W"])
        edge_attr = np.require(graph.edge_attr, np.float32, ["C", "W"])
        columns = np.require(np.arange(edge_attr.shape[1]) if edge_columns is None else edge_columns, np.int64, ["C", "W"])
        src, dst = (np.require(row, np.int64, ["C", "W"]) for row in graph.edge_index)
        mean, scale = (np.require(t.detach().cpu().numpy(), np.float32, ["C", "W"]) for t in (self.net.mean, self.net.scale))
        num_edges = graph.num_edges
        out = np.empty(num_edges, dtype=np.float32)

        def score(first: int, last: int) -> None:
            # The chunk's standardised inputs only, made on this thread into one buffer: the (E, 2 F + F_e) array of
            # a full event (318 MB) is never made.
            rows = np.empty((chunk, mean.size), dtype=np.float32)
            scratch = (torch.empty(chunk, self.config.hidden), torch.empty(chunk, self.config.hidden))
            with torch.no_grad():  # grad mode is per thread
                for start in range(first * chunk, min(last * chunk, num_edges), chunk):
                    stop = min(start + chunk, num_edges)
                    standardised_rows(x, src, dst, edge_attr, columns, mean, scale, start, stop, rows)
                    self.net.score_rows(torch.from_numpy(rows[: stop - start]), scratch, out[start:stop])

        num_chunks = -(-num_edges // chunk)
        chunks.run(score, chunks.bounds(num_chunks, 4 * chunks.build_threads(), max(1, chunks.MIN_CHUNK // chunk)))
        return out

    def apply(self, graph: EventGraph, logits: np.ndarray | None = None) -> EventGraph:
        """The graph with only the edges the filter keeps (nodes unchanged, edge order kept).

        Args:
            graph: the graph to prune.
            logits: (E,) this filter's :meth:`logits` of ``graph`` where they were computed already (those of the
                held-out graphs of :func:`train_filter`); None: computed here.
        """
        if logits is None:
            logits = self.logits(graph)
        elif np.shape(logits) != (graph.num_edges,):
            raise DomainparError(
                f"event {graph.event_id}: expected one logit per edge, shape ({graph.num_edges},) (got {np.shape(logits)})"
            )
        keep = logits >= self.threshold
        build = json.loads(graph.build_config) if graph.build_config else {}
        build["edge_filter"] = {"hash": self.content_hash, "threshold": self.threshold, "efficiency": self.config.efficiency}
        return replace(
            graph,
            edge_index=np.ascontiguousarray(graph.edge_index[:, keep]),
            edge_attr=np.ascontiguousarray(graph.edge_attr[keep]),
            y=None if graph.y is None else np.ascontiguousarray(graph.y[keep]),
            build_config=json.dumps(build, sort_keys=True),
        )

    def save(self, path: str | os.PathLike) -> Path:
        """Write weights and settings to ``path`` (torch, loaded with ``weights_only=True``), atomically."""
        path = Path(path)
        state = {
            "format_version": FILTER_FORMAT_VERSION,
            "weights": self.net.state_dict(),
            "meta": json.dumps(
                {
                    "threshold": self.threshold,
                    "node_features": None if self.node_features is None else list(self.node_features),
                    "edge_features": None if self.edge_features is None else list(self.edge_features),
                    "config": asdict(self.config),
                    "record": self.record,
                    "num_inputs": int(self.net.mean.numel()),
                }
            ),
        }
        buffer = io.BytesIO()
        torch.save(state, buffer)
        with atomic_path(path) as tmp:
            tmp.write_bytes(buffer.getvalue())
        return path


def load_filter(path: str | os.PathLike) -> EdgeFilter:
    """Read a filter written by :meth:`EdgeFilter.save`.

    Raises:
        DomainparError: missing or corrupted file, another format version.
    """
    path = Path(path)
    if path.is_dir():
        raise DomainparError(f"{path}: expected a domainpar edge filter file (found a directory)")
    if not path.is_file():
        raise not_a_file(path, "edge filter file")
    if path.stat().st_size == 0:
        raise DomainparError(f"{path}: expected a domainpar edge filter (found an empty file)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise DomainparError(f"{path}: expected a domainpar edge filter, could not read it (not a torch file of tensors and plain containers)") from None
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a damaged file
        reraise_fault(exc)
        raise DomainparError(f"{path}: expected a domainpar edge filter, could not read it (corrupted or truncated: {one_line(exc, 120)})") from None
    if isinstance(state, dict) and {"model", "model_config"} <= set(state) and "weights" not in state:
        # The two .pt files of a physics run side by side: the GNN's checkpoint given where its filter goes.
        raise DomainparError(
            f"{path}: expected a domainpar edge filter (the physics recipe's filter.pt, which prunes graphs before the "
            "GNN), found a GNN checkpoint of `domainpar train`; pass the filter.pt beside it"
        )
    try:
        version = state["format_version"]
        meta = parse_json(state["meta"], str(path), "an edge filter's settings")
    except (KeyError, TypeError, IndexError) as exc:  # a DomainparError (a ValueError) of parse_json passes through
        found = f"keys {shorten(sorted(map(str, state)))}" if isinstance(state, dict) else f"a {type(state).__name__}"
        raise DomainparError(f"{path}: expected a domainpar edge filter, could not read it (found {found})") from None
    if version != FILTER_FORMAT_VERSION:
        raise DomainparError(f"{path}: edge filter format version must be {FILTER_FORMAT_VERSION} (got {shorten(version)})")
    if not isinstance(meta, dict):
        raise DomainparError(f"{path}: edge filter settings must be a JSON object (got {type(meta).__name__})")
    names = lambda value: None if value is None else tuple(str(v) for v in value)  # noqa: E731
    try:
        config = FilterConfig.from_dict(meta["config"], source=str(path))
        net = FilterNet(int(meta["num_inputs"]), config.hidden, config.layers)
        net.load_state_dict(state["weights"])
        threshold = float(meta["threshold"])
        node_features, edge_features = names(meta["node_features"]), names(meta["edge_features"])
    except DomainparError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
        reraise_fault(exc)
        raise DomainparError(f"{path}: edge filter settings or weights are missing or malformed ({one_line(exc, 160)})") from None
    net.eval()
    return EdgeFilter(net, threshold, node_features, edge_features, config, meta.get("record"))


def _threshold_for(logits: np.ndarray, labels: np.ndarray, high_pt: np.ndarray, config: FilterConfig) -> float:
    """The largest threshold that keeps ``config.efficiency`` of the true edges and ``efficiency_pt1`` of the stiff ones."""
    candidates = []
    for mask, target in ((labels, config.efficiency), (labels & high_pt, config.efficiency_pt1)):
        true_logits = np.sort(logits[mask])
        if true_logits.size:
            # Keep at least ceil(target * n) true edges: the threshold is the logit of the last one kept.
            drop = int(np.floor((1.0 - target) * true_logits.size))
            candidates.append(float(true_logits[drop]))
    return min(candidates) if candidates else float("-inf")


def _check_training_source(path, labelled: bool, num_edges: int, names: tuple | None, widths: tuple[int, int],
                           first: EventGraph) -> None:  # fmt: skip
    """What a training or held-out graph must be: labelled, with edges, and of the first graph's features (``names``:
    its node and edge feature names, None where its file does not record them; ``widths``: its column counts)."""
    if not labelled:
        raise DomainparError(f"{path}: the edge filter trains on graphs with truth (got one without labels)")
    require_edges(num_edges, path, "train the edge filter on")
    if (names is not None and names != (first.node_features, first.edge_features)) or widths != (
        first.x.shape[1], first.edge_attr.shape[1]
    ):
        raise DomainparError("the edge filter's training graphs must share one feature set (got several)")


def _check_training_graph(graph: EventGraph, first: EventGraph, path) -> None:
    _check_training_source(path, graph.y is not None and graph.particle_pt is not None, graph.num_edges,
                           (graph.node_features, graph.edge_features), (graph.x.shape[1], graph.edge_attr.shape[1]), first)  # fmt: skip


def _check_held_out_header(path, first: EventGraph) -> None:
    """A held-out graph checked from its headers (its content is checked when it is read, after training): a file
    that cannot choose the threshold is refused before the steps."""
    header = inspect_graph(path)
    names = read_graph_metadata(path)
    # Names where the file's headers hold them (a PyG file names its columns in its description, read with it).
    named = all(names[k] is not None for k in ("node_features", "edge_features"))
    recorded = (tuple(names["node_features"]), tuple(names["edge_features"])) if named else None
    _check_training_source(path, header.has_labels, header.num_edges, recorded, (header.node_features, header.edge_features), first)


def _training_rows(files: list, config: FilterConfig, first: EventGraph, columns) -> tuple[torch.Tensor, torch.Tensor]:
    """Every true edge and ``config.negative_fraction`` of the false ones of the graphs ``files`` (a seeded draw),
    as (N, inputs) float32 rows and (N,) float32 labels, graph after graph."""
    rng = np.random.default_rng(config.seed)
    rows, targets = [], []
    for path in files:
        graph = first if path == files[0] else load_graph(path)
        _check_training_graph(graph, first, path)
        keep = np.flatnonzero((graph.y > 0.5) | (rng.random(graph.num_edges) < config.negative_fraction))
        rows.append(edge_inputs(graph, *columns, rows=keep))  # only the kept rows (~1/4 of a full event) gathered
        targets.append(graph.y[keep])
        del graph
    inputs = torch.from_numpy(np.concatenate(rows))
    labels = torch.from_numpy(np.concatenate(targets).astype(np.float32))
    if inputs.shape[0] == 0:
        raise DomainparError("the edge filter's training graphs have no edges")
    return inputs, labels


def train_filter(
    files: list[str | os.PathLike],
    config: FilterConfig = FilterConfig(),
    progress: bool = False,
    held_out_logits: dict[str, np.ndarray] | None = None,
) -> EdgeFilter:
    """Train an edge filter on labelled graph files and choose its threshold on held-out ones.

    Each graph is read once: the training ones before the steps (only their training rows kept), the held-out
    ones after them (their headers checked before).

    Args:
        files: graph files with truth (every ``config.holdout_every``-th is held out).
        config: the filter's settings.
        progress: print a line every few hundred steps.
        held_out_logits: filled with ``str(path)`` → (E,) float32 logits of each held-out graph, the trained
            filter's :meth:`EdgeFilter.logits` that chose its threshold: pruning those graphs needs no second scoring
            (:meth:`EdgeFilter.apply`'s ``logits``).

    Returns:
        The filter, with ``record`` holding the held-out edge efficiency and
        purity before and after filtering and the training time.
    """
    if len(files) < 2:
        raise DomainparError(f"the edge filter needs at least 2 training graphs (got {len(files)})")
    started = time.perf_counter()
    cpu_started = time.process_time()
    held = [i % config.holdout_every == config.holdout_every - 1 for i in range(len(files))]
    if not any(held):
        held[-1] = True  # fewer graphs than holdout_every: the last one chooses the threshold
    training = [f for f, h in zip(files, held) if not h]
    holdout = [f for f, h in zip(files, held) if h]
    # Graphs are read one at a time and only the training rows are kept: a full event's graph is ~0.3 GB.
    first = load_graph(training[0])
    columns = _columns(config, first, str(training[0]))
    for path in holdout:
        _check_held_out_header(path, first)
    inputs, labels = _training_rows(training, config, first, columns)
    cpu_rows = time.process_time()
    generator = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)
    net = FilterNet(inputs.shape[1], config.hidden, config.layers)
    net.mean.copy_(inputs.mean(dim=0))
    net.scale.copy_(inputs.std(dim=0).clamp_min(1e-6))
    # Standardised once, in place, instead of in every step's forward: the same bits, elementwise.
    inputs.sub_(net.mean).div_(net.scale)
    optimiser = AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=config.lr, total_steps=config.steps)
    # Balance the classes: true edges weigh the fakes' share of the batch. With a share of the false edges kept,
    # the balanced loss is the full data's balanced loss up to a constant factor, which AdamW's steps ignore.
    positive = float(labels.mean())
    pos_weight = torch.tensor((1.0 - positive) / max(positive, 1e-6))
    num_rows = inputs.shape[0]
    net.train()
    for step in range(config.steps):
        batch = torch.randint(0, num_rows, (config.batch_edges,), generator=generator)
        # The network after FilterNet.forward's standardisation, on rows standardised above: the same bits. The
        # rows by index_select, a copy per row (7x faster than indexing's general gather on the 14M rows of the recipe).
        logits = net.mlp(torch.index_select(inputs, 0, batch)).squeeze(-1)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, torch.index_select(labels, 0, batch), pos_weight=pos_weight)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        if progress and (step + 1) % 500 == 0:
            print(f"  filter step {step + 1}/{config.steps}: loss {float(loss):.4f}", flush=True)
    net.eval()
    cpu_steps = time.process_time()
    train_rows = int(num_rows)
    del inputs, labels
    edge_filter = EdgeFilter(net, 0.0, first.node_features, first.edge_features, config, {})
    held_logits, held_labels, held_high = [], [], []
    for path in holdout:
        graph = load_graph(path)
        _check_training_graph(graph, first, path)
        held_logits.append(edge_filter.logits(graph))
        if held_out_logits is not None:
            held_out_logits[str(path)] = held_logits[-1]
        held_labels.append(graph.y > 0.5)
        held_high.append(graph.particle_pt[graph.edge_index[0]] > 1.0)
        del graph
    all_logits, all_labels, all_high = (np.concatenate(v) for v in (held_logits, held_labels, held_high))
    edge_filter.threshold = _threshold_for(all_logits, all_labels, all_high, config)
    kept = all_logits >= edge_filter.threshold
    edge_filter.record = {
        "train_graphs": len(training),
        "holdout_graphs": len(holdout),
        "train_edges": train_rows,
        "holdout_edges": int(all_labels.size),
        "holdout_kept_fraction": float(kept.mean()),
        "holdout_efficiency": float(kept[all_labels].mean()),
        "holdout_efficiency_pt1": float(kept[all_labels & all_high].mean()) if (all_labels & all_high).any() else None,
        "holdout_purity_before": float(all_labels.mean()),
        "holdout_purity_after": float(all_labels[kept].mean()) if kept.any() else None,
        "seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu_started,
        # This process's CPU seconds: reading the training graphs' rows, the steps, reading and scoring the held-out.
        "cpu_seconds_rows": cpu_rows - cpu_started,
        "cpu_seconds_steps": cpu_steps - cpu_rows,
        "cpu_seconds_threshold": time.process_time() - cpu_steps,
    }
    return edge_filter
