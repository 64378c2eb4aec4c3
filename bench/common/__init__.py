"""Helpers every bench section shares (see :mod:`bench` for the list)."""
