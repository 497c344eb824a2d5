"""A role's model routes, each with its own key, failing over in order: a route that is
down or rate-limited cools down and the turn moves on to the next one in the same turn;
a refusal does not fail over. Scripted model servers on separate ports."""
from __future__ import annotations

import json
import threading
import time

import pytest
from django.core.cache import cache

from qorven.runtime.cooldowns import cooldown_clear, cooldown_get
from sessions_app.models import Message
from tenancy.models import ModelFallback, Qor, Usage
from tenancy.services import api_token_create

from ..fakes.model_server import ModelServer, dropped, error, reply
from .test_model_endpoints import ask, change_form

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def servers(settings):
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]  # the fakes listen on loopback
    settings.QORVEN_MODEL_RETRIES = 0
    started = [ModelServer().start(), ModelServer().start()]  # new ports: no cooldown of an earlier test
    yield started
    for server in started:
        for model in ("primary-model", "fallback-model"):
            for key in ("", "key-primary", "key-fallback"):
                cooldown_clear(base_url=server.base_url, model=model, key=key)
        server.stop()


def _routes(world, primary, fallback):
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=primary.base_url, main_model="primary-model",
                                                 main_api_key="key-primary")
    ModelFallback.objects.create(qor=world.qor_a, role="main", position=1, base_url=fallback.base_url,
                                 model="fallback-model", api_key="key-fallback")


def _answers():
    return list(Message.objects.filter(role="assistant").order_by("seq").values_list("content", "metadata"))


def test_a_rate_limited_route_fails_over_in_the_same_turn_then_is_skipped_while_it_cools(client, world, servers,
                                                                                        drain):
    primary, fallback = servers
    _routes(world, primary, fallback)
    primary.default = error(429, "slow down", headers={"Retry-After": "1"})
    fallback.default = reply("From the fallback.")

    asked_at = time.time()
    ask(client, world, "first")
    drain()
    assert len(primary.requests) == 1 and len(fallback.requests) == 1
    [(content, metadata)] = _answers()
    assert content == "From the fallback." and metadata["route"] == "main fallback 1"
    assert fallback.requests[0]["model"] == "fallback-model"
    # The key's rate limit: the route cools for that key (tests/qorven/test_cooldown_scope.py).
    cooling = cooldown_get(base_url=primary.base_url, model="primary-model", key="key-primary")
    # A minute from when it failed (however long the turn took to finish on a loaded machine).
    assert cooling is not None and asked_at + 60 <= cooling.until <= time.time() + 60 and cooling.failures == 1

    ask(client, world, "second")  # the primary cools down: not called at all
    drain()
    assert len(primary.requests) == 1 and len(fallback.requests) == 2
    assert [c for c, _ in _answers()] == ["From the fallback.", "From the fallback."]
    assert list(Usage.objects.values_list("role", "route", "calls")) == [("main", "main fallback 1", 2)]


def test_each_route_gets_only_its_own_key(client, world, servers, drain):
    primary, fallback = servers
    _routes(world, primary, fallback)
    primary.add(error(503, "down"))
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")
    ask(client, world, "first")
    drain()
    assert primary.authorizations == ["Bearer key-primary"]
    assert fallback.authorizations == ["Bearer key-fallback"]
    assert "key-primary" not in str(Message.objects.values_list("content", "metadata"))


def test_a_refusal_is_the_answer_and_does_not_fail_over(client, world, servers, drain):
    """The request itself was refused (a content filter, an invalid request): another
    server would be asked the same thing."""
    primary, fallback = servers
    _routes(world, primary, fallback)
    primary.default = error(400, "this request is not allowed")
    fallback.default = reply("From the fallback.")
    ask(client, world, "hello")
    drain()
    assert fallback.requests == []
    assert Message.objects.get(role="system").metadata["notice"] == "model_refused"
    assert cooldown_get(base_url=primary.base_url, model="primary-model") is None


@pytest.mark.parametrize("status", [401, 402, 404])
def test_a_route_whose_key_model_or_quota_is_wrong_fails_over_and_cools_down(client, world, servers, drain, status):
    """A revoked key, a model the server does not have, a spent quota: the route cannot
    answer anyone, which is what fallbacks are for. The turn was failed with the fallback
    standing by; it now moves on to it, and the broken route is skipped while it cools."""
    primary, fallback = servers
    _routes(world, primary, fallback)
    primary.default = error(status, "no")
    fallback.default = reply("From the fallback.")
    ask(client, world, "hello")
    drain()
    assert [c for c, _ in _answers()] == ["From the fallback."]
    assert not Message.objects.filter(role="system").exists()
    assert cooldown_get(base_url=primary.base_url, model="primary-model", key="key-primary") is not None
    ask(client, world, "again")
    drain()
    assert len(primary.requests) == 1 and len(fallback.requests) == 2


def test_when_every_route_is_wrong_the_first_ones_failure_is_said(client, world, servers, drain):
    primary, fallback = servers
    _routes(world, primary, fallback)
    primary.default = error(401, "bad key")
    fallback.default = error(402, "quota")
    ask(client, world, "hello")
    drain()
    assert len(fallback.requests) == 1
    assert Message.objects.get(role="system").metadata["notice"] == "model_misconfigured"
    # Both cool down now, and waiting for them would not help: the next message is told the
    # same at once, not "unavailable, trying again later".
    ask(client, world, "and now?")
    drain()
    assert len(primary.requests) == 1 and len(fallback.requests) == 1
    notices = Message.objects.filter(role="system").order_by("seq")
    assert [n.metadata["notice"] for n in notices] == ["model_misconfigured", "model_misconfigured"]


def test_an_answer_clears_a_cooldown_and_every_route_cooling_waits_for_the_first_to_end(client, world, servers,
                                                                                      drain, settings):
    primary, fallback = servers
    _routes(world, primary, fallback)
    settings.QORVEN_ANSWER_ATTEMPTS = 1  # one try: the notice shows what the turn decided
    primary.default = error(500, "down")
    fallback.default = error(502, "down too")
    ask(client, world, "nobody answers")
    drain()
    assert len(primary.requests) == 1 and len(fallback.requests) == 1
    assert Message.objects.get(role="user").answer_state == "failed"
    before = len(primary.requests), len(fallback.requests)
    ask(client, world, "still cooling")
    drain()
    assert (len(primary.requests), len(fallback.requests)) == before  # neither called while both cool

    for server, model in ((primary, "primary-model"), (fallback, "fallback-model")):  # the waits end
        _expire(server.base_url, model)
    fallback.default = reply("Back.")
    ask(client, world, "again")
    drain()
    assert _answers()[-1][0] == "Back."
    assert cooldown_get(base_url=fallback.base_url, model="fallback-model") is None  # cleared by the answer
    again = cooldown_get(base_url=primary.base_url, model="primary-model")  # failed again: twice as long
    assert again.failures == 2 and 119 <= again.remaining <= 120


def _expire(base_url: str, model: str) -> None:
    """The route's cooldown as it is once its wait has passed."""
    from qorven.runtime import cooldowns

    found = cooldown_get(base_url=base_url, model=model)
    cache.set(cooldowns._key(base_url, model), (time.time() - 1, found.failures), timeout=3600)


def test_status_and_the_admin_show_the_routes_and_their_cooldowns(host, client, world, servers, drain):
    primary, fallback = servers
    _routes(world, primary, fallback)
    primary.default = error(429, "slow down")
    fallback.default = reply("ok")
    ask(client, world, "first")
    drain()
    ask(client, world, "/status")
    drain()
    status = Message.objects.filter(role="assistant").order_by("seq").last().content
    assert "main: primary-model — cooling down for" in status
    assert "main fallback 1: fallback-model — ready" in status
    page = host.get(f"/admin/qorven/qor/{world.qor_a.pk}/change/").content.decode()
    assert "main: primary-model — cooling down for" in page  # the Qor's own route
    assert "fallback-model" in page and ">ready<" in page  # the fallback's row


def test_status_shows_a_route_whose_key_was_refused_as_cooling(client, world, servers, drain):
    """A refused key cools down that key only; /status read the server's cooldown alone and
    said the route was ready while every turn skipped it."""
    primary, fallback = servers
    _routes(world, primary, fallback)
    primary.default = error(401, "bad key")
    fallback.default = reply("ok")
    ask(client, world, "first")
    drain()
    ask(client, world, "/status")
    drain()
    status = Message.objects.filter(role="assistant").order_by("seq").last().content
    assert "main: primary-model — cooling down for" in status, status


def test_keys_are_write_only_in_the_admin(host, world):
    Qor.objects.filter(pk=world.qor_a.pk).update(main_api_key="sk-stored-secret")
    page = host.get(f"/admin/qorven/qor/{world.qor_a.pk}/change/").content.decode()
    assert "sk-stored-secret" not in page and 'name="main_api_key"' in page and "model_fallbacks-TOTAL_FORMS" in page
    response = host.post(f"/admin/qorven/qor/{world.qor_a.pk}/change/", change_form(world.qor_a, main_api_key=""))
    assert response.status_code == 302
    world.qor_a.refresh_from_db()
    assert world.qor_a.main_api_key == "sk-stored-secret"  # an empty field keeps it
    host.post(f"/admin/qorven/qor/{world.qor_a.pk}/change/", change_form(world.qor_a, main_api_key="-"))
    world.qor_a.refresh_from_db()
    assert world.qor_a.main_api_key == ""  # "-" removes it


def test_a_tenant_admin_neither_sees_nor_sets_keys_and_fallbacks(tenant_admin, world):
    Qor.objects.filter(pk=world.qor_a.pk).update(main_api_key="sk-stored-secret")
    page = tenant_admin.get(f"/admin/qorven/qor/{world.qor_a.pk}/change/").content.decode()
    assert "sk-stored-secret" not in page and "main_api_key" not in page and "model_fallbacks" not in page
    tenant_admin.post(f"/admin/qorven/qor/{world.qor_a.pk}/change/",
                      change_form(world.qor_a, main_api_key="sk-attacker", name="Renamed"))
    world.qor_a.refresh_from_db()
    assert world.qor_a.name == "Renamed" and world.qor_a.main_api_key == "sk-stored-secret"


def test_the_concurrency_cap_holds_with_five_simultaneous_turns(client, world, servers, drain, settings):
    from ..factories.tenancy import MembershipFactory, UserFactory

    primary, _ = servers
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=primary.base_url, main_model="primary-model",
                                                 main_max_concurrency=2)
    from qorven.runtime import route_slots

    answer = threading.Event()  # the model answers once the test has seen the cap hold
    primary.default = reply("Answered.", hold=answer)
    people = [world.alice, world.bob, *(UserFactory() for _ in range(3))]
    for person in people[2:]:
        MembershipFactory(tenant=world.tenant_a, user=person)
    for person in people:  # five conversations, each with a turn to run at once
        token = api_token_create(tenant=world.tenant_a, user=person)[1]
        response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "hello"}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 201
    # Two calls are answering (held) and the three others have looked and wait their turn.
    deadline = time.monotonic() + 30
    while primary.in_flight < 2 or route_slots.route_slot_waiting(base_url=primary.base_url) < 3:
        assert time.monotonic() < deadline, (primary.in_flight, route_slots.route_slot_waiting(
            base_url=primary.base_url))
        time.sleep(0.02)
    answer.set()
    drain()
    assert len(primary.requests) == 5
    assert primary.most_in_flight == 2  # side by side, never more than the cap
    assert Message.objects.filter(role="assistant", content="Answered.").count() == 5


def test_waiters_for_a_slot_go_in_arrival_order():
    from qorven.runtime import route_slots

    base_url = f"http://slots.example/{time.monotonic_ns()}"
    order: list[str] = []

    def wait_then_note(name: str) -> None:
        with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
            order.append(name)

    with route_slots.route_slot(base_url=base_url, cap=1, wait=10, lease=30):
        waiters = []
        for queued, name in enumerate("abc", start=1):
            waiter = threading.Thread(target=wait_then_note, args=(name,))
            waiter.start()
            waiters.append(waiter)
            deadline = time.monotonic() + 10
            while route_slots.route_slot_waiting(base_url=base_url) < queued:  # queued before the next one comes
                assert time.monotonic() < deadline, f"{name} never queued"
                time.sleep(0.01)
        assert order == []  # the one slot is held
    for waiter in waiters:
        waiter.join(10)
    assert order == ["a", "b", "c"]


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
        waiters = []
        for queued, (name, tenant) in enumerate([("a1", 1), ("a2", 1), ("a3", 1), ("b1", 2)], start=1):
            waiter = threading.Thread(target=wait_then_note, args=(name, tenant))
            waiter.start()
            waiters.append(waiter)
            deadline = time.monotonic() + 10
            while route_slots.route_slot_waiting(base_url=base_url) < queued:  # queued before the next one comes
                assert time.monotonic() < deadline, f"{name} never queued"
                time.sleep(0.01)
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


def test_a_connection_dropped_before_any_answer_is_tried_again_on_the_same_route(client, world, servers, drain):
    """A connection that closes without an answer (one the server had just let go of, a
    restart) is tried once more at once before the turn fails over: one such blip does not
    send the turn to the fallback and cool the route down for a minute."""
    primary, fallback = servers
    _routes(world, primary, fallback)
    primary.add(dropped())
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")
    ask(client, world, "hello")
    drain()
    assert [content for content, _ in _answers()] == ["From the primary."]
    assert len(primary.requests) == 2 and fallback.requests == []
    assert cooldown_get(base_url=primary.base_url, model="primary-model") is None


def test_a_route_that_drops_twice_fails_over_as_before(client, world, servers, drain):
    primary, fallback = servers
    _routes(world, primary, fallback)
    primary.add(dropped())
    primary.add(dropped())
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")
    ask(client, world, "hello")
    drain()
    assert [content for content, _ in _answers()] == ["From the fallback."]
    assert len(primary.requests) == 2
    assert cooldown_get(base_url=primary.base_url, model="primary-model") is not None


def test_one_tenants_revoked_key_does_not_send_another_tenants_good_key_to_its_fallback(servers):
    """A 401 says the key is wrong, not the server: a Qor calling the same server and
    model with a key of its own that works is still answered there, not skipped as
    cooling down (for up to an hour) because someone else's key was revoked."""
    from qorven.llm.failover import FailoverProvider
    from qorven.llm.routes import ModelRoute

    primary, fallback = servers
    primary.add(error(401, "invalid api key"))
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")

    def routes(key: str) -> list[ModelRoute]:
        return [ModelRoute(base_url=primary.base_url, model="primary-model", num_ctx=8192, api_key=key),
                ModelRoute(base_url=fallback.base_url, model="fallback-model", num_ctx=8192, api_key="key-fallback",
                           label="main fallback 1")]

    revoked = FailoverProvider(routes("key-revoked")).complete(messages=[{"role": "user", "content": "hi"}])
    assert revoked.content == "From the fallback."
    good = FailoverProvider(routes("key-good")).complete(messages=[{"role": "user", "content": "hi"}])
    assert good.content == "From the primary."
    assert len(primary.requests) == 2


def _capped_routes(primary, fallback=None) -> list:
    from qorven.llm.routes import ModelRoute

    routes = [ModelRoute(base_url=primary.base_url, model="primary-model", num_ctx=8192, api_key="key-primary",
                         max_concurrency=1)]
    if fallback is not None:
        routes.append(ModelRoute(base_url=fallback.base_url, model="fallback-model", num_ctx=8192,
                                 api_key="key-fallback", label="main fallback 1"))
    return routes


def test_a_route_busy_with_our_own_calls_does_not_cool_down(servers, monkeypatch):
    """A call that waited out its wait for a capped route's slot (a heartbeat's or the
    summarizer's THREAD_WAIT, a turn's QORVEN_MODEL_DEADLINE) found the server busy with
    calls of ours, not failing: this call goes on to the fallback, but the route does not
    cool down, so every other call (of every tenant) is still sent to it. Before, the wait
    cooled it down like a 5xx: for a minute every call went to the fallback."""
    from qorven.llm.failover import FailoverProvider
    from qorven.runtime import route_slots

    monkeypatch.setattr(route_slots, "THREAD_WAIT", 0.2)
    primary, fallback = servers
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")
    hi = [{"role": "user", "content": "hi"}]
    with route_slots.route_slot(base_url=primary.base_url, cap=1, wait=5, lease=60):  # held by another call
        busy = FailoverProvider(_capped_routes(primary, fallback)).complete(messages=hi)
    assert busy.content == "From the fallback."
    assert cooldown_get(base_url=primary.base_url, model="primary-model") is None
    assert route_slots.route_slot_waiting(base_url=primary.base_url) == 0
    after = FailoverProvider(_capped_routes(primary, fallback)).complete(messages=hi)
    assert after.content == "From the primary."
    assert len(primary.requests) == 1 and len(fallback.requests) == 1


def test_a_busy_route_without_a_fallback_fails_the_call_as_busy_without_cooling(servers, monkeypatch):
    from qorven.llm import SlotsBusy
    from qorven.llm.failover import FailoverProvider
    from qorven.runtime import route_slots

    monkeypatch.setattr(route_slots, "THREAD_WAIT", 0.2)
    primary, _ = servers
    primary.default = reply("From the primary.")
    with route_slots.route_slot(base_url=primary.base_url, cap=1, wait=5, lease=60):
        with pytest.raises(SlotsBusy):
            FailoverProvider(_capped_routes(primary)).complete(messages=[{"role": "user", "content": "hi"}])
    assert cooldown_get(base_url=primary.base_url, model="primary-model") is None
    assert primary.requests == []


def test_a_waiter_whose_route_starts_cooling_gives_up_its_place_as_it_goes_to_the_fallback(servers):
    """A message waiting in a capped route's queue that goes to the fallback (the route
    started cooling down meanwhile, another call found it failing) gives up its place
    there: it held every other waiter back until it lapsed, 30 s."""
    from qorven.llm import WaitingForSlot
    from qorven.llm.failover import FailoverProvider
    from qorven.runtime import route_slots
    from qorven.runtime.cooldowns import cooldown_start

    primary, fallback = servers
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")
    hi = [{"role": "user", "content": "hi"}]
    with route_slots.route_slot(base_url=primary.base_url, cap=1, wait=5, lease=60):  # held by another call
        with route_slots.slot_ticket("message:waiting"), pytest.raises(WaitingForSlot):
            FailoverProvider(_capped_routes(primary, fallback)).complete(messages=hi)
        assert route_slots.route_slot_waiting(base_url=primary.base_url) == 1
        cooldown_start(base_url=primary.base_url, model="primary-model", retry_after=None, kind="unreachable")
        with route_slots.slot_ticket("message:waiting"):
            FailoverProvider(_capped_routes(primary, fallback)).slot_look()  # the turn's look, back for its slot
            assert route_slots.route_slot_waiting(base_url=primary.base_url) == 0
            answered = FailoverProvider(_capped_routes(primary, fallback)).complete(messages=hi)
    assert answered.content == "From the fallback."
    assert route_slots.route_slot_waiting(base_url=primary.base_url) == 0


def test_a_call_that_finds_its_looked_at_route_cooling_gives_up_its_place_there(servers):
    """The turn looked (its route's slot free for it, its place at the head of the queue),
    then the route started cooling before its call: the call goes to the fallback and
    gives the place up, not holding the free slot from every other waiter."""
    from qorven.llm import WaitingForSlot
    from qorven.llm.failover import FailoverProvider
    from qorven.runtime import route_slots
    from qorven.runtime.cooldowns import cooldown_start

    primary, fallback = servers
    fallback.default = reply("From the fallback.")
    hi = [{"role": "user", "content": "hi"}]
    with route_slots.route_slot(base_url=primary.base_url, cap=1, wait=5, lease=60):
        with route_slots.slot_ticket("message:head"), pytest.raises(WaitingForSlot):
            FailoverProvider(_capped_routes(primary, fallback)).complete(messages=hi)
    with route_slots.slot_ticket("message:head"):
        FailoverProvider(_capped_routes(primary, fallback)).slot_look()  # free for it: it stays at the head
        assert route_slots.route_slot_waiting(base_url=primary.base_url) == 1
        cooldown_start(base_url=primary.base_url, model="primary-model", retry_after=None, kind="unreachable")
        answered = FailoverProvider(_capped_routes(primary, fallback)).complete(messages=hi)
    assert answered.content == "From the fallback."
    assert route_slots.route_slot_waiting(base_url=primary.base_url) == 0
