"""The model factory: names, user models by import path, options, shared settings, the one constructor."""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from domainpar.errors import DomainparError, FieldError
from domainpar.model.config import ModelConfig
from domainpar.model.interaction_gnn import InteractionGNN
from domainpar.model.interaction_network import InteractionNetwork
from domainpar.model.registry import BUILTINS, build_model, check_config, is_builtin, model_source, resolve
from domainpar.parallel.part import rank_part
from domainpar.train.config import load_config
from fixtures import REPO, random_graph


def _config(graph, **changes) -> ModelConfig:
    return ModelConfig(node_features=int(graph.x.shape[1]), edge_features=int(graph.edge_attr.shape[1]), hidden=8,
                       num_iterations=2, **changes)  # fmt: skip


@pytest.mark.parametrize("name", list(BUILTINS))
def test_every_builtin_builds_and_gives_one_logit_per_edge(name):
    graph = random_graph(40, 120, seed=3)
    model = build_model(_config(graph, name=name)).double()
    whole = rank_part(graph, dtype=torch.float64)
    logits = model(whole.graph, whole.exchange)
    assert logits.shape == (graph.num_edges,) and torch.isfinite(logits).all()
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert resolve(name).description


def test_default_and_unnamed_configs_build_todays_interaction_network():
    """A config (or a checkpoint's model_config) without a name is the Interaction Network, with the same weights."""
    old = ModelConfig(hidden=8, num_iterations=2).to_dict()
    del old["name"], old["options"]
    torch.manual_seed(0)
    via_factory = build_model(ModelConfig.from_dict(old))
    torch.manual_seed(0)
    direct = InteractionNetwork(ModelConfig(hidden=8, num_iterations=2))  # unit reference: the class itself
    assert type(via_factory) is InteractionNetwork
    for (name, a), (_, b) in zip(via_factory.state_dict().items(), direct.state_dict().items()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"name": "gnn"}, r"^model\.name must be one of interaction_network, interaction_gnn, pyg_gnn or an import path"),
        ({"name": "no_such_module_xyz:Model"}, r"^model\.name 'no_such_module_xyz:Model': cannot import no_such_module_xyz"),
        ({"name": "collections:OrderedDict"}, r"must name a torch.nn.Module subclass"),
        ({"name": "torch.nn:NoSuchLayer"}, r"module torch.nn has no attribute NoSuchLayer"),
        ({"name": "interaction_gnn", "options": {"aggregator": "sum"}}, r"^model\.options\.aggregator is not an option of model interaction_gnn"),
        ({"name": "interaction_gnn", "options": {"undirected": "yes"}}, r"^model\.options\.undirected must be true or false"),
        ({"name": "interaction_gnn", "options": {"messages": "out"}}, r"^model\.options\.messages must be one of in_out, in"),
        ({"name": "interaction_gnn", "overlap": True}, r"^model\.overlap is not a setting of model interaction_gnn .*it honours checkpointing, recurrent"),
        ({"name": "pyg_gnn", "options": {"layer": "gat", "heads": 3}}, r"^model\.options\.heads must divide hidden 8"),
        ({"options": {"x": 1}}, r"^model\.options\.x is not an option of model interaction_network \(it has none\)"),
    ],
)
def test_bad_models_are_one_line_naming_the_key(changes, message):
    graph = random_graph(20, 40, seed=1)
    with pytest.raises(DomainparError, match=message) as info:
        build_model(_config(graph, **changes))
    assert "\n" not in str(info.value)


def test_check_config_writes_every_option_out():
    complete = check_config(ModelConfig(name="interaction_gnn", options={"undirected": True}))
    assert complete.options == {"aggregation": ["sum"], "messages": "in_out", "undirected": True, "residual": False,
                                "output_layers": 0}  # fmt: skip
    assert check_config(ModelConfig()).options == {}
    assert check_config(complete) == complete  # idempotent: what a checkpoint records rebuilds the same model


def test_user_model_by_file_path_and_by_module(tmp_path, monkeypatch):
    source = textwrap.dedent(
        '''
        from dataclasses import dataclass
        import torch
        from torch import nn

        @dataclass(frozen=True)
        class Options:
            scale: float = 1.0

        class Linear(nn.Module):
            options_class = Options
            description = "a per-edge linear classifier"

            def __init__(self, config):
                super().__init__()
                self.scale = Options(**config.options).scale
                self.lin = nn.Linear(2 * config.node_features + config.edge_inputs, 1)

            def forward(self, graph, exchange):
                x = exchange(graph.x)
                src, dst = graph.edge_index
                return self.scale * self.lin(torch.cat([x[src], x[dst], graph.edge_attr], 1)).squeeze(-1)
        '''
    )
    (tmp_path / "my_models.py").write_text(source)
    graph = random_graph(20, 50, seed=2)
    by_file = build_model(_config(graph, name=f"{tmp_path / 'my_models.py'}:Linear", options={"scale": 2}))
    monkeypatch.syspath_prepend(str(tmp_path))
    by_module = build_model(_config(graph, name="my_models:Linear"))
    assert by_file.scale == 2.0 and by_module.scale == 1.0
    whole = rank_part(graph)
    assert by_module(whole.graph, whole.exchange).shape == (50,)
    assert resolve("my_models:Linear").description == "a per-edge linear classifier"
    with pytest.raises(DomainparError, match=r"model\.options\.scale must be a finite number"):
        build_model(_config(graph, name="my_models:Linear", options={"scale": "big"}))
    with pytest.raises(DomainparError, match=r"model\.checkpointing is not a setting of model my_models:Linear"):
        build_model(_config(graph, name="my_models:Linear", checkpointing=True))
    with pytest.raises(FieldError, match=r"file .*missing\.py not found"):
        resolve(f"{tmp_path / 'missing.py'}:Linear")


def test_train_config_model_flags_and_yaml(tmp_path):
    config = load_config(None, {"model.name": "interaction_gnn", "model.options": ("aggregation=[sum, max]", "undirected=true")})
    assert config.model.name == "interaction_gnn"
    assert config.model.options == {"aggregation": ["sum", "max"], "undirected": True}
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("model:\n  name: interaction_gnn\n  options:\n    residual: true\n")
    merged = load_config(yaml_file, {"model.options": ("undirected=true",)})
    assert merged.model.options == {"residual": True, "undirected": True}  # flags add to the file's options
    with pytest.raises(DomainparError, match=r"^command line: --model-option residul is not an option of model interaction_gnn"):
        load_config(yaml_file, {"model.options": ("residul=1",)})
    yaml_file.write_text("model:\n  name: interaction_gnn\n  options:\n    residual: maybe\n")
    with pytest.raises(DomainparError, match=rf"^{re.escape(str(yaml_file))}: model\.options\.residual must be true or false"):
        load_config(yaml_file)
    with pytest.raises(DomainparError, match=r"--model-option must be KEY=VALUE"):
        load_config(None, {"model.options": ("undirected",)})


def test_interaction_gnn_deploys_the_same_function():
    graph = random_graph(60, 200, seed=4)
    for options in ({}, {"aggregation": ["sum", "max", "mean", "min"], "undirected": True, "residual": True}):
        for edges in (True, False):
            torch.manual_seed(0)
            model = build_model(_config(graph, name="interaction_gnn", options=options, use_edge_features=edges)).double()
            assert isinstance(model, InteractionGNN)
            whole = rank_part(graph, dtype=torch.float64)
            with torch.no_grad():
                trained = whole.scatter_edges(model(whole.graph, whole.exchange))
                inputs = [torch.from_numpy(graph.x).double(), torch.from_numpy(graph.edge_index)]
                inputs += [torch.from_numpy(graph.edge_attr).double()] if edges else []
                deployed = torch.jit.script(model.deploy())(*inputs)
            assert torch.allclose(trained, deployed, rtol=0, atol=1e-12)


def test_models_are_constructed_by_the_factory_only():
    """No domainpar or benchmark code constructs a model class directly: build_model is the one constructor."""
    classes = ("InteractionNetwork", "InteractionGNN", "PygEdgeClassifier", "AttentionEdgeClassifier", "PygStack")
    pattern = re.compile(r"(?<![\w.])(?:" + "|".join(classes) + r")\(")
    found = []
    for root in ("domainpar", "bench", "examples"):
        for path in (REPO / root).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line) and not line.lstrip().startswith(("class ", "#")):
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_a_users_model_is_known_by_its_source_file(tmp_path):
    import hashlib

    path = tmp_path / "my_model.py"
    path.write_text("class M: pass\n")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    source = model_source(f"{path}:M")
    assert (source.digest, source.shown) == (digest, f"my_model.py (sha256 {digest[:12]})")
    assert model_source("domainpar.model.interaction_network:InteractionNetwork") is None  # a built-in, by import path
    assert model_source(f"{tmp_path / 'missing.py'}:M") is None
    assert is_builtin("pyg_gnn") and not is_builtin(f"{path}:M")
