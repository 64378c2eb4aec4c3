"""Track candidates from edge scores, and how physicists judge them.

* :mod:`domainpar.tracks.candidates` — hits → track candidates (its docstring lists the stages of the track finder);
* :mod:`domainpar.tracks.submission` and :mod:`domainpar.tracks.score` — TrackML submissions and the challenge's
  score, exactly;
* :mod:`domainpar.tracks.efficiency` and :mod:`domainpar.tracks.plots` — edge and track figures, and their plots.

The builders side by side on scored events: ``python -m bench.tools.compare_builders``.

Same layer as :mod:`domainpar.data`: numpy/pandas only, no torch.distributed.
"""

from domainpar.caches import settle as _settle_caches

# Before any module of the package defines its cached numba kernels (a read-only installation has no __pycache__ to
# write them to).
_settle_caches()

