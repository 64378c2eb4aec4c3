"""The event simulator: determinism, physics, TrackML conventions, and agreement with the real event."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import domainpar.sim
from domainpar.cli.main import main as cli_main
from domainpar.data.detector import layer_index_of, layer_table
from domainpar.data.trackml import load_dataset, load_event
from domainpar.errors import DomainparError
from domainpar.sim.config import SimulationConfig
from domainpar.sim.dataset import simulate_dataset, simulator_digest
from domainpar.sim.event import simulate_event
from domainpar.sim.measurement import measurement_model
from domainpar.sim.truth import pt_weight

from fixtures import TRACKML_DIR

REFERENCE = TRACKML_DIR / "reference_stats_event000021000.json"
SMALL = SimulationConfig(num_particles=1500)
#: No scattering, no smearing, no decays, no interactions: truth points lie exactly on the ideal helix.
IDEAL = replace(
    SMALL,
    multiple_scattering=False,
    smear=False,
    module_overlaps=False,
    module_planes=False,
    k0s_fraction=0.0,
    lambda_fraction=0.0,
    interaction_scale=0.0,
)


@pytest.fixture(scope="module")
def small_event() -> dict[str, pd.DataFrame]:
    return simulate_event(SMALL, event_id=3, seed=11)


@pytest.fixture(scope="module")
def ideal_event() -> dict[str, pd.DataFrame]:
    return simulate_event(IDEAL, event_id=3, seed=11)


@pytest.fixture(scope="module")
def full_event() -> dict[str, pd.DataFrame]:
    """One full-scale event with the default configuration (the only one in the suite)."""
    return simulate_event(SimulationConfig(), event_id=21000, seed=0)


def _signal(event: dict[str, pd.DataFrame]) -> pd.DataFrame:
    merged = event["hits"].merge(event["truth"], on="hit_id")
    return merged[merged["particle_id"] != 0]


def test_deterministic_for_a_seed(small_event):
    again = simulate_event(SMALL, event_id=3, seed=11)
    for part in ("hits", "cells", "particles", "truth"):
        pd.testing.assert_frame_equal(small_event[part], again[part])
    other = simulate_event(SMALL, event_id=3, seed=12)
    assert not np.array_equal(other["hits"]["x"].to_numpy()[:100], small_event["hits"]["x"].to_numpy()[:100])
    other_event = simulate_event(SMALL, event_id=4, seed=11)
    assert len(other_event["hits"]) != len(small_event["hits"]) or not other_event["hits"].equals(small_event["hits"])


def test_hits_lie_on_their_layers(small_event):
    signal = _signal(small_event)
    table = layer_table()
    index = layer_index_of(signal["volume_id"].to_numpy(), signal["layer_id"].to_numpy())
    assert (index >= 0).all()
    layer = table.iloc[index]
    barrel = layer["barrel"].to_numpy()
    true_r = np.hypot(signal["tx"].to_numpy(), signal["ty"].to_numpy())
    tz = signal["tz"].to_numpy()
    # Truth crossings: on the plane of their module (float32 precision), inside it (up to the gaps the
    # nearest-centre assignment ignores), and inside the layer's extent.
    from domainpar.data.detector import load_detector

    modules = load_detector().set_index(["volume_id", "layer_id", "module_id"])
    module = modules.loc[list(zip(signal["volume_id"], signal["layer_id"], signal["module_id"]))]
    local = signal[["tx", "ty", "tz"]].to_numpy(np.float64) - module[["cx", "cy", "cz"]].to_numpy()
    off_plane = np.abs(np.einsum("ij,ij->i", local, module[["rot_xw", "rot_yw", "rot_zw"]].to_numpy()))
    # (Grazing crossings of loopers at their apex keep the cylinder point: a few per mille.)
    assert (off_plane < 2e-3).mean() > 0.995
    along_u = np.abs(np.einsum("ij,ij->i", local, module[["rot_xu", "rot_yu", "rot_zu"]].to_numpy()))
    along_v = np.abs(np.einsum("ij,ij->i", local, module[["rot_xv", "rot_yv", "rot_zv"]].to_numpy()))
    inside = (along_u <= module["module_maxhu"].to_numpy() + 1.0) & (along_v <= module["module_hv"].to_numpy() + 1.0)
    assert inside.mean() > 0.97
    # Barrel hits spread in radius by the modules' flatness and stagger (a few mm), not on one cylinder.
    pixel_barrel = (signal["volume_id"] == 8).to_numpy()
    assert np.ptp(true_r[pixel_barrel & (signal["layer_id"] == 2).to_numpy()]) > 1.0
    assert ((tz[barrel] >= layer["z_min"].to_numpy()[barrel] - 1) & (tz[barrel] <= layer["z_max"].to_numpy()[barrel] + 1)).all()
    assert ((true_r[~barrel] >= layer["r_min"].to_numpy()[~barrel] - 1) & (true_r[~barrel] <= layer["r_max"].to_numpy()[~barrel] + 1)).all()
    # Measured hits: displaced from the truth point along the module's (u, v) axes by the measured
    # residual distribution of their volume and cluster size along that axis (real event 1): within its
    # range, with its median and spread.
    from domainpar.data.features import cluster_summary

    d_u, d_v, pitch_u, pitch_v = _residuals(signal)
    clusters = cluster_summary(signal["hit_id"].to_numpy(), small_event["cells"])
    model = measurement_model()
    volume = signal["volume_id"].to_numpy()
    checked = 0
    for key, per_volume in model["volumes"].items():
        for offset, pitch, axis, size in ((d_u, pitch_u, "u", clusters[:, 2]), (d_v, pitch_v, "v", clusters[:, 3])):
            size_class = np.clip(size, 1, 3).astype(int).astype(str)
            for name, quantiles in per_volume[axis].items():
                in_class = size_class == name if name != "all" else ~np.isin(size_class, list(per_volume[axis]))
                chosen = (volume == int(key)) & in_class
                if chosen.sum() < 200:
                    continue
                scaled = offset[chosen] / pitch[chosen]
                low, high = quantiles[0], quantiles[-1]
                assert ((scaled >= low - 1e-3) & (scaled <= high + 1e-3)).all(), (key, axis, name)
                # Distribution-free: the share of hits below each stored quantile q_p is p within its binomial error.
                for probability in (0.1, 0.25, 0.5, 0.75, 0.9):
                    knot = np.interp(probability, model["probabilities"], quantiles)
                    share = np.mean(scaled <= knot)
                    tolerance = 4 * np.sqrt(probability * (1 - probability) / chosen.sum()) + 0.01
                    assert abs(share - probability) < tolerance, (key, axis, name, probability, share)
                checked += 1
    assert checked >= 10


def _residuals(signal: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Measured minus true position along every hit's module u and v axes, and the module pitches."""
    from domainpar.data.detector import load_detector

    modules = load_detector().set_index(["volume_id", "layer_id", "module_id"])
    keys = list(zip(signal["volume_id"], signal["layer_id"], signal["module_id"]))
    module = modules.loc[keys]
    residual = signal[["x", "y", "z"]].to_numpy(np.float64) - signal[["tx", "ty", "tz"]].to_numpy(np.float64)
    d_u = np.einsum("ij,ij->i", residual, module[["rot_xu", "rot_yu", "rot_zu"]].to_numpy())
    d_v = np.einsum("ij,ij->i", residual, module[["rot_xv", "rot_yv", "rot_zv"]].to_numpy())
    return d_u, d_v, module["pitch_u"].to_numpy(), module["pitch_v"].to_numpy()


def test_pitch_resolution_model():
    event = simulate_event(replace(SMALL, resolution="pitch"), event_id=3, seed=11)
    d_u, d_v, pitch_u, pitch_v = _residuals(_signal(event))
    sigma_u, sigma_v = pitch_u / np.sqrt(12), pitch_v / np.sqrt(12)
    assert (np.abs(d_u) < 5 * sigma_u + 1e-3).all()
    assert (np.abs(d_v) < 5 * sigma_v + 1e-3).all()
    signal = _signal(event)
    for volume in (8, 13, 17):
        chosen = (signal["volume_id"] == volume).to_numpy()
        assert 0.9 < np.std(d_u[chosen]) / sigma_u[chosen].mean() < 1.1
        assert 0.9 < np.std(d_v[chosen]) / sigma_v[chosen].mean() < 1.1


def test_module_ids_are_nearest_real_modules(small_event):
    from domainpar.data.detector import load_detector

    modules = load_detector().set_index(["volume_id", "layer_id", "module_id"])
    signal = _signal(small_event)
    keys = list(zip(signal["volume_id"], signal["layer_id"], signal["module_id"]))
    centres = modules.loc[keys, ["cx", "cy", "cz"]].to_numpy()
    distance = np.linalg.norm(centres - signal[["tx", "ty", "tz"]].to_numpy(), axis=1)
    half_size = np.hypot(modules.loc[keys, "module_maxhu"].to_numpy(), modules.loc[keys, "module_hv"].to_numpy())
    # Overlap hits sit in the neighbouring module, so allow a little more than a module half-diagonal.
    assert (distance < 1.6 * half_size + 6.0).all()


def _fit_circle(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Algebraic least-squares circle (centre x, centre y, radius)."""
    design = np.stack([x, y, np.ones_like(x)], axis=1)
    solution, *_ = np.linalg.lstsq(design, x**2 + y**2, rcond=None)
    cx, cy = solution[0] / 2, solution[1] / 2
    return cx, cy, float(np.sqrt(solution[2] + cx**2 + cy**2))


def test_helix_radius_matches_pt(ideal_event):
    signal = _signal(ideal_event).merge(ideal_event["particles"], on="particle_id")
    signal["pt"] = np.hypot(signal["px"], signal["py"])
    checked = 0
    for _, track in signal[signal["nhits"] >= 6].groupby("particle_id"):
        pt = float(track["pt"].iloc[0])
        cx, cy, radius = _fit_circle(track["tx"].to_numpy(np.float64), track["ty"].to_numpy(np.float64))
        expected = 1000.0 * pt / (0.3 * IDEAL.field_tesla)
        # float32 truth over a lever arm of up to 1 m: relative precision ~1e-3 for R up to ~10 m.
        if expected < 5_000:
            assert radius == pytest.approx(expected, rel=2e-3), (pt, radius, expected)
            checked += 1
    assert checked > 200


def test_helix_radius_with_scattering_within_resolution(small_event):
    signal = _signal(small_event).merge(small_event["particles"], on="particle_id")
    signal["pt"] = np.hypot(signal["px"], signal["py"])
    ratios = []
    for _, track in signal[(signal["nhits"] >= 8) & (signal["pt"] > 0.5) & (signal["pt"] < 2.0)].groupby("particle_id"):
        _, _, radius = _fit_circle(track["x"].to_numpy(np.float64), track["y"].to_numpy(np.float64))
        ratios.append(radius / (1000.0 * track["pt"].iloc[0] / (0.3 * SMALL.field_tesla)))
    ratios = np.array(ratios)
    assert len(ratios) > 50
    assert abs(np.median(ratios) - 1.0) < 0.02
    assert np.median(np.abs(ratios - 1.0)) < 0.05


def test_charge_sets_bending_direction(ideal_event):
    """B along +z: positive particles turn clockwise seen from +z (as in the real truth)."""
    signal = _signal(ideal_event).merge(ideal_event["particles"][["particle_id", "q", "vx", "vy", "nhits"]], on="particle_id")
    signal["d"] = np.hypot(signal["tx"] - signal["vx"], signal["ty"] - signal["vy"])
    signs = {1: [], -1: []}
    for _, track in signal[signal["nhits"] >= 3].sort_values("d").groupby("particle_id"):
        points = track[["tx", "ty"]].to_numpy(np.float64)[:3]
        first, second = points[1] - points[0], points[2] - points[1]
        signs[int(track["q"].iloc[0])].append(np.sign(first[0] * second[1] - first[1] * second[0]))
    assert len(signs[1]) > 100 and len(signs[-1]) > 100
    assert np.mean(np.array(signs[1]) < 0) > 0.98
    assert np.mean(np.array(signs[-1]) > 0) > 0.98


def test_truth_weights(small_event):
    truth, particles = small_event["truth"], small_event["particles"]
    assert truth["weight"].sum() == pytest.approx(1.0, abs=1e-5)
    assert (truth.loc[truth["particle_id"] == 0, "weight"] == 0).all()
    assert (truth["weight"] >= 0).all()
    per_particle = truth[truth["particle_id"] != 0].groupby("particle_id")["weight"].sum()
    short = particles.set_index("particle_id")["nhits"].reindex(per_particle.index) < 4
    assert (per_particle[short] == 0).all()
    # Particle weights follow the pT rule: ratio of two weighted particles = ratio of their pT weights.
    primaries = particles[(np.hypot(particles["vx"], particles["vy"]) < 1.0) & (particles["nhits"] >= 4)].set_index("particle_id")
    pt = np.hypot(primaries["px"], primaries["py"]).to_numpy()
    sums = per_particle.reindex(primaries.index).to_numpy()
    np.testing.assert_allclose(sums / sums[0], pt_weight(pt) / pt_weight(pt[0]), rtol=2e-3)
    # Order weights: on a 9-hit track the first hit weighs 10/3 of the middle ones and the last 6/3.
    nine = primaries.index[primaries["nhits"] == 9][0]
    merged = truth[truth["particle_id"] == nine].merge(small_event["hits"], on="hit_id")
    vertex = primaries.loc[nine, ["vx", "vy", "vz"]].to_numpy(np.float64)
    path = np.linalg.norm(merged[["tx", "ty", "tz"]].to_numpy(np.float64) - vertex, axis=1)
    ordered = merged["weight"].to_numpy()[np.argsort(path)]
    np.testing.assert_allclose(ordered / ordered.min(), np.array([10, 8, 6, 5, 3, 3, 3, 5, 6]) / 3, rtol=1e-3)


def test_pt_weight_rule():
    np.testing.assert_allclose(pt_weight(np.array([0.1, 0.5, 1.75, 3.0, 50.0])), [0.2, 0.2, 0.6, 1.0, 1.0])


def test_nhits_consistent_with_truth(small_event):
    counts = small_event["truth"].groupby("particle_id").size()
    nhits = small_event["particles"].set_index("particle_id")["nhits"]
    np.testing.assert_array_equal(counts.reindex(nhits.index, fill_value=0).to_numpy(), nhits.to_numpy())
    assert set(small_event["truth"]["particle_id"]) - {0} <= set(nhits.index)


def test_tables_have_trackml_layout(small_event):
    from domainpar.data.trackml import COLUMNS

    for part, columns in COLUMNS.items():
        frame = small_event[part]
        for column, dtype in columns.items():
            assert frame[column].dtype == np.dtype(dtype), (part, column)
    hits = small_event["hits"]
    assert hits["hit_id"].tolist() == list(range(1, len(hits) + 1))
    assert set(small_event["cells"]["hit_id"]) == set(hits["hit_id"])
    assert set(small_event["particles"]["q"]) == {-1, 1}


def test_loopers_recross_barrel_layers_when_allowed():
    looping = replace(IDEAL, num_particles=400, max_turns=1.0, pt_temperature=0.05, eta_max=0.5)
    event = simulate_event(looping, event_id=1, seed=2)
    signal = _signal(event)
    repeats = signal.groupby(["particle_id", "volume_id", "layer_id"]).size()
    assert (repeats >= 2).sum() > 50
    at_apex = simulate_event(replace(looping, max_turns=0.5), event_id=1, seed=2)
    assert _signal(at_apex).groupby(["particle_id", "volume_id", "layer_id"]).size().max() == 1


def test_files_readable_by_load_event(tmp_path):
    prefixes = simulate_dataset(tmp_path, 2, replace(SMALL, num_particles=300), seed=5, first_event_id=7, progress=False)
    assert [p.name for p in prefixes] == ["event000000007", "event000000008"]
    loaded = list(load_dataset(tmp_path))
    assert [item[0] for item in loaded] == [7, 8]
    direct = simulate_event(replace(SMALL, num_particles=300), event_id=8, seed=5)
    for frame, part in zip(loaded[1][1:], ("hits", "cells", "particles", "truth")):
        pd.testing.assert_frame_equal(frame, direct[part])


def test_workers_write_the_same_files(tmp_path):
    """Events simulated in parallel processes are the events of one process, byte for byte: each draws from its
    own (seed, event id) stream and lands under its own name, whichever worker makes it."""
    config = replace(SMALL, num_particles=300)
    serial = simulate_dataset(tmp_path / "one", 3, config, seed=5, first_event_id=7, progress=False, workers=1)
    parallel = simulate_dataset(tmp_path / "two", 3, config, seed=5, first_event_id=7, progress=False, workers=2)
    assert [p.name for p in parallel] == [p.name for p in serial] == ["event000000007", "event000000008", "event000000009"]
    files = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert len(files) == 12 and sorted(p.name for p in (tmp_path / "two").iterdir()) == files
    for name in files:
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name


def test_workers_must_be_positive(tmp_path):
    with pytest.raises(DomainparError, match=r"workers must be at least 1 \(got 0\)"):
        simulate_dataset(tmp_path, 2, SMALL, workers=0, progress=False)
    assert not tmp_path.joinpath("event000000001-hits.csv.gz").exists()


def test_simulator_digest_covers_every_file_of_the_package(tmp_path):
    """The physics pipeline keys its cache of simulated events on this digest: a change to any file of the
    simulator (a module, its resources) or a new file must change it."""
    package = Path(domainpar.sim.__file__).parent
    copy = tmp_path / "sim"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert simulator_digest(copy) == simulator_digest()
    files = sorted(p.relative_to(copy) for p in copy.rglob("*") if p.is_file())
    assert {"event.py", "propagation.py", "calibration.py", "resources/measurement_model.json"} <= {f.as_posix() for f in files}
    digests = set()
    for name in files:
        original = (copy / name).read_bytes()
        (copy / name).write_bytes(original + b" ")
        digests.add(simulator_digest(copy))
        (copy / name).write_bytes(original)
    assert len(digests) == len(files) and simulator_digest() not in digests
    (copy / "extra.py").write_text("")
    assert simulator_digest(copy) != simulator_digest()


def test_config_validation():
    with pytest.raises(DomainparError, match=r"SimulationConfig.noise_fraction is out of range \(got 1.5\)"):
        SimulationConfig(noise_fraction=1.5)
    with pytest.raises(DomainparError, match=r"event_id and seed must be non-negative"):
        simulate_event(SMALL, event_id=-1, seed=0)


def test_cli_simulate(tmp_path, capsys):
    cli_main(["simulate", "--out", str(tmp_path), "--events", "1", "--particles", "200", "--seed", "3", "--quiet"])
    assert "wrote 1 events" in capsys.readouterr().out
    load_event(tmp_path / "event000000001")
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["simulate", "--out", str(tmp_path), "--events", "0"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: domainpar simulate: Invalid value for '--events': 0 is not in the range 1<=x<=999999999 "
        "(see 'domainpar simulate --help')"
    )


# --- agreement with the real full event 21000 -------------------------------------------------


def event_statistics(event: dict[str, pd.DataFrame]) -> dict:
    """The statistics of bench/tools/extract_reference_stats.py, computed the same way (noise from nhits)."""
    hits, particles = event["hits"], event["particles"]
    pt = np.hypot(particles["px"].to_numpy(np.float64), particles["py"].to_numpy(np.float64))
    nhits = particles["nhits"].to_numpy()
    with_hits = nhits[nhits > 0]
    return {
        "noise_fraction": (len(hits) - nhits.sum()) / len(hits),
        "volume_fractions": {str(v): f for v, f in hits["volume_id"].value_counts(normalize=True).items()},
        "frac_pt_above_1gev": float((pt > 1.0).mean()),
        "median_pt": float(np.median(pt)),
        "frac_particles_without_hits": float((nhits == 0).mean()),
        "mean_nhits_with_hits": float(with_hits.mean()),
        "median_nhits_with_hits": float(np.median(with_hits)),
    }


def drift_from_reference(stats: dict, reference: dict) -> list[str]:
    """Every statistic that drifted from the real event beyond its tolerance (empty: agreement).

    Tolerances: a volume's share of hits may differ by at most 25% relative and
    2 points absolute; the noise fraction by 10% relative; the fraction of
    particles above 1 GeV by 15% relative and the median pT by 10%; the mean
    and median number of hits of particles with hits by 10%, the fraction of
    particles without hits by 25% relative.
    """
    problems = []
    for volume, real in reference["volume_fractions"].items():
        simulated = stats["volume_fractions"].get(volume, 0.0)
        if abs(simulated - real) > min(0.25 * real, 0.02):
            problems.append(f"volume {volume} share {simulated:.4f} vs real {real:.4f}")
    relative = {
        "noise_fraction": 0.10,
        "frac_pt_above_1gev": 0.15,
        "median_pt": 0.10,
        "mean_nhits_with_hits": 0.10,
        "median_nhits_with_hits": 0.10,
        "frac_particles_without_hits": 0.25,
    }
    for key, tolerance in relative.items():
        if abs(stats[key] - reference[key]) > tolerance * reference[key]:
            problems.append(f"{key} {stats[key]:.4f} vs real {reference[key]:.4f}")
    return problems


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(REFERENCE.read_text())


def test_full_scale_event_matches_real_event(full_event, reference):
    # The default 10,000 collision particles (event 21000: 9,862) and the secondaries of their interactions in
    # the material make an event as busy as the real one: its particles file lists 12,670, it has 125,576 hits.
    assert abs(len(full_event["particles"]) / reference["num_particles"] - 1.0) < 0.05
    assert abs(len(full_event["hits"]) / reference["num_hits"] - 1.0) < 0.05
    assert drift_from_reference(event_statistics(full_event), reference) == []


@pytest.fixture(scope="module")
def reduced_baseline_problems(reference) -> list[str]:
    return drift_from_reference(event_statistics(simulate_event(SimulationConfig(num_particles=3000), event_id=21000, seed=0)), reference)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"noise_fraction": 0.284}, "noise_fraction"),
        ({"pt_temperature": 0.25}, "frac_pt_above_1gev"),
        ({"module_overlaps": False}, "mean_nhits_with_hits"),
        ({"eta_max": 2.5}, "volume 7 share"),
    ],
)
def test_reference_comparison_catches_drift(reference, reduced_baseline_problems, change, expected):
    # The undisturbed simulation at this size passes the same check, so the drift is what fails it.
    assert not any(problem.startswith(expected) for problem in reduced_baseline_problems)
    drifted = simulate_event(replace(SimulationConfig(num_particles=3000), **change), event_id=21000, seed=0)
    problems = drift_from_reference(event_statistics(drifted), reference)
    assert any(problem.startswith(expected) for problem in problems), problems
