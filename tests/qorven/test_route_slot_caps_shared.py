"""Two routes to one model server with different caps (`max_concurrency`), as two Qors
(of one workspace or of two) pointing at one server have: the queue is the server's, named
by its base URL, and each call checks its own route's cap against every call in flight to
that server. What the README's max_concurrency section says of it, shown on both layouts."""
from __future__ import annotations

import threading
import time

import pytest

from qorven.runtime import route_slots


def _held(base_url: str, cap: int, n: int) -> list[object]:
    slots = route_slots._slots(base_url)
    return [slots.acquire(cap=cap, wait=2, lease=30) for _ in range(n)]


def test_routes_to_one_server_with_different_caps_share_its_queue_each_checking_its_own_cap():
    server = f"http://gpu-{time.monotonic_ns()}.example:11434/v1"
    big, small = server, server + "/"  # one server, spelled with and without the slash: one queue
    slots = route_slots._slots(big)
    held = _held(big, 3, 2)  # two calls of the route capped at 3 in flight
    try:
        # The route capped at 1 waits while the server has any call in flight, whoever's.
        started = time.monotonic()
        with pytest.raises(route_slots.SlotTimeout):
            with route_slots.route_slot(base_url=small, cap=1, wait=0.3, lease=30):
                pass
        assert time.monotonic() - started >= 0.3
        # The route capped at 3 still lets its third call in: the server runs three at once.
        with route_slots.route_slot(base_url=big, cap=3, wait=0.3, lease=30):
            pass

        # The smaller route's call waiting first holds the queue: the bigger route's call
        # behind it waits too, though its own cap has room (first come first served).
        done = threading.Event()

        def small_call() -> None:
            try:
                with route_slots.route_slot(base_url=small, cap=1, wait=5, lease=30):
                    pass
            finally:
                done.set()

        waiter = threading.Thread(target=small_call)
        waiter.start()
        deadline = time.monotonic() + 5
        while route_slots.route_slot_waiting(base_url=big) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(route_slots.SlotWait):
            with route_slots.slot_ticket("behind", tenant=2):
                with route_slots.route_slot(base_url=big, cap=3, wait=5, lease=30):
                    pass
        assert not done.is_set()
    finally:
        for token in held:
            slots.release(token, cap=3)
    waiter.join(10)
    assert done.is_set()  # let in once the server's calls in flight fell below its cap of 1
    with route_slots.slot_ticket("behind", tenant=2):
        route_slots.route_slot_leave(base_url=big, cap=3)
    assert route_slots.route_slot_waiting(base_url=big) == 0
