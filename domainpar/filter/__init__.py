"""The edge filter: a per-edge classifier that prunes the hit graph before the GNN sees it.

See :mod:`domainpar.filter.edge_filter`.
"""
