"""Side-by-side figures of the default simulation and the real full TrackML event 21000.

    python -m bench.tools.plot_sim_vs_real [--data DIR] [--out docs/figures/sim_vs_real.png]

Simulates one event with the default :class:`SimulationConfig` (event id 21000,
seed 0, as in tests/sim/test_simulate.py) and compares it with the real event:
hits per volume, hits per particle, pT spectrum, pseudorapidity, and the x-y
and r-z views of the hits.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from bench.common.report import REPO_ROOT  # noqa: E402
from bench.common.workloads import DATA_ENV, FULL_EVENT, trackml_dir  # noqa: E402
from domainpar.atomic import atomic_path  # noqa: E402
from domainpar.data.trackml import load_event  # noqa: E402
from domainpar.sim.config import SimulationConfig  # noqa: E402
from domainpar.sim.event import simulate_event  # noqa: E402

VOLUMES = (7, 8, 9, 12, 13, 14, 16, 17, 18)
SIM_COLOUR, REAL_COLOUR = "tab:orange", "tab:blue"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help=f"TrackML data directory (default: ${DATA_ENV} or <repo>/../shared/data/trackml)")
    parser.add_argument("--out", default=str(REPO_ROOT / "docs" / "figures" / "sim_vs_real.png"))
    args = parser.parse_args()

    data = Path(args.data) if args.data else trackml_dir()
    real_hits, real_particles = load_event(data / FULL_EVENT, parts=("hits", "particles"))
    sim = simulate_event(SimulationConfig(), event_id=21000, seed=0)
    sim_hits, sim_particles = sim["hits"], sim["particles"]
    sim_noise = (sim["truth"]["particle_id"] == 0).mean()
    real_noise = 1.0 - real_particles["nhits"].sum() / len(real_hits)
    labels = {
        "real": f"real event 21000 ({len(real_hits):,} hits, {len(real_particles):,} particles, noise {real_noise:.1%})",
        "sim": f"simulated, default config ({len(sim_hits):,} hits, {len(sim_particles):,} particles, noise {sim_noise:.1%})",
    }

    fig, axes = plt.subplots(2, 4, figsize=(20, 9.5))
    ax = axes[0, 0]
    width = 0.4
    positions = np.arange(len(VOLUMES))
    for offset, hits, colour, name in ((-width / 2, real_hits, REAL_COLOUR, "real"), (width / 2, sim_hits, SIM_COLOUR, "sim")):
        shares = hits["volume_id"].value_counts(normalize=True).reindex(VOLUMES, fill_value=0.0)
        ax.bar(positions + offset, 100 * shares.to_numpy(), width, color=colour, label=name)
    ax.set_xticks(positions, [str(v) for v in VOLUMES])
    ax.set_xlabel("volume_id (8/13/17 barrels, others endcaps)")
    ax.set_ylabel("share of hits [%]")
    ax.set_title("Hits per volume")
    ax.legend()

    ax = axes[0, 1]
    bins = np.arange(0, 26) - 0.5
    for particles, colour, name in ((real_particles, REAL_COLOUR, "real"), (sim_particles, SIM_COLOUR, "sim")):
        nhits = particles["nhits"].to_numpy()
        ax.hist(nhits, bins=bins, density=True, histtype="step", lw=2, color=colour,
                label=f"{name}: mean {nhits.mean():.2f}, with hits {nhits[nhits > 0].mean():.2f}")
    ax.set_xlabel("hits per particle (nhits)")
    ax.set_ylabel("fraction of particles")
    ax.set_title("Hits per particle")
    ax.legend()

    ax = axes[0, 2]
    bins = np.geomspace(0.1, 100, 31)
    for particles, colour, name in ((real_particles, REAL_COLOUR, "real"), (sim_particles, SIM_COLOUR, "sim")):
        pt = np.hypot(particles["px"].to_numpy(np.float64), particles["py"].to_numpy(np.float64))
        ax.hist(pt, bins=bins, density=True, histtype="step", lw=2, color=colour,
                label=f"{name}: {np.mean(pt > 1):.1%} above 1 GeV, median {np.median(pt):.3f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("particle pT [GeV]")
    ax.set_ylabel("density [1/GeV]")
    ax.set_title("pT spectrum")
    ax.legend(loc="lower left")

    ax = axes[0, 3]
    bins = np.linspace(-4.5, 4.5, 37)
    for particles, colour, name in ((real_particles, REAL_COLOUR, "real"), (sim_particles, SIM_COLOUR, "sim")):
        pt = np.hypot(particles["px"].to_numpy(np.float64), particles["py"].to_numpy(np.float64))
        eta = np.arcsinh(particles["pz"].to_numpy(np.float64) / pt)
        ax.hist(eta, bins=bins, density=True, histtype="step", lw=2, color=colour, label=name)
    ax.set_xlabel("particle pseudorapidity eta")
    ax.set_ylabel("density")
    ax.set_title("Pseudorapidity")
    ax.legend()

    rng = np.random.default_rng(0)
    for column, (hits, colour, name) in enumerate(((real_hits, REAL_COLOUR, "real"), (sim_hits, SIM_COLOUR, "sim"))):
        sample = hits.iloc[rng.permutation(len(hits))[:30_000]]
        x, y, z = (sample[c].to_numpy() for c in ("x", "y", "z"))
        ax = axes[1, column]
        ax.scatter(x, y, s=0.2, color=colour, alpha=0.4, rasterized=True)
        ax.set_aspect("equal")
        ax.set_xlabel("x [mm]")
        ax.set_ylabel("y [mm]")
        ax.set_title(f"{name}: x-y (30k hits)")
        ax = axes[1, 2 + column]
        ax.scatter(z, np.hypot(x, y), s=0.2, color=colour, alpha=0.4, rasterized=True)
        ax.set_xlabel("z [mm]")
        ax.set_ylabel("r [mm]")
        ax.set_title(f"{name}: r-z (30k hits)")

    fig.suptitle(f"{labels['real']}\n{labels['sim']}", fontsize=12)
    fig.tight_layout()
    out = Path(args.out)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=80)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
