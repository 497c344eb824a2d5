"""A capped model route (`max_concurrency` 1) shared by two workspaces, its one slot held
by a call of tenant A's while messages of both workspaces wait for it, when the only
`qorven worker` is killed outright (SIGKILL to its process group: the call holding the
slot dies with it, and so do the waiting messages' come-backs, kept in its memory) and
started again, on PostgreSQL + Redis with `qorven serve` and `qorven beat`.

Every message is answered once, none fails, and the route's queue ends empty: the slot
the dead call held is not left taken until its lease runs out (the model's deadline and
timeout: longer than a waiting message may wait, so each would fail as the model being
unavailable).
"""
from __future__ import annotations

import threading
from collections import Counter

import pytest

from qorven.runtime import route_slots
from sessions_app.models import Message

from ..fakes.model_server import reply
from ..processes import Processes, free_port, needs_postgres_and_redis, wait_for
from .capped_route import senders_capped, three_waiting_behind_a1
from .layout import first_error, layout_started, server_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability, needs_postgres_and_redis]

# A call's deadline and timeout: a dead call's slot lease is their sum (70 s), longer than
# a message waits for a slot (40 s); one try each, so a wait that runs out fails.
ENV = {"QORVEN_SWEEP_INTERVAL": "2", "QORVEN_TURN_LEASE": "5", "QORVEN_MODEL_DEADLINE": "40",
       "QORVEN_MODEL_TIMEOUT": "30", "QORVEN_ANSWER_ATTEMPTS": "1"}


def _asked(model_server) -> list[str]:
    """The messages the model was asked to answer, in the order it was asked."""
    return [body["messages"][-1]["content"] if isinstance(body["messages"][-1]["content"], str)
            else str(body["messages"][-1]["content"]) for body in model_server.requests]


def test_a_worker_killed_holding_a_capped_routes_slot_leaves_every_waiting_message_answered_once(
    world, model_server, platform
):
    tokens = senders_capped(world)
    held = threading.Event()
    first = [True]

    def model(body):
        if first[0]:
            first[0] = False
            return reply("dies with its worker", hold=held)
        return reply("Answered.")

    model_server.default = model
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**server_env(model_server, platform), **ENV}
    processes = Processes()
    try:
        _, worker = layout_started(processes, env, port, worker_slots=4, beat=True)
        three_waiting_behind_a1(base, tokens, model_server, processes, worker)
        worker.kill()
        held.set()  # its answer goes to no one
        worker = processes.worker(env, concurrency=4)
        settled = Message.objects.filter(role="user").exclude(answer_state="pending")
        wait_for(lambda: settled.count() == 4, 150, processes=processes)
    finally:
        processes.stop()

    states = dict(Message.objects.filter(role="user").values_list("content", "answer_state"))
    print(f"after the kill: {states}; the model was asked {_asked(model_server)}")
    assert states == {"a1": "answered", "b1": "answered", "a2": "answered", "b2": "answered"}, (
        f"worker, first error: {first_error(worker.output)}")
    replies = Counter(Message.objects.filter(role="assistant").values_list("session_id", "metadata__reply_to"))
    assert len(replies) == 4 and set(replies.values()) == {1}
    assert route_slots.route_slot_waiting(base_url=model_server.base_url) == 0
