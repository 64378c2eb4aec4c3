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

Modules, in the order an event is made (:func:`domainpar.sim.event.simulate_event`):

* :mod:`~domainpar.sim.config`: :class:`~domainpar.sim.config.SimulationConfig`, every parameter;
* :mod:`~domainpar.sim.particles`: the collisions' particles and their vertices (pile-up, decays);
* :mod:`~domainpar.sim.geometry`: the detector as the simulator sees it (layer surfaces, module lookup, overlaps);
* :mod:`~domainpar.sim.material`: the material's nuclear interaction thicknesses (layers, passive surfaces);
* :mod:`~domainpar.sim.propagation`: helices through the layers, with multiple scattering;
* :mod:`~domainpar.sim.interactions`: where particles end (interactions, soft cut), their secondaries;
* :mod:`~domainpar.sim.sensors`: the modules a crossing passes through, acceptance and hit efficiency;
* :mod:`~domainpar.sim.noise`: noise hits;
* :mod:`~domainpar.sim.truth`: the challenge's truth weights;
* :mod:`~domainpar.sim.clusters`: the cells of every hit (cluster models);
* :mod:`~domainpar.sim.measurement`: measured positions (residual models);
* :mod:`~domainpar.sim.event`: one event, step by step, as the challenge's four tables;
* :mod:`~domainpar.sim.dataset`: many events written as TrackML files;
* :mod:`~domainpar.sim.calibration`: the same per-layer and per-layer-pair figures measured on real and
  simulated events, and how far apart they may be;
* :mod:`~domainpar.sim.cluster_fit`: the fits of the cluster models to real events;
* :mod:`~domainpar.sim.occupancy`: what makes an event busy (hits, particles, decays, interactions, curlers,
  clusters, noise, graph edges), counted the same way on real and simulated events.

Nothing in :mod:`domainpar.data` depends on this package.
"""
