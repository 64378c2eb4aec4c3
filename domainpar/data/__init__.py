"""Events, hit graphs and their files: TrackML I/O, graph construction (geometric cuts or a module map), features.

Importing any data module runs this first: numba's cache directory is settled before a cached kernel is defined
(:mod:`domainpar.caches`; the module map's edge loops are cached kernels).
"""

from domainpar.caches import settle as _settle_caches

_settle_caches()
