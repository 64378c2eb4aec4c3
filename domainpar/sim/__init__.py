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

Approximations (documented, and held against the real event 21000 by
``tests/sim/test_simulate.py``, ``test_interactions.py`` and ``test_occupancy.py``;
the whole comparison: ``docs/sim_vs_real.md``):

* Geometry: barrel layers are cylinders at the mean module radius, endcap layers
  discs at the mean module z, with extents from :func:`~domainpar.data.detector.layer_table`.
  A hit carries the real volume_id/layer_id and the module_id of the nearest
  module centre in its layer; gaps between modules are ignored (the hit
  efficiency accounts for them).
* Field: uniform B along +z. A particle of charge q moves on a circle of radius
  R[mm] = 1000 · pT[GeV] / (0.3 · B[T]); ``F = q v × B`` makes positive particles
  turn clockwise seen from +z (the azimuth of the direction decreases along the
  track), as in the real TrackML truth.
* Material: each layer is silicon of the module thickness plus a support
  fraction of a radiation length; Highland scattering angles are applied at
  every crossing and the displacement they cause downstream grows linearly with
  the path length (small-angle, straight lever arm), with the particle's own
  mass in its velocity (slow protons scatter most). A particle stops when it
  leaves the tracker volume, interacts (below), or after ``max_turns`` turns
  of its helix. The default of half a turn stops a looper from the beam line
  at its apex, as the real files do; ``max_turns >= 1`` lets loopers re-cross
  barrel layers on the way in.
* Module planes: each crossing of a layer's cylinder or disc is moved along the
  track onto the plane of the nearest module (``module_planes``), so barrel
  hits spread in radius and disc hits in z by the modules' tilt and stagger,
  as in the real files (the true segments' Δr per layer pair then match the
  real event's; ``tests/sim/test_calibration.py``).
* Module overlaps: a crossing in a ring whose neighbouring modules overlap also
  leaves a hit in the neighbour, with the ring's geometric overlap fraction as
  probability (on the neighbour's own plane).
* Measurement: the measured position is displaced from the true crossing along
  the module's local u (azimuthal) and v (z on barrels, radius on endcaps) axes
  by residuals drawn from the real event 1's per-volume residual distributions
  (``resolution="measured"``, default: pixel-barrel hits carry the real
  uncorrected Lorentz shift of 0.18 pitch along u with a 4 µm core, binary
  strips are flat over a pitch along v), or by a Gaussian of sigma
  pitch / sqrt(12) (``resolution="pitch"``).
* Hit efficiency: 98.3 % per crossing (fitted to the real event 1, see
  :attr:`SimulationConfig.hit_efficiency`).
* Decays: K0S → π+π− and Λ → pπ− decays, two-body in the parent's rest
  frame, after an exponential flight from a beam-line vertex (their rates
  fitted to event 21000's displaced daughters).
* Interactions: a crossing of a layer or of a passive surface (beam pipe,
  pixel support tube, pixel barrel end plates) ends the particle in a hadronic
  interaction with the probability of the surface's nuclear interaction
  thickness along the path (:mod:`~domainpar.sim.material`, fitted to event
  21000's interaction vertices per surface); 1 + Poisson(0.9) secondaries
  (protons and pions of a few hundred MeV, nearly isotropic) start at the
  vertex, for up to 3 generations. Particles below 0.15 GeV pT end at the
  first surface they reach (one hit at most), as in the challenge's files.
  No energy loss.
* Particle ids: TrackML's layout (vertex, particle number, generation), so the
  generation of every particle is read from its id as in the real files.
* Truth weights: the challenge's rule (particle weight 0.2 below pT 0.5 GeV
  rising linearly to 1 at 3 GeV, split over the particle's hits by order along
  the track, first and last hits weighted most; zero for noise, for particles
  with fewer than 4 hits and for secondaries of interactions), normalised to
  sum to 1 per event.

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
