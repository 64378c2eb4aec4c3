"""Pixel events: the full-event recipe trained and judged on the pixel detector alone (``examples/pixel_event.yaml``).

The full-event section's run (:func:`bench.sections.full_event.run`) with the pixel recipe, into
``<out>/pixel_event/``: every event the recipe touches (its simulated training and held-out events, the real
labelled event 1, the real full event 21000 compared truth-free) is cut to the pixel volumes before its graph is
built. The real labelled pixel event 21000 of ``../shared`` is judged afterwards with ``domainpar evaluate``
(docs/full_event.md).
"""

from __future__ import annotations

from bench.common.report import REPO_ROOT, Section
from bench.sections.full_event import run

#: Devices the section runs for (the recipe's file is the CPU size, its ``cuda`` profile the GPU size).
DEVICES = ("cpu", "cuda")
#: The recipe this section runs.
RECIPE = REPO_ROOT / "examples" / "pixel_event.yaml"


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`)."""
    return run(ctx.out / "pixel_event", quick=ctx.quick, device=ctx.device, recipe_path=RECIPE)
