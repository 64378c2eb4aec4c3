# Shared set-up sourced by the domainpar sbatch scripts (not submitted on its own).
#
# Expects SLURM_DIR (this directory, found by the caller) and CONFIG. Exposes:
#   PYTHON        the interpreter of the environment that has domainpar
#   CPUS_PER_TASK CPUs Slurm gave each task, passed on to srun (which no longer inherits them)
#   OUT_DIR       run.out of the config
#   RESUME_FLAG   --resume when asked (RESUME=1, or --resume after the script's name) or when Slurm requeued
#                 this job; an --out that already holds checkpoints is refused otherwise
#   gpus_per_node     the GPUs of this node, from the allocation (error if it lists none)
#   threads_per_rank N  intra-op threads for each of N ranks of a task
#   rendezvous_port   a port derived from the job id (the same on every node)
#   preflight N       every check `domainpar train` makes before ranks start, for a job of N ranks
#
# Nothing here changes directory: relative paths in the config are relative to where the job runs (the
# directory sbatch was called from, or --chdir), wherever the repository is.

set -euo pipefail

REPO_DIR=${REPO_DIR:-$(cd "$SLURM_DIR/.." && pwd)}

# An environment with domainpar installed: the repository's .venv when there is one, else the python on PATH.
VENV_DIR=${VENV_DIR:-$REPO_DIR/.venv}
if [[ -f "$VENV_DIR/bin/activate" ]]; then
    # shellcheck disable=SC1091
    source "$VENV_DIR/bin/activate"
fi
PYTHON=${PYTHON:-python}

if [[ ! -f "$CONFIG" ]]; then
    echo "error: config file $CONFIG not found (set CONFIG=path/to/config.yaml; relative to $(pwd))" >&2
    exit 2
fi

# CPUs per task: what Slurm gave (--cpus-per-task), else the node's CPUs over its tasks.
CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-}
if [[ -z "$CPUS_PER_TASK" && -n "${SLURM_CPUS_ON_NODE:-}" ]]; then
    CPUS_PER_TASK=$(( SLURM_CPUS_ON_NODE / ${SLURM_NTASKS_PER_NODE:-1} ))
fi
CPUS_PER_TASK=${CPUS_PER_TASK:-1}
(( CPUS_PER_TASK >= 1 )) || CPUS_PER_TASK=1

# GPUs on this node, from the allocation: what it lists, never a number written here.
gpus_per_node() {
    local count=${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}
    if [[ -z "$count" && -n "${SLURM_GPUS_PER_NODE:-}" ]]; then
        count=${SLURM_GPUS_PER_NODE##*:}          # --gpus-per-node=[type:]N
    fi
    if [[ -z "$count" && -n "${SLURM_JOB_GPUS:-}" ]]; then
        local ids
        IFS=, read -ra ids <<< "$SLURM_JOB_GPUS"
        count=${#ids[@]}
    fi
    if [[ -z "$count" && -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
        local ids
        IFS=, read -ra ids <<< "$CUDA_VISIBLE_DEVICES"
        count=${#ids[@]}
    fi
    if ! [[ "$count" =~ ^[0-9]+$ ]] || (( count < 1 )); then
        echo "error: cannot tell how many GPUs this node has (SLURM_GPUS_ON_NODE, SLURM_GPUS_PER_NODE and" \
             "CUDA_VISIBLE_DEVICES are unset or not a count: '${count}'); request them with #SBATCH --gpus-per-node=N" \
             "or set GPUS_PER_NODE" >&2
        exit 2
    fi
    echo "$count"
}

# A rendezvous port every node derives alike: job id hashed into 20000-29999 (as domainpar does for srun steps).
rendezvous_port() {
    echo $(( 20000 + (${SLURM_JOB_ID:-0} * 97) % 10000 ))
}

# The config, as the run will see it: a typo fails in one line here, not after srun started the ranks.
OUT_DIR=$("$PYTHON" - "$CONFIG" <<'PY'
import sys
from domainpar.errors import DomainparError
from domainpar.train.config import load_config
try:
    print(load_config(sys.argv[1]).run.out)
except DomainparError as exc:
    sys.exit(f"error: {exc}")
PY
)

# Resume only when asked, or when Slurm requeued this very job; an old run's checkpoints are never taken silently.
RESUME_FLAG=""
for argument in "$@"; do
    if [[ "$argument" == "--resume" ]]; then
        RESUME=1
    fi
done
if [[ "${RESUME:-0}" == "1" || "${SLURM_RESTART_COUNT:-0}" -gt 0 ]]; then
    RESUME_FLAG="--resume"
    echo "resuming from the checkpoints in $OUT_DIR/checkpoints"
elif compgen -G "$OUT_DIR/checkpoints/step-*.pt" > /dev/null; then
    echo "error: $OUT_DIR already holds checkpoints of an earlier run; resubmit with RESUME=1 (or --resume after the" \
         "script's name) to continue it, or set run.out in $CONFIG to a new directory" >&2
    exit 2
fi

preflight() {
    # Every check the ranks would make before they start, for a job of $1 ranks (domainpar train --dry-run).
    "$PYTHON" -m domainpar train --config "$CONFIG" --ranks "$1" $RESUME_FLAG --dry-run
}

threads_per_rank() {
    # The CPUs of a task over the $1 ranks it launches (at least one).
    local threads=$(( CPUS_PER_TASK / $1 ))
    echo $(( threads > 0 ? threads : 1 ))
}
