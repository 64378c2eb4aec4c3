"""Peak memory of one part's forward+backward, traced on fake tensors (no allocation).

The real full event at hidden 64 needs tens of GiB of activations on one
process, more than a shared 24 GiB machine can give a benchmark. So the
memory section traces the step instead of running it: the model runs under
``FakeTensorMode`` (shapes and dtypes only, no data) while
``torch.distributed._tools.mem_tracker.MemTracker`` follows every storage's
lifetime and records the peak by category (parameters, gradients,
activations, temporaries). Checkpointing's recomputation is traced too.

The trace is checked against reality in the same benchmark run: on a graph
that fits, :mod:`bench.probe` measures the RSS high-water mark of the real
step, and the report prints both.
"""

from __future__ import annotations

import dataclasses

import torch

from domainpar.model.interaction_network import InteractionNetwork, ModelConfig
from domainpar.partition.local_graph import LocalGraph


class _Ready:
    def __init__(self, value: torch.Tensor) -> None:
        self._value = value

    def wait(self) -> torch.Tensor:
        return self._value


class _FakeHalo:
    """Stand-in exchange on fake tensors: appends a (num_halo, H) leaf that requires grad."""

    def __init__(self, num_halo: int, hidden: int) -> None:
        self.num_halo = num_halo
        self.halo = torch.zeros(num_halo, hidden).requires_grad_(True)

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        return torch.cat([x_owned, self.halo]) if self.num_halo else x_owned

    def start(self, x_owned: torch.Tensor) -> _Ready:
        return _Ready(self(x_owned))


def traced_peak(part: LocalGraph, config: ModelConfig) -> dict[str, int]:
    """Trace one forward+backward of ``part``: its peak memory by category and its matmul FLOPs.

    Args:
        part: the part's real local graph (only shapes are used).
        config: model hyper-parameters (``checkpointing`` is honoured).

    Returns:
        ``{"total", "activations", "temporaries", "parameters", "gradients"}``
        in bytes at the moment of the peak, and ``"flops"``: floating-point
        operations of the matrix products (forward + backward, recomputation
        included), as counted by ``torch.utils.flop_counter``.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.utils.flop_counter import FlopCounterMode

    mode = FakeTensorMode()
    with mode:
        fake_part = LocalGraph(
            **{
                f.name: mode.from_tensor(getattr(part, f.name)) if isinstance(getattr(part, f.name), torch.Tensor) else getattr(part, f.name)
                for f in dataclasses.fields(part)
            }
        )
        model = InteractionNetwork(config)
        exchange = _FakeHalo(part.num_halo, config.hidden)
        weights = torch.linspace(-1.0, 1.0, part.num_edges)
    tracker = MemTracker()
    tracker.track_external(model)
    with mode, tracker:
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
    (per_device,) = snapshot.values()
    by_name = {getattr(k, "value", k): int(v) for k, v in per_device.items()}
    return {
        "total": by_name["Total"],
        "activations": by_name.get("Activation", 0),
        "temporaries": by_name.get("Temp", 0),
        "parameters": by_name.get("Parameter", 0),
        "gradients": by_name.get("Gradient", 0),
        "flops": int(flops.get_total_flops()),
    }
