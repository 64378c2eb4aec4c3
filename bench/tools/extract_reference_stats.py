"""Extract the reference statistics of the real full event 21000 for tests/sim/test_simulate.py.

Run once (needs the real data, which tests do not):

    python -m bench.tools.extract_reference_stats [--data DIR]

It writes tests/data/trackml/reference_stats_event000021000.json. Event 21000 has
no truth file, so the noise count is the number of hits minus the particles'
summed nhits; volume shares come from the hits, pT, eta and nhits from the
particles file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common.report import REPO_ROOT
from bench.common.workloads import DATA_ENV, FULL_EVENT, trackml_dir
from domainpar.atomic import atomic_path
from domainpar.data.trackml import event_file, load_event

OUTPUT = REPO_ROOT / "tests" / "data" / "trackml" / "reference_stats_event000021000.json"


def event_statistics(hits: pd.DataFrame, particles: pd.DataFrame, noise_hits: int) -> dict:
    """The statistics the simulator is held to, from one event's hits and particles tables."""
    pt = np.hypot(particles["px"].to_numpy(np.float64), particles["py"].to_numpy(np.float64))
    eta = np.arcsinh(particles["pz"].to_numpy(np.float64) / pt)
    nhits = particles["nhits"].to_numpy()
    with_hits = nhits[nhits > 0]
    shares = hits["volume_id"].value_counts(normalize=True).sort_index()
    return {
        "num_hits": int(len(hits)),
        "num_particles": int(len(particles)),
        "noise_fraction": noise_hits / len(hits),
        "volume_fractions": {str(int(v)): float(f) for v, f in shares.items()},
        "frac_pt_above_1gev": float((pt > 1.0).mean()),
        "median_pt": float(np.median(pt)),
        "pt_quantiles": {str(q): float(np.quantile(pt, q)) for q in (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)},
        "frac_particles_without_hits": float((nhits == 0).mean()),
        "mean_nhits": float(nhits.mean()),
        "mean_nhits_with_hits": float(with_hits.mean()),
        "median_nhits_with_hits": float(np.median(with_hits)),
        "nhits_histogram": np.bincount(nhits, minlength=21)[:21].tolist(),
        "eta_histogram_edges": np.linspace(-4, 4, 17).tolist(),
        "eta_histogram": np.histogram(eta, bins=np.linspace(-4, 4, 17))[0].tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help=f"directory holding {FULL_EVENT}-* (default: ${DATA_ENV} or <repo>/../shared/data/trackml)")
    args = parser.parse_args()
    prefix = (Path(args.data) if args.data else trackml_dir()) / FULL_EVENT
    hits, particles = load_event(prefix, parts=("hits", "particles"))
    stats = event_statistics(hits, particles, noise_hits=int(len(hits) - particles["nhits"].sum()))
    sources = {}
    for part in ("hits", "particles"):
        path = event_file(prefix, part)
        sources[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    stats["provenance"] = {
        "event": "TrackML challenge event000021000 (full occupancy, no truth), see the TrackML data directory's README.md",
        "script": "bench/tools/extract_reference_stats.py",
        "sha256": sources,
        "noise": "hits minus the particles' summed nhits (no truth file)",
    }
    with atomic_path(OUTPUT) as tmp:
        tmp.write_text(json.dumps(stats, indent=1) + "\n")
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
