"""Partitioning: owner assignment (METIS, detector sectors), halo plans, their I/O and quality.

Import from the submodules; :func:`partition_graph` is the usual entry point.
This package never imports torch.distributed (and only ``local_graph`` imports torch).
"""

from domainpar.partition.partitioners import METHODS, partition_graph
from domainpar.partition.plan import PartitionPlan, PartPlan, build_plan

__all__ = ["METHODS", "PartPlan", "PartitionPlan", "build_plan", "partition_graph"]
