"""The locality check (issue 28): a user's model that is not local is refused before it trains or scores.

A BatchNorm over the nodes, a global mean and halo rows never asked of the exchange all train in domain mode
and score with ``evaluate --parts 2`` without an error on main, to other numbers than one process gives.
Here each is refused by ``train --mode domain`` (spawned ranks, and a torchrun-style job) and by ``evaluate
--parts 2`` with one line naming the model and the tensor that differs; ``--skip-locality-check`` (and its
YAML key) lets the run go on; built-in models are never checked. The check itself is held to the exactness
of the engine: every built-in forced through it, and a local user model, pass at 1e-10 in float64.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from domainpar.cli.main import main
from domainpar.data.event_graph import save_graph
from domainpar.errors import DomainparError
from domainpar.launch import ranks
from bench.common.jobs import free_port
from domainpar.model.config import ModelConfig
from domainpar.model.registry import is_builtin
from domainpar.train.gate import GateRefused, wait_at_gate
from domainpar.verification import locality
from domainpar.verification.locality import check_locality, file_slice, graph_slice
from fixtures import REPO, synthetic_graph, write_graphs

MODELS = Path(__file__).resolve().parent / "user_models.py"
NOT_LOCAL = ("BatchNormGNN", "GlobalMeanGNN", "NoExchangeGNN")
SMALL = ["--hidden", "8", "--iterations", "1", "--threads", "1", "--no-progress", "--no-curves"]
NUMBER = r"[0-9.]+(?:e[+-]?[0-9]+)?"
RULE = r"\(docs/models\.md, 'What it must not do'\)"


def user_model(name: str) -> str:
    return f"{MODELS}:{name}"


class Spawned(Exception):
    """Raised by the stub of ``spawn``: the run went past its checks and its ranks would take their first step."""


def _stub_spawn(fn, nprocs, args=(), **kwargs):
    """``spawn`` of ranks that do what real ones do before their first step: wait at the launcher's gate, and stop
    (the job failing, as spawn reports it) when it refuses. Passing the gate is :class:`Spawned`."""
    gate = args[0].get("locality_gate") if args and isinstance(args[0], dict) else None
    if gate is not None:
        try:
            wait_at_gate(gate)
        except GateRefused as exc:
            raise ranks.SpawnError(f"rank 0 of {nprocs}: {exc}", [0]) from None
    raise Spawned()


def _train_line(model: str, tensor: str) -> str:
    """The exact line of a model refused by ``train`` on the first graph of ``write_graphs`` (70 nodes, 131 edges)."""
    return (
        rf"error: model '{re.escape(user_model(model))}' is not local: on a 2-part slice of event000000000\.npz \(70 nodes, "
        rf"131 edges\) its output \(edge logits\) differs from one process's by {NUMBER} and the gradient of its "
        rf"parameter {re.escape(tensor)} by {NUMBER} \(relative\) \(tolerance 1e-10\), so domain-parallel training would "
        rf"compute other gradients than one process {RULE}; make it local, or check it with `domainpar verify` and pass "
        r"--skip-locality-check \(parallel\.skip_locality_check\)"
    )


#: The parameter whose gradient each model gets most wrong on that slice (named by the line).
TRAIN_TENSOR = {"BatchNormGNN": "node.bias", "GlobalMeanGNN": "encode.0.weight", "NoExchangeGNN": "node.weight"}


@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("locality")
    write_graphs(root / "graphs", 2)
    return root / "graphs"


def _run(args: list[str]) -> int:
    try:
        main(args)
    except SystemExit as exc:
        return exc.code
    return 0


# ------------------------------------------------------------------------------------ the check itself


@pytest.mark.parametrize("name", NOT_LOCAL)
@pytest.mark.parametrize("gradients", [True, False], ids=["train", "eval"])
def test_models_that_are_not_local_fail_the_check(name, gradients):
    graph = synthetic_graph(1, 0)
    config = ModelConfig(name=user_model(name), node_features=3, edge_features=4, hidden=8, num_iterations=1)
    result = check_locality(config, graph, 2, gradients=gradients)
    assert result.proven and not result.passed
    assert result.max_err_logits > 1e-4  # far outside 1e-10: the check is not near its tolerance
    if gradients:
        assert result.max_err_grad > 1e-4 and result.worst_parameter
    else:
        assert result.max_err_grad == 0.0 and result.worst_parameter == ""


@pytest.mark.parametrize(
    ("name", "settings", "options"),
    [
        (user_model("LocalGNN"), {}, {}),
        (user_model("ForcedInteractionNetwork"), {"checkpointing": True, "overlap": True}, {}),
        (user_model("ForcedInteractionNetwork"), {"recurrent": False}, {}),
        (user_model("ForcedInteractionGNN"), {"checkpointing": True}, {"aggregation": ["sum", "max"], "undirected": True}),
        ("pyg_gnn", {}, {"layer": "gcn", "undirected": False}),  # exchanges a degree column besides the hidden rows
        (f"{REPO / 'examples' / 'custom_layer.py'}:AttentionEdgeClassifier", {}, {"heads": 2}),
    ],
    ids=["local-user", "in-ckpt-overlap", "in-not-recurrent", "ign-acorn", "pyg-gcn", "example-attention"],
)
@pytest.mark.parametrize("parts", [2, 3])
def test_local_models_pass_at_the_exactness_tolerance(name, settings, options, parts):
    """The threads-and-one-autograd-graph emulation is exact: every built-in (forced through it) and a local user
    model agree with one process to float64 rounding, outputs and every parameter gradient."""
    graph = synthetic_graph(2, 1, num_nodes=600, num_candidates=3000)
    config = ModelConfig(name=name, node_features=3, edge_features=4, hidden=8, num_iterations=2, options=options, **settings)
    result = check_locality(config, graph, parts)
    assert result.proven and result.passed, result
    assert result.num_nodes == locality.SLICE_NODES and result.num_halo > result.num_nodes // 2
    assert result.max_err_logits < 1e-12 and result.max_err_grad < 1e-12


def test_a_model_that_exchanges_out_of_step_or_in_backward_is_refused(tmp_path):
    source = tmp_path / "odd.py"
    source.write_text(
        "import torch\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "import sys; sys.path.insert(0, %r)\n"
        "from user_models import LocalGNN\n"
        "class OddGNN(LocalGNN):\n"
        "    def complete(self, h, graph, exchange):\n"
        "        if bool(((graph.edge_ids == 0) & graph.edge_owned).any()):  # one more exchange on one part only\n"
        "            exchange(h)\n"
        "        return exchange(h)\n"
        "class RecomputedGNN(LocalGNN):\n"
        "    def complete(self, h, graph, exchange):\n"
        "        return checkpoint(exchange, h, use_reentrant=False)\n" % str(MODELS.parent)
    )
    graph = synthetic_graph(1, 0)
    config = ModelConfig(name=f"{source}:OddGNN", node_features=3, edge_features=4, hidden=8, num_iterations=1)
    with pytest.raises(DomainparError, match=r"OddGNN': its forward calls the exchange a different number of times on "
                                             r"different parts \(part [01] made call 2, part [01] returned after 1\)"):
        check_locality(config, graph, 2)
    config = ModelConfig(name=f"{source}:RecomputedGNN", node_features=3, edge_features=4, hidden=8, num_iterations=1)
    with pytest.raises(DomainparError, match=r"RecomputedGNN': it calls the exchange outside its forward pass \(in a "
                                             r"region recomputed during backward"):
        check_locality(config, graph, 2)


def test_a_model_that_indexes_rows_a_part_lacks_is_refused_in_one_line(tmp_path):
    source = tmp_path / "indexing.py"
    source.write_text(
        "import sys; sys.path.insert(0, %r)\n"
        "from user_models import LocalGNN\n"
        "class OwnedOnlyGNN(LocalGNN):\n"
        "    def complete(self, h, graph, exchange):\n"
        "        return h  # halo ids index past the owned rows on a part\n" % str(MODELS.parent)
    )
    config = ModelConfig(name=f"{source}:OwnedOnlyGNN", node_features=3, edge_features=4, hidden=8, num_iterations=1)
    with pytest.raises(DomainparError) as info:
        check_locality(config, synthetic_graph(1, 0), 2)
    message = str(info.value)
    assert re.fullmatch(
        rf"model '{re.escape(str(source))}:OwnedOnlyGNN': failed on part [01] of a 2-part slice although one process ran "
        rf"\(IndexError: .+\): it does not compute on the owned and halo rows the exchange gives {RULE}", message
    ), message


def test_the_slice_is_an_induced_subgraph_and_a_file_gives_the_slice_of_its_graph(tmp_path):
    graph = synthetic_graph(3, 4, num_nodes=2000, num_candidates=12000)
    piece = graph_slice(graph)
    assert piece.num_nodes == locality.SLICE_NODES and piece.num_edges > 0
    # Every edge of the slice joins two of its nodes, with the graph's features and labels.
    ids = np.searchsorted(graph.hit_id, piece.hit_id)
    pairs = {(int(a), int(b)) for a, b in graph.edge_index.T}
    assert all((int(ids[a]), int(ids[b])) in pairs for a, b in piece.edge_index.T)
    np.testing.assert_array_equal(piece.x, graph.x[ids])
    from_file = file_slice(save_graph(graph, tmp_path / "event000000003.npz"))
    for name in ("x", "pos", "hit_id", "layer", "edge_index", "edge_attr", "y"):
        np.testing.assert_array_equal(getattr(from_file, name), getattr(piece, name))


def test_a_damaged_graph_file_is_named_not_sliced(tmp_path):
    path = save_graph(synthetic_graph(3, 4), tmp_path / "event000000003.npz")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DomainparError, match=re.escape(str(path))):
        file_slice(path)


def test_builtins_are_known_local_by_name_and_import_path():
    assert is_builtin("interaction_network") and is_builtin("pyg_gnn") and is_builtin("interaction_gnn")
    assert is_builtin("domainpar.model.interaction_network:InteractionNetwork")
    assert not is_builtin(user_model("ForcedInteractionNetwork"))


# ------------------------------------------------------------------------------------------ train


@pytest.mark.parametrize("name", NOT_LOCAL)
def test_train_refuses_a_model_that_is_not_local_before_any_rank_starts(graphs, tmp_path, capsys, monkeypatch, name):
    monkeypatch.setattr(ranks, "spawn", _stub_spawn)  # reaching it would be a failure of the check
    out = tmp_path / "out"
    code = _run(["train", "--data", str(graphs), "--mode", "domain", "--ranks", "2", "--model", user_model(name),
                 "--out", str(out), *SMALL])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert re.fullmatch(_train_line(name, TRAIN_TENSOR[name]), err.strip()), err
    # No rank trained: nothing of a run was written (the plans of the events are the preparation's, kept for reuse).
    assert not any((out / name).exists() for name in ("config.yaml", "steps.jsonl", "metrics.jsonl", "model.pt", "checkpoints"))


def test_skip_locality_check_flag_and_yaml_key_let_the_run_start(graphs, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ranks, "spawn", _stub_spawn)
    args = ["train", "--data", str(graphs), "--mode", "domain", "--ranks", "2", "--model", user_model("GlobalMeanGNN"), *SMALL]
    with pytest.raises(Spawned):
        main([*args, "--out", str(tmp_path / "flag"), "--skip-locality-check"])
    config = tmp_path / "run.yaml"
    config.write_text("parallel:\n  skip_locality_check: true\n")
    with pytest.raises(Spawned):
        main([*args, "--out", str(tmp_path / "yaml"), "--config", str(config)])
    assert "is not local" not in capsys.readouterr().err


def test_a_local_user_model_is_checked_and_said_so(graphs, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ranks, "spawn", _stub_spawn)
    with pytest.raises(Spawned):
        main(["train", "--data", str(graphs), "--mode", "domain", "--ranks", "2", "--model", user_model("LocalGNN"),
              "--out", str(tmp_path / "out"), *SMALL])  # fmt: skip
    err = capsys.readouterr().err
    assert re.search(rf"domainpar: model {re.escape(user_model('LocalGNN'))} is local: on a 2-part slice of "
                     rf"event000000000\.npz \(70 nodes, 131 edges, \d+ halo rows\) its outputs and gradients are one "
                     rf"process's \(checked in {NUMBER} s\)", err), err  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "interaction_network"],
        ["--model", "interaction_gnn"],
        ["--model", user_model("GlobalMeanGNN"), "--mode", "single", "--ranks", "1"],
        ["--model", user_model("GlobalMeanGNN"), "--mode", "sectors"],
        ["--model", user_model("GlobalMeanGNN"), "--domain-size", "1", "--batch-events", "2"],
    ],
    ids=["interaction_network", "interaction_gnn", "single", "sectors", "data-parallel"],
)
def test_no_check_for_builtins_or_runs_without_halo_exchange(graphs, tmp_path, monkeypatch, args):
    """Built-ins cost nothing (the check is never entered); single mode, sectors and groups of one rank have no
    exchange for a model to get wrong."""

    def entered(*a, **k):
        raise AssertionError("the locality check ran")

    monkeypatch.setattr(locality, "check_locality", entered)
    monkeypatch.setattr(ranks, "spawn", _stub_spawn)
    run = ["train", "--data", str(graphs), "--mode", "domain", "--ranks", "2", "--out", str(tmp_path / "out"), *SMALL]
    if "--ranks" in args:
        run = run[: run.index("--ranks")] + run[run.index("--ranks") + 2 :]
    try:
        main([*run, *args])
    except Spawned:
        pass


def test_the_programmatic_entry_checks_too(graphs, tmp_path):
    from domainpar.train.config import load_config
    from domainpar.train.run import prepare_payload

    config = load_config(None, {"data.train": str(graphs), "run.out": str(tmp_path / "out"), "parallel.ranks": 2,
                                "model.name": user_model("NoExchangeGNN"), "model.hidden": 8, "model.num_iterations": 1})  # fmt: skip
    with pytest.raises(DomainparError, match="NoExchangeGNN' is not local: .* its output \\(edge logits\\) differs"):
        prepare_payload(config, 2)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_torchrun_style_job_refuses_on_every_rank(graphs, tmp_path):
    """RANK/WORLD_SIZE set by hand (what torchrun gives its workers): rank 0 checks, every rank refuses, exit 2."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    args = [sys.executable, "-m", "domainpar", "train", "--data", str(graphs), "--mode", "domain", "--device", "cpu",
            "--model", user_model("GlobalMeanGNN"), "--out", str(tmp_path / "out"), *SMALL]  # fmt: skip
    processes = [subprocess.Popen(args, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, cwd=tmp_path, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(2)]  # fmt: skip
    try:
        outputs = [p.communicate(timeout=240) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, (_, err) in zip(processes, outputs):
        assert process.returncode == 2, err
        assert re.fullmatch(_train_line("GlobalMeanGNN", TRAIN_TENSOR["GlobalMeanGNN"]), err.strip()), err
    assert not (tmp_path / "out" / "model.pt").exists()


# --------------------------------------------------------------------------------------- evaluate


@pytest.fixture(scope="module")
def event1(tmp_path_factory) -> Path:
    from domainpar.data.graph import build_graph
    from domainpar.data.trackml import load_event
    from fixtures import EVENT1

    hits, particles, truth = load_event(EVENT1, parts=("hits", "particles", "truth"))
    graph, _ = build_graph(hits, truth, particles, event_id=1)
    root = tmp_path_factory.mktemp("event1")
    save_graph(graph, root / "graphs" / "event000000001.npz")
    return root / "graphs"


@pytest.fixture(scope="module")
def checkpoints(event1, tmp_path_factory) -> dict[str, Path]:
    """``model.pt`` of every test model, trained one step on one process (single mode needs no check)."""
    from domainpar.train.config import load_config
    from domainpar.train.run import train

    root = tmp_path_factory.mktemp("models")
    found = {}
    for name in (*NOT_LOCAL, "LocalGNN"):
        config = load_config(None, {"data.train": str(event1), "run.out": str(root / name), "parallel.mode": "single",
                                    "model.name": user_model(name), "model.hidden": 8, "model.num_iterations": 1,
                                    "parallel.threads": 1, "run.progress": False, "run.curves": False})  # fmt: skip
        found[name] = Path(train(config)["model"])
    return found


@pytest.mark.parametrize("name", NOT_LOCAL)
def test_evaluate_parts_refuses_a_model_that_is_not_local(event1, checkpoints, tmp_path, capsys, monkeypatch, name):
    monkeypatch.setattr("domainpar.inference.partitioned.spawn", _stub_spawn)
    json_path = tmp_path / "eval.json"
    code = _run(["evaluate", "--checkpoint", str(checkpoints[name]), "--data", str(event1), "--parts", "2", "--quiet",
                 "--json", str(json_path)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert re.fullmatch(
        rf"error: model '{re.escape(user_model(name))}' is not local: on a 2-part slice of event 1 \(400 nodes, 1108 edges\) "
        rf"its output \(edge logits\) differs from one process's by {NUMBER} \(tolerance 1e-10\), so --parts 2 would score "
        rf"edges otherwise than one process {RULE}; make it local, or check it with `domainpar verify` and pass "
        r"--skip-locality-check",
        err.strip(),
    ), err
    assert not json_path.exists()


def test_evaluate_skip_flag_and_builtins_go_straight_to_the_parts(event1, checkpoints, tmp_path, monkeypatch):
    from fixtures import trained_event1_checkpoint

    monkeypatch.setattr("domainpar.inference.partitioned.spawn", _stub_spawn)
    args = ["evaluate", "--data", str(event1), "--parts", "2", "--quiet"]
    with pytest.raises(Spawned):
        main([*args, "--checkpoint", str(checkpoints["GlobalMeanGNN"]), "--skip-locality-check"])
    with pytest.raises(Spawned):  # a local user model passes the check
        main([*args, "--checkpoint", str(checkpoints["LocalGNN"])])

    def entered(*a, **k):
        raise AssertionError("the locality check ran")

    monkeypatch.setattr(locality, "check_locality", entered)
    with pytest.raises(Spawned):
        main([*args, "--checkpoint", str(trained_event1_checkpoint(tmp_path))])


def test_evaluate_is_refused_on_every_rank_of_a_launched_job(event1, checkpoints, capsys, monkeypatch):
    """Under torchrun/srun evaluate would score every event once per rank into the same outputs: refused."""
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
        code = _run(["evaluate", "--checkpoint", str(checkpoints["LocalGNN"]), "--data", str(event1), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2
        assert err.strip() == (
            f"error: evaluate does not join torchrun/srun jobs (this process is rank {rank} of 2 under torchrun): it runs "
            "in one process, or starts its own --parts local processes; run it once, outside torchrun/srun"
        )


def test_the_check_leaves_threads_and_random_state_as_they_were():
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    config = ModelConfig(name=user_model("LocalGNN"), node_features=3, edge_features=4, hidden=8, num_iterations=1)
    check_locality(config, synthetic_graph(1, 0), 2)
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.slow
def test_reconstruct_parts_refuses_a_model_that_is_not_local(event1, checkpoints, tmp_path, capfd, monkeypatch):
    """``reconstruct --parts 2`` checks the model before --out is touched or a rank starts: one line, exit 2, no
    --out; a refusal that comes later (a rank's) takes back what the run wrote too."""
    out = tmp_path / "out"
    args = ["reconstruct", "--checkpoint", str(checkpoints["GlobalMeanGNN"]), "--data", str(event1), "--out", str(out),
            "--parts", "2", "--quiet"]  # fmt: skip
    capfd.readouterr()
    code = _run(args)
    err = capfd.readouterr().err
    assert code == 2, err
    assert re.fullmatch(
        rf"error: model '{re.escape(user_model('GlobalMeanGNN'))}' is not local: on a 2-part slice of event 1 \(400 nodes, "
        rf"1108 edges\) its output \(edge logits\) differs from one process's by {NUMBER} \(tolerance 1e-10\), so --parts 2 "
        rf"would score edges otherwise than one process {RULE}; make it local, or check it with `domainpar verify` and pass "
        r"--skip-locality-check",
        err.strip(),
    ), err
    assert not out.exists()

    def refused(*args, **kwargs):
        raise DomainparError("rank 0 of 2: refused")

    monkeypatch.setattr("domainpar.inference.reconstruct.check_model_first", lambda *a: None)
    monkeypatch.setattr("domainpar.inference.reconstruct._spawn_ranks", refused)
    assert _run(args) == 2
    assert not out.exists()
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert _run(args) == 2
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
