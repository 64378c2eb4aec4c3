"""domainpar: graph-partitioned, domain-parallel training of GNNs for particle tracking."""

__version__ = "0.1.0"
