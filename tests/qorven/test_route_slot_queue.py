"""The queue for a capped route's slots (qorven.runtime.route_slots): waiters go in
arrival order, tenants take turns, a waiter whose task comes back keeps its place, and a
place or a slot whose holder is gone is freed."""
from __future__ import annotations

import threading
import time

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_waiters_for_a_slot_go_in_arrival_order():
    from qorven.runtime import route_slots

    base_url = f"http://slots.example/{time.monotonic_ns()}"
    order: list[str] = []

    def wait_then_note(name: str) -> None:
        with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
            order.append(name)

    with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
        waiters = [threading.Thread(target=wait_then_note, args=(name,), name=name) for name in "abc"]
        _queued_one_by_one(base_url, waiters)
        assert order == []  # the one slot is held
    for waiter in waiters:
        waiter.join(10)
    assert order == ["a", "b", "c"]


def _queued_one_by_one(base_url: str, waiters: list[threading.Thread]) -> None:
    """Start the waiters for the route's slot one by one, each queued before the next one
    comes (a waiter's thread is named for it)."""
    from qorven.runtime import route_slots

    for queued, waiter in enumerate(waiters, start=1):
        waiter.start()
        deadline = time.monotonic() + 10
        while route_slots.route_slot_waiting(base_url=base_url) < queued:
            assert time.monotonic() < deadline, f"{waiter.name} never queued"
            time.sleep(0.01)


def _ticketed_as(base_url: str, ticket: str, tenant: int) -> bool | float:
    """One look for a slot as `ticket` of `tenant`'s message: True if it got in (and let
    go at once), else the seconds its task is asked to come back after."""
    from qorven.runtime import route_slots

    try:
        with route_slots.slot_ticket(ticket, tenant=tenant):
            with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
                return True
    except route_slots.SlotWait as waiting:
        return waiting.after


def _served_in_turn(base_url: str, tickets: list[tuple[str, int]]) -> list[str]:
    """The tickets waiting, each coming back in arrival order until one gets in, again
    and again: the order in which the one slot went to them."""
    served: list[str] = []
    left = list(tickets)
    while left:
        name, tenant = next((n, t) for n, t in left if _ticketed_as(base_url, n, t) is True)
        served.append(name)
        left.remove((name, tenant))
    return served


def test_a_freed_slot_goes_to_the_tenants_waiting_in_turn_not_in_one_arrival_order():
    """The route is the host's, shared by every tenant. Tenant 1 queues three messages,
    then tenant 2 one: 2's is let in second, between 1's first and second, and is asked
    to come back as second in line. Before, one first-come queue for every tenant served
    it after all of 1's (with 30 of them on a server answering in 10 s, past the model's
    deadline: 2's message failed while 1's burst was served)."""
    from qorven.runtime import route_slots

    base_url = f"http://slots.example/{time.monotonic_ns()}"
    burst = [("a1", 1), ("a2", 1), ("a3", 1)]
    with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):  # held elsewhere
        for name, tenant in burst:
            assert _ticketed_as(base_url, name, tenant) is not True
        assert _ticketed_as(base_url, "b1", 2) == route_slots._come_back(1)
        assert route_slots.route_slot_waiting(base_url=base_url) == 4
    assert _served_in_turn(base_url, [*burst, ("b1", 2)]) == ["a1", "b1", "a2", "a3"]
    assert route_slots.route_slot_waiting(base_url=base_url) == 0


def test_tenants_waiting_for_a_slot_take_turns_and_each_keeps_its_own_arrival_order():
    """Three tenants: the slot goes round them, each tenant's messages in the order they
    came; a tenant alone on the route (the last rounds) keeps its arrival order."""
    from qorven.runtime import route_slots

    base_url = f"http://slots.example/{time.monotonic_ns()}"
    tickets = [("a1", 1), ("a2", 1), ("b1", 2), ("a3", 1), ("c1", 3), ("b2", 2), ("a4", 1), ("a5", 1)]
    with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
        for name, tenant in tickets:
            assert _ticketed_as(base_url, name, tenant) is not True
    assert _served_in_turn(base_url, tickets) == ["a1", "b1", "c1", "a2", "b2", "a3", "a4", "a5"]


def test_a_freed_slot_sends_the_task_of_the_ticket_first_in_the_tenants_turn():
    from qorven.runtime import route_slots

    base_url = f"http://slots.example/{time.monotonic_ns()}"
    slots = route_slots._slots(base_url)
    held = slots.acquire(cap=1, wait=1, lease=30)
    for name, tenant in [("a1", 1), ("a2", 1), ("b1", 2)]:
        with pytest.raises(route_slots.SlotWait):
            with route_slots.slot_ticket(name, tenant=tenant, wake=("a.task", [name])):
                with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
                    pass
    assert [tuple(w) for w in slots.release(held, cap=1)] == [("a.task", ["a1"])]
    token, _ = slots.enter(ticket="a1", lane="1", wake=("a.task", ["a1"]), cap=1, wait=10, lease=30)
    assert [tuple(w) for w in slots.release(token, cap=1)] == [("a.task", ["b1"])]  # not a2's


def test_calls_waiting_on_their_thread_take_turns_with_their_tenant():
    """A heartbeat's or a summarizer's call waits for the slot on its thread, in its
    tenant's turn like a message."""
    from qorven.runtime import route_slots

    base_url = f"http://slots.example/{time.monotonic_ns()}"
    order: list[str] = []

    def wait_then_note(name: str, tenant: int) -> None:
        with route_slots.slot_tenant(tenant), route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
            order.append(name)

    with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
        waiters = [threading.Thread(target=wait_then_note, args=(name, tenant), name=name)
                   for name, tenant in [("a1", 1), ("a2", 1), ("a3", 1), ("b1", 2)]]
        _queued_one_by_one(base_url, waiters)
    for waiter in waiters:
        waiter.join(10)
    assert order == ["a1", "b1", "a2", "a3"]


def _ticketed(base_url: str, ticket: str, *, wait: float = 10) -> bool:
    """One look for a slot as `ticket`, as a worker's task takes it: True if it got in."""
    from qorven.runtime import route_slots

    try:
        with route_slots.slot_ticket(ticket), route_slots.route_slot(base_url=base_url, cap=1, wait=wait, lease=30):
            return True
    except route_slots.SlotWait as waiting:
        assert 0 < waiting.after <= route_slots.COME_BACK_MOST
        return False


def test_a_waiter_that_comes_back_for_a_slot_keeps_its_place_in_the_queue():
    """A call that finds no free slot ends (its task comes back on the worker's timer);
    its ticket stays in the queue, so one that came after it does not go first."""
    from qorven.runtime import route_slots

    base_url = f"http://slots.example/{time.monotonic_ns()}"
    with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
        assert not _ticketed(base_url, "first")
        assert not _ticketed(base_url, "second")
        assert route_slots.route_slot_waiting(base_url=base_url) == 2
    assert not _ticketed(base_url, "second")  # the slot is free, but it is first's
    assert _ticketed(base_url, "first")
    assert _ticketed(base_url, "second")
    assert route_slots.route_slot_waiting(base_url=base_url) == 0


def test_a_freed_slot_names_the_task_of_each_ticket_first_in_line_once():
    """What a holder's release sends at once: the task of each waiting ticket a slot is
    free for, in the queue's order, each once until it looks again; a ticket on its way
    to a slot counts as first in line, and one a slot was already sent for is not sent
    again when it enters."""
    from qorven.runtime import route_slots

    base_url = f"http://slots.example/{time.monotonic_ns()}"
    slots = route_slots._slots(base_url)
    held = [slots.acquire(cap=2, wait=1, lease=30) for _ in range(2)]  # both slots, by calls on their thread
    for name in ("first", "second", "third"):
        with pytest.raises(route_slots.SlotWait):
            with route_slots.slot_ticket(name, wake=("a.task", [name])):
                with route_slots.route_slot(base_url=base_url, cap=2, wait=10, lease=30):
                    pass
    assert [tuple(w) for w in slots.release(held[0], cap=2)] == [("a.task", ["first"])]
    assert [tuple(w) for w in slots.release(held[1], cap=2)] == [("a.task", ["second"])]  # first: sent already
    token, due = slots.enter(ticket="first", wake=("a.task", ["first"]), cap=2, wait=10, lease=30)
    assert due == []  # second's is sent already
    assert route_slots.route_slot_waiting(base_url=base_url) == 2
    assert [tuple(w) for w in slots.release(token, cap=2)] == [("a.task", ["third"])]


def test_a_look_before_a_first_call_queues_nothing():
    """A turn looks at its slot before it builds its prompt, and may then make no call at
    all (it rotates its conversation for a manual compaction, and its message is carried
    into the next one). A ticket that was not waiting is not queued by that look: at the
    head of the queue, it held every other call back until its place lapsed (30 s)."""
    from qorven.runtime import route_slots

    base_url = f"http://slots.example/{time.monotonic_ns()}"
    with route_slots.slot_ticket("rotated", wake=("a.task", ["rotated"])):
        route_slots.route_slot_look(base_url=base_url, cap=1, wait=10)
    assert route_slots.route_slot_waiting(base_url=base_url) == 0
    assert _ticketed(base_url, "next")


def test_a_waiter_that_never_comes_back_frees_the_queue_once_its_presence_runs_out(monkeypatch):
    from qorven.runtime import route_slots

    monkeypatch.setattr(route_slots, "TICKET_PRESENCE", 1)
    base_url = f"http://slots.example/{time.monotonic_ns()}"
    with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
        assert not _ticketed(base_url, "lost")  # its task is lost: it never looks again
    started = time.monotonic()
    while not _ticketed(base_url, "next"):
        assert time.monotonic() - started < 5, "the lost waiter kept the queue"
        time.sleep(0.05)
    assert 0.5 < time.monotonic() - started < 3
    with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
        assert not _ticketed(base_url, "lost too")
    started = time.monotonic()
    with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):  # a call waiting on its thread
        assert 0.5 < time.monotonic() - started < 3


def test_a_waiter_coming_back_past_its_wait_since_its_first_look_gives_up():
    from qorven.runtime import route_slots

    base_url = f"http://slots.example/{time.monotonic_ns()}"
    with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
        assert not _ticketed(base_url, "late", wait=0.5)
        time.sleep(0.3)
        assert not _ticketed(base_url, "late", wait=0.5)
        time.sleep(0.3)
        with pytest.raises(route_slots.SlotTimeout):
            _ticketed(base_url, "late", wait=0.5)
        assert route_slots.route_slot_waiting(base_url=base_url) == 0


def test_a_call_outside_a_ticket_waits_on_its_thread_no_longer_than_thread_wait(monkeypatch):
    from qorven.runtime import route_slots

    monkeypatch.setattr(route_slots, "THREAD_WAIT", 0.5)
    base_url = f"http://slots.example/{time.monotonic_ns()}"
    with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
        started = time.monotonic()
        with pytest.raises(route_slots.SlotTimeout):
            with route_slots.route_slot(base_url=base_url, cap=1, wait=180, lease=30):
                pass
        assert time.monotonic() - started < 2


def test_a_slot_whose_holder_died_frees_when_its_lease_runs_out(settings):
    from qorven.runtime import route_slots

    if not settings.REDIS_URL:
        pytest.skip("across processes only: in one process a holder cannot die and leave its slot")
    base_url = f"http://slots.example/{time.monotonic_ns()}"
    slots = route_slots._RedisSlots(route_slots.hashlib.sha256(base_url.encode()).hexdigest()[:24])
    slots.acquire(cap=1, wait=1, lease=0.5)  # taken, never released: its process died
    started = time.monotonic()
    with route_slots.route_slot(base_url=base_url, cap=1, wait=5, lease=30):
        waited = time.monotonic() - started
    assert 0.3 < waited < 3


def test_a_slot_held_by_a_message_whose_call_died_is_freed_when_that_message_comes_back(settings):
    """A message's call holds the one slot when its worker dies; a message of another
    tenant waits. The first message's turn, taken over, comes back for its slot: the slot
    its dead try held is freed, and goes first to the message that waited. Before, it
    stayed taken until its lease ran out (a call's deadline and timeout, 240 s by default),
    from the message itself too, which then failed as the model being unavailable."""
    from qorven.runtime import route_slots

    if not settings.REDIS_URL:
        pytest.skip("across processes only: in one process a holder cannot die and leave its slot")
    base_url = f"http://slots.example/{time.monotonic_ns()}"
    slots = route_slots._slots(base_url)
    slots.enter(ticket="a1", lane="1", wake=None, cap=1, wait=10, lease=300)  # never released: its worker died
    assert _ticketed_as(base_url, "b1", 2) is not True
    assert _ticketed_as(base_url, "a1", 1) is not True  # back: its dead try's slot is b1's, who waited
    assert _ticketed_as(base_url, "b1", 2) is True
    assert _ticketed_as(base_url, "a1", 1) is True
    assert route_slots.route_slot_waiting(base_url=base_url) == 0
