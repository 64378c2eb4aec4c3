"""Physics plots of an evaluation (PNG, matplotlib's non-interactive Agg backend): the ROC curve, efficiency and
purity vs pT and eta with binomial error bars, event displays, and built tracks whole, broken and fake.

Binning conventions: an edge's pT is the pT of the particle of its inner hit
(edges starting on a noise hit have no pT and are left out of the pT plots);
an edge's eta is the pseudorapidity of its midpoint seen from the origin. In
the eta plots, tracking efficiency counts reconstructable particles with
pT > ``pt_min`` and edge efficiency counts true edges of such particles.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from domainpar.atomic import atomic_path
from domainpar.tracks.efficiency import ETA_BINS, PT_BINS, TrackingMetrics, binned_fraction, roc_curve


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | os.PathLike) -> Path:
    path = Path(path)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    finally:
        _pyplot().close(fig)
    return path


@dataclass(frozen=True)
class EdgeSample:
    """Pooled per-edge arrays of one or more events, for the pT/eta plots. Shapes (E,)."""

    pt: np.ndarray
    """pT (GeV) of the inner hit's particle; 0 when the inner hit is noise."""
    eta: np.ndarray
    """Pseudorapidity of the edge midpoint."""
    label: np.ndarray
    """bool: the edge is a true segment."""
    predicted: np.ndarray
    """bool: the edge's score is above the threshold."""

    @staticmethod
    def from_graph(pos: np.ndarray, particle_pt: np.ndarray, edge_index: np.ndarray, label: np.ndarray, predicted: np.ndarray) -> "EdgeSample":
        """From a graph's node positions (N, 3), per-node particle pT (N,), edges (2, E) and per-edge flags."""
        pos = np.asarray(pos, dtype=np.float64)
        src, dst = np.asarray(edge_index)
        mid = 0.5 * (pos[src] + pos[dst])
        r = np.hypot(mid[:, 0], mid[:, 1])
        return EdgeSample(
            pt=np.asarray(particle_pt, dtype=np.float64)[src],
            eta=np.arcsinh(mid[:, 2] / np.maximum(r, 1e-9)),
            label=np.asarray(label) > 0.5,
            predicted=np.asarray(predicted, dtype=bool),
        )

    @staticmethod
    def concatenate(samples: list["EdgeSample"]) -> "EdgeSample":
        return EdgeSample(*(np.concatenate([getattr(s, k) for s in samples]) for k in ("pt", "eta", "label", "predicted")))


@dataclass(frozen=True)
class ParticleSample:
    """Pooled per-particle arrays (P,) from :class:`TrackingMetrics` of one or more events."""

    pt: np.ndarray
    """Particle pT in GeV."""
    eta: np.ndarray
    """Particle pseudorapidity."""
    nlayers: np.ndarray
    """Distinct layers hit."""
    matched: np.ndarray
    """bool: a double-majority track exists."""
    perfect: np.ndarray
    """bool: a perfectly matching track exists."""

    @staticmethod
    def from_metrics(metrics: list[TrackingMetrics]) -> "ParticleSample":
        return ParticleSample(
            pt=np.concatenate([m.particle_pt for m in metrics]),
            eta=np.concatenate([m.particle_eta for m in metrics]),
            nlayers=np.concatenate([m.particle_nlayers for m in metrics]),
            matched=np.concatenate([m.particle_matched for m in metrics]),
            perfect=np.concatenate([m.particle_perfect for m in metrics]),
        )


def plot_roc(scores: np.ndarray, labels: np.ndarray, path: str | os.PathLike, threshold: float | None = None, auc: float | None = None) -> Path:
    """ROC curve (linear axes and a log-scale false-positive-rate panel).

    Args:
        scores: (E,) edge scores (probabilities).
        labels: (E,) truth.
        threshold: marks the working point "score > threshold" when given.
        auc: shown in the legend when given.
    """
    plt = _pyplot()
    fpr, tpr, _ = roc_curve(scores, labels)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
    label = "edge classifier" if auc is None else f"edge classifier (AUC = {auc:.4f})"
    for ax, log in zip(axes, (False, True)):
        ax.plot(fpr, tpr, lw=1.8, label=label)
        if not log:
            ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=0.8, label="random")
        if threshold is not None:
            scores_arr = np.asarray(scores)
            positive = np.asarray(labels) > 0.5
            predicted = scores_arr > threshold
            point_tpr = np.count_nonzero(predicted & positive) / max(np.count_nonzero(positive), 1)
            point_fpr = np.count_nonzero(predicted & ~positive) / max(np.count_nonzero(~positive), 1)
            ax.plot([point_fpr], [point_tpr], "o", color="C3", label=f"score > {threshold:g}")
        ax.set_xlabel("false positive rate (fake edges kept)")
        ax.set_ylabel("true positive rate (edge efficiency)")
        ax.grid(alpha=0.3)
        if log:
            ax.set_xscale("log")
            ax.set_xlim(max(1e-5, 1.0 / max(np.count_nonzero(np.asarray(labels) <= 0.5), 1)), 1)
            ax.set_title("ROC, log scale")
        else:
            ax.set_xlim(0, 1)
            ax.set_title("ROC")
        ax.set_ylim(0, 1.02)
        ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)


def _errorbar(ax, bins: np.ndarray, values: np.ndarray, passed: np.ndarray, label: str, log_x: bool, marker: str) -> None:
    fraction, error, count = binned_fraction(values, passed, bins)
    centres = np.sqrt(bins[:-1] * bins[1:]) if log_x else 0.5 * (bins[:-1] + bins[1:])
    filled = count > 0
    ax.errorbar(
        centres[filled], fraction[filled], yerr=error[filled],
        xerr=None, fmt=marker, ms=4, capsize=2, label=f"{label} (n={int(count.sum())})",
    )  # fmt: skip


def plot_performance(
    particles: ParticleSample,
    edges: EdgeSample,
    directory: str | os.PathLike,
    pt_min: float = 1.0,
    min_layers: int = 3,
) -> list[Path]:
    """Efficiency and purity vs pT (``efficiency_purity_vs_pt.png``) and vs eta (``..._vs_eta.png``).

    ``pt_min`` (GeV) is the pT cut of the eta plots; reconstructable particles hit at least ``min_layers`` layers.
    """
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter, NullFormatter

    directory = Path(directory)
    paths = []
    reco_layers = particles.nlayers >= min_layers
    true_edges = edges.label
    predicted = edges.predicted
    for quantity in ("pt", "eta"):
        fig, (ax_eff, ax_pur) = plt.subplots(1, 2, figsize=(11, 4.4))
        if quantity == "pt":
            bins, log_x, xlabel = PT_BINS, True, "pT [GeV]"
            p_sel = reco_layers
            e_true = true_edges & (edges.pt > 0)
            e_pred = predicted & (edges.pt > 0)
            p_values, e_values = particles.pt, edges.pt
            suffix = f"(particles on >= {min_layers} layers)"
        else:
            bins, log_x, xlabel = ETA_BINS, False, "eta"
            p_sel = reco_layers & (particles.pt > pt_min)
            e_true = true_edges & (edges.pt > pt_min)
            e_pred = predicted
            p_values, e_values = particles.eta, edges.eta
            suffix = f"(pT > {pt_min:g} GeV, >= {min_layers} layers)"
        _errorbar(ax_eff, bins, p_values[p_sel], particles.matched[p_sel], "tracking efficiency, double majority", log_x, "o")
        _errorbar(ax_eff, bins, p_values[p_sel], particles.perfect[p_sel], "tracking efficiency, perfect match", log_x, "s")
        _errorbar(ax_eff, bins, e_values[e_true], predicted[e_true], "edge efficiency", log_x, "^")
        _errorbar(ax_pur, bins, e_values[e_pred], true_edges[e_pred], "edge purity", log_x, "v")
        for ax, title in ((ax_eff, f"efficiency vs {xlabel} {suffix}"), (ax_pur, f"purity vs {xlabel}")):
            ax.set_xlabel(xlabel)
            ax.set_ylim(0, 1.05)
            ax.grid(alpha=0.3)
            ax.set_title(title, fontsize=9)
            ax.legend(loc="lower right", fontsize=7)
            if log_x:
                ax.set_xscale("log")
                # Plain major labels only: the default minor labels (2x10^-1, 3x10^-1, ...) overlap.
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.xaxis.set_minor_formatter(NullFormatter())
            # Fixed limits: an empty panel (e.g. no edge above threshold) cannot be log-autoscaled.
            ax.set_xlim(bins[0], bins[-1])
        ax_eff.set_ylabel("efficiency")
        ax_pur.set_ylabel("purity")
        paths.append(_save(fig, directory / f"efficiency_purity_vs_{quantity}.png"))
    return paths


def plot_event_display(
    pos: np.ndarray, track_id: np.ndarray, edge_index: np.ndarray, edge_mask: np.ndarray, path: str | os.PathLike,
    min_track_hits: int = 3, title: str = "",
) -> Path:  # fmt: skip
    """Found tracks in the transverse (x–y) and longitudinal (z–r) views: tracks of at least ``min_track_hits`` hits
    in colour along the edges that built them, all other hits small grey points.

    Args:
        pos: (N, 3) hit positions in mm.
        track_id: (N,) track of every hit.
        edge_index: (2, E) edges of the graph.
        edge_mask: (E,) bool edges that joined hits into tracks.
    """
    from matplotlib.collections import LineCollection

    plt = _pyplot()
    pos = np.asarray(pos, dtype=np.float64)
    track_id = np.asarray(track_id)
    _, inverse, sizes = np.unique(track_id, return_inverse=True, return_counts=True)
    in_track = sizes[inverse] >= min_track_hits
    src, dst = np.asarray(edge_index)[:, np.asarray(edge_mask, dtype=bool)]
    drawn = in_track[src] & (track_id[src] == track_id[dst])
    src, dst = src[drawn], dst[drawn]
    # Colour by track: a fixed pseudo-random hue per track id, so neighbouring tracks differ.
    cmap = plt.get_cmap("tab20")
    colour_index = (inverse * 7919) % 20
    r = np.hypot(pos[:, 0], pos[:, 1])
    fig, (ax_xy, ax_rz) = plt.subplots(1, 2, figsize=(13, 6), gridspec_kw={"width_ratios": [1, 1.5]})
    views = ((ax_xy, pos[:, 0], pos[:, 1], "x [mm]", "y [mm]"), (ax_rz, pos[:, 2], r, "z [mm]", "r [mm]"))
    for ax, u, v, xlabel, ylabel in views:
        ax.scatter(u[~in_track], v[~in_track], s=0.3, color="0.75", rasterized=True, label="hits not on a track")
        segments = np.stack([np.stack([u[src], v[src]], 1), np.stack([u[dst], v[dst]], 1)], 1)
        ax.add_collection(LineCollection(segments, colors=cmap(colour_index[src]), linewidths=0.7, rasterized=True))
        ax.scatter(u[in_track], v[in_track], s=1.2, c=cmap(colour_index[in_track]), rasterized=True)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.2)
    ax_xy.set_aspect("equal")
    num_tracks = int(np.count_nonzero(sizes >= min_track_hits))
    ax_xy.set_title(f"transverse view: {num_tracks} tracks with >= {min_track_hits} hits", fontsize=9)
    ax_rz.set_title("longitudinal view", fontsize=9)
    ax_xy.legend(loc="upper right", fontsize=7, markerscale=10)
    if title:
        fig.suptitle(title)
    return _save(fig, path)


@dataclass(frozen=True)
class TrackExamples:
    """Examples of built tracks judged against the truth, for :func:`plot_track_examples`."""

    whole: list
    """Candidates that are exactly one reconstructable particle's hits: (candidate, particle)."""
    broken: list
    """Reconstructable particles whose hits the builder spread over several candidates or left out: (candidate
    holding most of them, particle)."""
    fake: list
    """Candidates of >= min_track_hits hits with no double-majority particle: (candidate, its most frequent particle)."""


def pick_track_examples(
    track_id: np.ndarray, particle_id: np.ndarray, particle_pt: np.ndarray, count: int = 2, pt_min: float = 1.0,
    min_track_hits: int = 3,
) -> TrackExamples:  # fmt: skip
    """``count`` examples of each kind, the longest first (ties: the lower id), from one event.

    Args:
        track_id: (N,) candidate of every hit.
        particle_id: (N,) truth particle of every hit (0: noise).
        particle_pt: (N,) pT of every hit's particle (GeV).
        pt_min: whole and broken examples are particles above this pT.
    """
    track_id = np.asarray(track_id, dtype=np.int64)
    particle_id = np.asarray(particle_id, dtype=np.int64)
    size = np.bincount(track_id)
    real = particle_id != 0
    ids, first, particle_hits = np.unique(particle_id[real], return_index=True, return_counts=True)
    pt = np.asarray(particle_pt)[np.flatnonzero(real)[first]]
    # Hits of each (particle, candidate) pair.
    pairs, shared = np.unique(np.stack([particle_id[real], track_id[real]]), axis=1, return_counts=True)
    whole, broken = [], []
    order = np.lexsort((pairs[1], -shared))
    best_of_particle: dict[int, tuple[int, int]] = {}
    for k in order:
        best_of_particle.setdefault(int(pairs[0, k]), (int(pairs[1, k]), int(shared[k])))
    by_length = np.lexsort((ids, -particle_hits))
    for i in by_length:
        p = int(ids[i])
        if pt[i] <= pt_min or particle_hits[i] < min_track_hits:
            continue
        t, n = best_of_particle[p]
        if n == particle_hits[i] == size[t]:
            if len(whole) < count:
                whole.append((t, p))
        elif len(broken) < count and n < particle_hits[i]:
            broken.append((t, p))
        if len(whole) == count and len(broken) == count:
            break
    # Fakes: candidates whose most frequent particle holds at most half of them or at most half of its hits.
    fake = []
    candidates = np.flatnonzero(size >= min_track_hits)
    majority: dict[int, tuple[int, int]] = {}
    for k in np.lexsort((pairs[0], -shared)):
        majority.setdefault(int(pairs[1, k]), (int(pairs[0, k]), int(shared[k])))
    hits_of = dict(zip(ids.tolist(), particle_hits.tolist()))
    for t in candidates[np.lexsort((candidates, -size[candidates]))]:
        p, n = majority.get(int(t), (0, 0))
        if not (2 * n > size[t] and p != 0 and 2 * n > hits_of.get(p, 0)):
            fake.append((int(t), p))
            if len(fake) == count:
                break
    return TrackExamples(whole=whole, broken=broken, fake=fake)


def plot_track_examples(
    pos: np.ndarray, offsets: np.ndarray, hits: np.ndarray, track_id: np.ndarray, particle_id: np.ndarray,
    particle_pt: np.ndarray, path: str | os.PathLike, count: int = 2, pt_min: float = 1.0, title: str = "",
) -> Path:  # fmt: skip
    """Built tracks whole, broken and fake, each in the x–y and r–z views, hits coloured by their true particle.

    One row per kind (:func:`pick_track_examples`), ``count`` examples a row, two panels an example zoomed on its
    hits: the candidate's hits joined in their order along the track (black line), every hit of the particles
    involved coloured by particle (noise: grey crosses), the particle's hits the candidate left out as open circles.

    Args:
        pos: (N, 3) hit positions (mm).
        offsets, hits: the candidates as CSR, each candidate's hits in order (:class:`~domainpar.tracks.layout.TrackCandidates`).
        track_id: (N,) candidate of every hit.
        particle_id: (N,) truth particle of every hit (0: noise).
        particle_pt: (N,) pT of every hit's particle (GeV).
        count: examples of each kind.
        pt_min: whole and broken examples are particles above this pT (GeV).
    """
    plt = _pyplot()
    pos = np.asarray(pos, dtype=np.float64)
    particle_id = np.asarray(particle_id, dtype=np.int64)
    track_id = np.asarray(track_id, dtype=np.int64)
    examples = pick_track_examples(track_id, particle_id, particle_pt, count=count, pt_min=pt_min)
    r = np.hypot(pos[:, 0], pos[:, 1])
    cmap = plt.get_cmap("tab10")
    fig, axes = plt.subplots(3, 2 * count, figsize=(4.2 * count * 2, 11.5), squeeze=False)
    kinds = (("whole", examples.whole), ("broken", examples.broken), ("fake", examples.fake))
    for row, (kind, chosen) in enumerate(kinds):
        for col in range(count):
            ax_xy, ax_rz = axes[row, 2 * col], axes[row, 2 * col + 1]
            if col >= len(chosen):
                for ax in (ax_xy, ax_rz):
                    ax.text(0.5, 0.5, f"no {kind} track", ha="center", va="center", transform=ax.transAxes)
                    ax.set_axis_off()
                continue
            t, p = chosen[col]
            mine = hits[offsets[t] : offsets[t + 1]]
            involved = np.unique(particle_id[mine])
            if p != 0 and p not in involved:
                involved = np.append(involved, p)
            shown = np.flatnonzero(np.isin(particle_id, involved[involved != 0]) | np.isin(np.arange(pos.shape[0]), mine))
            colour = {int(q): cmap(k % 10) for k, q in enumerate(involved[involved != 0])}
            for ax, u, v, xlabel, ylabel in ((ax_xy, pos[:, 0], pos[:, 1], "x [mm]", "y [mm]"), (ax_rz, pos[:, 2], r, "z [mm]", "r [mm]")):
                ax.plot(u[mine], v[mine], "-", color="black", linewidth=0.8, zorder=1)
                # One scatter per kind of marker, not per hit: a figure of a few hundred hits drew in seconds.
                noise, real = shown[particle_id[shown] == 0], shown[particle_id[shown] != 0]
                if noise.size:
                    ax.scatter(u[noise], v[noise], marker="x", color="0.5", s=22, zorder=2)
                if real.size:
                    edge = np.array([colour[int(q)] for q in particle_id[real]], dtype=np.float64).reshape(-1, 4)
                    face = np.where((track_id[real] == t)[:, None], edge, 0.0)  # open circle: left out of the candidate
                    ax.scatter(u[real], v[real], s=22, zorder=2, edgecolors=edge, facecolors=face)
                ax.set_xlabel(xlabel, fontsize=8)
                ax.set_ylabel(ylabel, fontsize=8)
                ax.tick_params(labelsize=7)
                ax.grid(alpha=0.2)
            ax_xy.set_aspect("equal", adjustable="datalim")
            n_particle = int(np.count_nonzero(particle_id == p)) if p != 0 else 0
            pt = float(particle_pt[np.flatnonzero(particle_id == p)[0]]) if p != 0 else float("nan")
            if kind == "fake":
                label = f"fake: {mine.size} hits from {int(np.count_nonzero(involved))} particle(s)"
            elif kind == "broken":
                pieces = np.unique(track_id[particle_id == p]).size
                label = f"broken: {n_particle} hits in {pieces} candidates, pT {pt:.2f} GeV"
            else:
                label = f"whole: {n_particle} hits, pT {pt:.2f} GeV"
            ax_xy.set_title(label, fontsize=8)
            ax_rz.set_title("r-z view", fontsize=8)
    fig.text(0.5, 0.005, "hits coloured by true particle; filled: on the candidate, open: left out; grey x: noise; "
             "black line: the candidate's hits in order", ha="center", fontsize=8)  # fmt: skip
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.02, 1, 0.97))
    return _save(fig, path)
