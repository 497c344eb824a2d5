"""The send gates (channels_app.send_gate): a binding sends one thing at a time, a worker
runs at most QORVEN_SEND_SLOTS sends, and a gate is let go only by the send holding it."""
from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import connection

from channels_app.send_gate import BindingBusy, GateShut, binding_free, binding_key, send_gate, send_slot_keys

from .conftest import gates_held_elsewhere

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_gate_left(settings):
    """The gates these tests use, free before and after (the cache may be shared Redis)."""
    settings.QORVEN_SEND_SLOTS = 2
    keys = [f"send:binding:{n}" for n in (7, 8, 9)] + [k for w in ("w1", "w2") for k in send_slot_keys(w)]
    cache.delete_many(keys)
    yield
    cache.delete_many(keys)


def test_a_binding_sends_one_thing_at_a_time_and_is_free_again_after(settings):
    settings.QORVEN_SEND_SLOTS = 2
    with send_gate(binding_id=7, worker="w1"):
        with pytest.raises(BindingBusy), send_gate(binding_id=7, worker="w1"):
            pass
        with send_gate(binding_id=8, worker="w1"):  # another binding takes the second slot
            with pytest.raises(GateShut), send_gate(binding_id=9, worker="w1"):
                pass
    with send_gate(binding_id=7, worker="w1"), send_gate(binding_id=8, worker="w1"):
        pass  # both gates and both slots were let go


def test_a_bot_another_worker_is_sending_on_is_busy_until_that_send_lets_go():
    with gates_held_elsewhere(binding_key(7)):
        assert not binding_free(binding_id=7)
        with pytest.raises(BindingBusy), send_gate(binding_id=7, worker="w2"):
            pass
        with send_gate(binding_id=8, worker="w2"):  # another bot is not held up
            pass
    assert binding_free(binding_id=7)
    with send_gate(binding_id=7, worker="w2"):
        pass


@pytest.mark.skipif(connection.vendor == "postgresql", reason="the cache's gates only: PostgreSQL's advisory "
                    "locks do not expire, they go with the connection holding them")
def test_a_gate_taken_over_after_it_expired_is_left_to_its_new_holder(settings):
    settings.QORVEN_SEND_SLOTS = 1
    with send_gate(binding_id=7, worker="w1"):
        # The hold ran out (a stalled send) and another send took the binding and the slot.
        cache.set("send:binding:7", "another send", 60)
        cache.set(send_slot_keys("w1")[0], "another send", 60)
    assert cache.get("send:binding:7") == "another send"
    assert cache.get(send_slot_keys("w1")[0]) == "another send"
    with pytest.raises(BindingBusy), send_gate(binding_id=7, worker="w2"):
        pass


def test_with_the_gates_in_the_cache_a_send_whose_gate_was_taken_over_claims_nothing_more(settings):
    """It stalled past its gate's expiry and another send holds the bot now: the parts it
    has not claimed are the other send's to send, in order."""
    settings.QORVEN_SEND_GATES = "cache"
    with send_gate(binding_id=7, worker="w1") as gates:
        assert gates.renew()
        cache.set("send:binding:7", "another send", 60)
        assert not gates.renew()
    assert cache.get("send:binding:7") == "another send"


def test_with_the_gates_in_the_cache_a_bot_held_is_a_key_there_until_let_go(settings):
    """QORVEN_SEND_GATES=cache, for PostgreSQL behind a pooler in transaction mode."""
    settings.QORVEN_SEND_GATES = "cache"
    with send_gate(binding_id=7, worker="w1"):
        assert cache.get("send:binding:7") is not None
        assert not binding_free(binding_id=7)
    assert cache.get("send:binding:7") is None


def test_with_the_gates_in_the_cache_a_reply_sending_longer_than_a_hold_is_not_swept_from_under_it(
    world, telegram, platform, settings, monkeypatch
):
    """A key's expiry is past the longest one send can take, and it is renewed as each part
    is claimed: a reply of many slow parts sends them all, in order, while the sweeper
    looks on past the first hold, and nothing is failed or told undelivered."""
    import threading
    import time

    from django.db import connections

    from channels_app.models import OutboundDelivery
    from channels_app.send_gate import _hold_seconds
    from channels_app.sending import deliver_message
    from channels_app.sweep import sweep
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve

    from ..fakes.platform_server import Canned
    from .conftest import pair

    settings.QORVEN_SEND_GATES = "cache"
    settings.QORVEN_PLATFORM_TIMEOUT = 2
    # A hold of 6 s, still past two calls: the reply outlasts it as one of 14 s did, in half the time.
    monkeypatch.setattr("channels_app.send_gate.HOLD_MARGIN", 2)
    hold, pace = _hold_seconds(), 0.8
    assert hold == 6
    platform.default(r"/sendMessage", Canned(body={"ok": True, "result": {"message_id": 1}}, delay=pace))
    pair(world, "telegram", "42", world.alice)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    texts = [f"part {n}" for n in range(int(hold / pace) + 3)]
    message = message_append(session=session, role="assistant", content="\n".join(texts), channel="telegram",
                             notify=False).message
    for n, text in enumerate(texts):
        OutboundDelivery.objects.create(tenant=world.tenant_a, message=message, part=n, binding=telegram,
                                        target="42", text=text)
    def send() -> None:
        try:
            deliver_message(tenant_id=world.tenant_a.pk, message_id=message.pk, worker="w1")
        finally:
            # Its thread's connection, left open, kept the test database from being dropped
            # at the run's end for PostgreSQL's 5 s.
            connections.close_all()

    sender = threading.Thread(target=send)
    started = time.monotonic()
    sender.start()
    time.sleep(hold + 1)  # the first hold has run out; a part is being sent
    assert sender.is_alive() and OutboundDelivery.objects.filter(state="sending").count() == 1
    report = sweep()
    sender.join(timeout=60)
    assert report.interrupted_sends == 0
    assert [s.json["text"] for s in platform.sent("sendMessage")] == texts
    assert set(OutboundDelivery.objects.values_list("state", flat=True)) == {"sent"}
    assert time.monotonic() - started > hold
