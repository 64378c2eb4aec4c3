"""Track candidates from edge scores, and how physicists judge them.

* :mod:`domainpar.tracks.candidates` — hits → track candidates
  (:func:`~domainpar.tracks.candidates.build_candidates`, settings :class:`~domainpar.tracks.config.TrackConfig`,
  methods :mod:`~domainpar.tracks.methods`); its docstring lists the stages of the track finder and their modules.
* :mod:`domainpar.tracks.submission` — TrackML submissions, track ids for every hit of an event.
* :mod:`domainpar.tracks.score` — the TrackML challenge score, exactly.
* :mod:`domainpar.tracks.efficiency` — edge metrics (efficiency, purity, ROC AUC) and track metrics (tracking
  efficiency, fake and duplicate rates).
* :mod:`domainpar.tracks.plots` — ROC, efficiency/purity vs pT and eta, event displays.
* :mod:`domainpar.tracks.compare` — the builders side by side on scored events.

Same layer as :mod:`domainpar.data`: numpy/pandas only, no torch.distributed.
"""

from domainpar.caches import settle as _settle_caches

# Before any module of the package defines its cached numba kernels (a read-only installation has no __pycache__ to
# write them to).
_settle_caches()

