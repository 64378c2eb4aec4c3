"""The names of the track-building methods, importable without numba (the CLI builds its choices from them).

``docs/tracks.md`` describes and compares them; :func:`domainpar.tracks.candidates.build_candidates` runs them.
"""

from __future__ import annotations

#: Every track-building method, in the order the documentation compares them.
METHODS = ("components", "walk", "ckf", "ambiguity")
#: The method used unless told otherwise: the measured best (docs/tracks.md).
DEFAULT_METHOD = "ckf"
