"""A route capped to a number of calls at once (its slots), with a fallback: the cap holds
over real turns; a route busy with our own calls sends a call to the fallback without
cooling down; a call going to the fallback gives up its place in the route's queue."""
from __future__ import annotations

import json
import threading
import time

import pytest

from qorven.runtime.cooldowns import cooldown_get
from sessions_app.models import Message
from tenancy.models import Qor
from tenancy.services import api_token_create

from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_concurrency_cap_holds_with_five_simultaneous_turns(
    client, world, route_servers, drain, settings
):
    from ..factories.tenancy import MembershipFactory, UserFactory

    primary, _ = route_servers
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


def _capped_routes(primary, fallback=None) -> list:
    from qorven.llm.routes import ModelRoute

    routes = [ModelRoute(base_url=primary.base_url, model="primary-model", num_ctx=8192, api_key="key-primary",
                         max_concurrency=1)]
    if fallback is not None:
        routes.append(ModelRoute(base_url=fallback.base_url, model="fallback-model", num_ctx=8192,
                                 api_key="key-fallback", label="main fallback 1"))
    return routes


def test_a_route_busy_with_our_own_calls_does_not_cool_down(route_servers, monkeypatch):
    """A call that waited out its wait for a capped route's slot (a heartbeat's or the
    summarizer's THREAD_WAIT, a turn's QORVEN_MODEL_DEADLINE) found the server busy with
    calls of ours, not failing: this call goes on to the fallback, but the route does not
    cool down, so every other call (of every tenant) is still sent to it. Before, the wait
    cooled it down like a 5xx: for a minute every call went to the fallback."""
    from qorven.llm.failover import FailoverProvider
    from qorven.runtime import route_slots

    monkeypatch.setattr(route_slots, "THREAD_WAIT", 0.2)
    primary, fallback = route_servers
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


def test_a_busy_route_without_a_fallback_fails_the_call_as_busy_without_cooling(route_servers, monkeypatch):
    from qorven.llm import SlotsBusy
    from qorven.llm.failover import FailoverProvider
    from qorven.runtime import route_slots

    monkeypatch.setattr(route_slots, "THREAD_WAIT", 0.2)
    primary, _ = route_servers
    primary.default = reply("From the primary.")
    with route_slots.route_slot(base_url=primary.base_url, cap=1, wait=5, lease=60):
        with pytest.raises(SlotsBusy):
            FailoverProvider(_capped_routes(primary)).complete(messages=[{"role": "user", "content": "hi"}])
    assert cooldown_get(base_url=primary.base_url, model="primary-model") is None
    assert primary.requests == []


def test_a_waiter_whose_route_starts_cooling_gives_up_its_place_as_it_goes_to_the_fallback(route_servers):
    """A message waiting in a capped route's queue that goes to the fallback (the route
    started cooling down meanwhile, another call found it failing) gives up its place
    there: it held every other waiter back until it lapsed, 30 s."""
    from qorven.llm import WaitingForSlot
    from qorven.llm.failover import FailoverProvider
    from qorven.runtime import route_slots
    from qorven.runtime.cooldowns import cooldown_start

    primary, fallback = route_servers
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


def test_a_call_that_finds_its_looked_at_route_cooling_gives_up_its_place_there(route_servers):
    """The turn looked (its route's slot free for it, its place at the head of the queue),
    then the route started cooling before its call: the call goes to the fallback and
    gives the place up, not holding the free slot from every other waiter."""
    from qorven.llm import WaitingForSlot
    from qorven.llm.failover import FailoverProvider
    from qorven.runtime import route_slots
    from qorven.runtime.cooldowns import cooldown_start

    primary, fallback = route_servers
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
