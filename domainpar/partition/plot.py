"""Pictures of a partition: the event in x–y, r–z and η–φ, coloured by owning part.

x–y and r–z are the views physicists know, but both are projections in which
parts on opposite sides overlap (φ wedges pile up in r–z, η slices in x–y);
the third panel, η–φ, unrolls the detector so every part is seen whole.

Hits are coloured by the part that owns them; hits that are halo on at least
one other part (the rows exchanged every step) are drawn on top as small black
crosses. Large events are subsampled uniformly (with a fixed seed, halo hits
subsampled at the same rate) so the figure stays readable and small.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from domainpar.atomic import atomic_path
from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError
from domainpar.partition.plan import PartitionPlan


def halo_mask(plan: PartitionPlan) -> np.ndarray:
    """(N,) bool: node is halo on at least one part."""
    mask = np.zeros(plan.num_nodes, dtype=bool)
    for part in plan.parts:
        mask[part.halo_ids] = True
    return mask


def _part_colours(num_parts: int) -> np.ndarray:
    # Imported on use: partitioning without --plot does not pay for importing matplotlib.
    import matplotlib

    cmap = matplotlib.colormaps["tab20" if num_parts > 10 else "tab10"]
    if num_parts <= cmap.N:
        return np.asarray([cmap(i) for i in range(num_parts)])
    return np.asarray(matplotlib.colormaps["hsv"](np.linspace(0, 1, num_parts, endpoint=False)))


def plot_partition(
    graph: EventGraph,
    plan: PartitionPlan,
    path: str | os.PathLike,
    *,
    max_points: int = 40_000,
) -> Path:
    """Write a PNG with the x–y and r–z views of ``graph`` coloured by ``plan``'s owners.

    Args:
        graph: the event graph the plan was made from.
        plan: the plan.
        path: output ``.png``.
        max_points: hits drawn at most (uniform subsample above that, seed 0).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if plan.num_nodes != graph.num_nodes:
        raise DomainparError(f"plan must cover the graph's {graph.num_nodes} nodes (got {plan.num_nodes})")
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise DomainparError(f"{path}: plot file must end in .png (got {path.suffix or 'no suffix'})")
    pos = graph.pos.astype(np.float64)
    keep = np.arange(graph.num_nodes)
    if graph.num_nodes > max_points:
        keep = np.sort(np.random.default_rng(0).choice(graph.num_nodes, size=max_points, replace=False))
    halo = halo_mask(plan)[keep]
    colours = _part_colours(plan.num_parts)[plan.owner[keep]]
    x, y, z = pos[keep, 0], pos[keep, 1], pos[keep, 2]
    r = np.hypot(x, y)
    eta = np.arcsinh(z / np.maximum(r, 1e-6))
    phi = np.arctan2(y, x)
    point = 1.5 if keep.size > 10_000 else 4.0

    fig, (ax_xy, ax_rz, ax_ep) = plt.subplots(1, 3, figsize=(21, 6.5), gridspec_kw={"width_ratios": [1, 1.5, 1.2]})
    for ax, (u, v), (lu, lv) in (
        (ax_xy, (x, y), ("x [mm]", "y [mm]")),
        (ax_rz, (z, r), ("z [mm]", "r [mm]")),
        (ax_ep, (eta, phi), ("η", "φ [rad]")),
    ):
        ax.scatter(u, v, c=colours, s=point, linewidths=0, rasterized=True)
        ax.scatter(u[halo], v[halo], c="black", marker="x", s=point * 2, linewidths=0.3, rasterized=True)
        ax.set_xlabel(lu)
        ax.set_ylabel(lv)
    ax_xy.set_aspect("equal")
    ax_xy.set_title("x–y (transverse)")
    ax_rz.set_title("r–z (longitudinal)")
    ax_ep.set_title("η–φ (unrolled)")
    handles = [
        plt.Line2D([], [], marker="o", linestyle="", color=_part_colours(plan.num_parts)[p], label=f"part {p}")
        for p in range(plan.num_parts)
    ]
    handles.append(plt.Line2D([], [], marker="x", linestyle="", color="black", label="halo hit"))
    ax_ep.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    shown = f" ({keep.size:,} of {graph.num_nodes:,} hits shown)" if keep.size < graph.num_nodes else ""
    fig.suptitle(f"event {graph.event_id}: {plan.method}, {plan.num_parts} parts, "
                 f"{int(halo_mask(plan).sum()):,} halo hits{shown}")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return path
