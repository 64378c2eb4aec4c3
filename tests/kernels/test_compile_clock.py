"""A stage's timing leaves numba's compiling out and says how much it left (domainpar.kernels.compile_clock)."""

from __future__ import annotations

import time

import numba
import numpy as np

from domainpar.kernels.compile_clock import compile_clock


def test_a_first_call_compiles_and_a_second_does_not():
    # Defined here, so never in numba's cache: the first call compiles it (and its callee, inside it: one outermost).
    @numba.njit
    def inner(x):
        return x * 2.0

    @numba.njit
    def outer(values):
        total = 0.0
        for v in values:
            total += inner(v)
        return total

    values = np.arange(10.0)
    started = time.perf_counter()
    with compile_clock() as first:
        assert outer(values) == 90.0
    elapsed = time.perf_counter() - started
    assert first.kernels == 1 and 0.0 < first.seconds <= elapsed
    with compile_clock() as second:
        assert outer(values) == 90.0
    assert second.kernels == 0 and second.seconds == 0.0


def test_track_building_reports_its_time_without_the_compiling(monkeypatch):
    import contextlib

    from domainpar.tracks import candidates as module
    from domainpar.tracks.config import TrackConfig

    @contextlib.contextmanager
    def compiled_half_a_second():
        from domainpar.kernels.compile_clock import CompileClock

        clock = CompileClock()
        yield clock
        clock.seconds, clock.kernels = 0.5, 3

    pos = np.array([[30.0 * k, 0.0, 10.0 * k] for k in range(1, 6)])
    layer = np.arange(5)
    edge_index = np.array([[0, 1, 2, 3], [1, 2, 3, 4]])
    scores = np.full(4, 0.9)
    config = TrackConfig(method="components")
    warm = module.build_candidates(pos, layer, edge_index, scores, config)
    assert warm.seconds_compiling == 0.0 and warm.seconds > 0.0
    monkeypatch.setattr(module, "compile_clock", compiled_half_a_second)
    built = module._built

    def slow_build(*args):
        time.sleep(0.6)  # as long as a build that compiled for half a second and worked for a tenth
        return built(*args)

    monkeypatch.setattr(module, "_built", slow_build)
    started = time.perf_counter()
    cold = module.build_candidates(pos, layer, edge_index, scores, config)
    elapsed = time.perf_counter() - started
    assert cold.seconds_compiling == 0.5
    assert 0.1 - 1e-3 <= cold.seconds <= elapsed - 0.5 + 1e-9  # the half second is left out of the stage's time
    assert np.array_equal(cold.track_id, warm.track_id)
