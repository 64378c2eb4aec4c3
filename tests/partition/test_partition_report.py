"""Quality reports, pictures and the `domainpar partition` command."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from fixtures import TRACKML_DIR, hits_graph, random_graph

from domainpar.cli.main import cli, main
from domainpar.data.event_graph import save_graph
from domainpar.errors import DomainparError
from domainpar.partition import partition_graph
from domainpar.partition.io import load_plan
from domainpar.partition.plan import build_plan
from domainpar.partition.report import partition_report

JSON_KEYS = {"num_parts", "method", "edge_cut_fraction", "halo_fraction", "imbalance_edges",
             "imbalance_nodes", "halo_nodes", "bytes_per_step", "seconds"}


def test_report_numbers_on_a_hand_made_plan():
    # Path 0-1-2-3 split in two: one cut edge 1→2, halo {2} on part 0 and {1} on part 1.
    edge_index = np.array([[0, 1, 2], [1, 2, 3]])
    plan = build_plan(edge_index, np.array([0, 0, 1, 1]), 2)
    report = partition_report(plan, hidden=10, dtype="float16")
    assert report.edge_cut_fraction == pytest.approx(1 / 3)
    assert report.halo_fraction == pytest.approx(2 / 4)
    assert report.bytes_per_step == 2 * 10 * 2
    assert [p.local_edges for p in report.parts] == [2, 2]
    assert [p.owned_edges for p in report.parts] == [1, 2]
    assert [(p.interior_edges, p.boundary_edges, p.neighbour_parts) for p in report.parts] == [(1, 1, 1), (1, 1, 1)]
    assert report.imbalance_edges == 1.0 and report.imbalance_nodes == 1.0
    assert report.edges_lost is None and report.true_edges_lost is None
    assert JSON_KEYS <= set(report.to_dict()) and "true_edges_lost" not in report.to_dict()


def test_bad_report_arguments():
    plan = build_plan(np.array([[0], [1]]), np.array([0, 1]), 2)
    with pytest.raises(DomainparError, match="hidden must be at least 1"):
        partition_report(plan, hidden=0)
    with pytest.raises(DomainparError, match="dtype must be a floating dtype name"):
        partition_report(plan, dtype="int8")


def test_plot_writes_a_png(tmp_path):
    from domainpar.partition.plot import halo_mask, plot_partition

    graph = hits_graph(TRACKML_DIR / "event000000001-hits.csv.gz", window=0.08, event_id=1)
    plan = partition_graph(graph, 4, "geometric")
    path = plot_partition(graph, plan, tmp_path / "p.png", max_points=2000)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert halo_mask(plan).sum() == len(set(np.concatenate([p.halo_ids for p in plan.parts]).tolist()))
    with pytest.raises(DomainparError, match="plot file must end in .png"):
        plot_partition(graph, plan, tmp_path / "p.pdf")


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("graphs")
    save_graph(hits_graph(TRACKML_DIR / "event000000001-hits.csv.gz", window=0.08, event_id=1), directory / "event000000001.npz")
    save_graph(random_graph(400, 1600, seed=5, labels=False), directory / "event000000005.npz")
    return directory


def test_cli_one_graph_sectors(graph_dir, tmp_path):
    result = CliRunner().invoke(cli, [
        "partition", "--graph", str(graph_dir / "event000000001.npz"), "--parts", "4", "--method", "sectors",
        "--out", str(tmp_path / "plan"), "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "p.png"),
    ])
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "r.json").read_text())
    assert JSON_KEYS | {"true_edges_lost"} <= set(record)
    assert record["num_parts"] == 4 and record["method"] == "sectors" and len(record["halo_nodes"]) == 4
    assert 0 < record["true_edges_lost"] < 1
    assert "sectors" in result.output and "cut" in result.output
    assert load_plan(tmp_path / "plan").num_parts == 4
    assert (tmp_path / "p.png").is_file()


def test_cli_directory_writes_one_plan_per_event(graph_dir, tmp_path):
    result = CliRunner().invoke(cli, [
        "partition", "--graph", str(graph_dir), "--parts", "3", "--out", str(tmp_path / "plans"),
        "--json", str(tmp_path / "r.json"), "--hidden", "128", "--dtype", "float16",
    ])
    assert result.exit_code == 0, result.output
    records = json.loads((tmp_path / "r.json").read_text())
    assert [r["event_id"] for r in records] == [1, 5]
    assert all(JSON_KEYS <= set(r) for r in records)
    assert records[1]["bytes_per_step"] == sum(records[1]["halo_nodes"]) * 128 * 2
    assert sorted(p.name for p in (tmp_path / "plans").iterdir()) == ["event000000001", "event000000005"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--parts", "0"], "error: --parts must be at least 1 (got 0)"),
        (["--parts", "100000"], "--parts must be at most the number of nodes"),
        (["--parts", "2", "--plot", "x.pdf"], "must end in .png"),
    ],
)
def test_cli_user_mistakes_exit_2_with_one_line(graph_dir, tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(["partition", "--graph", str(graph_dir / "event000000001.npz"), "--out", str(tmp_path / "o"), *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
