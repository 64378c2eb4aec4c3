"""The edge filter: a per-edge classifier that prunes the hit graph before the GNN sees it.

See :mod:`domainpar.filter.edge_filter`.
"""

from domainpar.filter.edge_filter import EdgeFilter, FilterConfig, load_filter, train_filter

__all__ = ["EdgeFilter", "FilterConfig", "load_filter", "train_filter"]
