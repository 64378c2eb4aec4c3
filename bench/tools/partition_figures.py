"""Pictures of a METIS and a geometric partition of the real full event (docs/figures/partition_<method>_<P>.png).

    python -m bench.tools.partition_figures [--data DIR] [--parts 4] [--out docs/figures]

Builds the graph of event000021000 with the default graph builder and draws
each partition with :func:`domainpar.partition.plot.plot_partition`. The
partition figures of the report (cut, halo, balance, bytes per step) are in
``python -m bench --only communication``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.common.report import REPO_ROOT
from bench.common.workloads import DATA_ENV, full_event_prefix, missing_full_event, real_event_graph


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help=f"TrackML data directory (default: ${DATA_ENV} or <repo>/../shared/data/trackml)")
    parser.add_argument("--parts", type=int, default=4, help="number of parts")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "figures", help="directory of the figures")
    args = parser.parse_args(argv)
    if args.data is not None:
        os.environ[DATA_ENV] = str(Path(args.data).resolve())
    prefix = full_event_prefix()
    if prefix is None:
        print(f"error: {missing_full_event()}", file=sys.stderr)
        return 2
    from domainpar.partition import partition_graph
    from domainpar.partition.plot import plot_partition

    graph = real_event_graph(prefix, labelled=False)
    for method in ("metis", "geometric"):
        plan = partition_graph(graph, args.parts, method, seed=0)
        print(f"wrote {plot_partition(graph, plan, args.out / f'partition_{method}_{args.parts}.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
