"""examples/: the custom halo-exchange layer is exact domain-parallel; the example files are consistent."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest
import torch

from fixtures import TRACKML_DIR, hits_graph

from fixtures import REPO
EXAMPLES = REPO / "examples"


def _load(name: str):
    # On sys.path (which spawned ranks inherit) so the ranks can unpickle the example's functions by module name.
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def custom_layer():
    return _load("custom_layer")


@pytest.fixture(scope="module")
def real_graph():
    return hits_graph(TRACKML_DIR / "event000000001-hits.csv.gz", event_id=1, window=0.08)


def _halo_sizes(graph, num_parts: int, method: str) -> list[int]:
    from domainpar.partition import partition_graph

    return [p.num_halo for p in partition_graph(graph, num_parts, method=method, seed=0).parts]


def test_segment_softmax_normalises_per_receiver(custom_layer):
    scores = torch.tensor([[1.0], [2.0], [3.0], [0.5]], dtype=torch.float64)
    segment = torch.tensor([0, 0, 2, 2])
    weights = custom_layer.segment_softmax(scores, segment, 3)
    expected = torch.cat([torch.softmax(scores[:2, 0], 0), torch.softmax(scores[2:, 0], 0)]).unsqueeze(1)
    torch.testing.assert_close(weights, expected)


def test_layer_output_depends_only_on_incident_edges(custom_layer):
    """Changing a node that shares no edge with v must not change v's output (what makes the layer exact)."""
    torch.manual_seed(0)
    layer = custom_layer.HaloAttentionConv(hidden=8, edge_features=4, heads=2).double()
    h = torch.randn(5, 8, dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 3], [1, 2, 4]])
    edge_attr = torch.randn(3, 4, dtype=torch.float64)
    before = layer(h, edge_index, edge_attr, num_owned=5)
    h_changed = h.clone()
    h_changed[4] += 10.0  # node 4 touches only node 3
    after = layer(h_changed, edge_index, edge_attr, num_owned=5)
    torch.testing.assert_close(after[:3], before[:3], rtol=0, atol=0)
    assert not torch.allclose(after[3], before[3])


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_custom_layer_is_exact_on_two_spawned_ranks(custom_layer, real_graph):
    # Geometric sectors cut this subsampled event's edges (METIS finds a zero cut): both ranks have a halo.
    assert min(_halo_sizes(real_graph, 2, "geometric")) > 0
    result = custom_layer.compare_with_single_process(real_graph, num_parts=2, method="geometric", hidden=16, num_layers=2)
    assert abs(result["loss_parts"] - result["loss_single"]) <= 1e-12 * abs(result["loss_single"])
    assert result["max_rel_err_grad"] < 1e-10, result


def test_custom_layer_detects_a_wrong_halo(custom_layer, real_graph):
    """The comparison can fail: stale halo rows (zeros) give different gradients than the full graph."""
    from domainpar.model.registry import build_model
    from domainpar.partition import partition_graph
    from domainpar.partition.local_graph import local_graph

    _, reference = custom_layer.single_process_gradients(real_graph, seed=0, hidden=16)
    plan = partition_graph(real_graph, 2, method="geometric", seed=0)
    summed = None
    for part_plan in plan.parts:
        torch.manual_seed(0)
        model = build_model(custom_layer.model_config(real_graph, hidden=16)).double()
        part = local_graph(real_graph, part_plan).to("cpu", torch.float64)

        class ZeroHalo:
            num_halo = part.num_halo

            def __call__(self, x):
                return torch.cat([x, x.new_zeros(part.num_halo, x.shape[1])])

        custom_layer.part_loss(model(part, ZeroHalo()), part).backward()
        grads = custom_layer.gradients(model)
        summed = grads if summed is None else {k: summed[k] + grads[k] for k in grads}
    assert custom_layer.max_relative_error(reference, summed) > 1e-6


def test_quickstart_script_commands_exist_in_the_cli():
    """Every `domainpar <command>` the quick start uses is a command of the CLI."""
    from domainpar.cli.main import COMMANDS

    script = (EXAMPLES / "quickstart.sh").read_text()
    subprocess.run(["bash", "-n", str(EXAMPLES / "quickstart.sh")], check=True)
    used = set(re.findall(r"domainpar (\w+)", script))
    assert used, "quickstart.sh runs no domainpar command"
    assert used <= set(COMMANDS), f"unknown commands {used - set(COMMANDS)}"
    assert {"simulate", "build", "partition", "train", "evaluate"} <= used
