"""numba and torch hot loops with no knowledge of the layers above.

Importing any kernel module runs this first: numba's cache directory is settled before a cached kernel is defined
(:mod:`domainpar.caches`).
"""

from domainpar.caches import settle as _settle_caches

_settle_caches()
