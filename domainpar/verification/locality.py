"""A model's locality, proved on a slice of the run's own graph before a partitioned run trusts it.

Domain-parallel training and partitioned inference equal one process only for a *local* model (docs/models.md,
"What it must not do"). A user's model is not proven exact as the built-in ones are, and a non-local one (a
BatchNorm over the nodes, a global mean) trains and scores without an error, to other numbers than one process
gives. :func:`check_locality` is the proof a run asks for before its first step:

1. :func:`graph_slice` cuts a few hundred nodes out of the graph (a breadth-first ball around its most
   connected node, every edge between them);
2. the slice runs once as one process and once split into parts with owners drawn at random, so nearly every
   edge is cut;
3. the parts run in threads of this process, each with its own copy of the model, and meet in a
   :class:`SliceExchange`: the halo rows a part receives are the owners' own rows, so one autograd graph joins
   the parts and a single backward returns every halo gradient to its owner, as the halo exchange does;
4. the edge logits and, for training, the summed parameter gradients are compared with one process's in float64
   at the exactness tolerance of ``domainpar verify``.

It cannot see behaviour that depends on more than this slice shows, randomness such as dropout (refused), or what
a model does outside ``forward``; ``domainpar verify`` runs the same comparison on a whole graph, on real ranks.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from domainpar.arrays import unique
from domainpar.data.event_graph import EventGraph
from domainpar.data.graph_files import load_graph
from domainpar.errors import DomainparError, one_line, shorten
from domainpar.model.config import ModelConfig
from domainpar.model.exchange import CompletedExchange
from domainpar.model.loss import edge_loss
from domainpar.model.registry import build_model
from domainpar.npzfile import stored_member
from domainpar.parallel.part import load_host_part, rank_part, stage
from domainpar.partition.local_graph import LocalGraph
from domainpar.partition.plan import PartPlan, build_plan
from domainpar.verification.cases import TOLERANCES, max_rel

#: Nodes of the slice the check runs on (fewer when the graph has fewer).
SLICE_NODES = 400
#: Most parts the slice is split into (the run's domain size, at least 2).
MAX_PARTS = 4
#: Pass threshold of the logit and gradient errors: ``domainpar verify``'s in float64.
TOLERANCE = TOLERANCES["float64"]
#: Seconds the parts may take to meet at an exchange before the check gives up.
MEET_TIMEOUT_S = 300.0
#: Where the rule is written down, for messages.
RULE = "docs/models.md, 'What it must not do'"


def check_parts(domain_size: int) -> int:
    """Parts the slice is split into for a run of ``domain_size`` ranks per event: that many, 2 to :data:`MAX_PARTS`."""
    return max(2, min(int(domain_size), MAX_PARTS))


# --------------------------------------------------------------------------------------------- the slice


def _ball(edge_index: np.ndarray, num_nodes: int, size: int) -> np.ndarray:
    """(num_nodes,) bool: ``size`` nodes grown breadth-first (edges undirected) from the most connected node,
    restarting from the most connected node left when a component is used up."""
    src, dst = edge_index
    degree = np.bincount(edge_index.reshape(-1), minlength=num_nodes)
    inside = np.zeros(num_nodes, dtype=bool)
    count = 0
    while count < size:
        seed = int(np.argmax(np.where(inside, -1, degree)))
        inside[seed] = True
        count += 1
        while count < size:
            crossing = inside[src] != inside[dst]  # edges that leave the ball
            if not crossing.any():
                break
            new = unique(np.concatenate([src[crossing], dst[crossing]]))
            new = new[~inside[new]][: size - count]
            inside[new] = True
            count += new.shape[0]
    return inside


#: What a slice keeps of a graph (labels become zeros for a graph without them).
_SLICE_ARRAYS = ("x", "pos", "hit_id", "layer", "edge_index", "edge_attr", "y")


def _cut(event_id: int, arrays: Mapping[str, np.ndarray | None], size: int) -> EventGraph:
    """The slice of a graph given as arrays (in memory or memory-mapped: only the slice's rows are read)."""
    edge_index = np.asarray(arrays["edge_index"])
    num_nodes = int(arrays["x"].shape[0])
    if num_nodes <= size:
        inside = np.ones(num_nodes, dtype=bool)
    else:
        inside = _ball(edge_index, num_nodes, size)
    ids = np.flatnonzero(inside)
    kept = np.flatnonzero(inside[edge_index[0]] & inside[edge_index[1]])
    remap = np.full(num_nodes, -1, dtype=np.int64)
    remap[ids] = np.arange(ids.shape[0], dtype=np.int64)
    labels = arrays.get("y")
    return EventGraph(
        event_id=int(event_id), x=np.asarray(arrays["x"][ids]), pos=np.asarray(arrays["pos"][ids]),
        hit_id=np.asarray(arrays["hit_id"][ids]), layer=np.asarray(arrays["layer"][ids]),
        edge_index=remap[edge_index[:, kept]], edge_attr=np.asarray(arrays["edge_attr"][kept]),
        y=np.asarray(labels[kept]) if labels is not None else np.zeros(kept.shape[0], dtype=np.float32),
    )  # fmt: skip


def graph_slice(graph: EventGraph, size: int = SLICE_NODES) -> EventGraph:
    """A slice of ``graph``: ``size`` nodes around its most connected node (a breadth-first ball) and every edge
    between them, with their features and labels (zeros for a graph without labels)."""
    return _cut(graph.event_id, {name: getattr(graph, name) for name in _SLICE_ARRAYS}, size)


def _stored_members(path: Path, names: tuple[str, ...]) -> tuple[int, dict[str, np.ndarray | None]] | None:
    """(event id, read-only memory maps of ``names``) of an ``.npz`` graph whose members are stored uncompressed
    (``domainpar build`` writes them so); None for any other file, which is then read whole."""
    with open(path, "rb") as fh, zipfile.ZipFile(fh) as archive:
        file_size = os.fstat(fh.fileno()).st_size
        infos = {info.filename[:-4]: info for info in archive.infolist() if info.filename.endswith(".npy")}
        maps: dict[str, np.ndarray | None] = {}
        for name in (*names, "event_id"):
            info = infos.get(name)
            if info is None:
                maps[name] = None
                continue
            if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                return None
            layout = stored_member(fh, info, file_size)
            if layout is None:
                return None
            start, header_len, shape, fortran, dtype = layout
            order = "F" if fortran else "C"
            maps[name] = np.memmap(path, dtype=dtype, mode="r", offset=start + header_len, shape=shape, order=order)
    if maps["event_id"] is None or any(maps[name] is None for name in names if name != "y"):
        return None
    return int(maps.pop("event_id")), maps


def file_slice(path: str | os.PathLike) -> EventGraph:
    """:func:`graph_slice` of the graph file at ``path``, reading little more than its edge list: the rows of the
    slice are read from memory maps of the file. Other files (PyG, compressed) are loaded whole.

    Raises:
        DomainparError: a file that is not a readable graph (as :func:`~domainpar.data.graph_files.load_graph`).
    """
    path = Path(path)
    try:
        stored = _stored_members(path, _SLICE_ARRAYS) if path.suffix == ".npz" else None
        if stored is not None:
            return _cut(stored[0], stored[1], SLICE_NODES)
    except (OSError, ValueError, IndexError, zipfile.BadZipFile, struct.error, DomainparError):
        pass  # damaged: the whole read below names what is wrong
    return graph_slice(load_graph(path))


def random_owner(num_nodes: int, num_parts: int, seed: int = 0) -> np.ndarray:
    """(num_nodes,) owning part of every node, drawn at random (every part non-empty): nearly every edge is cut."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, num_parts, num_nodes).astype(np.int64)
    owner[rng.permutation(num_nodes)[:num_parts]] = np.arange(num_parts)
    return owner


# --------------------------------------------------------------------------------------- the exchange


class _Meeting:
    """Where the parts' threads meet at every exchange: each posts its owned rows, then takes its halo rows from
    the owners' posts of the same call (kept by call number, so no part waits for another to read)."""

    def __init__(self, num_parts: int, timeout_s: float) -> None:
        self.num_parts = num_parts
        self.timeout_s = timeout_s
        self.cond = threading.Condition()
        self.rows: dict[tuple[int, int], torch.Tensor] = {}
        self.calls = [0] * num_parts
        self.finished = [False] * num_parts
        self.failed = False

    def post(self, part: int, x_owned: torch.Tensor) -> int:
        with self.cond:
            call = self.calls[part]
            self.calls[part] += 1
            self.rows[(call, part)] = x_owned
            self.cond.notify_all()
        return call

    def take(self, part: int, call: int, owner: int) -> torch.Tensor:
        """Part ``owner``'s rows of exchange number ``call`` (waits for them)."""
        deadline = time.monotonic() + self.timeout_s
        with self.cond:
            while (call, owner) not in self.rows:
                if self.failed:
                    raise _PeerStopped()
                if self.finished[owner]:
                    raise DomainparError(
                        f"its forward calls the exchange a different number of times on different parts (part {part} "
                        f"made call {call + 1}, part {owner} returned after {self.calls[owner]}): the ranks of a domain "
                        "group must exchange in step"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DomainparError(
                        f"part {part} waited {self.timeout_s:g} s for part {owner} at exchange {call + 1}: the parts "
                        "of its forward do not exchange in step"
                    )
                self.cond.wait(min(left, 1.0))
            return self.rows[(call, owner)]

    def finish(self, part: int, failed: bool = False) -> None:
        with self.cond:
            self.finished[part] = True
            self.failed = self.failed or failed
            self.cond.notify_all()


class _PeerStopped(Exception):
    """Another part's thread failed first (its exception is the one reported)."""


class SliceExchange:
    """The exchange of one part of the slice, run in that part's thread: halo rows are the owners' posted rows.

    Differentiable as the halo exchange is (docs/models.md): the halo rows are rows *of the owners' tensors*, so
    their gradients flow back to the owners within the one autograd graph of all parts.
    """

    def __init__(self, plan: PartPlan, owned_ids: list[np.ndarray], meeting: _Meeting) -> None:
        self.part = plan.part
        self.num_halo = plan.num_halo
        self.bytes_sent = 0
        self.meeting = meeting
        self.thread: threading.Thread | None = None
        # For each neighbour q: the owner-local row of every halo node it sends, in halo order.
        self._sources = []
        for i, q in enumerate(plan.recv_parts):
            halo = plan.halo_ids[plan.recv_offsets[i] : plan.recv_offsets[i + 1]]
            rows = np.searchsorted(owned_ids[int(q)], halo)
            self._sources.append((int(q), torch.from_numpy(rows.astype(np.int64))))

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        return self.start(x_owned).wait()

    def start(self, x_owned: torch.Tensor) -> "_PendingSlice":
        if threading.current_thread() is not self.thread:
            raise DomainparError(
                "it calls the exchange outside its forward pass (in a region recomputed during backward, or from "
                "another thread): recomputation would repeat a message between ranks"
            )
        return _PendingSlice(self, x_owned, self.meeting.post(self.part, x_owned))


class _PendingSlice:
    def __init__(self, exchange: SliceExchange, x_owned: torch.Tensor, call: int) -> None:
        self._exchange, self._x_owned, self._call = exchange, x_owned, call

    def wait(self) -> torch.Tensor:
        exchange = self._exchange
        halo = [exchange.meeting.take(exchange.part, self._call, q)[rows] for q, rows in exchange._sources]
        return CompletedExchange(torch.cat([self._x_owned, *halo]) if halo else self._x_owned).wait()


# ------------------------------------------------------------------------------------------ the check


@dataclass(frozen=True)
class LocalityResult:
    """What :func:`check_locality` found."""

    model: str
    num_parts: int
    num_nodes: int
    num_edges: int
    num_halo: int
    """Halo rows of all parts (0: nothing was exchanged, so nothing was proven)."""
    max_err_logits: float
    """Max over every local copy of every edge of |logit_part − logit_one| / max(1, max |logit_one|)."""
    max_err_grad: float
    """Max over parameters of max |Σ_p g_p − g_one| / max |g_one| (0 when gradients were not compared)."""
    worst_parameter: str
    """The parameter with the largest gradient error ("" when gradients were not compared)."""
    gradients: bool
    """Whether parameter gradients were compared (training) or only the outputs (inference)."""
    seconds: float

    @property
    def proven(self) -> bool:
        """Something was exchanged: the comparison says something about the model's locality."""
        return self.num_halo > 0

    @property
    def passed(self) -> bool:
        """Outputs (and gradients) within :data:`TOLERANCE` (NaN fails)."""
        return bool(self.max_err_logits <= TOLERANCE and self.max_err_grad <= TOLERANCE)


def _build(config: ModelConfig, seed: int, state: dict[str, torch.Tensor] | None, train: bool) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_model(config).to(dtype=torch.float64)
    if state is not None:
        model.load_state_dict(state)  # converted to float64 as it is copied in
    return model.train(train)


def _run_part(model, graph: LocalGraph, exchange: SliceExchange, gradients: bool, out: dict, part: int) -> None:
    """Body of a part's thread: its forward (its logits, or its exception, land in ``out``)."""
    try:
        with torch.set_grad_enabled(gradients):
            out[part] = model(graph, exchange)
        exchange.meeting.finish(part)
    except BaseException as exc:  # noqa: BLE001 - reported by the main thread, which names the part
        out[part] = exc
        exchange.meeting.finish(part, failed=True)


def _gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: (p.grad if p.grad is not None else torch.zeros_like(p)).detach() for name, p in model.named_parameters()}


def check_locality(
    config: ModelConfig,
    graph: EventGraph,
    num_parts: int = 2,
    *,
    seed: int = 0,
    state: dict[str, torch.Tensor] | None = None,
    gradients: bool = True,
) -> LocalityResult:
    """Compare the model of ``config`` on a slice of ``graph``: split into ``num_parts`` parts against one process.

    Args:
        config: the model, with the graph's feature widths (the partitioned copies run it as given; the one-process
            reference without activation checkpointing and overlap).
        graph: the graph to slice (the run's first).
        num_parts: parts of the slice (at least 2).
        seed: seed of the weights when ``state`` is None (a training run's initial weights).
        state: the weights to check (a trained model's), or None.
        gradients: compare the parameter gradients of the loss too (training: model in train mode), or the
            outputs only (inference: eval mode, no autograd).

    Returns:
        The :class:`LocalityResult` (``proven`` False when the slice had no edge to cut).

    Raises:
        DomainparError: the partitioned model failed where one process did not, or its parts did not exchange in
            step (it names the model and what happened).
    """
    threads = torch.get_num_threads()
    # One intra-op thread: the slice is small, and the parts' threads must not each spin up a pool on shared cores.
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
            return _check(config, graph, num_parts, seed, state, gradients)
    finally:
        torch.set_num_threads(threads)


def _check(config: ModelConfig, graph: EventGraph, num_parts: int, seed: int, state: dict[str, torch.Tensor] | None,
           gradients: bool) -> LocalityResult:  # fmt: skip
    start = time.perf_counter()
    name = config.name
    timeout_s = MEET_TIMEOUT_S
    piece = graph_slice(graph)
    if piece.num_edges == 0 or piece.num_nodes < num_parts:
        return LocalityResult(name, num_parts, piece.num_nodes, piece.num_edges, 0, 0.0, 0.0, "", gradients,
                              time.perf_counter() - start)  # fmt: skip
    # The plain reference: one process, no recomputation, no overlap (as `domainpar verify` runs it).
    reference = _build(dataclasses.replace(config, checkpointing=False, overlap=False), seed, state, gradients)
    state = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    whole = rank_part(piece, dtype=torch.float64)
    with torch.set_grad_enabled(gradients):
        logits_one = reference(whole.graph, whole.exchange)
        if gradients:
            edge_loss(logits_one, whole.graph).backward()
    full = whole.scatter_edges(logits_one.detach())
    grads_one = _gradients(reference) if gradients else {}

    plan = build_plan(piece.edge_index, random_owner(piece.num_nodes, num_parts, seed), num_parts, y=piece.y)
    owned = [p.owned_ids for p in plan.parts]
    meeting = _Meeting(num_parts, timeout_s)
    models, graphs, exchanges = [], [], []
    for p in range(num_parts):
        models.append(_build(config, seed, state, gradients))
        graphs.append(stage(load_host_part(piece, p, plan=plan), "cpu", torch.float64).graph)
        exchanges.append(SliceExchange(plan.parts[p], owned, meeting))
    out: dict[int, Any] = {}
    threads = []
    for p in range(num_parts):
        thread = threading.Thread(target=_run_part, args=(models[p], graphs[p], exchanges[p], gradients, out, p),
                                  name=f"domainpar-locality-part{p}", daemon=True)  # fmt: skip
        exchanges[p].thread = thread
        threads.append(thread)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 5.0)
    _raise_part_failure(name, out, num_parts, timeout_s)
    logits_parts = [out[p] for p in range(num_parts)]
    for logits, g in zip(logits_parts, graphs):
        if not isinstance(logits, torch.Tensor) or logits.shape != (g.num_edges,):
            found = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
            raise DomainparError(
                f"model {shorten(name, limit=240)}: must return one logit per local edge, shape ({g.num_edges},) "
                f"(got {found}) on a part of a {num_parts}-part slice"
            )
    if gradients:
        try:
            sum(edge_loss(logits, g) for logits, g in zip(logits_parts, graphs)).backward()
        except DomainparError as exc:
            raise DomainparError(f"model {shorten(name, limit=240)}: {exc} ({RULE})") from None

    err_logits = 0.0
    for logits, g in zip(logits_parts, graphs):
        ref = full[g.edge_ids]
        if ref.numel():
            err = float((logits.detach() - ref).abs().max()) / max(1.0, float(ref.abs().max()))
            err_logits = max(err_logits, err) if err == err else float("nan")
            if err_logits != err_logits:
                break
    worst, err_grad = "", 0.0
    if gradients:
        per_part = [_gradients(m) for m in models]
        summed = {key: sum(g[key] for g in per_part) for key in grads_one}
        for key, ref in grads_one.items():
            err = max_rel(summed[key] - ref, ref)
            if not err <= err_grad or not worst:
                worst, err_grad = key, err if err == err else float("nan")
            if err_grad != err_grad:
                break
    return LocalityResult(
        model=name, num_parts=num_parts, num_nodes=piece.num_nodes, num_edges=piece.num_edges,
        num_halo=sum(p.num_halo for p in plan.parts), max_err_logits=err_logits, max_err_grad=err_grad,
        worst_parameter=worst, gradients=gradients, seconds=time.perf_counter() - start,
    )  # fmt: skip


def _raise_part_failure(name: str, out: dict[int, Any], num_parts: int, timeout_s: float) -> None:
    """The first part whose forward raised (not merely stopped after another's failure), as one line."""
    missing = [p for p in range(num_parts) if p not in out]
    if missing:
        raise DomainparError(
            f"model {shorten(name, limit=240)}: part {missing[0]} of a {num_parts}-part slice did not finish its forward "
            f"within {timeout_s:g} s ({RULE})"
        )
    failures = [(p, out[p]) for p in range(num_parts) if isinstance(out[p], BaseException)]
    first = next(((p, exc) for p, exc in failures if not isinstance(exc, _PeerStopped)), None)
    if first is None:
        return
    part, exc = first
    if isinstance(exc, DomainparError):
        raise DomainparError(f"model {shorten(name, limit=240)}: {one_line(exc)} ({RULE})") from None
    # One process ran; the same model failed on a part: it reads rows the part does not hold (or holds elsewhere).
    raise DomainparError(
        f"model {shorten(name, limit=240)}: failed on part {part} of a {num_parts}-part slice although one process ran "
        f"({type(exc).__name__}: {one_line(exc, limit=160)}): it does not compute on the owned and halo rows the "
        f"exchange gives ({RULE})"
    ) from None


def require_local(
    config: ModelConfig,
    graph: EventGraph,
    num_parts: int,
    *,
    where: str,
    consequence: str,
    skip: str = "--skip-locality-check",
    seed: int = 0,
    state: dict[str, torch.Tensor] | None = None,
    gradients: bool = True,
) -> LocalityResult:
    """:func:`check_locality`, refusing a model that is not local in one line.

    Args:
        config: the model (the graph's feature widths set).
        graph: the graph to slice.
        num_parts: parts of the slice.
        where: the graph, for the message (a file name, "event 1000").
        consequence: what the run would do wrong, for the message.
        skip: how the user skips the check, for the message.
        seed: seed of the initial weights (when ``state`` is None).
        state: trained weights to check instead.
        gradients: compare parameter gradients too (training), or outputs only (inference).

    Raises:
        DomainparError: naming the model and the tensor that differs.
    """
    result = check_locality(config, graph, num_parts, seed=seed, state=state, gradients=gradients)
    if result.passed:
        return result
    differs = []
    if not result.max_err_logits <= TOLERANCE:
        differs.append(f"its output (edge logits) differs from one process's by {result.max_err_logits:.2g}")
    if not result.max_err_grad <= TOLERANCE:
        differs.append(f"the gradient of its parameter {result.worst_parameter} by {result.max_err_grad:.2g} (relative)")
    raise DomainparError(
        f"model {shorten(result.model, limit=240)} is not local: on a {result.num_parts}-part slice of {where} ({result.num_nodes} "
        f"nodes, {result.num_edges} edges) {' and '.join(differs)} (tolerance {TOLERANCE:g}), so {consequence} "
        f"({RULE}); make it local, or check it with `domainpar verify` and pass {skip}"
    )


__all__ = ["LocalityResult", "MAX_PARTS", "SLICE_NODES", "SliceExchange", "TOLERANCE", "check_locality", "check_parts",
           "graph_slice", "random_owner", "require_local"]
