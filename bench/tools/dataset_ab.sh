#!/usr/bin/env bash
# Events per hour of `domainpar reconstruct` for two checkouts side by side (docs/reconstruct.md, docs/performance.md).
#
#   bench/tools/dataset_ab.sh BEFORE_TREE AFTER_TREE RECIPE_DIR DATA_DIR OUT_DIR [ROUND]
#
# RECIPE_DIR holds model.pt and filter.pt (`python -m bench --only full_event --out DIR`: DIR/full_event); DATA_DIR
# the raw events (hits and cells). For each way of running (two replicas; the default host and preparing process)
# each tree reconstructs DATA_DIR in a fresh process, timed from outside with its peak RSS (/usr/bin/time), then the
# two trees' submissions and tracks files are compared byte for byte. Both trees run on this checkout's venv.
set -euo pipefail
before=$(realpath "$1"); after=$(realpath "$2"); recipe=$(realpath "$3"); data=$(realpath "$4"); out=$(realpath -m "$5")
round=${6:-1}
python="$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python"  # not realpath: the venv's python is a link out of it
mkdir -p "$out"
for mode in replicas default; do
  options=(); [ "$mode" = replicas ] && options=(--workers 2 --prefetch 0)
  for tree in "$before" "$after"; do
    name=$(basename "$tree")-$mode-$round
    rm -rf "$out/$name"
    load=$(cut -d' ' -f1 /proc/loadavg)
    start=$(date +%s.%N)
    (cd "$tree" && PYTHONPATH="$tree" /usr/bin/time -f %M -o "$out/$name.rss" "$python" -m domainpar reconstruct \
      --checkpoint "$recipe/model.pt" --filter "$recipe/filter.pt" --data "$data" --out "$out/$name" --quiet "${options[@]}")
    end=$(date +%s.%N)
    rate=$("$python" -c "import json, sys; print(round(json.load(open(sys.argv[1]))['events_per_hour']))" "$out/$name/summary.json")
    echo "$name: wall $(echo "$end - $start" | bc) s, $rate events per hour, peak RSS $(cat "$out/$name.rss") KB, load before $load"
  done
  for part in submissions tracks; do
    diff -rq "$out/$(basename "$before")-$mode-$round/$part" "$out/$(basename "$after")-$mode-$round/$part" >/dev/null \
      && echo "$mode $part: byte-identical" || echo "$mode $part: DIFFERENT"
  done
done
