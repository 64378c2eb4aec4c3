"""A scaling model on paper: step time and memory per GPU for 1–64 GPUs.

Inputs come from a benchmark report (``python -m bench`` writes them under
``scaling_inputs``): for every part count P of the real full event, the
largest part's traced peak memory and matmul FLOPs of a training step, the
activation bytes, the interior-edge fraction, and each rank's halo rows
received from / sent to GPUs on its own node and on other nodes (parts
placed four to a node in part order). The hardware figures and efficiencies
are assumptions, stated in :data:`HARDWARE` and :class:`Assumptions` and in
docs/scaling.md.

Per GPU and training step (fp32, hidden H, I message-passing iterations):

* compute: ``max(FLOPs / (eta_flops · peak FP32), 3 · activation bytes / (eta_hbm · HBM bandwidth))``
  — matmuls at a fraction of peak, or streaming the activations three times
  (written forward, read backward, their gradients written), whichever is slower;
* one halo exchange: ``latency + max over ranks (on-node bytes / NVLink + off-node bytes / InfiniBand)``
  with bytes = rows × H × 4 in the busier direction;
  a step makes I + 1 exchanges forward and I + 1 backward;
* overlap hides the forward exchanges behind the interior edges' forward
  compute (backward exchanges stay exposed, as implemented);
* gradient all-reduce: ring, ``2 (P−1)/P · parameter bytes / link + 2 log2(P) · latency``;
* memory: the traced peak of the largest part, plus its inputs and the
  optimiser state (gradients + two AdamW moments).

Run ``python -m bench.scaling_model --inputs bench/results/<host>-<date>.json
--figure docs/figures/scaling_model.png`` to print the Markdown table and
draw the figure.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from domainpar.atomic import atomic_path
from domainpar.errors import DomainparError


@dataclass(frozen=True)
class Hardware:
    """One GPU of a node, and its links."""

    name: str
    """Label in tables and plots."""
    fp32_tflops: float
    """Peak dense FP32 (non-tensor-core) TFLOP/s."""
    hbm_tb_s: float
    """HBM bandwidth, TB/s."""
    memory_gb: float
    """HBM capacity, GB (10^9 bytes)."""
    nvlink_gb_s: float
    """NVLink bandwidth per GPU per direction, GB/s."""
    ib_gb_s: float
    """InfiniBand bandwidth per GPU per direction between nodes, GB/s."""
    gpus_per_node: int = 4
    """GPUs sharing one node's NVLink domain."""
    source: str = ""
    """Where the figures come from."""


#: Assumed hardware (vendor datasheets; per-direction link figures).
HARDWARE = (
    Hardware(
        "A100-SXM4-80GB", fp32_tflops=19.5, hbm_tb_s=2.039, memory_gb=80.0, nvlink_gb_s=300.0, ib_gb_s=25.0,
        source="NVIDIA A100 datasheet (19.5 TFLOP/s FP32, 2,039 GB/s HBM2e, NVLink3 600 GB/s bidirectional); "
        "HDR InfiniBand 200 Gb/s = 25 GB/s per GPU (one HCA per GPU as in DGX A100)",
    ),
    Hardware(
        "H100-SXM5-80GB", fp32_tflops=67.0, hbm_tb_s=3.35, memory_gb=80.0, nvlink_gb_s=450.0, ib_gb_s=50.0,
        source="NVIDIA H100 datasheet (67 TFLOP/s FP32, 3.35 TB/s HBM3, NVLink4 900 GB/s bidirectional); "
        "NDR InfiniBand 400 Gb/s = 50 GB/s per GPU (one HCA per GPU as in DGX H100)",
    ),
)


@dataclass(frozen=True)
class Assumptions:
    """Efficiencies and latencies the model cannot measure without the cluster."""

    eta_flops: float = 0.4
    """Fraction of peak FP32 reached by the small (K = H) matrix products."""
    eta_hbm: float = 0.6
    """Fraction of HBM bandwidth reached by the gathers, scatters and element-wise layers."""
    latency_us: float = 20.0
    """Fixed cost of one batched point-to-point round (NCCL launch + synchronisation), µs."""
    itemsize: int = 4
    """Bytes per exchanged value (4 = fp32; 2 for bf16 halo rows)."""


def load_inputs(report: str | Path) -> tuple[list[dict], dict]:
    """The ``scaling_inputs`` rows and constants of a benchmark report JSON."""
    path = Path(report)
    if not path.is_file():
        raise DomainparError(f"{path}: benchmark report not found (run `python -m bench` first)")
    payload = json.loads(path.read_text())
    section = payload.get("sections", {}).get("scaling_inputs")
    if not section or section.get("skipped") or not section.get("rows"):
        raise DomainparError(f"{path}: report must contain a scaling_inputs section with rows (got none)")
    return section["rows"], section["extra"]


def _per_edge(rows: list[dict], key: str, num_parts: int) -> float:
    """The key's value per local edge of the largest part, at the traced part count nearest ``num_parts`` (in log P)."""
    traced = [r for r in rows if r.get(key) is not None]
    if not traced:
        raise DomainparError(f"scaling inputs must contain at least one traced {key} (got none)")
    row = min(traced, key=lambda r: (abs(math.log(r["num_parts"] / num_parts)), -r["num_parts"]))
    return row[key] / row["max_local_edges"]


def predict(rows: list[dict], extra: dict, hardware: Hardware, assumptions: Assumptions = Assumptions()) -> list[dict]:
    """Predicted step time and memory per GPU for every part count of ``rows``."""
    hidden, iterations = extra["hidden"], extra["iterations"]
    if hardware.gpus_per_node != extra["gpus_per_node"]:
        raise DomainparError(
            f"inputs place {extra['gpus_per_node']} parts per node, so the hardware must have that many GPUs per node "
            f"(got {hardware.gpus_per_node})"
        )
    latency = assumptions.latency_us * 1e-6
    flops_rate = hardware.fp32_tflops * 1e12 * assumptions.eta_flops
    hbm_rate = hardware.hbm_tb_s * 1e12 * assumptions.eta_hbm
    nvlink, ib = hardware.nvlink_gb_s * 1e9, hardware.ib_gb_s * 1e9
    row_bytes = hidden * assumptions.itemsize
    out = []
    single_step = None
    for r in sorted(rows, key=lambda r: r["num_parts"]):
        num_parts = r["num_parts"]
        edges = r["max_local_edges"]

        def value(key: str) -> float:
            return r[key] if r.get(key) is not None else _per_edge(rows, key, num_parts) * edges

        param_bytes = next((x["parameter_bytes"] for x in rows if x.get("parameter_bytes")), 0)
        input_bytes = edges * (2 * 8 + 4 * 4 + 8 + 1 + 4) + r["max_local_nodes"] * 3 * 4
        optimiser_bytes = 3 * param_bytes
        memory = value("peak_bytes") + input_bytes + optimiser_bytes
        memory_ckpt = value("peak_bytes_ckpt") + input_bytes + optimiser_bytes
        t_compute = max(value("flops") / flops_rate, 3 * value("activation_bytes") / hbm_rate)
        t_compute_ckpt = max(value("flops_ckpt") / flops_rate, 3 * value("activation_bytes") / hbm_rate * value("flops_ckpt") / value("flops"))
        if num_parts > 1:
            per_rank = [
                max(recv_on, send_on) * row_bytes / nvlink + max(recv_off, send_off) * row_bytes / ib
                for recv_on, recv_off, send_on, send_off in zip(r["recv_on_node"], r["recv_off_node"], r["send_on_node"], r["send_off_node"])
            ]
            t_exchange = latency + max(per_rank)
            slowest = ib if num_parts > hardware.gpus_per_node else nvlink
            t_allreduce = 2 * (num_parts - 1) / num_parts * param_bytes / slowest + 2 * math.log2(num_parts) * latency
        else:
            t_exchange = t_allreduce = 0.0
        exchanges = iterations + 1
        t_comm = 2 * exchanges * t_exchange
        step = t_compute + t_comm + t_allreduce
        hidden_fwd = min(exchanges * t_exchange, r["largest_interior_fraction"] * t_compute / 3.0)
        step_overlap = step - hidden_fwd
        if single_step is None and num_parts == 1:
            single_step = step
        out.append(
            {
                "hardware": hardware.name,
                "gpus": num_parts,
                "nodes": math.ceil(num_parts / hardware.gpus_per_node),
                "max_local_edges": edges,
                "memory_gib": memory / 2**30,
                "memory_ckpt_gib": memory_ckpt / 2**30,
                "fits": memory <= hardware.memory_gb * 1e9,
                "fits_ckpt": memory_ckpt <= hardware.memory_gb * 1e9,
                "compute_ms": t_compute * 1e3,
                "compute_ckpt_ms": t_compute_ckpt * 1e3,
                "exchange_ms": t_comm * 1e3,
                "allreduce_ms": t_allreduce * 1e3,
                "step_ms": step * 1e3,
                "step_overlap_ms": step_overlap * 1e3,
                "speedup": None if single_step is None else single_step / step_overlap,
                "efficiency": None if single_step is None else single_step / step_overlap / num_parts,
                "traced": r.get("peak_bytes") is not None,
            }
        )
    return out


def markdown_table(predictions: list[dict]) -> str:
    """One Markdown table of all predictions."""
    lines = [
        "| GPU | GPUs | nodes | largest part edges | memory/GPU GiB | with ckpt GiB | compute ms | halo ms | all-reduce ms | step ms (overlap) | speed-up | efficiency |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in predictions:
        fit = "" if p["fits"] else " ✗"
        lines.append(
            f"| {p['hardware']} | {p['gpus']} | {p['nodes']} | {p['max_local_edges']:,} | {p['memory_gib']:.1f}{fit} | "
            f"{p['memory_ckpt_gib']:.1f} | {p['compute_ms']:.1f} | {p['exchange_ms']:.2f} | {p['allreduce_ms']:.3f} | "
            f"{p['step_overlap_ms']:.1f} | {p['speedup']:.2f} | {p['efficiency']:.0%} |"
        )
    return "\n".join(lines)


def plot(predictions: list[dict], path: str | Path, title: str) -> Path:
    """Step time and memory per GPU vs GPUs, one line per hardware (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(11, 4.3))
    colours = {"A100-SXM4-80GB": "tab:blue", "H100-SXM5-80GB": "tab:green"}
    for name in dict.fromkeys(p["hardware"] for p in predictions):
        rows = [p for p in predictions if p["hardware"] == name]
        gpus = [p["gpus"] for p in rows]
        colour = colours.get(name)
        ax_time.plot(gpus, [p["step_overlap_ms"] for p in rows], "o-", color=colour, label=f"{name}: step (overlap)")
        ax_time.plot(gpus, [p["compute_ms"] for p in rows], ":", color=colour, label=f"{name}: compute only")
        multi = [p for p in rows if p["gpus"] > 1]
        ax_time.plot([p["gpus"] for p in multi], [p["exchange_ms"] + p["allreduce_ms"] for p in multi], "--", color=colour,
                     alpha=0.7, label=f"{name}: communication")
        ideal = [rows[0]["step_overlap_ms"] / g for g in gpus]
        ax_time.plot(gpus, ideal, "-", color=colour, alpha=0.25, linewidth=4, label=f"{name}: ideal")
    first = [p for p in predictions if p["hardware"] == predictions[0]["hardware"]]
    gpus = [p["gpus"] for p in first]
    ax_mem.plot(gpus, [p["memory_gib"] for p in first], "o-", color="tab:red", label="activations kept")
    ax_mem.plot(gpus, [p["memory_ckpt_gib"] for p in first], "s-", color="tab:purple", label="checkpointing")
    ax_mem.axhline(80e9 / 2**30, color="k", linestyle="--", linewidth=1, label="80 GB HBM")
    ax_mem.axhline(40e9 / 2**30, color="grey", linestyle=":", linewidth=1, label="40 GB HBM")
    for ax in (ax_time, ax_mem):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(gpus)
        ax.set_xticklabels([str(g) for g in gpus])
        ax.set_xlabel("GPUs (4 per node)")
        ax.grid(True, which="both", alpha=0.3)
    ax_time.set_ylabel("training step, ms")
    ax_time.set_title("Predicted step time (fp32)")
    ax_time.legend(fontsize=6.5, ncol=2)
    ax_mem.set_ylabel("peak memory per GPU, GiB")
    ax_mem.set_title("Predicted memory per GPU (fp32)")
    ax_mem.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=130)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Predict step time and memory per GPU from a benchmark report.")
    parser.add_argument("--inputs", required=True, help="benchmark report JSON with a scaling_inputs section")
    parser.add_argument("--figure", default=None, help="write the plot here (PNG)")
    parser.add_argument("--json", default=None, help="write the predictions here")
    parser.add_argument("--eta-flops", type=float, default=Assumptions.eta_flops, help="fraction of FP32 peak reached")
    parser.add_argument("--eta-hbm", type=float, default=Assumptions.eta_hbm, help="fraction of HBM bandwidth reached")
    parser.add_argument("--latency-us", type=float, default=Assumptions.latency_us, help="cost of one exchange round, µs")
    parser.add_argument("--itemsize", type=int, default=4, choices=[2, 4], help="bytes per exchanged value (2 = bf16)")
    args = parser.parse_args(argv)
    try:
        rows, extra = load_inputs(args.inputs)
        assumptions = Assumptions(args.eta_flops, args.eta_hbm, args.latency_us, args.itemsize)
        predictions = [p for hw in HARDWARE for p in predict(rows, extra, hw, assumptions)]
    except DomainparError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown_table(predictions))
    if args.figure:
        title = (f"{extra['graph']}: {extra['num_nodes']:,} nodes, {extra['num_edges']:,} edges; "
                 f"Interaction Network hidden {extra['hidden']}, {extra['iterations']} iterations")
        print(f"figure: {plot(predictions, args.figure, title)}")
    if args.json:
        with atomic_path(args.json) as tmp:
            tmp.write_text(json.dumps({"assumptions": asdict(assumptions), "hardware": [asdict(h) for h in HARDWARE],
                                       "predictions": predictions}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
