"""A request or webhook whose database connection was lost under it (a restart, a
failover, a backend ended by an operator) is answered 503 with Retry-After — try again —
not 500, nothing is stored half, and the next one runs on a working connection.
PostgreSQL only: a SQLite file has no connection to lose."""
from __future__ import annotations

import asyncio
import json
import threading

import pytest
from django.db import connection, connections

from channels_app.models import InboundEvent
from channels_app.services import binding_create
from channels_app.webhook_ingest import _Job, group_commit
from sessions_app.models import Message
from tenancy.services import api_token_create

from ..channels_app.conftest import pair
from ..fakes.model_server import reply
from ..channels_app.payloads import telegram_scope, telegram_update
from ..conftest import database_vendor
from ..processes import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(database_vendor() != "postgresql", reason="a SQLite file has no connection to lose"),
]


def _lose_this_threads_connection() -> None:
    import psycopg
    from psycopg.conninfo import make_conninfo

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    db = connection.settings_dict
    with psycopg.connect(make_conninfo(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
                                       password=db["PASSWORD"] or None, dbname=db["NAME"]), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


def _lose_every_connection() -> None:
    """What a restart or a failover does: every backend of the database is ended at once,
    the pool's idle connections with the rest."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    db = connection.settings_dict
    with psycopg.connect(make_conninfo(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
                                       password=db["PASSWORD"] or None, dbname=db["NAME"]), autocommit=True) as other:
        ended = [row[0] for row in other.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()]
        # pg_terminate_backend only signals: each backend says goodbye and closes its socket
        # as it exits, a moment later. A restarted server answers once they have.
        assert wait_for(lambda: not other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)",
                                                  [ended]).fetchall(), 30)


def _pool_fill(borrowers: int) -> None:
    """Leave `borrowers` idle connections in the pool: as many threads borrow one at once,
    then give them back."""
    together = threading.Barrier(borrowers)

    def borrow() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        together.wait(10)
        connections.close_all()

    threads = [threading.Thread(target=borrow) for _ in range(borrowers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_an_api_post_on_a_lost_connection_is_answered_503_and_the_next_is_stored(client, world):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]

    def post(text: str):
        return client.post("/v1/qors/aria/messages", data=json.dumps({"content": text}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")

    _lose_this_threads_connection()
    refused = post("lost with the connection")
    assert refused.status_code == 503
    assert refused["Retry-After"] == "1"
    # Its code tells it from another 503 (the cache away for a Stop, a proxy's) without
    # reading the notice's words.
    assert refused.json() == {"error": "the database is unavailable; try again in a moment",
                              "code": "database_unavailable"}

    assert post("sent again").status_code == 201
    assert list(Message.objects.filter(role="user").values_list("content", flat=True)) == ["sent again"]


def test_a_webhook_on_a_lost_connection_is_answered_503_and_the_next_is_stored(world, platform, model_server,
                                                                               drain):
    model_server.default = reply("ok")
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    pair(world, "telegram", "42", world.alice)
    from qorven.asgi import application  # noqa: F401 (Django set up as the server has it)

    loop = asyncio.new_event_loop()

    def deliver(message_id: int) -> int:
        body = json.dumps(telegram_update(f"update {message_id}", message_id=message_id)).encode()
        (answer,) = group_commit.handle([_Job("telegram", telegram_scope(), body, loop, loop.create_future())])
        return answer.status

    _lose_this_threads_connection()  # the binding is read first: it meets the lost connection
    assert deliver(1) == 503
    assert deliver(1) == 200  # Telegram's retry
    assert InboundEvent.objects.count() == 1
    drain()
    assert len(platform.sent("sendMessage")) == 1  # answered once
    loop.close()


@pytest.mark.skipif(not connection.settings_dict["OPTIONS"].get("pool"), reason="the pool is off (QORVEN_DB_POOL)")
def test_after_a_restart_no_request_is_refused_the_pool_lets_go_of_its_dead_connections_first(client, world):
    """A restart or a failover ends the pool's idle connections as they sit there; each
    one's socket then holds the server's goodbye, which the pool looks for (no round trip)
    before lending it. Before, the first request after the restart borrowed a dead one and
    was answered 503 (then the pool checked the rest)."""
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]

    def post(text: str):
        return client.post("/v1/qors/aria/messages", data=json.dumps({"content": text}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")

    connections.close_all()
    _pool_fill(4)
    _lose_every_connection()
    # Each would otherwise borrow one of the pool's dead connections.
    assert [post(f"after the restart {i}").status_code for i in range(4)] == [201] * 4
    stored = Message.objects.filter(role="user").values_list("content", flat=True)
    assert sorted(stored) == [f"after the restart {i}" for i in range(4)]
