"""Memory: the one place the benchmarks measure memory, four ways that answer different questions.

* **RSS** (:func:`current_rss_bytes`, :func:`peak_rss_bytes`, :func:`reset_peak_rss`):
  the kernel's resident-set high-water mark of this process (primitives shared with the trainer,
  :mod:`domainpar.train.memory`) — what a real
  CPU step costs, allocator and temporaries included. Measure it in a fresh
  process (:mod:`bench.common.probe`) with :data:`PROBE_ENV`, so freed blocks
  go back to the kernel and each repeat measures afresh.
* **traced** (:func:`traced_peak`): forward + backward run on fake tensors
  under torch's ``MemTracker`` (every storage's lifetime, no allocation), so
  the real full event at hidden 64 — tens of GiB — can be measured on a
  24 GiB machine. Checkpointing's recomputation is traced too. The report
  checks it against RSS on a graph that fits.
* **saved tensors** (:class:`SavedTensors`, :func:`saved_bytes_meta`): the
  distinct storages autograd saves for backward (activation memory without
  allocator noise), optionally split by the device they live on — the
  device-resident activation memory of an offloaded run is what stays on the
  compute device.
* **CUDA** (:func:`cuda_peak_bytes`): ``torch.cuda.max_memory_allocated`` over
  one call, above what was allocated before it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from bench.common.exchanges import StandInExchange
from domainpar.train.memory import current_rss_bytes, peak_rss_bytes, reset_peak_rss

#: Environment of fresh measuring processes: glibc serves every large block by mmap and trims eagerly,
#: so freed activations go back to the kernel and the RSS high-water mark of each step is its own.
PROBE_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}


# ----------------------------------------------------------------------------- RSS

def rss_peak_of(fn: Callable[[], Any]) -> int | None:
    """RSS high-water mark of one call of ``fn`` above the RSS just before it (None where it cannot be reset)."""
    baseline = current_rss_bytes()
    if not reset_peak_rss():
        fn()
        return None
    fn()
    return peak_rss_bytes() - baseline


# ----------------------------------------------------------------------------- CUDA

def cuda_peak_bytes(fn: Callable[[], Any], device: torch.device | str = "cuda") -> int:
    """``torch.cuda.max_memory_allocated`` during one call of ``fn`` above the allocation before it."""
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device) - before)


# ----------------------------------------------------------------------------- saved tensors

class SavedTensors:
    """Counts the distinct storages autograd saves for backward, per device type.

    Use as ``with SavedTensors(exclude=model.parameters()) as saved: loss = step()``;
    then ``saved.total`` is the activation bytes kept for backward and
    ``saved.by_device`` splits them (``{"cpu": …, "cuda": …}``). Tensors packed
    by an outer hook (offloading) are counted as the hook left them only when
    this counter is installed *inside* that hook's context.

    Args:
        exclude: tensors whose storages are not activations (parameters, the graph's inputs).
    """

    def __init__(self, exclude: Any = ()) -> None:
        self.excluded = {t.untyped_storage()._cdata for t in exclude}
        self.storages: dict[int, tuple[str, int]] = {}
        self._hooks = None

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key not in self.excluded:
            self.storages[key] = (tensor.device.type, storage.nbytes())
        return tensor

    @staticmethod
    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def __enter__(self) -> "SavedTensors":
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)

    @property
    def total(self) -> int:
        """Bytes of every distinct saved storage."""
        return sum(n for _, n in self.storages.values())

    @property
    def by_device(self) -> dict[str, int]:
        """Saved bytes per device type."""
        out: dict[str, int] = {}
        for device, n in self.storages.values():
            out[device] = out.get(device, 0) + n
        return out


def _graph_tensors(graph: Any) -> list[torch.Tensor]:
    return [getattr(graph, f.name) for f in dataclasses.fields(graph) if isinstance(getattr(graph, f.name), torch.Tensor)]


def saved_bytes_meta(model: torch.nn.Module, graph: Any, exchange: Any, *, segment_peak: bool = False) -> tuple[int, int]:
    """Bytes autograd saves in one forward of ``model(graph, exchange)`` (any device, ``meta`` needs no RAM).

    Parameters and the graph's input tensors are not activations and are excluded.

    Args:
        model: a domainpar model (built by :func:`domainpar.model.registry.build_model`).
        graph: its local graph.
        exchange: completes the halo (a :class:`StandInExchange` on the same device).
        segment_peak: also measure the largest checkpointable region (``model._run``) of the forward.

    Returns:
        (bytes saved at the end of the forward, bytes of the largest region; 0 unless ``segment_peak``).
    """
    counter = SavedTensors(exclude=[*model.parameters(), *_graph_tensors(graph)])
    largest = 0
    original_run = model._run

    def measured_run(fn, *args):
        nonlocal largest
        before = counter.total
        out = original_run(fn, *args)
        largest = max(largest, counter.total - before)
        return out

    if segment_peak:
        model._run = measured_run
    try:
        with counter:
            model(graph, exchange)
    finally:
        model._run = original_run
    return counter.total, largest


def activation_peak_meta(graph: Any, part: Any, config: Any) -> int:
    """Saved-tensor activation peak of one part on the ``meta`` device.

    Without checkpointing: what is saved at the end of the forward. With
    checkpointing: that plus the largest region recomputed during backward
    (the saved bytes of the largest region of a non-checkpointed forward).

    Args:
        graph: the :class:`~domainpar.data.event_graph.EventGraph`.
        part: one :class:`~domainpar.partition.plan.PartPlan` of it.
        config: the :class:`~domainpar.model.interaction_network.ModelConfig` (``checkpointing`` honoured).
    """
    from domainpar.model.registry import build_model
    from domainpar.partition.local_graph import local_graph

    local = local_graph(graph, part).to("meta")
    exchange = StandInExchange(part.num_halo, config.hidden, device="meta", requires_grad=False)
    forward_bytes, _ = saved_bytes_meta(build_model(config).to("meta"), local, exchange)
    if not config.checkpointing:
        return forward_bytes
    plain = build_model(dataclasses.replace(config, checkpointing=False)).to("meta")
    _, segment = saved_bytes_meta(plain, local, exchange, segment_peak=True)
    return forward_bytes + segment


def check_meta_accounting(graph: Any, part: Any) -> None:
    """Raise unless the ``meta`` byte count equals a real CPU run's (both checkpointing settings)."""
    from domainpar.model.config import ModelConfig
    from domainpar.model.registry import build_model
    from domainpar.partition.local_graph import local_graph

    for checkpointing in (False, True):
        config = ModelConfig(hidden=16, num_iterations=2, checkpointing=checkpointing)
        counts = []
        for device in ("cpu", "meta"):
            local = local_graph(graph, part).to(device)
            exchange = StandInExchange(part.num_halo, config.hidden, device=device, requires_grad=False)
            counts.append(saved_bytes_meta(build_model(config).to(device), local, exchange))
        if counts[0] != counts[1]:
            raise RuntimeError(f"meta saved-tensor accounting differs from a CPU run: cpu {counts[0]}, meta {counts[1]}")


# ----------------------------------------------------------------------------- traced

class _HostStash:
    """``save_on_cpu`` for traced runs: every saved tensor moves to the ``meta`` device, which stands for host memory.

    Under fake tensors the compute device is the fake CPU; what autograd keeps
    for backward is copied to a second device, so the tracker's per-device
    peaks separate device-resident memory from what offloading keeps on the host.
    """

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(
            lambda t: (t.device, t.to("meta")), lambda packed: packed[1].to(packed[0])
        )
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)


def traced_peak(
    part: Any, config: Any, model_factory: Callable[[Any], torch.nn.Module] | None = None, offload: bool = False
) -> dict[str, int]:
    """Trace one forward+backward of ``part`` on fake tensors: its peak memory by category and its matmul FLOPs.

    Args:
        part: the part's real :class:`~domainpar.partition.local_graph.LocalGraph` (only shapes are used).
        config: model hyper-parameters (``checkpointing`` is honoured).
        model_factory: builds the model from ``config`` (default: the package factory, :func:`domainpar.model.registry.build_model`); it is
            called as ``model(graph, exchange)``.
        offload: keep what autograd saves in "host" memory during the forward (as ``--offload`` does);
            the figures are then the compute device's, and ``"host"`` is the host's peak.

    Returns:
        ``{"total", "activations", "temporaries", "parameters", "gradients"}``
        in bytes at the moment of the peak, and ``"flops"``: floating-point
        operations of the matrix products (forward + backward, recomputation
        included), as counted by ``torch.utils.flop_counter``.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.utils.flop_counter import FlopCounterMode

    from domainpar.model.registry import build_model

    factory = model_factory or build_model
    mode = FakeTensorMode()
    with mode:
        fake_part = type(part)(
            **{
                f.name: mode.from_tensor(getattr(part, f.name)) if isinstance(getattr(part, f.name), torch.Tensor) else getattr(part, f.name)
                for f in dataclasses.fields(part)
            }
        )
        model = factory(config)
        exchange = StandInExchange(part.num_halo, config.hidden, random=False)
        weights = torch.linspace(-1.0, 1.0, part.num_edges)
    tracker = MemTracker()
    tracker.track_external(model)
    import contextlib

    with mode, tracker:
        with _HostStash() if offload else contextlib.nullcontext():
            logits = model(fake_part, exchange)
        (logits * weights).sum().backward()
    # A second pass for the FLOPs: nesting the two modes skews the memory tracker's attribution.
    for parameter in model.parameters():
        parameter.grad = None
    flops = FlopCounterMode(display=False)
    with mode, flops:
        logits = model(fake_part, exchange)
        (logits * weights).sum().backward()
    snapshot = tracker.get_tracker_snapshot("peak")
    per_device = {str(device): values for device, values in snapshot.items()}
    compute = next(v for d, v in per_device.items() if not d.startswith("meta"))
    host = next((v for d, v in per_device.items() if d.startswith("meta")), {})
    by_name = {getattr(k, "value", k): int(v) for k, v in compute.items()}
    host_total = sum(int(v) for k, v in host.items() if getattr(k, "value", k) == "Total")
    return {
        "host": host_total,
        "total": by_name["Total"],
        "activations": by_name.get("Activation", 0),
        "temporaries": by_name.get("Temp", 0),
        "parameters": by_name.get("Parameter", 0),
        "gradients": by_name.get("Gradient", 0),
        "flops": int(flops.get_total_flops()),
    }
