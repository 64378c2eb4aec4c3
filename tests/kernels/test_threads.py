"""numba's parallel kernels leave torch's intra-op thread count as the process set it.

numba's OpenMP threading layer starts its pool with ``omp_set_num_threads(NUMBA_NUM_THREADS)``,
the setting torch reads: without :func:`domainpar.kernels.threads.follow_torch_threads` a process
at ``torch.set_num_threads(1)`` ran torch on every core after its first kernel call, and a resumed
training run was not bitwise the run it continued. The pool starts once per process, so each case
runs in a fresh interpreter; the OpenMP layer and a pool of 2 threads are asked for explicitly, so the
case can fail on any machine (a single-core one included).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fixtures import REPO

_FIRST_KERNEL = {
    "segment_sum": """
from domainpar.kernels import segment_reduce as sr
index = torch.arange(50) % 7
out = sr.segment_sum(torch.randn(50, 4, dtype=torch.float64), sr.build_segments(index, 7))
""",
    "ln_act_forward": """
import numpy as np
from domainpar.kernels import rownorm
z = np.random.default_rng(0).standard_normal((50, 4))
rownorm.ln_act_forward(z, np.ones(4), np.zeros(4), 1e-5, rownorm.ACTIVATION_CODES["relu"], 0.0, np.empty_like(z))
""",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kernel", sorted(_FIRST_KERNEL))
def test_first_kernel_call_keeps_torch_threads(kernel):
    script = (
        "import numba, torch\n"
        "torch.set_num_threads(1)\n"
        + _FIRST_KERNEL[kernel]
        + "print(numba.threading_layer(), numba.get_num_threads(), torch.get_num_threads())\n"
    )
    env = {**os.environ, "NUMBA_THREADING_LAYER": "omp", "NUMBA_NUM_THREADS": "2"}
    env.pop("OMP_NUM_THREADS", None)
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=110)
    if result.returncode != 0 and "threading layer" in result.stderr.lower():
        pytest.skip(f"numba has no OpenMP threading layer here: {result.stderr.strip().splitlines()[-1]}")
    assert result.returncode == 0, result.stderr
    layer, numba_threads, torch_threads = result.stdout.split()
    assert (layer, numba_threads, torch_threads) == ("omp", "1", "1")
