"""The figure of the simulation against the real event 21000, drawn from bench.tools.sim_vs_real's JSON.

    python -m bench.tools.plot_sim_vs_real [--json docs/figures/sim_vs_real.json] [--out docs/figures/sim_vs_real.png]

Twelve panels: the simulated sources (``before``: the simulator before the
material interactions, ``after``: the recipe's held-out events, ``training``:
its occupancy mix) against the real event, whole (no truth) and its pixel
detector (truth). Counts are per event.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from bench.common.report import REPO_ROOT  # noqa: E402
from domainpar.atomic import atomic_path  # noqa: E402
from domainpar.data.detector import layer_table  # noqa: E402
from bench.tools.occupancy import ETA_BINS, NHITS_BINS, PT_BINS, SECONDARY_P_BINS, VERTEX_R_BINS, VOLUMES  # noqa: E402

STYLE = {
    "real": {"color": "black", "label": "real event 21000"},
    "before": {"color": "tab:orange", "label": "simulated before"},
    "after": {"color": "tab:blue", "label": "simulated after (held-out events)"},
    "training": {"color": "tab:green", "label": "simulated after, training mix"},
}
#: Material groups of the interaction vertices, summed into regions for the bar chart.
REGIONS = {
    "beam pipe": ("beam_pipe",),
    "pixel barrel": ("8:2", "8:4", "8:6", "8:8"),
    "pixel endcaps": ("7", "9"),
    "pixel support": ("pixel_support_tube", "pixel_barrel_end_plate"),
    "strip barrels": ("13:2", "13:4", "13:6", "13:8", "17:2", "17:4"),
    "strip endcaps": ("12", "14", "16", "18"),
    "elsewhere": ("elsewhere",),
}


def _sources(result: dict) -> dict[str, dict]:
    """The real event, then every simulated source (before, after, training, then any other), by name."""
    order = [name for name in ("before", "after", "training") if name in result["simulated"]]
    order += [name for name in result["simulated"] if name not in order]
    return {"real": result["real"], **{name: result["simulated"][name] for name in order}}


def _per_event(block: dict, key: str) -> np.ndarray:
    return np.asarray(block["counts"][key], dtype=np.float64) / block["counts"]["events"]


def _step(ax, bins: np.ndarray, values: np.ndarray, name: str, **kwargs) -> None:
    ax.stairs(values, bins, color=STYLE[name]["color"], label=STYLE[name]["label"], lw=2 if name == "real" else 1.6, **kwargs)


def draw(result: dict, out: Path) -> None:
    sources = _sources(result)
    simulated = [name for name in sources if name != "real"]
    fig, axes = plt.subplots(3, 4, figsize=(24, 15))

    # (a) Hits per layer, simulated / real.
    ax = axes[0, 0]
    table = layer_table()
    keys = [f"{v}:{l}" for v, l in zip(table["volume_id"], table["layer_id"])]
    real_layers = np.array([sources["real"]["whole"]["summary"]["hits_per_layer"].get(k, np.nan) for k in keys])
    for name in simulated:
        layers = np.array([sources[name]["whole"]["summary"]["hits_per_layer"].get(k, 0.0) for k in keys])
        ax.plot(np.arange(len(keys)), layers / real_layers, "o-", ms=3, color=STYLE[name]["color"], label=STYLE[name]["label"])
    ax.axhline(1.0, color="black", lw=1)
    starts = [i for i in range(len(keys)) if i == 0 or table["volume_id"].iloc[i] != table["volume_id"].iloc[i - 1]]
    for i in starts[1:]:
        ax.axvline(i - 0.5, color="grey", lw=0.5)
    ax.set_xticks(starts, [str(v) for v in table["volume_id"].iloc[starts]])
    ax.set_xlabel("layer (ticks: first layer of each volume_id)")
    ax.set_ylabel("hits, simulated / real")
    ax.set_ylim(0.4, 1.6)
    ax.set_title("Hits per layer (whole event)")
    ax.legend(fontsize=8)

    # (b) Hits per volume.
    ax = axes[0, 1]
    width = 0.8 / len(sources)
    for i, name in enumerate(sources):
        values = [sources[name]["whole"]["summary"]["hits_per_volume"].get(str(v), 0.0) / 1000 for v in VOLUMES]
        ax.bar(np.arange(len(VOLUMES)) + (i - (len(sources) - 1) / 2) * width, values, width, color=STYLE[name]["color"],
               label=STYLE[name]["label"])  # fmt: skip
    ax.set_xticks(np.arange(len(VOLUMES)), [str(v) for v in VOLUMES])
    ax.set_xlabel("volume_id (8/13/17 barrels, others endcaps)")
    ax.set_ylabel("hits per event [thousands]")
    ax.set_title("Hits per volume")
    ax.legend(fontsize=8)

    # (c, d) pT and eta of particles with pixel hits.
    for ax, key, bins, label in ((axes[0, 2], "pt_histogram", PT_BINS, "pT [GeV]"), (axes[0, 3], "eta_histogram", ETA_BINS, "η")):
        for name in sources:
            values = _per_event(sources[name]["pixel"], key)
            summary = sources[name]["pixel"]["summary"]
            _step(ax, bins, values, name)
            ax.plot([], [], " ", label=f"  {summary['particles_with_hits']:,.0f} particles")
        ax.set_xlabel(f"{label} of particles with pixel hits")
        ax.set_ylabel("particles per event and bin")
        ax.legend(fontsize=8)
    axes[0, 2].set_xscale("log")
    axes[0, 2].set_yscale("log")
    axes[0, 2].set_title("pT spectrum, particles with pixel hits")
    axes[0, 3].set_title("Pseudorapidity, particles with pixel hits")

    # (e) Production vertex radius.
    ax = axes[1, 0]
    for name in sources:
        _step(ax, VERTEX_R_BINS[1:], _per_event(sources[name]["whole"], "vertex_r_histogram")[1:], name)
    ax.set_xscale("log")
    ax.set_xlabel("production-vertex radius [mm] (beam line, r < 1 mm, not shown)")
    ax.set_ylabel("particles with hits per event and bin")
    ax.set_title("Displaced particles (decays, interactions)")
    ax.legend(fontsize=8)

    # (f) Interaction vertices per region.
    ax = axes[1, 1]
    width = 0.8 / len(sources)
    for i, name in enumerate(sources):
        groups = sources[name]["whole"]["summary"]["interaction_vertices_per_group"]
        values = [sum(groups.get(g, 0.0) for g in members) for members in REGIONS.values()]
        ax.bar(np.arange(len(REGIONS)) + (i - (len(sources) - 1) / 2) * width, values, width, color=STYLE[name]["color"],
               label=f"{STYLE[name]['label']}: {sum(groups.values()):,.0f}")  # fmt: skip
    ax.set_xticks(np.arange(len(REGIONS)), list(REGIONS), rotation=25, ha="right")
    ax.set_ylabel("interaction vertices per event")
    ax.set_title("Hadronic interactions in the material (particle ids' generation)")
    ax.legend(fontsize=8)

    # (g) Hits per particle.
    ax = axes[1, 2]
    for name in sources:
        summary = sources[name]["whole"]["summary"]
        _step(ax, NHITS_BINS, _per_event(sources[name]["whole"], "nhits_histogram"), name)
        ax.plot([], [], " ", label=f"  mean {summary['hits_per_particle']:.2f}, stopped {summary['central_stopped_share']:.1%}")
    ax.set_xlabel("hits per particle with hits (whole event)")
    ax.set_ylabel("particles per event")
    ax.set_title("Hits per particle; 'stopped': central 0.3-3 GeV primaries < 8 hits")
    ax.legend(fontsize=8)

    # (h) Momentum of the secondaries of interactions.
    ax = axes[1, 3]
    for name in sources:
        values = _per_event(sources[name]["whole"], "secondary_p_histogram")
        if values.sum() == 0:
            continue
        summary = sources[name]["whole"]["summary"]
        _step(ax, SECONDARY_P_BINS, values, name)
        ax.plot([], [], " ", label=f"  {summary['secondaries']:,.0f} per event, {summary['secondaries_per_vertex']:.2f} per vertex, "
                f"{summary['secondary_proton_share']:.0%} protons")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("momentum of secondaries of interactions [GeV]")
    ax.set_ylabel("secondaries per event and bin")
    ax.set_title("Secondaries of interactions (generation >= 1)")
    ax.legend(fontsize=8)

    # (i) Summary figures, simulated / real.
    ax = axes[2, 0]
    figures = (
        ("hits", "whole", "hits"), ("particles listed", "whole", "particles_listed"),
        ("particles with hits", "whole", "particles_with_hits"), ("pixel hits", "pixel", "hits"),
        ("particles w. pixel hits", "pixel", "particles_with_hits"), ("hits per particle", "whole", "hits_per_particle"),
        ("displaced share", "whole", "displaced_share"), ("stopped share", "whole", "central_stopped_share"),
        ("edges", "whole", "edges"), ("pixel edges", "pixel", "edges"), ("noise fraction", "whole", "noise_fraction"),
        ("pixel noise", "pixel", "noise_fraction"),
    )  # fmt: skip
    width = 0.8 / len(simulated)
    for i, name in enumerate(simulated):
        ratios = []
        for _, part, key in figures:
            real, value = sources["real"][part]["summary"].get(key), sources[name][part]["summary"].get(key)
            ratios.append(value / real if real and value is not None else np.nan)
        ax.barh(np.arange(len(figures)) + (i - (len(simulated) - 1) / 2) * width, ratios, width, color=STYLE[name]["color"],
                label=STYLE[name]["label"])  # fmt: skip
    ax.axvline(1.0, color="black", lw=1)
    ax.set_yticks(np.arange(len(figures)), [f[0] for f in figures])
    ax.invert_yaxis()
    ax.set_xlim(0.0, 1.6)
    ax.set_xlabel("simulated / real")
    ax.set_title("Figures per event, simulated / real")
    ax.legend(fontsize=8, loc="lower right")

    # (j) Cells per hit by volume.
    ax = axes[2, 1]
    width = 0.8 / len(sources)
    for i, name in enumerate(sources):
        clusters = sources[name]["whole"]["summary"]["clusters"]
        values = [clusters.get(str(v), {}).get("cells") or 0.0 for v in VOLUMES]
        ax.bar(np.arange(len(VOLUMES)) + (i - (len(sources) - 1) / 2) * width, values, width, color=STYLE[name]["color"],
               label=STYLE[name]["label"])  # fmt: skip
    ax.set_xticks(np.arange(len(VOLUMES)), [str(v) for v in VOLUMES])
    ax.set_xlabel("volume_id")
    ax.set_ylabel("cells per hit")
    ax.set_title("Cluster size by volume")
    ax.legend(fontsize=8)

    # (k) Noise per pixel volume, and edges per hit.
    ax = axes[2, 2]
    labels = ["noise 7", "noise 8", "noise 9", "edges/hit ÷ 100, whole", "edges/hit ÷ 100, pixel"]
    width = 0.8 / len(sources)
    for i, name in enumerate(sources):
        noise = sources[name]["pixel"]["summary"]["noise_per_volume"]
        values = [noise.get(v) or 0.0 for v in ("7", "8", "9")]
        values += [(sources[name][part]["summary"].get("edges_per_hit") or 0.0) / 100 for part in ("whole", "pixel")]
        ax.bar(np.arange(len(labels)) + (i - (len(sources) - 1) / 2) * width, values, width, color=STYLE[name]["color"],
               label=STYLE[name]["label"])  # fmt: skip
    ax.set_xticks(np.arange(len(labels)), labels, rotation=15)
    ax.set_ylabel("noise fraction; graph edges per hit / 100")
    ax.set_title("Pixel noise by volume; edges per hit after the recipe's cuts")
    ax.legend(fontsize=8)

    # (l) The occupancy mix: hits per event.
    ax = axes[2, 3]
    real_hits = sources["real"]["whole"]["summary"]["hits"]
    ax.axvline(real_hits / 1000, color="black", lw=2, label=f"{STYLE['real']['label']}: {real_hits:,.0f}")
    for row, name in enumerate(simulated):
        hits = np.asarray(sources[name]["hits_per_event"]) / 1000
        ax.plot(hits, np.full(hits.size, row), "o", ms=8, color=STYLE[name]["color"],
                label=f"{STYLE[name]['label']}: {hits.min():.0f}k-{hits.max():.0f}k")  # fmt: skip
    ax.set_yticks(np.arange(len(simulated)), simulated)
    ax.set_ylim(-0.8, len(simulated) + 0.8)
    ax.set_xlabel("hits per event [thousands]")
    ax.set_title("Occupancy of the simulated events")
    ax.legend(fontsize=8, loc="upper left")

    fig.suptitle(
        "Simulation against the real TrackML event 21000 (whole event without truth; its pixel detector with truth) — "
        f"{result['events']} simulated events per source",
        fontsize=14,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=70, format="png")
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=str(REPO_ROOT / "docs" / "figures" / "sim_vs_real.json"))
    parser.add_argument("--out", default=str(REPO_ROOT / "docs" / "figures" / "sim_vs_real.png"))
    args = parser.parse_args()
    draw(json.loads(Path(args.json).read_text()), Path(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
