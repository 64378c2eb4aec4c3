"""A named training recipe: the events it trains from, the graph, the filter, the model, the tracks.

A recipe is one YAML file (``examples/physics.yaml`` is the project's) with
these sections:

``simulation``
    the simulated events it trains and validates on: counts, particles per
    event, seeds (:class:`SimulationSection`);
``graph``
    the hit-graph cuts and features (:class:`~domainpar.data.graph.GraphConfig`);
``filter``
    the edge filter run on every graph before the GNN
    (:class:`~domainpar.filter.FilterConfig`), or ``null`` for none;
``model``, ``optim``, ``loss``, ``parallel``, ``run``
    the GNN training, exactly as in a ``domainpar train`` config
    (:class:`~domainpar.train.config.TrainConfig`; ``data`` is filled in by the
    pipeline);
``tracks``
    track building and the working point (:class:`TracksSection`).

:func:`load_recipe` validates everything before anything runs and stops at the
first mistake with one line naming the file and the key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from domainpar.data.graph import GraphConfig
from domainpar.errors import DomainparError
from domainpar.filter.edge_filter import FilterConfig
from domainpar.parsing import load_yaml
from domainpar.train.config import TrainConfig, config_from_dict

#: Sections of a recipe file besides the training ones.
RECIPE_SECTIONS = ("name", "simulation", "graph", "filter", "tracks")
#: Sections handed to :func:`~domainpar.train.config.config_from_dict`.
TRAIN_SECTIONS = ("model", "optim", "loss", "parallel", "run")


@dataclass(frozen=True)
class SimulationSection:
    """The simulated events a recipe trains and validates on."""

    train_events: int = 24
    """Training events."""
    val_events: int = 4
    """Held-out validation events (also the held-out simulated test set of the evaluation)."""
    particles: int = 1000
    """Charged particles per event."""
    seed: int = 1
    """Seed of the training events (event i uses the stream (seed, i))."""
    val_seed: int = 10_001
    """Seed of the validation events (a different stream: no event is shared)."""
    cluster_variation: float = 0.0
    """Domain randomisation of the training events' clusters (SimulationConfig.cluster_variation); the
    validation events use the calibrated model."""

    def __post_init__(self) -> None:
        if isinstance(self.cluster_variation, bool) or not isinstance(self.cluster_variation, (int, float)) or not (
            0.0 <= self.cluster_variation < 1.0
        ):
            raise DomainparError(f"simulation.cluster_variation must be a number in [0, 1) (got {self.cluster_variation!r})")
        for name, low in (("train_events", 2), ("val_events", 1), ("particles", 10), ("seed", 0), ("val_seed", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise DomainparError(f"simulation.{name} must be an integer of at least {low} (got {value!r})")
        if self.seed == self.val_seed:
            raise DomainparError(f"simulation.val_seed must differ from simulation.seed (both {self.seed})")


@dataclass(frozen=True)
class TracksSection:
    """Track building and the working point of the evaluation."""

    method: str = "walk"
    """Track building: walk or components (see :mod:`domainpar.tracks.build`)."""
    threshold: float = 0.5
    """Edge score cut: the working point of edge efficiency and purity, and of track building."""

    def __post_init__(self) -> None:
        from domainpar.tracks.build import METHODS

        if self.method not in METHODS:
            raise DomainparError(f"tracks.method must be one of {', '.join(METHODS)} (got {self.method!r})")
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) or not 0 < self.threshold < 1:
            raise DomainparError(f"tracks.threshold must be a number in (0, 1) (got {self.threshold!r})")


@dataclass(frozen=True)
class Recipe:
    """Everything one recipe run needs."""

    name: str
    """Short name (reports and output directories)."""
    simulation: SimulationSection = field(default_factory=SimulationSection)
    """The simulated events."""
    graph: GraphConfig = field(default_factory=GraphConfig)
    """Graph cuts and features."""
    filter: FilterConfig | None = None
    """Edge filter before the GNN (None: none)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """GNN training (``data`` paths are set by the pipeline)."""
    tracks: TracksSection = field(default_factory=TracksSection)
    """Track building and working point."""

    def __post_init__(self) -> None:
        if self.filter is None:
            return
        # A filter reading a feature the graphs will not have would fail only after simulating and building.
        for kind, wanted, have in (
            ("node", self.filter.node_features, self.graph.node_feature_names),
            ("edge", self.filter.edge_features, self.graph.edge_features),
        ):
            missing = [name for name in wanted or () if name not in have]
            if missing:
                raise DomainparError(f"filter.{kind}_features {missing} are not in graph.{kind}_features (it has {list(have)})")

    def training_simulation(self):
        """The :class:`~domainpar.sim.config.SimulationConfig` of the training events."""
        from domainpar.sim.config import SimulationConfig

        return SimulationConfig(num_particles=self.simulation.particles, cluster_variation=float(self.simulation.cluster_variation))

    def validation_simulation(self):
        """The :class:`~domainpar.sim.config.SimulationConfig` of the validation (held-out) events."""
        from domainpar.sim.config import SimulationConfig

        return SimulationConfig(num_particles=self.simulation.particles)

    def scaled(
        self,
        train_events: int,
        val_events: int,
        epochs: int | None = None,
        particles: int | None = None,
        filter_steps: int | None = None,
    ) -> "Recipe":
        """The same recipe on fewer (or more) events, epochs and edge-filter steps (``make run``'s budget, smoke tests)."""
        simulation = replace(
            self.simulation,
            train_events=train_events,
            val_events=val_events,
            particles=self.simulation.particles if particles is None else particles,
        )
        train = self.train if epochs is None else self.train.replace(**{"run.epochs": epochs})
        edge_filter = self.filter
        if filter_steps is not None and edge_filter is not None:
            edge_filter = replace(edge_filter, steps=filter_steps)
        return replace(self, simulation=simulation, train=train, filter=edge_filter)

    def to_dict(self) -> dict:
        """Plain nested dict (YAML-safe), the inverse of :func:`recipe_from_dict`."""
        from dataclasses import asdict

        train = self.train.to_dict()
        return {
            "name": self.name,
            "simulation": asdict(self.simulation),
            "graph": self.graph.to_dict(),
            "filter": None if self.filter is None else asdict(self.filter),
            **{section: train[section] for section in TRAIN_SECTIONS},
            "tracks": asdict(self.tracks),
        }


def _section(nested: Mapping[str, Any], name: str, source: str) -> dict | None:
    value = nested.get(name)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise DomainparError(f"{source}: section {name!r} must be a mapping of settings (got {type(value).__name__})")
    return dict(value)


def _dataclass_from(cls, values: dict | None, section: str, source: str):
    if values is None:
        return cls()
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise DomainparError(f"{source}: unknown {section} settings {unknown} (expected a subset of {sorted(known)})")
    try:
        return cls(**values)
    except DomainparError as exc:
        raise DomainparError(f"{source}: {exc}") from None
    except TypeError as exc:
        raise DomainparError(f"{source}: invalid {section} settings ({exc})") from None


def recipe_from_dict(nested: Mapping[str, Any], source: str = "recipe") -> Recipe:
    """Build and validate a recipe from a parsed YAML mapping.

    Raises:
        DomainparError: an unknown section or key, a value of the wrong type or out of range.
    """
    if not isinstance(nested, Mapping):
        raise DomainparError(f"{source}: expected a YAML mapping of sections (got {type(nested).__name__})")
    unknown = sorted(set(nested) - set(RECIPE_SECTIONS) - set(TRAIN_SECTIONS))
    if unknown:
        raise DomainparError(
            f"{source}: unknown sections {unknown} (expected {', '.join(RECIPE_SECTIONS + TRAIN_SECTIONS)}; "
            "data is filled in by the pipeline)"
        )
    name = nested.get("name", Path(source).stem)
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
        raise DomainparError(f"{source}: name must be a non-empty word of letters, digits, - _ . (got {name!r})")
    simulation = _dataclass_from(SimulationSection, _section(nested, "simulation", source), "simulation", source)
    graph_values = _section(nested, "graph", source)
    graph = GraphConfig() if graph_values is None else GraphConfig.from_dict(graph_values, source=f"{source}: graph")
    filter_values = _section(nested, "filter", source)
    edge_filter = None if filter_values is None else _dataclass_from(FilterConfig, filter_values, "filter", source)
    tracks = _dataclass_from(TracksSection, _section(nested, "tracks", source), "tracks", source)
    train_nested = {section: _section(nested, section, source) for section in TRAIN_SECTIONS}
    train = config_from_dict({k: v for k, v in train_nested.items() if v is not None}, source=source)
    if train.run.threshold != tracks.threshold:
        # One working point: the training metrics and the evaluation use the same cut.
        train = train.replace(**{"run.threshold": tracks.threshold})
    try:
        return Recipe(name=name, simulation=simulation, graph=graph, filter=edge_filter, train=train, tracks=tracks)
    except DomainparError as exc:
        raise DomainparError(f"{source}: {exc}") from None


def load_recipe(path: str | os.PathLike) -> Recipe:
    """Read and validate a recipe YAML file.

    Raises:
        DomainparError: missing or malformed file, or any invalid setting (one line).
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise DomainparError(f"{path}: recipe file not found")
    try:
        nested = load_yaml(path, "a YAML recipe")
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DomainparError(f"{path}: expected a YAML recipe, could not parse it ({first})") from None
    return recipe_from_dict(nested if nested is not None else {}, source=str(path))


def packaged_recipe_path(name: str = "physics") -> Path:
    """Path of a recipe shipped inside the package (``domainpar/pipeline/recipes/<name>.yaml``)."""
    from importlib import resources

    path = Path(str(resources.files("domainpar.pipeline") / "recipes" / f"{name}.yaml"))
    if not path.is_file():
        raise DomainparError(f"no packaged recipe named {name!r} (expected {path})")
    return path
