"""Lingering after a rank's own failure (domainpar.comm.wait.linger): it waits for the peers' acknowledgements."""

from __future__ import annotations

import threading
import time

import torch.distributed as dist

from domainpar.comm.failure import FailureChannel, raised
from domainpar.comm.wait import linger


def test_linger_waits_until_every_peer_has_read_the_failure():
    store = dist.HashStore()
    failing, peer1, peer2 = (FailureChannel(store, rank) for rank in range(3))
    failing.publish(raised(0, RuntimeError("out of luck")))

    def read_later() -> None:
        time.sleep(0.3)
        peer1.acknowledge()
        time.sleep(0.3)
        peer2.acknowledge()

    reader = threading.Thread(target=read_later)
    start = time.monotonic()
    reader.start()
    linger(failing, world_size=3, timeout_s=10.0)
    waited = time.monotonic() - start
    reader.join()
    # It returns once both peers have read it: not before the second one, and long before the timeout.
    assert 0.55 <= waited < 5.0, waited


def test_linger_gives_up_at_its_timeout_when_a_peer_never_reads():
    store = dist.HashStore()
    failing, peer = FailureChannel(store, 1), FailureChannel(store, 0)
    failing.publish(raised(1, RuntimeError("out of luck")))
    start = time.monotonic()
    linger(failing, world_size=2, timeout_s=0.4)
    assert 0.35 <= time.monotonic() - start < 3.0
    peer.acknowledge()
    start = time.monotonic()
    linger(failing, world_size=2, timeout_s=10.0)
    assert time.monotonic() - start < 1.0
