"""Benchmarks of domainpar: one report made of sections.

Run (from the repository root, with the project's environment)::

    python -m bench                          # the full CPU report → bench/results/<host>-<date>.{json,md}
    python -m bench --quick --out /tmp/b     # minutes on 2 cores: small graphs, few repeats
    python -m bench --only memory reference  # some sections only
    python -m bench --device cuda            # the GPU report (one line and exit 0 without CUDA)
    python -m bench --data DIR               # where event000021000-* is (default: $DOMAINPAR_TRACKML_DIR,
                                             # else <repo>/../shared/data/trackml); sections that need it
                                             # skip with one line when it is absent

Timed figures on a shared machine: run under ``flock /tmp/domainpar-timing.lock``;
every figure is a median and every comparison a ratio taken in the same run;
the load average is recorded at the start and end of the report. Never
collected by pytest (no ``test_*`` files here).

Layout:

* ``bench/sections/<name>.py`` — one report section each; the order and the
  :class:`~bench.sections.Context` a section is given are in
  :mod:`bench.sections`;
* ``bench/common/`` — what sections share: ``report`` (Section, Column, the
  report files, the machine), ``timing`` (the one ``median_seconds``,
  alternating rounds, load average), ``memory`` (RSS peak, traced peak on
  fake tensors, saved-tensor accounting, CUDA peak), ``workloads`` (the
  graphs and where the data is), ``plans`` (memoised partition plans and
  their quality), ``exchanges`` (a part's halo without the other ranks),
  ``probe`` (one step in a fresh process), ``models`` (our Interaction Network
  and the field's InteractionGNN as compared, built by the package's factory);
* ``bench/scaling_model.py`` — the paper model of step time and memory per GPU
  (``python -m bench.scaling_model``, also run by the scaling_inputs section);
* ``bench/tools/`` — one-off generators of repository files (figures, test
  reference statistics), each ``python -m bench.tools.<name> --help``;
* ``bench/results/`` — committed reports.

Adding a section ``foo``:

1. write ``bench/sections/foo.py`` with a module docstring saying what is
   measured, on what, and how, and ``def section(ctx: Context) -> Section``
   (build the rows with the helpers of ``bench.common``; pick sizes with
   ``ctx.size(quick_value, full_value)``; get graphs from ``ctx.real_full()``,
   ``ctx.real_small()``, ``ctx.simulated(n)``; when an input is missing
   return ``Section(name="foo", title=..., skipped="<one line why>")``);
2. set ``DEVICES = ("cuda",)`` in it if it is a GPU section (default: CPU);
3. add ``"foo"`` to :data:`bench.sections.ORDER` where it belongs in the report.

``python -m bench --only foo --quick --out /tmp/b`` then runs it alone.
"""
