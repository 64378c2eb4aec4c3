"""Benchmarks of domainpar: ``python -m bench [--quick] [--out bench/results]``.

Never collected by pytest (no ``test_*`` files here). Every figure is a median of
several runs and every comparison is a ratio of figures taken in the same run,
because the machines these run on are shared and noisy.
"""
