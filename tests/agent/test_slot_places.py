"""A message's place in the queue of its capped route (`max_concurrency`) while its
conversation is compacted or its Qor's route changes, and what an answered message does
with the route's slots: a place left behind holds every later call to that server, any
tenant's, until it lapses (TICKET_PRESENCE, 30 s)."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.conf import settings as django_settings

from qorven.runtime import route_slots
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.models import Qor

from ..fakes.model_server import ModelServer, reply
from ..fakes.summarizer import FakeModel, kind_of
from .test_turns import _until, _waiting_for_a_slot_held_elsewhere, alice_token, ask, turn_runs  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def other_server():
    """A second model server, for a route the admin moves to."""
    server = ModelServer().start()
    yield server
    server.stop()


def _answered_exchange(world) -> Session:
    """Something for /compact to condense, answered before the test's message."""
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="remember my dentist is Dr Okafor", channel="web",
                   sender_name="Alice")
    message_append(session=session, role="assistant", content="Noted.", channel="web")
    session.refresh_from_db()
    Session.objects.filter(pk=session.pk).update(replied_through_seq=session.last_seq)
    return session


def _active(world) -> Session:
    return Session.objects.get(tenant=world.tenant_a, user=world.alice, kind="canonical", state="active")


def test_compact_while_a_message_waits_for_the_routes_slot_is_not_held_behind_that_message(
    client, world, alice_token, model_server, drain, turn_runs, monkeypatch  # noqa: F811
):
    """/compact while "hello?" waits at the head of its route's queue: the summarizer's
    calls (on the same server, waiting on their thread) waited behind its place, kept
    for a call that comes only after the compaction, until their wait ran out: /compact
    failed, and the message was answered in the full conversation."""
    monkeypatch.setattr(route_slots, "THREAD_WAIT", 2.0)
    old = _answered_exchange(world)
    with _waiting_for_a_slot_held_elsewhere(client, world, alice_token, model_server, turn_runs):
        model_server.default = FakeModel()
        ask(client, alice_token, "/compact")
    drain()
    assert not Message.objects.filter(tenant=world.tenant_a, metadata__notice="compact_failed").exists()
    new = _active(world)
    assert new.pk != old.pk
    question = Message.objects.get(session=old, content="hello?")
    copy = Message.objects.get(session=new, metadata__carried_from__seq=question.seq)
    assert copy.answer_state == "answered"
    assert Message.objects.get(session=new, role="assistant").metadata["reply_to"] == copy.seq
    assert [kind_of(r) for r in model_server.requests] == ["flush", "summary", "main"]
    assert route_slots.route_slot_waiting(base_url=model_server.base_url) == 0


def test_a_waiting_message_carried_by_compact_keeps_its_place_in_the_routes_queue(
    client, world, alice_token, model_server, drain, turn_runs, settings  # noqa: F811
):
    """The summarizer has its own route (no cap), so "hello?" keeps its place at the head
    of the main route's queue while /compact runs. The copy carried to the fresh
    conversation waited as a new message at the back of the queue, behind the original's
    place, which lapsed only after 30 s."""
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]  # a Qor's own route to the fake, on loopback
    Qor.objects.filter(pk=world.qor_a.pk).update(summarizer_base_url=model_server.base_url)
    old = _answered_exchange(world)
    with _waiting_for_a_slot_held_elsewhere(client, world, alice_token, model_server, turn_runs):
        model_server.default = FakeModel()
        ask(client, alice_token, "/compact")
        _until(lambda: Message.objects.filter(tenant=world.tenant_a, metadata__has_key="carried_from").exists())
        runs = len(turn_runs)
        _until(lambda: len(turn_runs) >= runs + 2)  # the copy's turn has come, and come back
        assert route_slots.route_slot_waiting(base_url=model_server.base_url) == 1
    drain()
    new = _active(world)
    assert new.pk != old.pk
    copy = Message.objects.get(session=new, metadata__has_key="carried_from")
    assert copy.content == "hello?" and copy.answer_state == "answered"
    assert [kind_of(r) for r in model_server.requests] == ["flush", "summary", "main"]
    assert route_slots.route_slot_waiting(base_url=model_server.base_url) == 0


def test_a_waiting_message_whose_qors_route_is_edited_gives_up_its_place_in_the_old_routes_queue(
    client, world, alice_token, model_server, other_server, drain, turn_runs, settings  # noqa: F811
):
    """The admin points Aria's main route at another server while "hello?" waits for the
    old one's slot. Its turn comes back, finds the new route and is answered there; its
    place at the head of the old route's queue stayed until it lapsed (30 s), every later
    call to the old server waiting behind it."""
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]  # a Qor's own route to the fake, on loopback
    other_server.default = reply("From the new server.")
    with _waiting_for_a_slot_held_elsewhere(client, world, alice_token, model_server, turn_runs):
        Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=other_server.base_url)
        _until(lambda: len(turn_runs) == 2)  # it came back, and was answered
        assert route_slots.route_slot_waiting(base_url=model_server.base_url) == 0
    drain()
    answered = Message.objects.get(tenant=world.tenant_a, role="assistant")
    assert answered.content == "From the new server."
    assert model_server.requests == [] and len(other_server.requests) == 1


@contextmanager
def _redis_commands(seen: list[str]) -> Iterator[None]:
    """The commands the app sends to the route's slots in this test's Redis db meanwhile
    (as MONITOR shows them; not those a script runs)."""
    import redis

    client = redis.Redis.from_url(django_settings.REDIS_URL)
    db = client.connection_pool.connection_kwargs.get("db", 0)
    end = "qorven-test-end"
    ready = threading.Event()

    def read() -> None:
        with client.monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                if command["db"] != db or command.get("client_type") == "lua":
                    continue
                if end in command["command"]:
                    return
                if "route-slots:" in command["command"]:
                    seen.append(command["command"].split(" ", 1)[0])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(5)
    try:
        yield
    finally:
        client.echo(end)
        reader.join(10)


@pytest.mark.skipif(not django_settings.REDIS_URL, reason="counts what reaches Redis (REDIS_URL)")
def test_an_answered_message_on_a_capped_route_sends_the_slots_no_more_than_its_look_and_its_call(
    client, world, alice_token, model_server, drain  # noqa: F811
):
    """A message that never waited looks for its slot, makes its call and frees the slot
    as it ends: as many commands reach the slots as for a look and a call made alone.
    Before, it then gave up a place it did not have (two more round trips)."""
    Qor.objects.filter(pk=world.qor_a.pk).update(main_max_concurrency=2)
    model_server.default = reply("Hi.")
    alone: list[str] = []
    with _redis_commands(alone), route_slots.slot_ticket("alone"):
        route_slots.route_slot_look(base_url=model_server.base_url, cap=2, wait=5)
        with route_slots.route_slot(base_url=model_server.base_url, cap=2, wait=5, lease=30):
            pass
    turn: list[str] = []
    with _redis_commands(turn):
        ask(client, alice_token, "hello?")
        drain()
    assert Message.objects.get(tenant=world.tenant_a, role="assistant").content == "Hi."
    assert alone and turn == alone


def test_a_waiting_message_whose_route_is_edited_after_the_cache_lost_its_note_still_gives_up_its_old_place(
    client, world, alice_token, model_server, other_server, drain, turn_runs, settings  # noqa: F811
):
    """Where a waiting message's place is (its server's queue) was noted in the cache only.
    A note the cache lost while the place stayed (evicted under maxmemory, or its write
    refused by a Redis that blinked as the message queued) left the place behind when the
    admin moved the route: every later call to the old server waited behind it until it
    lapsed (30 s). A cache flushed with the queue, or Redis restarted without its data,
    loses the place too, and the message queues anew, noting it again."""
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]  # a Qor's own route to the fake, on loopback
    other_server.default = reply("From the new server.")
    with _waiting_for_a_slot_held_elsewhere(client, world, alice_token, model_server, turn_runs):
        _cache_lost_but_the_slots()
        Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=other_server.base_url)
        _until(lambda: len(turn_runs) == 2)  # it came back, and was answered
        assert route_slots.route_slot_waiting(base_url=model_server.base_url) == 0
    drain()
    assert Message.objects.get(tenant=world.tenant_a, role="assistant").content == "From the new server."


def _cache_lost_but_the_slots() -> None:
    """The cache's own keys gone (this run's), the route's queue kept: as keys evicted
    under maxmemory (the slots' lists have no expiry), or a note never written."""
    from django.core.cache import cache

    if not django_settings.REDIS_URL:
        cache.clear()  # the process's memory: the slots are not in it
        return
    import redis

    client = redis.Redis.from_url(django_settings.REDIS_URL)
    keys = list(client.scan_iter(match=cache.make_key("*"), count=1000))
    if keys:
        client.delete(*keys)
