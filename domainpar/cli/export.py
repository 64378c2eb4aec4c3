"""``domainpar export``: a checkpoint as a TorchScript or ONNX edge classifier for ACTS, plus its sidecar JSON."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from domainpar.errors import DomainparError
from domainpar.cli.inputs import all_inputs
from domainpar.output_paths import check_apart, check_name_length, check_output_file


def _names(description: dict | None, kind: str) -> list[str] | None:
    features = None if description is None else description.get(kind)
    if not isinstance(features, list):
        return None
    names = [f.get("name") if isinstance(f, dict) else f for f in features]
    return names if all(isinstance(n, str) for n in names) else None


def _same_features(what: str, given: dict | None, recorded: dict | None, whose: str, kinds: tuple[str, ...]) -> None:
    """Refuse graphs whose feature names differ from those the checkpoint was trained on (where both are known)."""
    for kind in kinds:
        found, expected = _names(given, kind), _names(recorded, kind)
        if found is not None and expected is not None and found != expected:
            raise DomainparError(f"{what}: {kind.replace('_', ' ')} must be {expected} like {whose} (got {found})")


@click.command("export", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--checkpoint", required=True, type=click.Path(path_type=Path),
              help="A checkpoint (checkpoints/step-*.pt) or the final model.pt of `domainpar train`, of any mode and rank count.")
@click.option("--format", "fmt", required=True, type=click.Choice(["torchscript", "onnx"]),
              help="torchscript (ACTS TorchEdgeClassifier, torch.jit.load) or onnx (opset 18; ACTS OnnxEdgeClassifier, ONNX Runtime).")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="Model file to write (.pt for TorchScript, .onnx); the sidecar JSON goes to <out>.json.")
@click.option("--graphs", type=click.Path(path_type=Path), default=None,
              help="Training graphs whose recorded features and cuts to use, for checkpoints that record none.")
@click.option("--filter", "filter_path", type=click.Path(path_type=Path), default=None,
              help="The edge filter the training graphs were pruned with (filter.pt of a recipe run; default: the one "
                   "beside the checkpoint or above it whose hash the graphs record); exported beside the model.")
@click.option("--threshold", type=float, default=None,
              help="Score cut to record in the sidecar (default: the training run's threshold).")
@click.option("--check-graph", type=click.Path(path_type=Path), default=None,
              help="Graph file to check the exported model on (default: a random graph of the model's widths).")
def export(
    checkpoint: Path, fmt: str, out: Path, graphs: Path | None, filter_path: Path | None, threshold: float | None,
    check_graph: Path | None,
) -> None:
    """Export a trained edge classifier as one single-graph model file:

    \b
      logits = model(x, edge_index[, edge_attr])
      x (N, F) float32, edge_index (2, E) int64, edge_attr (E, F_e) float32, logits (E,) float32

    the calling convention of ACTS's ExaTrkX edge-classifier stage, with
    dynamic N and E. The file is loaded back (torch.jit.load / ONNX Runtime)
    and checked against the training model before it is written; the sidecar
    JSON records every stage of the pipeline as trained: the graph cuts and the
    input features with their scaling, the edge filter that pruned the
    training graphs (written beside the model as <stem>.filter<suffix>, checked
    the same way) with its threshold, and the classifier with its threshold.
    Models trained domain-parallel or with checkpointing export the same way:
    the export is the one-process model.
    """
    # Imported when the command runs: --help stays fast (torch).
    from domainpar.data.graph_files import graph_files, load_graph, read_graph_description, read_graph_metadata
    from domainpar.export.source import find_filter, load_export_source, recorded_filter_hash
    from domainpar.export.sidecar import sidecar_path
    from domainpar.export.writer import CheckGraph, check_out_path, export_model
    from domainpar.export.writer import filter_path as exported_filter_path
    from domainpar.filter.edge_filter import load_filter

    check_out_path(out, fmt)
    check_output_file(out, "--out")
    # The files written beside --out: checked like it, before any work, so none of them fails after the others.
    inputs = all_inputs(("--checkpoint", checkpoint), ("--graphs", graphs), ("--filter", filter_path), ("--check-graph", check_graph))
    for written, what in ((out, ""), (sidecar_path(out), "its sidecar")):
        if what:
            check_name_length(written, "--out", out, what)
            check_output_file(written, "--out")
        check_apart("--out", written, "file", inputs)
    description = None
    if graphs is not None:
        first = graph_files(graphs)[0]
        description = read_graph_description(first)
        if description is None:
            raise DomainparError(
                f"--graphs {graphs}: {first.name} names none of its feature columns (a format-1 graph file); "
                "rebuild the graphs with `domainpar build`"
            )
    source = load_export_source(checkpoint)
    if recorded_filter_hash(source.description) is not None or filter_path is not None:
        # Its training graphs were pruned: the edge filter is written beside --out too (checked like it, before work).
        check_name_length(exported_filter_path(out), "--out", out, "its edge filter")
        check_output_file(exported_filter_path(out), "--out")
        check_apart("--out", exported_filter_path(out), "file", inputs)
    # Edge features matter only to a model that reads them.
    kinds = ("node_features", "edge_features") if source.model_config.edge_inputs else ("node_features",)
    if description is not None:
        # --graphs gives the description of checkpoints that record none; one that does must agree with it (the
        # sidecar tells the deployment side what each input column is: a wrong name there is a wrong answer there).
        _same_features(f"--graphs {graphs}", description, source.description, f"{checkpoint}'s training graphs", kinds)
        source = dataclasses.replace(source, description=description)
    checked = None
    if check_graph is not None:
        first_check = graph_files(check_graph)[0]
        graph = load_graph(first_check)
        checked = CheckGraph(name=str(check_graph), x=graph.x, edge_index=graph.edge_index, edge_attr=graph.edge_attr)
        meta = read_graph_metadata(first_check)
        check_names = {kind: meta.get(kind) for kind in ("node_features", "edge_features")}
        _same_features(f"--check-graph {check_graph}", check_names, source.description, f"{checkpoint}'s training graphs",
                       kinds)  # fmt: skip
    edge_filter = None
    if filter_path is not None:
        edge_filter = load_filter(filter_path)
    else:
        wanted = recorded_filter_hash(source.description)
        found = None if wanted is None else find_filter(checkpoint, wanted)
        if found is not None:
            click.echo(f"edge filter: {found} (found by the hash the training graphs record, {wanted})")
            edge_filter = load_filter(found)
    result = export_model(source, fmt, out, description=description, threshold=threshold, check_graph=checked,
                          edge_filter=edge_filter)
    s = result.sidecar
    inputs = ", ".join(f"{i['name']} ({', '.join(map(str, i['shape']))}) {i['dtype']}" for i in s["inputs"])
    names = lambda features: ", ".join(f"{f['name']}" + (f"/{f['scale']:g}" if f.get("scale") else "") for f in features)  # noqa: E731
    v = s["verification"]
    click.echo(f"{fmt} model: {inputs} -> logits (E) float32")
    click.echo(f"node features: {names(s['node_features'])}")
    click.echo(f"edge features: {names(s['edge_features']) or 'none (model uses x and edge_index only)'}")
    click.echo(f"threshold: {s['threshold']:g} ({s['threshold_source']})")
    click.echo(
        f"checked on {v['graph']} ({v['num_nodes']} nodes, {v['num_edges']} edges) with {v['runtime']}: "
        f"max |logit - training logit| = {v['max_abs_logit_diff']:.2g}"
    )
    stage = next((st for st in s["stages"] if st["stage"] == "edge_filter"), None)
    if stage is not None:
        click.echo(
            f"edge filter: keeps edges with filter logit >= {stage['threshold']:.4g}, reads "
            f"{', '.join(stage['reads']['node_features'])} (both ends) and {', '.join(stage['reads']['edge_features']) or 'no edge features'}; "
            f"checked: max |logit - training logit| = {stage['verification']['max_abs_logit_diff']:.2g}"
        )
        click.echo(f"wrote {result.filter_path}")
    click.echo(f"wrote {result.model_path}")
    click.echo(f"wrote {result.sidecar_path}")
