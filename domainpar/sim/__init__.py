"""The event simulator: TrackML-format events on the real TrackML detector, and its calibration against real events.

Charged particles from a pile-up of collision vertices (and the daughters of
their K0S and Λ decays) follow helices in a uniform solenoid field along +z;
crossing the material, some interact and end there, and the secondaries of
their interactions are followed in turn. Every crossing of a detector layer
within the tracker volume becomes a hit, after multiple scattering, hit
inefficiency and measurement smearing; noise hits are added at the real
event's rate. The output is the challenge's four tables (hits, cells,
particles, truth) with its columns and dtypes, so everything downstream reads
simulated and real events alike.

The physics and its approximations are described in ``docs/data.md``; how the
result compares with the real event 21000 (held by ``tests/sim/test_simulate.py``,
``test_interactions.py`` and ``test_occupancy.py``) in ``docs/sim_vs_real.md``.

Modules, in the order an event is made (:func:`domainpar.sim.event.simulate_event`): ``config``, ``particles``,
``geometry``, ``material``, ``propagation``, ``interactions``, ``sensors``, ``noise``, ``truth``, ``clusters``,
``measurement``, ``event``, then ``dataset`` (many events as TrackML files); ``calibration`` and ``cluster_fit``
fit the simulation to real events, and ``bench/tools/occupancy.py`` and ``bench/tools/calibration.py`` count and
compare it against them. Each module's docstring says what it does.

Nothing in :mod:`domainpar.data` depends on this package.
"""
