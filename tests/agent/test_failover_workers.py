"""Failover across worker processes (CI's PostgreSQL + Redis pass): a route that one
worker found rate-limited is skipped by another worker while it cools down."""
from __future__ import annotations

import json
import threading

import pytest

from qorven.runtime.cooldowns import cooldown_clear
from sessions_app.models import Message
from tenancy.models import ModelFallback, Qor
from tenancy.services import api_token_create

from ..fakes.model_server import ModelServer, error, reply
from ..processes import Processes, needs_postgres_and_redis, process_env, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery_worker, needs_postgres_and_redis]


@pytest.fixture
def two_servers():
    started = [ModelServer().start(), ModelServer().start()]
    yield started
    for server, model in zip(started, ("primary-model", "fallback-model")):
        cooldown_clear(base_url=server.base_url, model=model)
        server.stop()


def _answered_on_a_worker_of_its_own(client, world, user, text: str) -> str:
    """`text` from `user`, answered by a worker process started for it and stopped after."""
    env = process_env(QORVEN_ALLOW_PRIVATE_HOSTS="127.0.0.1", QORVEN_MODEL_RETRIES="0")
    running = Processes()
    try:
        running.purge(env)
        running.worker(env, concurrency=1)
        token = api_token_create(tenant=world.tenant_a, user=user)[1]
        response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": text}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 201
        answered = Message.objects.filter(role="assistant", session__user=user)
        assert wait_for(answered.exists, 90, processes=running), "no answer in time"
        return answered.get().content
    finally:
        running.stop()


def test_a_route_one_worker_found_rate_limited_is_skipped_by_another(client, world, two_servers):
    primary, fallback = two_servers
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=primary.base_url, main_model="primary-model")
    ModelFallback.objects.create(qor=world.qor_a, role="main", base_url=fallback.base_url, model="fallback-model")
    primary.default = error(429, "slow down")
    fallback.default = reply("From the fallback.")

    assert _answered_on_a_worker_of_its_own(client, world, world.alice, "first") == "From the fallback."
    assert (len(primary.requests), len(fallback.requests)) == (1, 1)
    # Another process, which knows of the cooldown only through Redis.
    assert _answered_on_a_worker_of_its_own(client, world, world.bob, "second") == "From the fallback."
    assert (len(primary.requests), len(fallback.requests)) == (1, 2)


def test_calls_waiting_for_a_capped_routes_slot_hold_no_slot_of_a_worker_process(client, world, processes):
    """On a `qorven worker` of two slots: tenant A's route takes one call at once and its
    first answer is held until tenant B is answered. The second of A's messages waited for
    the slot on the worker's other thread, and tenant B's message waited for A's held call
    to end: it was never answered while that call was held."""
    from qorven.runtime.route_slots import route_slot_waiting

    from ..factories.tenancy import MembershipFactory, UserFactory

    server = ModelServer().start()
    first = threading.Event()
    try:
        Qor.objects.filter(pk=world.qor_a.pk).update(main_model="slow-model", main_max_concurrency=1)
        slow = []

        def model(body):
            if body["model"] == "slow-model":
                slow.append(body)
                return reply("Slowly.", hold=first if len(slow) == 1 else None)
            return reply("Here you are.")

        server.default = model
        env = process_env(server)
        processes.purge(env)
        processes.worker(env, concurrency=2)

        def ask(tenant, user, text):
            token = api_token_create(tenant=tenant, user=user)[1]
            response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": text}),
                                   content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
            assert response.status_code == 201

        for n in range(2):
            person = UserFactory(username=f"busy{n}")
            MembershipFactory(tenant=world.tenant_a, user=person)
            ask(world.tenant_a, person, "a question")
        assert wait_for(lambda: len(slow) == 1 and route_slot_waiting(base_url=server.base_url) == 1, 60,
                        processes=processes), "A's calls did not reach the route"
        ask(world.tenant_b, world.charlie, "quick one")
        answered_b = Message.objects.filter(tenant=world.tenant_b, role="assistant")
        assert wait_for(answered_b.exists, 60, processes=processes, step=0.05)
        assert len(slow) == 1 and server.in_flight == 1  # A's first call is still answering
        first.set()
        answered_a = Message.objects.filter(tenant=world.tenant_a, role="assistant", content="Slowly.")
        assert wait_for(lambda: answered_a.count() == 2, 60, processes=processes)
        assert not Message.objects.filter(tenant=world.tenant_a, role="system").exists()
        assert len(slow) == 2
    finally:
        first.set()  # a held answer, let go should the test end early
        server.stop()
