"""The embedded channel layer: the expiry rules of Channels' in-memory layer, kept
without sweeping every channel on every event."""
from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync

from qorven.runtime import layers
from qorven.runtime.layers import InMemoryChannelLayer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(layers.time, "monotonic", fake)
    return fake


def run(coro_fn, *args):
    return async_to_sync(coro_fn)(*args)


def test_every_member_of_a_group_gets_its_own_copy_of_an_event():
    layer = InMemoryChannelLayer()
    for name in ("a", "b"):
        run(layer.group_add, "chat", f"specific.inmemory!{name}")
    event = {"type": "message.new", "message": {"seq": 3, "badges": ["telegram"]}}
    run(layer.group_send, "chat", event)

    first = run(layer.receive, "specific.inmemory!a")
    first["message"]["badges"].append("changed by one consumer")
    second = run(layer.receive, "specific.inmemory!b")

    assert second == {"type": "message.new", "message": {"seq": 3, "badges": ["telegram"]}}
    assert event["message"]["badges"] == ["telegram"]  # the sender's dict is not shared either


def test_a_channel_whose_message_expired_unread_leaves_every_group(clock):
    layer = InMemoryChannelLayer(expiry=60)
    dead, alive = "specific.inmemory!dead", "specific.inmemory!alive"
    for group in ("chat", "user"):
        run(layer.group_add, group, dead)
    run(layer.group_add, "chat", alive)
    run(layer.group_send, "chat", {"type": "x", "n": 1})
    assert run(layer.receive, alive)["n"] == 1  # the live socket reads; the dead one never does

    clock.now += 61
    run(layer.group_send, "chat", {"type": "x", "n": 2})

    assert not layer.has_members("user")  # the dead channel left the group it was not sent to too
    assert run(layer.receive, alive)["n"] == 2
    assert layer._channels.get(dead) is None  # its stale message is gone, not kept for ever


def test_a_message_read_in_time_keeps_its_channel_in_its_groups(clock):
    layer = InMemoryChannelLayer(expiry=60)
    name = "specific.inmemory!reader"
    run(layer.group_add, "chat", name)
    for n in range(3):
        run(layer.group_send, "chat", {"type": "x", "n": n})
        assert run(layer.receive, name)["n"] == n
        clock.now += 50  # each read well inside the expiry; the deadlines behind it pass

    run(layer.group_send, "chat", {"type": "x", "n": 3})
    assert run(layer.receive, name)["n"] == 3


def test_group_membership_expires_unless_renewed(clock):
    layer = InMemoryChannelLayer(group_expiry=100)
    run(layer.group_add, "chat", "specific.inmemory!old")
    run(layer.group_add, "chat", "specific.inmemory!renewed")
    clock.now += 60
    run(layer.group_add, "chat", "specific.inmemory!renewed")
    clock.now += 60

    run(layer.group_send, "chat", {"type": "x"})

    assert list(layer._groups["chat"]) == ["specific.inmemory!renewed"]


def test_sockets_coming_and_going_do_not_grow_the_layers_bookkeeping():
    layer = InMemoryChannelLayer()

    async def come_and_go():  # one event loop for all of them (a loop per call costs seconds)
        await layer.group_add("chat", "specific.inmemory!stays")
        for n in range(5000):
            name = f"specific.inmemory!s{n}"
            await layer.group_add("chat", name)
            await layer.group_add("user", name)
            await layer.group_discard("chat", name)
            await layer.group_discard("user", name)

    run(come_and_go)

    assert len(layer._joins) <= 1024 + 2 * 1  # stale joins were compacted away
    assert layer._memberships == {"specific.inmemory!stays": {"chat"}}


def test_a_full_channel_misses_a_group_event_and_the_others_still_get_it():
    layer = InMemoryChannelLayer(capacity=1)
    run(layer.group_add, "chat", "specific.inmemory!slow")
    run(layer.group_add, "chat", "specific.inmemory!fast")
    run(layer.group_send, "chat", {"type": "x", "n": 1})
    assert run(layer.receive, "specific.inmemory!fast")["n"] == 1

    run(layer.group_send, "chat", {"type": "x", "n": 2})  # slow still holds n=1

    assert run(layer.receive, "specific.inmemory!fast")["n"] == 2
    assert run(layer.receive, "specific.inmemory!slow")["n"] == 1


def test_a_receive_cancelled_at_any_point_ends_on_the_configured_layer():
    """A server shutting down or a test's event loop closing cancels the live hub's read once.
    On Python 3.11, asyncio.wait_for drops a cancellation that arrives as the awaited work
    completes; redis-py sends every command through it when a socket timeout is set, so a
    receive cancelled at that moment went on reading (a loop that never closed)."""
    from channels.layers import get_channel_layer

    async def scenario():
        layer = get_channel_layer()
        still_running = []
        for steps in range(40):  # cancel after 0, 1, 2, … turns of the event loop
            channel = await layer.new_channel()
            reading = asyncio.ensure_future(layer.receive(channel))
            for _ in range(steps):
                await asyncio.sleep(0)
            reading.cancel()
            done, _ = await asyncio.wait({reading}, timeout=7)  # longer than a blocking pop
            if not done:
                still_running.append(steps)
                while not reading.done():
                    reading.cancel()
                    await asyncio.wait({reading}, timeout=1)
        return still_running

    assert async_to_sync(scenario)() == []
