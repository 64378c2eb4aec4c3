"""A named training recipe: the events it trains from, the graph, the filter, the model, the tracks.

A recipe is one YAML file (``examples/physics.yaml`` is the project's) with these sections:

``simulation``
    the simulated events it trains and validates on: counts, particles per event, seeds (:class:`SimulationSection`);
``graph``
    the hit-graph cuts and features (:class:`~domainpar.data.graph.GraphConfig`);
``filter``
    the edge filter run on every graph before the GNN (:class:`~domainpar.filter.FilterConfig`), or ``null``;
``model``, ``optim``, ``loss``, ``parallel``, ``run``
    the GNN training, exactly as in a ``domainpar train`` config (:class:`~domainpar.train.config.TrainConfig`;
    ``data`` is filled in by the pipeline);
``tracks``
    track building and the working point (:class:`TracksSection`);
``evaluation``
    how the trained model is judged: parts per event, detector regions of the held-out events judged on their own
    (:class:`EvaluationSection`);
``profiles``
    optional per-device overrides: ``profiles: {cuda: {model: {hidden: 128}, parallel: {ranks: 4}}}`` replaces
    those keys of those sections when the recipe is loaded for that device (``load_recipe(path, device="cuda")``,
    ``python -m bench --device cuda``). The file itself is the CPU recipe. Every profile is validated whenever the
    file is loaded, so a recipe whose GPU size is wrong fails on a CPU machine too.

:func:`load_recipe` validates everything before anything runs and stops at the first mistake with one line naming
the file and the key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from domainpar.data.graph import GraphConfig
from domainpar.data.subset import check_volumes
from domainpar.errors import DomainparError, not_a_file, shorten
from domainpar.filter.edge_filter import FilterConfig
from domainpar.inference.spec import PARTITION_METHODS, PipelineSpec
from domainpar.parsing import load_yaml
from domainpar.sim.config import SimulationConfig
from domainpar.tracks.config import recorded_tracks
from domainpar.tracks.methods import DEFAULT_METHOD, METHODS
from domainpar.train.config import RunConfig, TrainConfig, config_from_dict

#: Sections of a recipe file besides the training ones.
RECIPE_SECTIONS = ("name", "simulation", "graph", "filter", "tracks", "evaluation")
#: Devices a recipe may hold a profile for (the file itself is the CPU recipe).
PROFILE_DEVICES = ("cuda",)
#: Sections a profile may override (name and graph are the recipe's identity: a profile changes sizes, not the graph).
PROFILE_SECTIONS = ("simulation", "filter", "tracks", "evaluation", "model", "optim", "parallel", "run")
#: Sections handed to :func:`~domainpar.train.config.config_from_dict`.
TRAIN_SECTIONS = ("model", "optim", "loss", "parallel", "run")


@dataclass(frozen=True)
class SimulationSection:
    """The simulated events a recipe trains and validates on."""

    train_events: int = 24
    val_events: int = 4
    """Held-out validation events (also the held-out simulated test set of the evaluation)."""
    particles: int = 1000
    """Charged particles per event from the collisions (SimulationConfig.num_particles; secondaries of
    interactions in the material come on top)."""
    particles_spread: float = 0.0
    """Occupancy mix of the training events: each one's particles scaled by a factor drawn in [1 - s, 1 + s]
    (SimulationConfig.multiplicity_spread); the validation events keep ``particles``."""
    seed: int = 1
    """Seed of the training events (event i uses the stream (seed, i))."""
    val_seed: int = 10_001
    """Seed of the validation events (a different stream: no event is shared)."""
    cluster_variation: float = 0.0
    """Domain randomisation of the training events' clusters (SimulationConfig.cluster_variation); the
    validation events use the calibrated model."""

    def __post_init__(self) -> None:
        for name in ("cluster_variation", "particles_spread"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise DomainparError(f"simulation.{name} must be a number in [0, 1) (got {value!r})")
        for name, low in (("train_events", 2), ("val_events", 1), ("particles", 10), ("seed", 0), ("val_seed", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise DomainparError(f"simulation.{name} must be an integer of at least {low} (got {value!r})")
        if self.seed == self.val_seed:
            raise DomainparError(f"simulation.val_seed must differ from simulation.seed (both {self.seed})")


@dataclass(frozen=True)
class TracksSection:
    """Track building and the working point of the evaluation (both recorded in the trained checkpoint)."""

    method: str = DEFAULT_METHOD
    """Track building: one of :data:`~domainpar.tracks.methods.METHODS` (docs/tracks.md)."""
    threshold: float = RunConfig.threshold
    """Edge score cut: the working point of edge efficiency and purity, and of track building."""
    settings: dict = field(default_factory=dict)
    """The builder's other settings where they differ from the defaults (:class:`~domainpar.tracks.config.TrackConfig`
    fields, ``window: 8``), recorded in the checkpoint with the method: every command that runs the model uses them."""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise DomainparError(f"tracks.method must be one of {', '.join(METHODS)} (got {self.method!r})")
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) or not 0 < self.threshold < 1:
            raise DomainparError(f"tracks.threshold must be a number in (0, 1) (got {self.threshold!r})")
        recorded_tracks(self.method, self.threshold, self.settings, "tracks.settings")


@dataclass(frozen=True)
class EvaluationSection:
    """How the trained model is judged after training."""

    parts: int = PipelineSpec.num_parts
    """Parts per event: inference with halo exchange over that many local processes (1: one process)."""
    method: str = PipelineSpec.method
    """Partitioner of those parts: metis or geometric."""
    subsets: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Detector regions of the held-out events also judged on their own, as events holding only those volumes'
    hits: name → volume ids (``pixel: [7, 8, 9]``, the pixel-only events of the Exa.TrkX studies)."""

    def __post_init__(self) -> None:
        if not isinstance(self.parts, int) or isinstance(self.parts, bool) or not 1 <= self.parts <= 64:
            raise DomainparError(f"evaluation.parts must be an integer in [1, 64] (got {self.parts!r})")
        if self.method not in PARTITION_METHODS:
            raise DomainparError(f"evaluation.method must be one of {', '.join(PARTITION_METHODS)} (got {self.method!r})")
        if not isinstance(self.subsets, Mapping):
            raise DomainparError(f"evaluation.subsets must be a mapping of names to volume ids (got {self.subsets!r})")
        subsets = {}
        for name, volumes in self.subsets.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise DomainparError(f"evaluation.subsets: names must be words of letters, digits and _ (got {name!r})")
            subsets[name] = check_volumes(volumes, f"evaluation.subsets.{name}")
        object.__setattr__(self, "subsets", subsets)


@dataclass(frozen=True)
class Recipe:
    """Everything one recipe run needs (the sections of the module docstring; ``name`` names reports and output
    directories)."""

    name: str
    simulation: SimulationSection = field(default_factory=SimulationSection)
    graph: GraphConfig = field(default_factory=GraphConfig)
    filter: FilterConfig | None = None
    train: TrainConfig = field(default_factory=TrainConfig)
    """GNN training (``data`` paths are set by the pipeline)."""
    tracks: TracksSection = field(default_factory=TracksSection)
    evaluation: EvaluationSection = field(default_factory=EvaluationSection)
    profiles: dict[str, "Recipe"] = field(default_factory=dict, compare=False)
    """The recipe as run on other devices (``profiles`` of the file applied), by device name."""

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
        return SimulationConfig(
            num_particles=self.simulation.particles,
            cluster_variation=float(self.simulation.cluster_variation),
            multiplicity_spread=float(self.simulation.particles_spread),
        )

    def validation_simulation(self):
        """The :class:`~domainpar.sim.config.SimulationConfig` of the validation (held-out) events."""
        return SimulationConfig(num_particles=self.simulation.particles)

    def scaled(
        self,
        train_events: int,
        val_events: int,
        epochs: int | None = None,
        particles: int | None = None,
        filter_steps: int | None = None,
    ) -> "Recipe":
        """The same recipe on fewer (or more) events, epochs and edge-filter steps (``make run``'s budget, smoke tests).

        A warm-up that would take the whole of the scaled run (``domainpar train`` refuses it) keeps its share of
        the recipe's schedule instead (rounded down): the physics recipe's 20 of 600 steps become 0 of 3.
        """
        simulation = replace(
            self.simulation,
            train_events=train_events,
            val_events=val_events,
            particles=self.simulation.particles if particles is None else particles,
        )
        train = self.train if epochs is None else self.train.replace(**{"run.epochs": epochs})
        train = _scaled_warmup(train, self.train.run.epochs * self.simulation.train_events, train_events)
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
            "evaluation": {**asdict(self.evaluation), "subsets": {k: list(v) for k, v in self.evaluation.subsets.items()}},
        }


def _scaled_warmup(train: TrainConfig, recipe_event_passes: int, train_events: int) -> TrainConfig:
    """``train`` (already scaled to its epochs) with a warm-up shorter than its run of ``train_events`` events.

    The steps are counted as the trainer's check counts them (:func:`~domainpar.train.preflight.scheduled_steps`:
    a ``max_steps`` cap is a deliberate short run, not counted) with the recipe's global batch (one event a step
    when it leaves it to the world: an upper bound, the check before training has the last word).
    """
    from domainpar.train.preflight import scheduled_steps

    warmup = train.optim.warmup
    steps = scheduled_steps(train.run.epochs, train_events, train.optim.batch_events or 1)
    if warmup < steps:
        return train
    # Its share of the recipe's run (events x epochs; the batch is the same), which is fewer than the scaled steps.
    share = warmup * train.run.epochs * train_events // max(1, recipe_event_passes)
    return train.replace(**{"optim.warmup": min(share, max(0, steps - 1))})


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
    if "profiles" in nested:
        # Every profile is built (and so validated) whichever device loads the file.
        profiles = _profiles(nested, source)
        base = {k: v for k, v in nested.items() if k != "profiles"}
        built = {name: recipe_from_dict(with_profile(base, values), source=f"{source}: profiles.{name}") for name, values in profiles.items()}
        recipe = recipe_from_dict(base, source=source)
        return replace(recipe, profiles=built)
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
    evaluation = _dataclass_from(EvaluationSection, _section(nested, "evaluation", source), "evaluation", source)
    train_nested = {section: _section(nested, section, source) for section in TRAIN_SECTIONS}
    train = config_from_dict({k: v for k, v in train_nested.items() if v is not None}, source=source)
    # One working point and one builder: the training metrics and the evaluation use the same cut, and the checkpoint
    # records both, so every command that runs the trained model builds its tracks as the recipe does.
    train = train.replace(**{"run.threshold": tracks.threshold, "run.track_method": tracks.method, "run.track_settings": dict(tracks.settings)})
    try:
        return Recipe(
            name=name, simulation=simulation, graph=graph, filter=edge_filter, train=train, tracks=tracks, evaluation=evaluation
        )
    except DomainparError as exc:
        raise DomainparError(f"{source}: {exc}") from None


def _profiles(nested: Mapping[str, Any], source: str) -> dict[str, dict]:
    """The ``profiles`` section checked for its shape: device name → {section: {key: value}}."""
    profiles = nested["profiles"]
    if not isinstance(profiles, Mapping):
        raise DomainparError(f"{source}: section 'profiles' must be a mapping of device names (got {type(profiles).__name__})")
    unknown = sorted(set(profiles) - set(PROFILE_DEVICES))
    if unknown:
        raise DomainparError(f"{source}: unknown profiles {unknown} (expected a subset of {list(PROFILE_DEVICES)}; the file is the cpu recipe)")
    for name, values in profiles.items():
        if not isinstance(values, Mapping):
            raise DomainparError(f"{source}: profiles.{name} must be a mapping of sections (got {type(values).__name__})")
        wrong = sorted(set(values) - set(PROFILE_SECTIONS))
        if wrong:
            raise DomainparError(f"{source}: profiles.{name} may override {list(PROFILE_SECTIONS)} (got {wrong})")
        for section, keys in values.items():
            if not isinstance(keys, Mapping):
                raise DomainparError(f"{source}: profiles.{name}.{section} must be a mapping of settings (got {type(keys).__name__})")
            if section == "filter" and nested.get("filter") is None:
                raise DomainparError(f"{source}: profiles.{name}.filter overrides a recipe without a filter")
    return {name: dict(values) for name, values in profiles.items()}


def with_profile(base: Mapping[str, Any], profile: Mapping[str, Any]) -> dict:
    """``base`` (a recipe mapping) with every key a profile names replaced, section by section."""
    merged = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in base.items()}
    for section, keys in profile.items():
        merged[section] = {**(merged.get(section) or {}), **keys}
    return merged


def load_recipe(path: str | os.PathLike, device: str = "cpu") -> Recipe:
    """Read and validate a recipe YAML file, as run on ``device``.

    Args:
        path: the recipe file.
        device: ``cpu`` (the file as written) or a device of its ``profiles`` (that profile applied).

    Raises:
        DomainparError: missing or malformed file, any invalid setting in the recipe or in any profile,
            or a device the recipe has no profile for (one line).
    """
    path = Path(path)
    recipe = recipe_from_dict(_read_recipe(path, ()), source=str(path))
    if device == "cpu":
        return recipe
    if device not in recipe.profiles:
        raise DomainparError(f"{path}: the recipe has no profile for device {device!r} (it has {sorted(recipe.profiles) or 'none'})")
    return recipe.profiles[device]


def _read_recipe(path: Path, bases: tuple[Path, ...]) -> dict:
    """The recipe mapping of ``path``, on top of its ``base`` recipe when it names one: every section the file gives
    replaces the base's keys of that section one by one (as a profile does), its ``profiles`` replace the base's."""
    import yaml

    if not path.is_file():
        raise not_a_file(path, "recipe file" if not bases else f"base recipe of {bases[-1]}")
    try:
        nested = load_yaml(path, "a YAML recipe")
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DomainparError(f"{path}: expected a YAML recipe, could not parse it ({first})") from None
    nested = {} if nested is None else nested
    if not isinstance(nested, Mapping) or "base" not in nested:
        return nested
    base = nested["base"]
    if not isinstance(base, str) or not base:
        raise DomainparError(f"{path}: base must name another recipe file, relative to this one (got {shorten(base)})")
    base_path = (path.parent / base).resolve()
    if base_path in bases or base_path == path.resolve():
        raise DomainparError(f"{path}: base {base} leads back to a recipe that names it (expected a chain that ends)")
    sections = {k: v for k, v in nested.items() if k not in ("base", "name", "profiles")}
    for section, keys in sections.items():
        if not isinstance(keys, Mapping):
            raise DomainparError(f"{path}: section {section!r} must be a mapping of settings over its base's (got {shorten(keys)})")
    base_nested = _read_recipe(base_path, (*bases, path.resolve()))
    if not isinstance(base_nested, Mapping):
        raise DomainparError(f"{base_path}: expected a YAML mapping of sections (got {type(base_nested).__name__})")
    merged = with_profile(base_nested, sections)
    merged["name"] = nested.get("name", path.stem)
    if "profiles" in nested:
        merged["profiles"] = nested["profiles"]
    return merged


def packaged_recipe_path(name: str = "physics") -> Path:
    """Path of a recipe shipped inside the package (``domainpar/pipeline/recipes/<name>.yaml``)."""
    from importlib import resources

    path = Path(str(resources.files("domainpar.pipeline") / "recipes" / f"{name}.yaml"))
    if not path.is_file():
        raise DomainparError(f"no packaged recipe named {name!r} (expected {path})")
    return path
