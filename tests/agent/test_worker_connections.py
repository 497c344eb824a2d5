"""A `qorven worker` child keeps its database connection from one task to the next (CI's
PostgreSQL + Redis pass): connecting costs more than a short turn's queries, and a broken
connection is found and replaced before a task uses it."""
from __future__ import annotations

import pytest
from django.db import connection

from sessions_app.models import Message
from sessions_app.services.resolve import session_resolve

from qorven.agent.gateway import inbound_accept

from ..fakes.model_server import reply
from ..processes import Processes, needs_postgres_and_redis, process_env, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery_worker, needs_postgres_and_redis]


def _workers() -> set[int]:
    """The backend pids of the worker's connections to this test's database (they name
    themselves to PostgreSQL, as pg_stat_activity shows an operator)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                       " AND application_name = 'qorven worker'")
        return {row[0] for row in cursor.fetchall()}


def _kill(pids: set[int]) -> None:
    with connection.cursor() as cursor:
        for pid in pids:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


def _ask(world, text: str, running: Processes) -> None:
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    inbound_accept(session=session, content=text, channel="web", sender_name="Alice", user=world.alice,
                   trust="owner")
    answered = Message.objects.filter(session__tenant=world.tenant_a, role="assistant", content=f"re: {text}")
    assert wait_for(answered.exists, 60, processes=running), f"{text!r} was not answered"


def test_a_worker_child_answers_turn_after_turn_on_one_connection_and_replaces_a_broken_one(
        world, model_server, processes, settings):
    env = process_env(model_server)
    processes.purge(env)
    processes.worker(env, concurrency=1)
    model_server.add(*(reply(f"re: question {i}") for i in range(5)))

    _ask(world, "question 0", processes)
    kept = _workers()
    assert len(kept) == 1, kept  # the child's connection, idle between tasks
    for i in (1, 2):
        _ask(world, f"question {i}", processes)
        assert _workers() == kept  # the same backend served the next turns

    # Killed while idle (a database restart, a proxy's timeout): the next task checks it
    # first, connects again, and is answered.
    _kill(kept)
    _ask(world, "question 3", processes)
    replaced = _workers()
    assert len(replaced) == 1 and replaced != kept
    _ask(world, "question 4", processes)
    assert _workers() == replaced
