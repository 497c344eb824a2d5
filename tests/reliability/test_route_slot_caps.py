"""A capped model route shared by two workspaces whose cap the host edits while messages
wait for its slots, through `qorven serve`, `qorven worker` and `qorven beat` on
PostgreSQL + Redis: raised, the waiting messages take the new slots without waiting for
the call holding the old one; lowered, no more calls than the new cap are let in once the
calls holding slots end. Every message is answered once and the queue ends empty."""
from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from qorven.runtime import route_slots
from sessions_app.models import Message
from tenancy.models import Qor

from ..fakes.model_server import reply
from ..processes import Processes, free_port, needs_postgres_and_redis, wait_for
from .capped_route import TEXTS, say, senders_capped
from .layout import layout_started, server_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability, needs_postgres_and_redis]


def _cap(world, cap: int) -> None:
    for qor in Qor.objects.filter(pk__in=[world.qor_a.pk, world.qor_b.pk]):
        qor.main_max_concurrency = cap
        qor.save(update_fields=["main_max_concurrency"])


def test_a_routes_cap_raised_then_lowered_while_messages_wait_lets_in_as_many_calls_as_it_says(
    world, model_server, platform
):
    tokens = senders_capped(world)
    gates = {text: threading.Event() for text in TEXTS}

    def model(body):
        return reply(f"For {body['messages'][-1]['content'][-2:]}.", hold=gates[body["messages"][-1]["content"][-2:]])

    model_server.default = model
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**server_env(model_server, platform), "QORVEN_SWEEP_INTERVAL": "2"}
    processes = Processes()
    try:
        _, worker = layout_started(processes, env, port, worker_slots=6, beat=True)
        for queued, text in enumerate(TEXTS):  # each in the queue before the next is sent
            say(base, tokens[text], text)
            assert wait_for(lambda: model_server.in_flight == 1 and route_slots.route_slot_waiting(
                base_url=model_server.base_url) == queued, 30, processes=processes), worker.output[-3000:]
        assert model_server.in_flight == 1
        _cap(world, 3)  # raised: two of the three waiting go in, a1 still answering
        assert wait_for(lambda: model_server.in_flight == 3, 30, processes=processes), worker.output[-3000:]
        asked_raised = [b["messages"][-1]["content"][-2:] for b in model_server.requests]
        _cap(world, 1)  # lowered while three hold slots
        gates["a1"].set()
        answered = Message.objects.filter(role="user", answer_state="answered")
        assert wait_for(lambda: answered.count() == 1, 30, processes=processes), worker.output[-3000:]
        time.sleep(4)  # b2 is woken by a1's slot freed, and comes back on its timer (3 s at most)
        held_lowered = (model_server.in_flight, route_slots.route_slot_waiting(base_url=model_server.base_url))
        for gate in gates.values():
            gate.set()
        assert wait_for(lambda: Message.objects.filter(role="user", answer_state="answered").count() == 4, 60,
                        processes=processes), worker.output[-3000:]
        waiting = route_slots.route_slot_waiting(base_url=model_server.base_url)
    finally:
        for gate in gates.values():
            gate.set()
        processes.stop()

    print(f"asked while raised: {asked_raised}; most at once {model_server.most_in_flight}; "
          f"after a1, lowered: {held_lowered} (in flight, waiting)")
    assert asked_raised == ["a1", "b1", "a2"]  # the tenants in turn
    assert model_server.most_in_flight == 3
    assert held_lowered == (2, 1)  # b1 and a2 answering, b2 waiting: two hold more than the cap of 1
    replies = Counter(Message.objects.filter(role="assistant").values_list("session_id", "metadata__reply_to"))
    assert len(replies) == 4 and set(replies.values()) == {1}
    assert waiting == 0
