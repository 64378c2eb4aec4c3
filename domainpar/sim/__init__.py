"""The event simulator: TrackML-format events on the real TrackML detector, and its calibration against real events.

Charged particles from a pile-up of collision vertices (plus displaced
secondaries) follow helices in a uniform solenoid field along +z. Every crossing
of a detector layer within the tracker volume becomes a hit, after multiple
scattering, hit inefficiency and measurement smearing; noise hits are added at
the real event's rate. The output is the challenge's four tables (hits, cells,
particles, truth) with its columns and dtypes, so everything downstream reads
simulated and real events alike.

Approximations (documented, and held against the real event 21000 by
``tests/sim/test_simulate.py``):

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
  the path length (small-angle, straight lever arm). No energy loss, no
  interactions: a particle stops when it leaves the tracker volume or after
  ``max_turns`` turns of its helix. The default of half a turn stops loopers at
  their apex, as the real files do; ``max_turns >= 1`` lets them re-cross barrel
  layers on the way in.
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
* Secondaries: a fraction of particles starts at displaced vertices along a
  line of flight from the beam line, with a softer pT spectrum.
* Truth weights: the challenge's rule (particle weight 0.2 below pT 0.5 GeV
  rising linearly to 1 at 3 GeV, split over the particle's hits by order along
  the track, first and last hits weighted most; zero for noise, for particles
  with fewer than 4 hits and for secondaries), normalised to sum to 1 per event.

Modules, in the order an event is made (:func:`domainpar.sim.event.simulate_event`):

* :mod:`~domainpar.sim.config`: :class:`~domainpar.sim.config.SimulationConfig`, every parameter;
* :mod:`~domainpar.sim.particles`: particles and their vertices (pile-up, secondaries);
* :mod:`~domainpar.sim.geometry`: the detector as the simulator sees it (layer surfaces, module lookup, overlaps);
* :mod:`~domainpar.sim.propagation`: helices through the layers, with multiple scattering;
* :mod:`~domainpar.sim.sensors`: the modules a crossing passes through, acceptance and hit efficiency;
* :mod:`~domainpar.sim.noise`: noise hits;
* :mod:`~domainpar.sim.truth`: the challenge's truth weights;
* :mod:`~domainpar.sim.clusters`: the cells of every hit (cluster models);
* :mod:`~domainpar.sim.measurement`: measured positions (residual models);
* :mod:`~domainpar.sim.event`: one event, step by step, as the challenge's four tables;
* :mod:`~domainpar.sim.dataset`: many events written as TrackML files;
* :mod:`~domainpar.sim.calibration`: the same per-layer and per-layer-pair figures measured on real and
  simulated events, and the fits of the cluster models.

Nothing in :mod:`domainpar.data` depends on this package.
"""
