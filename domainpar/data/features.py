"""What the columns of a graph's ``x`` and ``edge_attr`` are: names, units and scaling.

A trained edge classifier only works on inputs built exactly like its training
graphs. This module is the one written description of those inputs, in the
form a user outside Python needs to rebuild them (e.g. the C++ side of ACTS's
ExaTrkX plugin): for every column its name, the raw quantity with its unit,
and the scale it is divided by (``feature = raw / scale``, the convention of
the field's pipelines' ``node_scales``). ``domainpar build`` stores the
description of every graph it writes (:func:`graph_description`), training
copies it into checkpoints, and ``domainpar export`` into the model's sidecar
JSON. ``tests/unit/data/test_features.py`` recomputes the columns of a real
event from this description, so a change of the graph builder that is not
described here fails a test.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

#: Bumped when the layout of a description changes.
DESCRIPTION_VERSION = 1


@dataclass(frozen=True)
class FeatureSpec:
    """One input column."""

    name: str
    """Column name (also the field name in PyG graph files)."""
    raw: str
    """The raw quantity, as a formula of hit coordinates (mm) and TrackML columns."""
    unit: str
    """Unit of the raw quantity."""
    scale: float
    """The column holds ``raw / scale``."""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return asdict(self)


#: Node feature columns, by name (the order of a graph's ``x`` is given by its description).
NODE_FEATURE_SPECS: dict[str, FeatureSpec] = {
    spec.name: spec
    for spec in (
        FeatureSpec("r", "sqrt(x^2 + y^2) of the hit", "mm", 1000.0),
        FeatureSpec("phi", "atan2(y, x) of the hit, in [-pi, pi]", "rad", math.pi),
        FeatureSpec("z", "z of the hit", "mm", 1000.0),
        FeatureSpec("cell_count", "number of cells of the hit (TrackML cells file)", "cells", 10.0),
        FeatureSpec("cell_charge", "sum of the cells' value (TrackML cells file)", "charge", 1.0),
    )
}

#: Edge feature columns, by name. src is the inner hit, dst the outer one.
EDGE_FEATURE_SPECS: dict[str, FeatureSpec] = {
    spec.name: spec
    for spec in (
        FeatureSpec("dr", "r_dst - r_src", "mm", 1000.0),
        FeatureSpec("dphi", "phi_dst - phi_src wrapped to [-pi, pi)", "rad", math.pi),
        FeatureSpec("dz", "z_dst - z_src", "mm", 1000.0),
        FeatureSpec(
            "dR", "sqrt(deta^2 + dphi^2), eta = asinh(z / r), dphi in rad wrapped to [-pi, pi)", "1", 1.0
        ),
    )
}

#: How edges are directed in every graph domainpar builds.
EDGE_DIRECTION = "edge_index[0] (src) is the inner hit, edge_index[1] (dst) the outer one: one directed edge per candidate segment"


def feature_list(names: tuple[str, ...] | list[str], specs: dict[str, FeatureSpec]) -> list[dict[str, Any]]:
    """The JSON description of the columns ``names``; a name without a spec gets only its name.

    Columns of foreign graphs (PyG files of other pipelines) may have names
    this module does not describe; their raw quantity and scale are then
    unknown here and recorded as None.
    """
    return [
        specs[name].to_dict() if name in specs else {"name": name, "raw": None, "unit": None, "scale": None}
        for name in names
    ]


def graph_description(
    node_features: tuple[str, ...] | list[str],
    edge_features: tuple[str, ...] | list[str],
    builder: str,
    cuts: dict[str, Any] | None,
) -> dict[str, Any]:
    """The description of a graph's inputs, as stored with the graph and in checkpoints.

    Args:
        node_features: names of the columns of ``x``, in order.
        edge_features: names of the columns of ``edge_attr``, in order.
        builder: what built the graph (``"domainpar build"``, ``"pyg files"`` ...).
        cuts: the graph construction settings (e.g. ``GraphConfig`` as a dict), None if unknown.
    """
    return {
        "version": DESCRIPTION_VERSION,
        "builder": builder,
        "node_features": feature_list(node_features, NODE_FEATURE_SPECS),
        "edge_features": feature_list(edge_features, EDGE_FEATURE_SPECS),
        "edge_direction": EDGE_DIRECTION,
        "cuts": cuts,
    }


def build_description(config: Any) -> dict[str, Any]:
    """The description of graphs made by ``domainpar build`` with ``config`` (a GraphConfig)."""
    from domainpar.data.event_graph import EDGE_FEATURES, NODE_FEATURES
    from domainpar.data.graph import CELL_FEATURES

    nodes = NODE_FEATURES + (CELL_FEATURES if config.cell_features else ())
    return graph_description(nodes, EDGE_FEATURES, "domainpar build", asdict(config))
