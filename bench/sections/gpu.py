"""GPU report: the real full event on one GPU (``python -m bench --device cuda``).

The graph of the real full event 21000 (built with the project's builder,
one part: the whole graph on one device) and the default Interaction Network
(hidden 64, 8 iterations, 2-layer MLPs with LayerNorm and SiLU), one
training step = forward + backward of a label-free loss of training's shape:

* step time: median over timed steps after warm-up, the device synchronised
  around each step;
* memory: ``torch.cuda.max_memory_allocated`` during a step above what was
  allocated before it, beside the traced figure of the same configuration
  (fake tensors on the host, :func:`bench.common.memory.traced_peak`) and the
  paper model's prediction (:mod:`bench.scaling_model`);
* fp32 vs bf16 (``torch.autocast``, reductions and LayerNorm in fp32);
* the model's ``compile`` setting: ``auto`` (Inductor-fused row pieces on CUDA) in every row, and
  ``off`` (PyTorch's eager kernels) beside it for fp32 ± checkpointing and the reference comparison;
* checkpointing ± offload (``torch.autograd.graph.save_on_cpu``, pinned host
  memory): with offload, what stays on the GPU is what ``max_memory_allocated`` sees;
* the reference comparison at the size of issue 14 (3-layer MLPs with
  LayerNorm and ReLU): ours ± checkpointing vs the field's InteractionGNN
  (the ``interaction_gnn`` model as set up in :mod:`bench.common.models`, checkpointed);
* determinism: two steps from the same weights give bitwise equal gradients
  (our segment kernels have no atomics; the reference's scatter-add does);
* where the time goes: ``torch.profiler`` tables of one step (CUDA time per
  operator).

Every configuration is guarded: an out-of-memory error is reported in its
row and the next configuration runs.
"""

from __future__ import annotations

import contextlib
import gc
import time

import torch

from bench.common.memory import cuda_peak_bytes, traced_peak
from bench.common.report import Column, Section, ratio
from bench.common.timing import median_seconds
from bench.common.workloads import Workload, missing_full_event

DEVICES = ("cuda",)

#: Default-size configurations: name → (checkpointing, offload, dtype, model compile setting).
OURS = {
    "fp32": (False, False, torch.float32, "auto"),
    "fp32, checkpointing": (True, False, torch.float32, "auto"),
    "fp32, checkpointing + offload": (True, True, torch.float32, "auto"),
    "bf16": (False, False, torch.bfloat16, "auto"),
    "bf16, checkpointing": (True, False, torch.bfloat16, "auto"),
    "bf16, checkpointing + offload": (True, True, torch.bfloat16, "auto"),
    "fp32, compile off": (False, False, torch.float32, "off"),
    "fp32, checkpointing, compile off": (True, False, torch.float32, "off"),
}
#: The issue-14 size for the reference comparison.
REFERENCE_MODEL = {"hidden": 64, "num_iterations": 8, "mlp_layers": 3, "activation": "relu", "layer_norm": True}
MIB = 2**20


def _model(kind: str, part, checkpointing: bool, **size):
    from bench.common.models import build as build_kind
    from domainpar.model.config import ModelConfig

    config = ModelConfig(
        node_features=int(part.x.shape[1]), edge_features=int(part.edge_attr.shape[1]), checkpointing=checkpointing, **size
    )
    return build_kind(kind, config), config


class _Step:
    """One training step of a model on the device's part, with its precision and offload."""

    def __init__(self, model, part, weights, dtype: torch.dtype, offload: bool) -> None:
        self.model, self.part, self.weights, self.dtype, self.offload = model, part, weights, dtype, offload

    def __call__(self) -> None:
        autocast = torch.autocast("cuda", dtype=self.dtype) if self.dtype != torch.float32 else contextlib.nullcontext()
        stash = torch.autograd.graph.save_on_cpu(pin_memory=True) if self.offload else contextlib.nullcontext()
        with stash, autocast:
            loss = (self.model(self.part).float() * self.weights).sum() / self.part.num_edges
        loss.backward()

    def grads(self) -> list[torch.Tensor]:
        return [p.grad.detach().clone() for p in self.model.parameters() if p.grad is not None]

    def clear(self) -> None:
        self.model.zero_grad(set_to_none=True)


def _measure(step: _Step, repeats: int, device) -> dict:
    """Warm up, then the CUDA peak of one step, the median time of ``repeats`` steps, and bitwise repeatability."""
    step()
    step.clear()
    peak = cuda_peak_bytes(step, device)
    first = step.grads()
    step.clear()
    timing = median_seconds(lambda: (step(), step.clear()), repeats, warmup=0, device=device)
    step()
    second = step.grads()
    step.clear()
    bitwise = len(first) == len(second) and all(torch.equal(a, b) for a, b in zip(first, second))
    return {"step_s": timing.seconds, "step_samples": timing.samples, "cuda_peak_bytes": peak, "bitwise_repeatable": bitwise}


def _guarded(name: str, fn) -> dict:
    try:
        return fn()
    except torch.cuda.OutOfMemoryError as exc:
        return {"error": f"out of memory: {str(exc).splitlines()[0][:160]}"}
    except RuntimeError as exc:  # e.g. cuBLAS/cuDNN allocation failures surface as RuntimeError
        if "out of memory" in str(exc).lower():
            return {"error": f"out of memory: {str(exc).splitlines()[0][:160]}"}
        raise
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def _profile(step: _Step, rows: int = 12) -> tuple[str, list[dict]]:
    """One profiled step: the operators with the most CUDA time (Markdown table and records)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    step.clear()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    step.clear()
    events = [e for e in prof.key_averages() if getattr(e, "self_device_time_total", 0) > 0]
    total = sum(e.self_device_time_total for e in events) or 1
    events.sort(key=lambda e: e.self_device_time_total, reverse=True)
    records = [
        {"op": e.key, "cuda_ms": e.self_device_time_total / 1e3, "share": e.self_device_time_total / total, "calls": e.count}
        for e in events[:rows]
    ]
    lines = ["| operator | CUDA ms | share | calls |", "|---|---:|---:|---:|"]
    lines += [f"| `{r['op'][:70]}` | {r['cuda_ms']:.2f} | {r['share']:.1%} | {r['calls']} |" for r in records]
    lines.append(f"| all operators | {total / 1e3:.2f} | 100% | |")
    return "\n".join(lines), records


def _predicted_ms(flops: int, activation_bytes: int) -> tuple[float, float]:
    """The paper model's one-GPU compute time on the H100 and A100 (docs/scaling.md), milliseconds."""
    from bench.scaling_model import HARDWARE, Assumptions

    a = Assumptions()
    out = []
    for hw in HARDWARE:
        t = max(flops / (hw.fp32_tflops * 1e12 * a.eta_flops), 3 * activation_bytes / (hw.hbm_tb_s * 1e12 * a.eta_hbm))
        out.append(t * 1e3)
    return out[1], out[0]


def run(workload: Workload, *, repeats: int = 10, trace: bool = True, profile: bool = True) -> Section:
    """The GPU section (see the module docstring)."""
    from bench.common.plans import part_at

    start = time.perf_counter()
    device = torch.device("cuda")
    host_part = part_at(workload.path, 1, "metis", 0)
    part = host_part.to(device)
    weights = torch.linspace(-1.0, 1.0, part.num_edges, device=device)
    rows: list[dict] = []
    section = Section(
        name="gpu",
        title=f"GPU: the real full event on one {torch.cuda.get_device_name(device)}",
        columns=[
            Column("model", "model"),
            Column("configuration", "configuration"),
            Column("step_ms", "step ms (median)", "{:.1f}"),
            Column("cuda_peak_mib", "max_memory_allocated MiB", "{:,.0f}"),
            Column("traced_mib", "traced MiB", "{:,.0f}"),
            Column("measured_over_traced", "measured ÷ traced", "{:.3f}"),
            Column("vs_plain", "memory ÷ fp32 no ckpt", "{:.3f}"),
            Column("time_vs_plain", "time ÷ fp32 no ckpt", "{:.2f}"),
            Column("bitwise_repeatable", "bitwise repeatable"),
            Column("error", "error"),
        ],
    )
    traced_cache: dict = {}

    def traced_for(config, offload: bool) -> dict | None:
        key = (config.mlp_layers, config.activation, config.checkpointing, offload)
        if trace and key not in traced_cache:
            traced_cache[key] = traced_peak(host_part, config, offload=offload)
        return traced_cache.get(key)

    # Our default model: precision × checkpointing × offload.
    for name, (ckpt, offload, dtype, compile_setting) in OURS.items():
        def one(ckpt=ckpt, offload=offload, dtype=dtype, compile_setting=compile_setting):
            model, config = _model("ours", part, ckpt, compile=compile_setting)
            model = model.to(device)
            record = _measure(_Step(model, part, weights, dtype, offload), repeats, device)
            tr = traced_for(config, offload) if dtype == torch.float32 and compile_setting == "auto" else None
            if tr is not None:
                record["traced_bytes"] = tr["total"]
                record["flops"] = tr["flops"]
                record["activation_bytes"] = tr["activations"]
            del model
            return record
        record = _guarded(name, one)
        rows.append({"model": "ours (default: 2-layer MLPs, SiLU)", "configuration": name, **record})
    # The reference comparison at the size.
    for name, kind, ckpt, setting in (("checkpointing", "ours", True, "auto"), ("no checkpointing", "ours", False, "auto"),
                                      ("checkpointing, compile off", "ours", True, "off"), ("checkpointing", "field", True, "auto")):
        def one(kind=kind, ckpt=ckpt, setting=setting):
            model, config = _model(kind, part, ckpt, **REFERENCE_MODEL, **({"compile": setting} if kind == "ours" else {}))
            model = model.to(device)
            record = _measure(_Step(model, part, weights, torch.float32, False), repeats, device)
            del model
            return record
        record = _guarded(f"{kind} {name}", one)
        label = "ours (3-layer MLPs, ReLU)" if kind == "ours" else "field reference (3-layer MLPs, ReLU)"
        rows.append({"model": label, "configuration": f"fp32, {name}", **record})
    plain = rows[0]
    for row in rows:
        row["step_ms"] = row["step_s"] * 1e3 if "step_s" in row else None
        row["cuda_peak_mib"] = row["cuda_peak_bytes"] / MIB if "cuda_peak_bytes" in row else None
        row["traced_mib"] = row["traced_bytes"] / MIB if "traced_bytes" in row else None
        row["measured_over_traced"] = ratio(row.get("cuda_peak_bytes"), row.get("traced_bytes"))
        if row["model"].startswith("ours (default"):
            row["vs_plain"] = ratio(row.get("cuda_peak_bytes"), plain.get("cuda_peak_bytes"))
            row["time_vs_plain"] = ratio(row.get("step_s"), plain.get("step_s"))
    section.rows = rows
    reference = next((r for r in rows if r["model"].startswith("field")), {})
    ours_ckpt = next((r for r in rows if r["model"].startswith("ours (3") and r["configuration"] == "fp32, checkpointing"), {})
    section.extra["reference_time_ratio"] = ratio(ours_ckpt.get("step_s"), reference.get("step_s"))
    section.extra["reference_memory_ratio"] = ratio(ours_ckpt.get("cuda_peak_bytes"), reference.get("cuda_peak_bytes"))
    if plain.get("flops"):
        h100, a100 = _predicted_ms(plain["flops"], plain["activation_bytes"])
        section.extra.update(predicted_h100_ms=h100, predicted_a100_ms=a100)
        section.notes.append(
            f"Paper model (docs/scaling.md) for this step in fp32 without checkpointing: {h100:.1f} ms on an H100, "
            f"{a100:.1f} ms on an A100 (compute only, one GPU); measured here: {plain['step_s'] * 1e3:.1f} ms."
        )
    section.notes[:0] = [
        f"Graph: {workload.name} ({workload.num_nodes:,} nodes, {workload.num_edges:,} edges), one part on one GPU; "
        f"step = forward + backward; median of {repeats} steps after a warm-up step; peak = max_memory_allocated during "
        "one step above the allocation before it (parameters and the graph's tensors excluded).",
        f"Reference comparison (issue-14 size, both checkpointed): ours ÷ field = {section.extra['reference_time_ratio'] or float('nan'):.2f} "
        f"in time, {section.extra['reference_memory_ratio'] or float('nan'):.2f} in peak memory.",
        "bf16: torch.autocast on the forward (matrix products in bf16, LayerNorm and the segment sums in fp32); "
        "offload: saved tensors in pinned host memory (torch.autograd.graph.save_on_cpu), so the GPU holds only the "
        "recomputed region's transients.",
        "Bitwise repeatable: two steps from the same weights give identical gradients (torch.equal on every parameter).",
    ]
    if profile:
        tables = []
        for label, kind, ckpt, size in (("ours, fp32, checkpointing (default size)", "ours", True, {}),
                                         ("ours, fp32, no checkpointing (default size)", "ours", False, {}),
                                         ("field reference, fp32, checkpointing", "field", True, REFERENCE_MODEL)):
            def one(kind=kind, ckpt=ckpt, size=size):
                model, _ = _model(kind, part, ckpt, **size)
                table, records = _profile(_Step(model.to(device), part, weights, torch.float32, False))
                return {"table": table, "records": records}
            result = _guarded(label, one)
            section.extra[f"profile: {label}"] = result.get("records") or result.get("error")
            tables.append(f"**Where the time goes: {label}** (one step, torch.profiler)\n\n{result.get('table') or result.get('error')}")
        section.markdown_extra = "\n\n".join(tables)
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`): needs CUDA and the real full event."""
    if not torch.cuda.is_available():
        return Section(name="gpu", title="GPU", skipped="no CUDA device on this machine")
    full = ctx.real_full()
    if full is None:
        return Section(name="gpu", title="GPU", skipped=missing_full_event())
    return run(full, repeats=ctx.size(3, 10), trace=True, profile=True)
