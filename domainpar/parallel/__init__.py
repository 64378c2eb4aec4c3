"""The seam between the data and a rank: turn an event (or a part file) into the part a rank runs.

:mod:`domainpar.parallel.part` is the one place where "graph + plan → local
graph → exchange → model inputs" is built, for one process (the whole event
as a one-part plan) and for a rank of a domain group alike.
"""
