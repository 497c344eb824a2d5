"""A capped model route (`max_concurrency` 1) shared by two workspaces, its one slot held
by a call of tenant A's while messages of both workspaces wait for it, when Redis loses
its data (stopped and started again: the queue, the holders and the waiting messages'
come-backs gone), at once or after 20 s away, on PostgreSQL and a Redis server of the
test's own with `qorven serve`, `qorven worker` and `qorven beat`, none restarted.

Away for 20 s, the call holding the slot answers while Redis is away with a tool call,
so the same message's next call is due then: it waits for Redis as for a slot taken, and
uses none of its tries. Every message is answered once, none fails,
and the route's queue ends empty. The queue lost, the messages queue again as they came:
each workspace's in the order they came (the sweeper finds them in the database).
"""
from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from qorven.runtime import route_slots
from sessions_app.models import Message

from ..fakes.model_server import Step, reply
from ..processes import Processes, free_port, needs_postgres_and_redis, wait_for
from .capped_route import senders_capped, three_waiting_behind_a1
from .layout import RedisOfOurOwn, first_error, layout_started, server_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability, needs_postgres_and_redis]

# One try each: a message that counted Redis's absence as its model failing fails.
ENV = {"QORVEN_SWEEP_INTERVAL": "2", "QORVEN_TURN_LEASE": "5", "QORVEN_MODEL_DEADLINE": "60",
       "QORVEN_MODEL_TIMEOUT": "30", "QORVEN_ANSWER_ATTEMPTS": "1"}


@pytest.mark.parametrize("away", [0.5, 20.0], ids=["restarted", "away_20s"])
def test_redis_losing_a_capped_routes_queue_leaves_every_waiting_message_answered_once(
    away, world, model_server, platform, settings
):
    tokens = senders_capped(world)
    held = threading.Event()
    first = [True]

    def model(body):
        if first[0]:
            first[0] = False
            return Step(tool_calls=[("memory_search", {"query": "plans"})], hold=held)
        return reply("Answered.")

    model_server.default = model
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    redis = RedisOfOurOwn()
    settings.REDIS_URL = redis.url  # the queue, as the processes see it
    env = {**server_env(model_server, platform), **ENV, "REDIS_URL": redis.url}
    processes = Processes()
    try:
        server, worker = layout_started(processes, env, port, worker_slots=2, beat=True)
        three_waiting_behind_a1(base, tokens, model_server, processes, worker)
        redis.stop()
        if away > 1:
            time.sleep(1)
            held.set()  # its tool call comes, and its next call is due, while Redis is away
        time.sleep(away)
        redis.start()
        held.set()
        back_at = len(worker.output)
        settled = Message.objects.filter(role="user").exclude(answer_state="pending")
        wait_for(lambda: settled.count() == 4, 150, processes=processes)
        time.sleep(3)  # an answer twice would come now
        waiting = route_slots.route_slot_waiting(base_url=model_server.base_url)
    finally:
        processes.stop()
        redis.stop()

    states = dict(Message.objects.filter(role="user").values_list("content", "answer_state"))
    after = worker.output[back_at:]
    asked_all = [b["messages"][-1]["content"] for b in model_server.requests]
    print(f"redis away {away} s: {states}; the model was asked {asked_all}; "
          f"worker tracebacks after: {after.count('Traceback')}, warnings {after.count('WARNING')}, "
          f"errors {after.count('ERROR')}; server tracebacks {server.output.count('Traceback')}; "
          f"the worker's first after: {first_error(after)}")
    assert states == {"a1": "answered", "b1": "answered", "a2": "answered", "b2": "answered"}, (
        f"worker, first error: {first_error(worker.output)}")
    answers = Message.objects.filter(role="assistant", tool_calls__isnull=True)  # not a tool round's
    replies = Counter(answers.values_list("session_id", "metadata__reply_to"))
    assert len(replies) == 4 and set(replies.values()) == {1}
    assert waiting == 0
    asked = [b["messages"][-1]["content"][-2:] for b in model_server.requests]
    assert [m for m in asked if m in ("b1", "b2")] == ["b1", "b2"]  # tenant B's in the order they came
