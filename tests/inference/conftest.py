"""What every inference test shares: one intra-op thread (tiny graphs gain nothing from more, and the test machine
is shared; processes a test spawns set their own)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
