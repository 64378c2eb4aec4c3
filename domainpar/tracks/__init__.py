"""Track candidates from edge scores, and how physicists judge them.

* :mod:`domainpar.tracks.build` — hits → track candidates (connected components
  or the branch-resolving walk-through) and TrackML submissions.
* :mod:`domainpar.tracks.score` — the TrackML challenge score, exactly.
* :mod:`domainpar.tracks.efficiency` — edge metrics (efficiency, purity, ROC
  AUC) and track metrics (tracking efficiency, fake and duplicate rates).
* :mod:`domainpar.tracks.plots` — ROC, efficiency/purity vs pT and eta, event displays.

Same layer as :mod:`domainpar.data`: numpy/pandas only, no torch.distributed.
"""
