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


def test_with_the_gates_in_the_cache_a_bot_held_is_a_key_there_until_let_go(settings):
    """QORVEN_SEND_GATES=cache, for PostgreSQL behind a pooler in transaction mode."""
    settings.QORVEN_SEND_GATES = "cache"
    with send_gate(binding_id=7, worker="w1"):
        assert cache.get("send:binding:7") is not None
        assert not binding_free(binding_id=7)
    assert cache.get("send:binding:7") is None
