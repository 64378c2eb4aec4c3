"""The exactness check (docs/design.md, "The exactness argument"): a partitioned run against one process.

* :mod:`~domainpar.verification.cases`: what is compared (cases, jobs, verdicts, tolerances);
* :mod:`~domainpar.verification.worker`: what every rank of a domain group runs;
* :mod:`~domainpar.verification.faults`: broken exchanges that must make the check fail;
* :mod:`~domainpar.verification.run`: the ``domainpar verify`` entry points (spawned ranks or torchrun/srun).
"""

from domainpar.verification.cases import FAULTS, TOLERANCES, VerifyCase, VerifyJob, VerifyResult

__all__ = ["FAULTS", "TOLERANCES", "VerifyCase", "VerifyJob", "VerifyResult"]
