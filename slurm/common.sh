# Shared set-up sourced by the domainpar sbatch scripts (not submitted on its own).
#
# Expects CONFIG to be set by the caller. Exposes PYTHON (the interpreter of
# the environment that has domainpar), OUT_DIR (run.out of the config) and
# RESUME_FLAG (--resume when OUT_DIR already holds checkpoints, so a requeued
# or resubmitted job continues where it stopped).

set -euo pipefail

# The job starts in the submission directory; the repo root is where slurm/ lives.
REPO_DIR=${REPO_DIR:-${SLURM_SUBMIT_DIR:-$(pwd)}}
cd "$REPO_DIR"

# An environment with domainpar installed: the repo's .venv by default.
VENV_DIR=${VENV_DIR:-$REPO_DIR/.venv}
if [[ -f "$VENV_DIR/bin/activate" ]]; then
    # shellcheck disable=SC1091
    source "$VENV_DIR/bin/activate"
fi
PYTHON=${PYTHON:-python}

if [[ ! -f "$CONFIG" ]]; then
    echo "error: config file $CONFIG not found (set CONFIG=path/to/config.yaml)" >&2
    exit 2
fi

# Validate the config before any rank starts: a typo fails in one line, not after the queue wait.
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

RESUME_FLAG=""
if compgen -G "$OUT_DIR/checkpoints/*" > /dev/null; then
    RESUME_FLAG="--resume"
    echo "resuming from the checkpoints in $OUT_DIR/checkpoints"
fi

# Threads per rank: the CPUs Slurm gave each task, split over the ranks it launches.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( ${SLURM_CPUS_PER_TASK:-1} / ${RANKS_PER_TASK:-1} > 0 ? ${SLURM_CPUS_PER_TASK:-1} / ${RANKS_PER_TASK:-1} : 1 ))}
