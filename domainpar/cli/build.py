"""``domainpar build``: hit graphs (one ``.npz``, or PyG ``.pyg``, per event) from TrackML events."""

from __future__ import annotations

import json
from pathlib import Path

import click

from domainpar.atomic import atomic_path
from domainpar.cli.checks import local_ranks
from domainpar.data.dataset import build_graph_files, build_workers, event_inputs
from domainpar.data.graph import CONSTRUCTIONS, TRAJECTORIES, GraphConfig
from domainpar.errors import DomainparError
from domainpar.cli.inputs import inputs_of
from domainpar.output_paths import check_apart, check_output_dir, check_output_file, no_empty_directories_left
from domainpar.workers import available_cores, failure_summary, parse_shard, shard_items

_DEFAULTS = GraphConfig()


@click.command("build")
@click.option("--input", "input_path", required=True, type=click.Path(), help="Directory of TrackML events, or one event prefix (e.g. data/event000000001).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory for event<id:09d>.npz graph files.")
@click.option("--phi-slope-max", type=float, default=_DEFAULTS.phi_slope_max, show_default=True, help="Largest |dphi|/|dr| of an edge, rad/mm.")
@click.option("--dphi-margin", type=float, default=_DEFAULTS.dphi_margin, show_default=True, help="Constant |dphi| allowance added to the phi-slope window, rad.")
@click.option("--z0-max", type=float, default=_DEFAULTS.z0_max, show_default=True, help="Largest |z0| of the (r, z) line through both hits, mm.")
@click.option("--trajectory", type=click.Choice(list(TRAJECTORIES)), default=_DEFAULTS.trajectory, show_default=True, help="What the phi-slope and z0 cuts follow: straight lines, or a helix from the beam line of curvature up to 2 x --phi-slope-max per mm (keeps low-pT segments at the strips' radii).")
@click.option("--helix-reach", type=float, default=_DEFAULTS.helix_reach, show_default=True, help="With --trajectory helix: the most curved circle of the phi window turns at this multiple of the outer hit's radius (>= 1).")
@click.option("--deta-max", type=float, default=_DEFAULTS.deta_max, show_default=True, help="Largest |deta| of an endcap disc -> disc edge.")
@click.option("--skip-missing/--no-skip-missing", default=_DEFAULTS.skip_missing, show_default=True, help="Add edges that jump a layer where a hit is missing.")
@click.option("--skip-phi-slope-max", type=float, default=_DEFAULTS.skip_phi_slope_max, show_default=True, help="Phi-slope cut of the layer-jumping edges, rad/mm.")
@click.option("--skip-z0-max", type=float, default=_DEFAULTS.skip_z0_max, show_default=True, help="z0 cut of the layer-jumping edges, mm.")
@click.option("--skip-dphi-margin", type=float, default=None, help="Constant |dphi| allowance of the layer-jumping edges, rad (default: --dphi-margin).")
@click.option("--bridge-dphi-margin", type=float, default=None, help="Constant |dphi| allowance of the bridge test's edges, rad (default: --dphi-margin).")
@click.option("--bridge-tolerance-xy", type=float, default=_DEFAULTS.bridge_tolerance_xy, show_default=True, help="A hit this close (transverse, mm) to a layer-jumping edge's line bridges it (the edge is dropped).")
@click.option("--bridge-tolerance-rz", type=float, default=_DEFAULTS.bridge_tolerance_rz, show_default=True, help="... and this close along z (barrel) or r (disc), mm.")
@click.option("--crossing-margin", type=float, default=_DEFAULTS.crossing_margin, show_default=True, help="A segment crosses a layer between its hits only this far inside the layer's extent, mm.")
@click.option("--min-pt", type=float, default=_DEFAULTS.min_pt, show_default=True, help="Keep only hits of particles with truth pT >= this, GeV (0: all hits; needs truth).")
@click.option("--cell-features", is_flag=True, default=_DEFAULTS.cell_features, help="Append cell count and charge to the node features (needs cells files).")
@click.option("--construction", type=click.Choice(list(CONSTRUCTIONS)), default=_DEFAULTS.construction, show_default=True, help="How edges are found: the geometric cuts above, a module map learned from simulated truth (--module-map), or the union of both.")
@click.option("--module-map", default=_DEFAULTS.module_map, help="Module map .npz for the constructions with module_map (python -m bench.tools.module_map learn); its hash is recorded in every graph.")
@click.option("--volumes", default="", help="Comma-separated detector volume ids whose hits are the graph's nodes (the pixel detector: 7,8,9; default: every hit); recorded in every graph.")
@click.option("--format", "fmt", type=click.Choice(["npz", "pyg"]), default="npz", show_default=True, help="npz: domainpar graph files; pyg: PyTorch Geometric Data files (event<id>.pyg) in the Exa.TrkX/acorn layout.")
@click.option("--node-features", default=",".join(_DEFAULTS.node_features), show_default=True,
              help="Comma-separated node features (r, phi, z, eta, cell_count, cell_charge, cluster_u, cluster_v; cluster ones need cells files).")
@click.option("--edge-features", default=",".join(_DEFAULTS.edge_features), show_default=True,
              help="Comma-separated edge features (dr, dphi, dz, dR, deta, phi_slope, z0, curvature).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write one JSON record per event (event_id, num_nodes, num_edges, efficiency, efficiency_pt1, purity, seconds).")
@click.option("--workers", type=local_ranks(), default=None, help="Events built in parallel processes (default: the cores available to this process, or one process for events that build in seconds; at most 4 per core: each holds an event).")
@click.option("--shard", default=None, metavar="I/N", help="Build only every N-th event starting at I (0-based): N jobs with I = 0..N-1 share a dataset.")
@click.option("--quiet", is_flag=True, help="No progress bar and no per-event summary.")
def build(
    input_path: str,
    out_dir: str,
    fmt: str,
    node_features: str,
    edge_features: str,
    json_path: str | None,
    workers: int | None,
    shard: str | None,
    quiet: bool,
    **cuts,
) -> None:
    """Build the hit graph of every event: edges between hits on adjacent layers
    of the whole detector, inner -> outer, kept by geometric cuts.

    Events with a truth file get edge labels and efficiency/purity; events
    without truth (test-set style) get unlabelled graphs. Events are built
    --workers at a time; an event that fails is reported by name, the others
    are still built, and the command ends with one line naming the failures
    (exit status 2). The output does not depend on --workers (same bytes).
    """
    # The options named after GraphConfig fields (the cuts, --construction, --module-map, --cell-features) are its own.
    options = {
        **cuts,
        "volumes": _volume_ids(cuts.pop("volumes")),
        "node_features": tuple(name.strip() for name in node_features.split(",") if name.strip()),
        "edge_features": tuple(name.strip() for name in edge_features.split(",") if name.strip()),
    }
    try:
        config = GraphConfig(**options)
    except DomainparError as exc:
        raise DomainparError(_option_names(str(exc), options)) from None
    shard_range = parse_shard(shard)
    check_output_dir(out_dir, "--out")
    if Path(input_path).is_dir() and Path(out_dir).resolve() == Path(input_path).resolve():
        raise DomainparError(
            f"--out {out_dir}: expected a directory of its own for the graphs, got the --input directory (train and "
            "evaluate refuse a directory that holds both raw events and graphs)"
        )
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise DomainparError(f"--out {out_dir}: output must be a directory (found a file)")
    if json_path is not None:
        check_output_file(json_path, "--json")
    inputs = inputs_of("--input", input_path)
    check_apart("--out", out_dir, "dir", inputs)
    if json_path is not None:
        check_apart("--json", json_path, "file", inputs)
    prefixes = shard_items(event_inputs(input_path), shard_range)
    # Directories this run creates are removed again if nothing could be written in them (a full disk, an interrupt).
    with no_empty_directories_left(out_dir, None if json_path is None else Path(json_path).parent):
        results = build_graph_files(
            prefixes, out_dir, config, workers=workers or build_workers(prefixes, available_cores(), fmt), progress=not quiet, fmt=fmt
        )
        all_stats = [r.value for r in results if r.ok]
        summary = failure_summary(results)
        if summary is not None and len(results) == 1:
            raise DomainparError(_option_names(results[0].error, options))
        records = [stats.as_record() for stats in all_stats]
        if json_path is not None:
            with atomic_path(json_path) as tmp:
                Path(tmp).write_text(json.dumps(records, indent=2) + "\n")
    unlabelled = [stats.event_id for stats in all_stats if stats.efficiency is None and stats.num_true_segments is None]
    if not quiet:
        for stats in all_stats:
            line = f"event {stats.event_id}: {stats.num_nodes} nodes, {stats.num_edges} edges, {stats.seconds:.2f} s"
            if stats.num_true_segments is not None:
                line += f", efficiency {_fmt(stats.efficiency)} (pT>1: {_fmt(stats.efficiency_pt1)}), purity {_fmt(stats.purity)}"
            click.echo(line)
    if unlabelled:
        click.echo(f"{len(unlabelled)} of {len(all_stats)} events have no truth file: their graphs carry no labels")
    where = "" if shard is None else f" (shard {shard_range[0]}/{shard_range[1]})"
    click.echo(f"wrote {len(all_stats)} graphs to {out_dir}{where}")
    if summary is not None:
        raise DomainparError(_option_names(summary, options))


def _volume_ids(text: str) -> tuple:
    """``--volumes`` as a tuple (GraphConfig checks the ids; a word that is not a number is named here)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    bad = [item for item in items if not item.lstrip("-").isdigit()]
    if bad:
        raise DomainparError(f"--volumes: expected comma-separated volume ids (got {bad[0]!r})")
    return tuple(int(item) for item in items)


def _option_names(message: str, options: dict) -> str:
    """Name the command-line option, not the dataclass field, in a one-line error."""
    for name in options:
        message = message.replace(f"GraphConfig.{name}", f"--{name.replace('_', '-')}")
    return message


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
