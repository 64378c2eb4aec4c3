"""Training curves as a PNG: losses per step and per epoch, edge metrics per epoch."""

from __future__ import annotations

import math
import os
from pathlib import Path

from domainpar.atomic import atomic_path


def _finite(values):
    return [v if v is not None and math.isfinite(v) else float("nan") for v in values]


def plot_curves(epoch_records: list[dict], step_records: list[dict], path: str | os.PathLike) -> Path:
    """Write ``path`` (PNG): left, training loss per step and train/val loss per epoch (log scale);
    right, validation efficiency, purity and ROC AUC per epoch.

    Args:
        epoch_records: the ``metrics.jsonl`` records.
        step_records: the ``steps.jsonl`` records (``step``, ``loss``).
        path: output PNG.
    """
    # Imported on use: matplotlib.pyplot is slow to import; runs without curves skip it.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter, MaxNLocator

    fig, (ax_loss, ax_metrics) = plt.subplots(1, 2, figsize=(11, 4.2))
    if step_records:
        ax_loss.plot(
            [r["step"] for r in step_records], _finite([r["loss"] for r in step_records]),
            color="tab:blue", alpha=0.35, lw=1, label="train (per step)",
        )
    if epoch_records:
        steps = [r.get("step", r["epoch"]) for r in epoch_records]
        ax_loss.plot(steps, _finite([r["train_loss"] for r in epoch_records]), "o-", color="tab:blue", label="train (epoch mean)")
        ax_loss.plot(steps, _finite([r["val_loss"] for r in epoch_records]), "s-", color="tab:orange", label="validation")
    ax_loss.set_xlabel("optimiser step")
    ax_loss.set_ylabel("weighted BCE per edge")
    positive = [r["loss"] for r in step_records if r.get("loss") and r["loss"] > 0]
    if positive:
        ax_loss.set_yscale("log")
        # Losses span well under a decade: plain numbers read better than 9x10^-1 tick labels.
        ax_loss.yaxis.set_major_formatter(FormatStrFormatter("%.2g"))
        ax_loss.yaxis.set_minor_formatter(FormatStrFormatter("%.2g"))
    ax_loss.grid(alpha=0.3)
    ax_loss.legend(fontsize=8)
    ax_loss.set_title("loss")

    if epoch_records:
        epochs = [r["epoch"] for r in epoch_records]
        threshold = epoch_records[-1].get("threshold", 0.5)
        ax_metrics.plot(epochs, _finite([r["efficiency"] for r in epoch_records]), "o-", label=f"efficiency @ {threshold:g}")
        ax_metrics.plot(epochs, _finite([r["purity"] for r in epoch_records]), "s-", label=f"purity @ {threshold:g}")
        ax_metrics.plot(epochs, _finite([r["auc"] for r in epoch_records]), "^-", label="ROC AUC")
        mode = epoch_records[-1].get("mode")
        if mode:
            ax_metrics.set_title(
                f"validation ({mode}, {epoch_records[-1].get('world_size', 1)} ranks, G={epoch_records[-1].get('domain_size', 1)})"
            )
    else:
        ax_metrics.set_title("validation")
    ax_metrics.set_xlabel("epoch")
    ax_metrics.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_loss.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_metrics.set_ylim(0, 1.02)
    ax_metrics.grid(alpha=0.3)
    ax_metrics.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path
