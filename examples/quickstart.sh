#!/usr/bin/env bash
# Quick start on simulated data, end to end on one machine (CPU, gloo):
#   simulate → build graphs → partition → train (domain mode, 2 ranks) → evaluate (2 ranks).
#
#   bash examples/quickstart.sh [WORK_DIR]       # default runs/quickstart; ~2-4 minutes on 2 cores
#
# Needs the `domainpar` command on PATH (`source .venv/bin/activate` after `make install`).
# PARTICLES and EPOCHS environment variables make it bigger or longer.
set -euo pipefail

WORK=${1:-runs/quickstart}
PARTICLES=${PARTICLES:-1000}      # per event; the full pile-up scale is 10000
EPOCHS=${EPOCHS:-5}

# 1. Four training events and one validation event on the real TrackML detector (TrackML CSV layout).
domainpar simulate --out "$WORK/events/train" --events 4 --particles "$PARTICLES" --seed 1 --quiet
domainpar simulate --out "$WORK/events/val" --events 1 --particles "$PARTICLES" --seed 2 --first-event-id 100 --quiet

# 2. Hit graphs (one .npz per event) with their construction efficiency and purity.
domainpar build --input "$WORK/events/train" --out "$WORK/graphs/train" --json "$WORK/graphs/train.json" --quiet
domainpar build --input "$WORK/events/val" --out "$WORK/graphs/val" --quiet

# 3. Two-way METIS plans of every graph (training and validation: `train --plans` reads both from one
#    directory), with their quality report and a picture of the first.
domainpar partition --graph "$WORK/graphs/train" --parts 2 --method metis --out "$WORK/plans" --json "$WORK/plans.json"
domainpar partition --graph "$WORK/graphs/val" --parts 2 --method metis --out "$WORK/plans"
graphs=("$WORK"/graphs/train/*.npz)
first_graph=${graphs[0]}
domainpar partition --graph "$first_graph" --parts 2 --method metis --out "$WORK/plan_first" --plot "$WORK/partition.png"

# 4. Domain-parallel training: 2 local ranks share every event, halo rows exchanged each iteration.
domainpar train --data "$WORK/graphs/train" --val "$WORK/graphs/val" --plans "$WORK/plans" \
    --mode domain --ranks 2 --hidden 32 --iterations 4 --epochs "$EPOCHS" \
    --lr 3e-3 --pos-weight 2 --out "$WORK/train"

# 5. Evaluation on the validation event, split over 2 ranks (same figures as one process):
#    edge efficiency/purity, tracks, TrackML score.
domainpar evaluate --checkpoint "$WORK/train/model.pt" --data "$WORK/events/val" --parts 2 \
    --json "$WORK/evaluate.json" --plots "$WORK/plots"

echo "done: metrics in $WORK/train/metrics.jsonl, curves in $WORK/train/curves.png, evaluation in $WORK/evaluate.json"
