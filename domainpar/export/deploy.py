"""The deploy-time edge classifier: the trained Interaction Network as one plain forward pass.

The training model (:class:`~domainpar.model.interaction_network.InteractionNetwork`) runs on a part's local graph
with a halo exchange, activation checkpointing and whatever custom autograd its speed needs. None of that belongs in
a deployed model. :func:`deploy_model` rebuilds the same function from a checkpoint's ``model_config`` and
``state_dict`` out of operations that TorchScript and ONNX (opset >= 16: ``ScatterElements`` with
``reduction="add"`` for the sums over incident edges) both support, with the calling convention of ACTS's ExaTrkX
edge-classifier stage:

    forward(x, edge_index[, edge_attr]) -> logits

``x`` (N, F) float32 node features, ``edge_index`` (2, E) int64 with row 0 the source (inner) and row 1 the
destination (outer) hit, ``edge_attr`` (E, F_e) float32 only for models trained with edge features, and (E,)
float32 logits out (the caller applies the sigmoid and the cut). N and E are free. The math is the training
model's, term by term:

    h = enc_n(x);  e = enc_e(edge_attr)  (or the learned start vector)
    repeat T times:
        e = e + phi_e(W_src h[src] + W_dst h[dst] + W_e e + b)
        h = h + phi_n([h, sum_{edges into v} e, sum_{edges out of v} e])
    logit = out(phi_head(W_src h[src] + W_dst h[dst] + W_e e + b))
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from domainpar.errors import DomainparError
from domainpar.filter.edge_filter import feature_columns
from domainpar.model.config import ACTIVATIONS
from domainpar.model.interaction_network import InteractionNetwork
from domainpar.model.registry import build_model


class DeployLayer(nn.Module):
    """Linear → (LayerNorm) → activation."""

    def __init__(self, linear: nn.Linear, norm: nn.Module, activation: nn.Module) -> None:
        super().__init__()
        self.linear = linear
        self.norm = norm
        self.activation = activation

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(rows, in) → (rows, H)."""
        return self.activation(self.norm(self.linear(h)))


class DeployMLP(nn.Module):
    """A stack of :class:`DeployLayer`."""

    def __init__(self, layers: list[DeployLayer]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(rows, in) → (rows, H)."""
        for layer in self.layers:
            h = layer(h)
        return h


class DeployPairMLP(nn.Module):
    """An MLP on [h_src, h_dst, e] per edge, with its first layer split project-then-gather."""

    def __init__(
        self, w_src: nn.Linear, w_dst: nn.Linear, w_edge: nn.Linear, first_norm: nn.Module, activation: nn.Module, rest: DeployMLP
    ) -> None:
        super().__init__()
        self.w_src = w_src
        self.w_dst = w_dst
        self.w_edge = w_edge
        self.first_norm = first_norm
        self.activation = activation
        self.rest = rest

    def forward(self, h: torch.Tensor, e: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """(N, H) node rows, (E, H) edge rows → (E, H) MLP output per edge."""
        # The training model's order of the three terms (edge term first), so the rounding matches.
        pre = self.w_edge(e) + self.w_src(h)[src] + self.w_dst(h)[dst]
        return self.rest(self.activation(self.first_norm(pre)))


class DeployIteration(nn.Module):
    """One message-passing step: residual edge update, then residual node update from summed edges."""

    def __init__(self, edge_network: DeployPairMLP, node_network: DeployMLP) -> None:
        super().__init__()
        self.edge_network = edge_network
        self.node_network = node_network

    def forward(
        self, h: torch.Tensor, e: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, H), (E, H) → updated (N, H), (E, H)."""
        e = e + self.edge_network(h, e, src, dst)
        zeros = torch.zeros(h.shape[0], e.shape[1], dtype=e.dtype, device=e.device)
        # scatter_add exports as ScatterElements(reduction="add"). Not index_add: its ScatterND(reduction="add")
        # loses updates in ONNX Runtime's CPU kernel with more than one intra-op thread.
        sum_in = zeros.scatter_add(0, dst.unsqueeze(1).expand(-1, e.shape[1]), e)
        sum_out = zeros.scatter_add(0, src.unsqueeze(1).expand(-1, e.shape[1]), e)
        h = h + self.node_network(torch.cat([h, sum_in, sum_out], dim=1))
        return h, e


class _Core(nn.Module):
    """Everything after the edge encoder, shared by both calling conventions."""

    def __init__(self, node_encoder: DeployMLP, iterations: list[DeployIteration], head: DeployPairMLP, head_output: nn.Linear) -> None:
        super().__init__()
        self.node_encoder = node_encoder
        # A recurrent model lists the same iteration module T times: the weights are shared, not copied.
        self.iterations = nn.ModuleList(iterations)
        self.head = head
        self.head_output = head_output

    def forward(self, x: torch.Tensor, e: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src = edge_index[0]
        dst = edge_index[1]
        h = self.node_encoder(x)
        for iteration in self.iterations:
            h, e = iteration(h, e, src, dst)
        return self.head_output(self.head(h, e, src, dst)).squeeze(-1)


class EdgeClassifier(nn.Module):
    """Deployed model with edge features: ``forward(x, edge_index, edge_attr) -> logits``."""

    def __init__(self, core: _Core, edge_encoder: DeployMLP) -> None:
        super().__init__()
        self.core = core
        self.edge_encoder = edge_encoder

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        """(N, F) float32, (2, E) int64, (E, F_e) float32 → (E,) float32 logits (module docstring)."""
        return self.core(x, self.edge_encoder(edge_attr), edge_index)


class NodeOnlyEdgeClassifier(nn.Module):
    """Deployed model without edge features: ``forward(x, edge_index) -> logits``."""

    def __init__(self, core: _Core, edge_init: torch.Tensor) -> None:
        super().__init__()
        self.core = core
        self.register_buffer("edge_init", edge_init.detach().clone())

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """(N, F) float32, (2, E) int64 → (E,) float32 logits (module docstring)."""
        e = self.edge_init.unsqueeze(0).expand(edge_index.shape[1], self.edge_init.shape[0])
        return self.core(x, e, edge_index)


# ----------------------------------------------------------------------------- from training weights


class _Weights:
    """A state dict read key by key, so that a missing or unused key is named in the error."""

    def __init__(self, state: dict[str, torch.Tensor], dtype: torch.dtype) -> None:
        self.state = state
        self.dtype = dtype
        self.used: set[str] = set()

    def get(self, key: str) -> torch.Tensor:
        if key not in self.state:
            raise DomainparError(f"checkpoint model weights lack {key!r}, which its model_config needs")
        self.used.add(key)
        return self.state[key].detach().to(dtype=self.dtype).clone()


def _linear(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, dtype=weight.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    return layer.requires_grad_(False)


def _norm(weights: _Weights, prefix: str, hidden: int, layer_norm: bool) -> nn.Module:
    if not layer_norm:
        return nn.Identity()
    norm = nn.LayerNorm(hidden, dtype=weights.dtype)
    with torch.no_grad():
        norm.weight.copy_(weights.get(f"{prefix}.weight"))
        norm.bias.copy_(weights.get(f"{prefix}.bias"))
    return norm.requires_grad_(False)


def _mlp(weights: _Weights, prefix: str, config, activation_cls, first: int = 0) -> DeployMLP:
    layers = []
    for i in range(first, config.mlp_layers):
        linear = _linear(weights.get(f"{prefix}.linears.{i}.weight"), weights.get(f"{prefix}.linears.{i}.bias"))
        layers.append(DeployLayer(linear, _norm(weights, f"{prefix}.norms.{i}", config.hidden, config.layer_norm), activation_cls()))
    return DeployMLP(layers)


def _pair_mlp(weights: _Weights, prefix: str, config, activation_cls) -> DeployPairMLP:
    hidden = config.hidden
    first_weight = weights.get(f"{prefix}.mlp.linears.0.weight")
    first_bias = weights.get(f"{prefix}.mlp.linears.0.bias")
    if first_weight.shape != (hidden, 3 * hidden):
        raise DomainparError(
            f"checkpoint weight {prefix}.mlp.linears.0.weight must have shape ({hidden}, {3 * hidden}) (got {tuple(first_weight.shape)})"
        )
    w_src = _linear(first_weight[:, :hidden], None)
    w_dst = _linear(first_weight[:, hidden : 2 * hidden], None)
    w_edge = _linear(first_weight[:, 2 * hidden :], first_bias)
    rest = _mlp(weights, f"{prefix}.mlp", config, activation_cls, first=1)
    first_norm = _norm(weights, f"{prefix}.mlp.norms.0", hidden, config.layer_norm)
    return DeployPairMLP(w_src, w_dst, w_edge, first_norm, activation_cls(), rest)


def deploy_model(model_config, state: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32) -> nn.Module:
    """The deploy-time model of a checkpoint.

    Args:
        model_config: the checkpoint's :class:`~domainpar.model.interaction_network.ModelConfig`.
        state: the checkpoint's model ``state_dict``.
        dtype: parameter dtype of the deployed model (ACTS feeds float32).

    Returns:
        For the Interaction Network :class:`EdgeClassifier` (``model_config.edge_inputs > 0``) or
        :class:`NodeOnlyEdgeClassifier`; for another model what its ``deploy()`` returns; in eval mode,
        without gradients.

    Raises:
        DomainparError: the weights do not fit ``model_config`` (a key is missing, unused or of another shape).
    """
    c = model_config
    # The training model is the judge of whether the weights fit the config (names and shapes).
    trained = build_model(c)
    try:
        trained.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = " ".join(str(exc).split())[:300]
        raise DomainparError(f"checkpoint weights do not fit its model_config ({first})") from None
    if not isinstance(trained, InteractionNetwork):
        return _deploy_other(trained, c, dtype)
    activation_cls = ACTIVATIONS[c.activation]
    weights = _Weights(state, dtype)
    num_networks = min(1, c.num_iterations) if c.recurrent else c.num_iterations
    blocks = [
        DeployIteration(
            _pair_mlp(weights, f"edge_networks.{k}", c, activation_cls), _mlp(weights, f"node_networks.{k}", c, activation_cls)
        )
        for k in range(num_networks)
    ]
    iterations = [blocks[min(step, len(blocks) - 1)] for step in range(c.num_iterations)]
    head = _pair_mlp(weights, "head", c, activation_cls)
    head_output = _linear(weights.get("head_output.weight"), weights.get("head_output.bias"))
    core = _Core(_mlp(weights, "node_encoder", c, activation_cls), iterations, head, head_output)
    if c.edge_inputs:
        model: nn.Module = EdgeClassifier(core, _mlp(weights, "edge_encoder", c, activation_cls))
    else:
        model = NodeOnlyEdgeClassifier(core, weights.get("edge_init"))
    unused = sorted(set(state) - weights.used)
    if unused:
        raise DomainparError(f"checkpoint model weights hold entries the deployed model does not use: {unused[:5]}")
    return model.eval().requires_grad_(False)


def _deploy_other(trained: nn.Module, model_config, dtype: torch.dtype) -> nn.Module:
    """The deploy-time module of a model other than the Interaction Network: what its ``deploy()`` returns."""
    deploy = getattr(trained, "deploy", None)
    if deploy is None:
        raise DomainparError(
            f"model {model_config.name} has no deploy-time module (a deploy() method returning forward(x, edge_index"
            "[, edge_attr]) -> logits, docs/models.md), so it cannot be exported; score it with evaluate --checkpoint"
        )
    module = deploy()
    if not isinstance(module, nn.Module):
        raise DomainparError(f"model {model_config.name}: deploy() must return a torch.nn.Module (got {type(module).__name__})")
    return module.to(dtype=dtype).eval().requires_grad_(False)


def input_names(model_config) -> list[str]:
    """The model's inputs in calling order (ACTS passes them positionally)."""
    return ["x", "edge_index", "edge_attr"] if model_config.edge_inputs else ["x", "edge_index"]


# ----------------------------------------------------------------------------- the edge filter


class FilterModule(nn.Module):
    """The deployed edge filter: ``forward(x, edge_index, edge_attr) -> logits`` on the graph stage's full inputs.

    It reads the columns of ``x`` and ``edge_attr`` the filter was trained on (by index), forms
    ``[x_src, x_dst, edge_attr]`` per edge, standardises with the training mean and spread and runs the MLP —
    the operations of :meth:`domainpar.filter.edge_filter.EdgeFilter.logits`, in its order. An edge is kept
    when its logit is at least the filter's threshold (a logit, recorded in the sidecar).
    """

    def __init__(self, edge_filter, node_columns: torch.Tensor, edge_columns: torch.Tensor) -> None:
        super().__init__()
        net = edge_filter.net
        self.register_buffer("node_columns", node_columns.to(torch.int64))
        self.register_buffer("edge_columns", edge_columns.to(torch.int64))
        self.register_buffer("mean", net.mean.detach().clone().float())
        self.register_buffer("scale", net.scale.detach().clone().float())
        self.mlp = copy.deepcopy(net.mlp).float().requires_grad_(False)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        """(N, F) float32, (2, E) int64, (E, F_e) float32 → (E,) float32 filter logits."""
        nodes = x.index_select(1, self.node_columns)
        inputs = torch.cat([nodes[edge_index[0]], nodes[edge_index[1]], edge_attr.index_select(1, self.edge_columns)], dim=1)
        return self.mlp((inputs - self.mean) / self.scale).squeeze(-1)


def deploy_filter(edge_filter, node_features: list[str], edge_features: list[str]) -> FilterModule:
    """The deploy-time module of a trained edge filter, for graphs whose columns are named ``node_features`` /
    ``edge_features`` (the model's training graphs: the filter was trained on those graphs before pruning).

    Raises:
        DomainparError: the filter reads a feature the graphs do not have, or its input width does not fit.
    """
    node_columns = feature_columns(edge_filter.config.node_features, tuple(node_features), "node", "edge filter")
    edge_columns = feature_columns(edge_filter.config.edge_features, tuple(edge_features), "edge", "edge filter")
    node_index = torch.arange(len(node_features)) if node_columns is None else torch.from_numpy(node_columns)
    edge_index = torch.arange(len(edge_features)) if edge_columns is None else torch.from_numpy(edge_columns)
    width = 2 * node_index.numel() + edge_index.numel()
    if width != edge_filter.net.mean.numel():
        raise DomainparError(
            f"edge filter expects {edge_filter.net.mean.numel()} inputs per edge (2 × node + edge features), "
            f"the graphs give {width}"
        )
    return FilterModule(edge_filter, node_index, edge_index).eval()
