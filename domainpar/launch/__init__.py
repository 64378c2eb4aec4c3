"""Starting the ranks of a job and ending them together: used by train, inference, verification and bench alike.

* :mod:`~domainpar.launch.ranks`: :func:`~domainpar.launch.ranks.spawn` (local processes, FileStore
  rendezvous), :func:`~domainpar.launch.ranks.init_from_env` (a rank of a torchrun or srun job), the backend
  and device of a rank, and the one-line report of a job's first failure;
* :mod:`~domainpar.launch.lifeline`: every rank dies with its launcher (parent-death signal and a watch of
  the parent), names itself ``domainpar r<k>``, and turns SIGTERM/SIGHUP into an unwinding exception;
* :mod:`~domainpar.launch.runlock`: one run at a time writes an output directory;
* :mod:`~domainpar.launch.jobs`: ``domainpar train`` jobs started as users start them (spawn, torchrun,
  srun-like) and their ranks found, killed and watched from outside (the fault tests and bench).
"""
