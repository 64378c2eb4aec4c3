"""The TrackML challenge's public trackers beside ours, on the same real event, scored by the same code.

Two peers, run unchanged (their public code, fetched and built here, never
part of the project):

* ``gorbunov``: Sergey Gorbunov's combinatorial tracker (github
  sgorbuno/TrackML_CombinatorialTracker), third in the accuracy phase, no
  machine learning. It needs ROOT only for analysis output: this tool writes
  small stand-in headers (``TString``, ``TStopwatch``, ``TMath``, no-op
  ``TFile``/``TNtuple``/``TH1``) instead. Its driver reads
  ``data/train_100_events/event000001000-hits.csv`` and writes
  ``mysubmission.csv``; the event under study is copied to that name.
* ``kunze``: Marcel Kunze's throughput-phase tracker (github
  marcelkunze/trackml), small neural networks on hit pairs and triplets,
  built with its own ``make eval`` (no ROOT: the ROOT flags of its Makefile
  are set empty on the command line). Its ``eval`` driver reads
  ``<DATAPATH>/event<id>-{hits,cells}.csv`` and writes
  ``<WORKPATH>/submission<id>.csv``; the two paths are set in
  ``Parameters.h``, as its README asks. Its two slice graphs
  (``paths/paths{0,1}.csv``, module pairs of truth tracks learnt from
  training events) are large files that a snapshot of the repository may
  lack; where they are absent they are rebuilt as the union of its published
  tile graphs (``graph/*``, the same kind of module pairs, per tile), and the
  figures say so (``slice_graphs``).

Each runs on the whole event (all ~125k hits: the strips help them place the
pixel hits) under ``/usr/bin/time``: wall and CPU seconds, peak memory. Its
submission is then restricted to the hits of a truth file (the pixel truth
of event 21000: a track keeps its pixel hits) and judged as ``evaluate``
judges ours: the TrackML score with the truth's weights
(:mod:`domainpar.tracks.score`), tracking and perfect-match efficiency above
1 GeV, fake and duplicate rates among tracks of ≥ 3 hits, and efficiency per
pT bin (:mod:`domainpar.tracks.efficiency`)::

    python -m bench.tools.peers --event ../shared/data/trackml/event000021000 \\
        --truth ../shared/data/trackml/pixel/event000021000 --work runs/peers --json peers.json

``--source NAME=DIR`` uses a checkout already on disk instead of cloning
(machines without network). ``--submission NAME=CSV`` judges a submission
made elsewhere (ours: ``domainpar reconstruct`` writes one per event).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from domainpar.data.detector import layer_index_of
from domainpar.data.trackml import event_id_of, load_event
from domainpar.errors import DomainparError
from domainpar.tracks.efficiency import ParticleTable, binned_efficiencies, tracking_metrics
from domainpar.tracks.score import score_arrays

#: Public repositories of the peers.
REPOSITORIES = {
    "gorbunov": "https://github.com/sgorbuno/TrackML_CombinatorialTracker",
    "kunze": "https://github.com/marcelkunze/trackml",
}

#: ROOT stand-ins for the combinatorial tracker: only what its reconstruction path uses; the analysis classes it
#: includes but runs only with truth analysis on do nothing.
ROOT_STANDINS = {
    "TString.h": """#pragma once
#include <cstdarg>
#include <cstdio>
#include <string>
// ROOT's headers bring these in; the tracker relies on it.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <vector>
class TString {
 public:
  TString() {}
  TString(const char* s) : s_(s ? s : "") {}
  const char* Data() const { return s_.c_str(); }
  operator const char*() const { return s_.c_str(); }
  TString& Form(const char* fmt, ...) {
    char buf[4096];
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf, sizeof buf, fmt, args);
    va_end(args);
    s_ = buf;
    return *this;
  }
  TString operator+(const char* other) const { return TString((s_ + other).c_str()); }
 private:
  std::string s_;
};
""",
    "TStopwatch.h": """#pragma once
#include <ctime>
class TStopwatch {
 public:
  TStopwatch() { Start(); }
  void Start(bool = true) { cpu0_ = std::clock(); }
  void Stop() { cpu_ = double(std::clock() - cpu0_) / CLOCKS_PER_SEC; }
  double CpuTime() const { return cpu_; }
 private:
  std::clock_t cpu0_ = 0;
  double cpu_ = 0;
};
""",
    "TMath.h": """#pragma once
#include <cmath>
namespace TMath {
inline constexpr double Pi() { return 3.14159265358979323846; }
inline constexpr double TwoPi() { return 2.0 * Pi(); }
}
""",
    "TFile.h": """#pragma once
class TFile {
 public:
  TFile(const char*, const char* = "") {}
  void Write() {}
  void Close() {}
};
""",
    "TNtuple.h": """#pragma once
class TNtuple {
 public:
  TNtuple(const char*, const char*, const char*, int = 32000) {}
  template <class... T> int Fill(T...) { return 0; }
  void SetMarkerStyle(int) {}
  void SetMarkerSize(double) {}
};
""",
    "TH1.h": "#pragma once\nclass TH1F {};\n",
}

#: The combinatorial tracker's translation units (its Makefile's SOURCES).
GORBUNOV_SOURCES = (
    "TrackModelPhysical.cxx FitLayer.cxx TrackletConstructor.cxx Tracker.cxx reconstruction.cxx Geo.cxx Cuts.cxx "
    "analysis/PolynomFit.cxx DataStructures.cxx analysis/TrackletFitTest.cxx TrackletProlongation.cxx "
    "analysis/TrackletConstructorMC.cxx TrackletCleaner.cxx TrackletEfficiency.cxx ReadEvent.cxx "
    "TrackletConstructorPrim.cxx analysis/TrackletConstructorPrimMC.cxx analysis/AnalyseGeometry.cxx"
).split()


def _run(command: list[str], cwd: Path, log: Path, env: dict | None = None) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        raise DomainparError(f"{cwd}: `{' '.join(command)}` exited {done.returncode} (log: {log})")


def fetch(name: str, work: Path, source: Path | None) -> Path:
    """The peer's checkout: ``source`` copied, else a shallow clone of its public repository."""
    tree = work / name
    if tree.exists():
        return tree
    if source is not None:
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns(".git"))
    else:
        _run(["git", "clone", "--depth", "1", REPOSITORIES[name], str(tree)], work, work / f"{name}.log")
    return tree


def build(name: str, tree: Path, log: Path) -> Path:
    """Compile the peer; returns its executable."""
    if name == "gorbunov":
        stubs = tree / "rootstub"
        stubs.mkdir(exist_ok=True)
        for header, text in ROOT_STANDINS.items():
            (stubs / header).write_text(text)
        objects = []
        for source in GORBUNOV_SOURCES:
            obj = str(Path(source).with_suffix(".o"))
            _run(["g++", "-c", "-w", "-std=c++11", "-O3", "-I.", "-I./analysis", "-Irootstub", source, "-o", obj], tree, log)
            objects.append(obj)
        _run(["g++", *objects, "-o", "reco"], tree, log)
        return tree / "reco"
    parameters = tree / "Parameters.h"
    text = re.sub(r'#define DATAPATH "/Users/[^"]*"', f'#define DATAPATH "{tree / "data"}"', parameters.read_text())
    text = re.sub(r'#define WORKPATH "/Users/[^"]*"', f'#define WORKPATH "{tree}"', text)
    parameters.write_text(text)
    _run(["make", "eval", "INCLUDES=-I. -I..", "ROOTLIBS=", "ROOTGLIBS=", "LDFLAGS="], tree, log)
    return tree / "eval"


def slice_graphs(tree: Path, slices: int = 2) -> str:
    """The throughput tracker's slice graphs: as published, or rebuilt from its tile graphs where absent."""
    paths = [tree / "paths" / f"paths{i}.csv" for i in range(slices)]
    if all(p.is_file() and p.stat().st_size > 0 for p in paths):
        return "as published"
    # Both kinds are "module_a weight module_b" lines of module pairs on truth tracks; a slice graph holds the pairs
    # of the tracks starting in its slice, the tile graphs those of each tile: their union holds every slice's pairs.
    union = "".join(p.read_text() for p in sorted((tree / "graph").iterdir()) if p.is_file())
    paths[0].parent.mkdir(exist_ok=True)
    for p in paths:
        p.write_text(union)
    return "rebuilt: the union of the tile graphs (graph/*) in each slice"


def _plain_csv(prefix: Path, part: str, out: Path) -> None:
    source = Path(f"{prefix}-{part}.csv")
    if source.exists():
        shutil.copyfile(source, out)
        return
    with gzip.open(f"{source}.gz", "rb") as f_in, open(out, "wb") as f_out:
        shutil.copyfileobj(f_in, f_out)


def _timed(command: list[str], cwd: Path, log: Path, env: dict | None = None) -> dict:
    """Run under ``/usr/bin/time -v``: wall, user+system CPU seconds, peak resident memory."""
    report = cwd / "time.txt"
    start = time.monotonic()
    _run(["/usr/bin/time", "-v", "-o", str(report), *command], cwd, log, env)
    wall = time.monotonic() - start
    text = report.read_text()
    field = lambda label: float(re.search(rf"{label}: ([0-9.]+)", text).group(1))  # noqa: E731
    return {"wall_s": round(wall, 2), "cpu_s": round(field("User time \\(seconds\\)") + field("System time \\(seconds\\)"), 2),
            "max_rss_mib": round(field("Maximum resident set size \\(kbytes\\)") / 1024, 1)}  # fmt: skip


def run(name: str, tree: Path, executable: Path, event: Path, log: Path) -> tuple[Path, dict]:
    """Reconstruct ``event`` with the peer; returns its submission and the time it took."""
    if name == "gorbunov":
        data = tree / "data" / "train_100_events"
        data.mkdir(parents=True, exist_ok=True)
        _plain_csv(event, "hits", data / "event000001000-hits.csv")
        timing = _timed([str(executable)], tree, log)
        return tree / "mysubmission.csv", timing
    data = tree / "data"
    data.mkdir(exist_ok=True)
    event_id = event_id_of(event)
    for part in ("hits", "cells"):
        _plain_csv(event, part, data / f"event{event_id:09d}-{part}.csv")
    graphs = slice_graphs(tree)
    timing = _timed([str(executable), str(event_id), "1"], tree, log, {**os.environ, "LD_LIBRARY_PATH": str(tree)})
    timing["slice_graphs"] = graphs
    return tree / f"submission{event_id}.csv", timing


def judge(submission: Path, truth_prefix: Path) -> dict:
    """Figures of a submission over the hits of ``truth_prefix``'s truth (the other hits dropped)."""
    hits, particles, truth = load_event(truth_prefix, parts=("hits", "particles", "truth"))
    frame = pd.read_csv(submission)
    if not {"hit_id", "track_id"} <= set(frame.columns):
        raise DomainparError(f"{submission}: expected columns hit_id, track_id, got {', '.join(frame.columns)}")
    truth = truth.sort_values("hit_id").reset_index(drop=True)
    track_of = frame.drop_duplicates("hit_id").set_index("hit_id")["track_id"]
    missing = ~truth["hit_id"].isin(track_of.index)
    if missing.any():
        raise DomainparError(f"{submission}: expected every hit of {truth_prefix}'s truth, {int(missing.sum())} missing")
    # Track id 0 is a track like any other, as the official scorer (and `domainpar score`) counts it.
    track_id = track_of.loc[truth["hit_id"]].to_numpy(np.int64)
    hits = hits.set_index("hit_id").loc[truth["hit_id"]]
    particle_id = truth["particle_id"].to_numpy(np.int64)
    layer = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    table = ParticleTable.from_momenta(particles["particle_id"], particles["px"], particles["py"], particles["pz"])
    metrics = tracking_metrics(track_id, particle_id, layer, table)
    by_pt = binned_efficiencies([metrics])["efficiency_vs_pt"]
    return {
        "trackml_score": score_arrays(track_id, particle_id, truth["weight"].to_numpy(np.float64)).score,
        **metrics.summary(),
        "efficiency_vs_pt": {key: by_pt[key] for key in ("bins", "count", "tracking_efficiency", "perfect_efficiency")},
    }


def _pairs(values: list[str], option: str) -> dict[str, Path]:
    out = {}
    for value in values:
        name, _, path = value.partition("=")
        if not path:
            raise DomainparError(f"{option} {value}: expected NAME=PATH")
        out[name] = Path(path)
    return out


def markdown(results: dict[str, dict]) -> str:
    """One row per tracker: score, efficiencies, fakes, time; then efficiency per pT bin."""
    lines = ["| tracker | TrackML score | tracking eff. pT > 1 GeV | perfect | fake rate | wall s | CPU s | peak MiB |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, r in results.items():
        t = r.get("timing", {})
        lines.append(f"| {name} | {r['trackml_score']:.4f} | {r['tracking_efficiency']:.3f} | {r['perfect_efficiency']:.3f} | "
                     f"{r['fake_rate']:.3f} | {t.get('wall_s', '')} | {t.get('cpu_s', '')} | {t.get('max_rss_mib', '')} |")  # fmt: skip
    bins = next(iter(results.values()))["efficiency_vs_pt"]["bins"]
    labels = [f"{lo:g}-{hi:g}" for lo, hi in zip(bins[:6], bins[1:6])] + ["> 1"]
    lines += ["", "| tracker | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for name, r in results.items():
        table = r["efficiency_vs_pt"]
        low = table["tracking_efficiency"][:5]
        count, eff = np.array(table["count"][5:]), np.array([e or 0.0 for e in table["tracking_efficiency"][5:]])
        high = float((count * eff).sum() / count.sum()) if count.sum() else float("nan")
        lines.append(f"| {name} | " + " | ".join(f"{v:.3f}" for v in [*low, high]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.peers", description=__doc__.splitlines()[0])
    parser.add_argument("--event", type=Path, required=True, help="the whole event's prefix (hits, cells)")
    parser.add_argument("--truth", type=Path, required=True, help="prefix of the event whose truth judges the submissions")
    parser.add_argument("--work", type=Path, required=True, help="where the peers are fetched, built and run")
    parser.add_argument("--peers", default="gorbunov,kunze", help="comma-separated: gorbunov, kunze")
    parser.add_argument("--source", action="append", default=[], help="NAME=DIR: a checkout on disk instead of cloning")
    parser.add_argument("--submission", action="append", default=[], help="NAME=CSV: also judge this submission")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    try:
        sources = _pairs(args.source, "--source")
        args.work.mkdir(parents=True, exist_ok=True)
        results = {}
        for name in [p for p in args.peers.split(",") if p]:
            if name not in REPOSITORIES:
                raise DomainparError(f"--peers {name}: expected one of {', '.join(REPOSITORIES)}")
            log = args.work / f"{name}.log"
            tree = fetch(name, args.work, sources.get(name))
            executable = build(name, tree, log)
            submission, timing = run(name, tree, executable, args.event, log)
            results[name] = {**judge(submission, args.truth), "timing": timing, "repository": REPOSITORIES[name]}
            print(f"[peers] {name}: score {results[name]['trackml_score']:.4f}, {timing}", flush=True)
        for name, path in _pairs(args.submission, "--submission").items():
            results[name] = judge(path, args.truth)
    except DomainparError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = markdown(results) if results else ""
    print(text, end="")
    if args.json is not None:
        args.json.write_text(json.dumps({"event": str(args.event), "truth": str(args.truth), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
