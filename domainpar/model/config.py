"""What every domainpar model is built from: :class:`ModelConfig` (shared settings, a model name, its options).

A model is chosen by ``name`` — a built-in of :mod:`domainpar.model.registry`
(``interaction_network``, ``interaction_gnn``, ``pyg_gnn``) or a user's class
by import path (``package.module:Class`` or ``path/to/file.py:Class``) — and
built by :func:`domainpar.model.registry.build_model` from this one config.

The fields are the settings models share (widths, depth, activation,
normalisation, edge-feature use, memory options); each model says which of
them it honours, and one it does not honour, set to anything but its default,
is refused with one line naming the key. Settings that only one model has are
its ``options`` (a mapping validated against that model's options dataclass
when the config is loaded: ``model.options.aggregation``...).

No torch.distributed, no model classes here: the registry imports this module, never the reverse.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

import torch
from torch import nn

from domainpar.errors import DomainparError, FieldError
from domainpar.kernels import compile as compiler

#: Activation names accepted by :class:`ModelConfig`.
ACTIVATIONS = {
    "silu": nn.SiLU,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
}

#: The model a config without a name builds (every checkpoint written before models had names holds one).
DEFAULT_MODEL = "interaction_network"


@dataclass(frozen=True)
class ModelConfig:
    """The model to build: its name, the settings models share, and its own options."""

    name: str = DEFAULT_MODEL
    """Model to train: interaction_network, interaction_gnn, pyg_gnn, or your class as package.module:Class (docs/models.md)."""
    node_features: int = 3
    """Input features per node (EventGraph.x columns: r, phi, z)."""
    edge_features: int = 4
    """Input features per edge (EventGraph.edge_attr columns: dr, dphi, dz, dR); 0 for graphs without edge features."""
    hidden: int = 64
    """Width H of node and edge latent vectors and of every hidden layer."""
    mlp_layers: int = 2
    """Linear layers in each encoder, edge network, node network and head (before the head's output layer)."""
    num_iterations: int = 8
    """Message-passing steps (each costs one halo exchange; the head costs one more)."""
    activation: str = "silu"
    """Hidden activation: one of silu, relu, tanh, gelu, elu, leaky_relu."""
    layer_norm: bool = True
    """LayerNorm after every hidden linear layer (row-wise, so exact under partitioning)."""
    checkpointing: bool = False
    """Recompute each iteration's local compute in backward to save activation memory (exact)."""
    overlap: bool = False
    """Compute interior edges while the halo exchange is in flight (exact)."""
    recurrent: bool = True
    """True: one edge and one node network shared by all iterations; False: separate networks per iteration."""
    use_edge_features: bool = True
    """Feed the graphs' edge features to the model (graphs without any: the model reads x and edge_index only)."""
    compile: str = "auto"
    """torch.compile the row-wise MLP pieces into fused kernels: auto (on for CUDA when Triton is present), on, off."""
    chunk_rows: int = 0
    """Edge rows recomputed at a time in backward under checkpointing (0: a sixteenth of the edges on CPU, an eighth on GPU, at least 4096; at most 64 chunks)."""
    options: dict = field(default_factory=dict, hash=False)
    """Settings of the chosen model only, as a mapping (YAML) or KEY=VALUE flags (--model-option); see docs/models.md."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise FieldError("name", f"must be a model name or package.module:Class (got {self.name!r})")
        for name in ("node_features", "edge_features", "hidden", "mlp_layers", "num_iterations", "chunk_rows"):
            value = getattr(self, name)
            least = 0 if name in ("edge_features", "num_iterations", "chunk_rows") else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise FieldError(name, f"must be a {'non-negative' if least == 0 else 'positive'} integer (got {value!r})")
        if self.compile not in compiler.SETTINGS:
            raise FieldError("compile", f"must be one of {', '.join(compiler.SETTINGS)} (got {self.compile!r})")
        if self.activation not in ACTIVATIONS:
            raise FieldError("activation", f"must be one of {', '.join(sorted(ACTIVATIONS))} (got {self.activation!r})")
        for name in ("layer_norm", "checkpointing", "overlap", "recurrent", "use_edge_features"):
            if not isinstance(getattr(self, name), bool):
                raise FieldError(name, f"must be true or false (got {getattr(self, name)!r})")
        if not isinstance(self.options, dict) or not all(isinstance(k, str) for k in self.options):
            raise FieldError("options", f"must be a mapping of option names to values (got {self.options!r:.80})")
        # A private copy: the dataclass is frozen, its options must not change behind it either.
        object.__setattr__(self, "options", dict(self.options))

    @property
    def edge_inputs(self) -> int:
        """Edge feature columns the model reads (0: none, its inputs are x and edge_index)."""
        return self.edge_features if self.use_edge_features else 0

    def to_dict(self) -> dict:
        """Plain dict (for checkpoints and YAML)."""
        return asdict(self)

    def key(self) -> str:
        """A canonical text of every setting (a hashable identity, options included)."""
        return json.dumps(self.to_dict(), sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, values: dict) -> "ModelConfig":
        """Inverse of :meth:`to_dict`; unknown keys are an error; a dict without ``name`` (written before models had
        names) is the :data:`DEFAULT_MODEL`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise DomainparError(f"model config has unknown keys {unknown} (expected a subset of {sorted(known)})")
        return cls(**values)


def check_widths(config: ModelConfig, x: torch.Tensor, edge_attr: torch.Tensor) -> None:
    """A local graph's feature tensors fit the model's widths (one line otherwise; edge features only when read).

    Args:
        config: the model's config.
        x: (n_owned, F) node features of the local graph.
        edge_attr: (E_local, F_e) edge features of the local graph.
    """
    if x.ndim != 2 or x.shape[1] != config.node_features:
        raise DomainparError(f"graph.x must have shape (n_owned, {config.node_features}) for this model (got {tuple(x.shape)})")
    if config.edge_inputs and (edge_attr.ndim != 2 or edge_attr.shape[1] != config.edge_features):
        raise DomainparError(
            f"graph.edge_attr must have shape (E, {config.edge_features}) for this model (got {tuple(edge_attr.shape)})"
        )


#: Settings of :class:`ModelConfig` every model honours (widths, depth, activation, normalisation, edge features).
UNIVERSAL_SETTINGS = frozenset(
    {"name", "node_features", "edge_features", "hidden", "mlp_layers", "num_iterations", "activation", "layer_norm",
     "use_edge_features", "options"}
)  # fmt: skip
#: The others: a model lists those it honours (:attr:`domainpar.model.registry.ModelSpec.settings`).
OPTIONAL_SETTINGS = tuple(f.name for f in fields(ModelConfig) if f.name not in UNIVERSAL_SETTINGS)
