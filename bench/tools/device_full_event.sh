#!/usr/bin/env bash
# One call on a lent GPU machine (the library's device tool): the full-event recipe's data (same seeds; pruned with
# the edge filter of a committed CPU run, carried in FILTER) and larger models trained on the GPU, one row each
# (bench/tools/full_event_larger_models.json: the CPU recipe's model among them, on the same graphs), then the
# engine's GPU report if RESERVE seconds are kept for it (0: none; it needs ~140). Run from the repository root with
# the real events carried in DATA (a copy of ../shared/data/trackml); BUDGET is the call's seconds, DEADLINE the
# seconds after which no model starts training. Rows land in $OUT/levers.jsonl as each is measured.
#   FILTER=.gpu/filter.pt DATA=.gpu/trackml BUDGET=575 DEADLINE=330 RESERVE=150 bash bench/tools/device_full_event.sh
set -u
export PYTHONUNBUFFERED=1
end=$((SECONDS + ${BUDGET:-575}))
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, numpy, numba; print('torch', torch.__version__, 'numpy', numpy.__version__, 'numba', numba.__version__)"
uptime
timeout $((end - SECONDS - ${RESERVE:-150})) python3 -m bench.tools.physics_levers --out /tmp/levers \
  --levers bench/tools/full_event_larger_models.json --recipe examples/full_event.yaml --real "$DATA/pixel" \
  --filter "$FILTER" --no-base-model --deadline "${DEADLINE:-330}" --set parallel.ranks=1 --set parallel.device=cuda \
  --set parallel.threads=16 --set model.compile=off --set model.checkpointing=false 2>&1 | tee "$OUT/levers.log" | grep -v "s\] *[0-9]*/"
cp /tmp/levers/levers.jsonl "$OUT/" 2>/dev/null
cp /tmp/levers/base/eval.json "$OUT/base_eval.json" 2>/dev/null
left=$((end - SECONDS))
echo "left for the GPU report: $left s"
if [ "${RESERVE:-150}" -gt 0 ] && [ "$left" -gt 140 ]; then
  timeout $((left - 5)) python3 -m bench --device cuda --only gpu --data "$DATA" --out "$OUT/bench" 2>&1 | tee "$OUT/bench.log" | tail -5
fi
uptime
