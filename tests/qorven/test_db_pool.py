"""Under an ASGI server every request runs on a thread of its own. On PostgreSQL those threads
borrow connections from psycopg's pool instead of each opening (and closing) a new one."""
from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connection

from ..conftest import database_vendor

pytestmark = pytest.mark.skipif(database_vendor() != "postgresql", reason="the pool is PostgreSQL's layout")


def _backend_pid_on_a_new_thread() -> int:
    """What a request does: a query on its own thread, then Django's close at its end."""
    out: list[int] = []

    def request() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            out.append(cursor.fetchone()[0])
        connection.close()

    thread = threading.Thread(target=request)
    thread.start()
    thread.join()
    return out[0]


@pytest.mark.django_db
def test_requests_on_fresh_threads_reuse_pooled_connections():
    pids = {_backend_pid_on_a_new_thread() for _ in range(12)}

    assert len(pids) < 12, "every thread opened a connection of its own"
    assert len(pids) <= settings.DATABASES["default"]["OPTIONS"]["pool"]["max_size"]


@pytest.mark.django_db
def test_the_pool_is_bounded_and_connections_are_not_kept_per_thread():
    default = settings.DATABASES["default"]
    assert default["CONN_MAX_AGE"] == 0
    assert 0 < default["OPTIONS"]["pool"]["max_size"] <= 100


@pytest.mark.django_db
def test_a_read_made_on_every_request_is_planned_once_per_connection(world):
    """The token read of every API request (three tables and a subquery) took PostgreSQL
    longer to plan than to run: after a few runs on a connection it runs as a prepared
    statement there, and the answer stays the live one (a revoked token is refused)."""
    from django.utils import timezone

    from tenancy.models import ApiToken
    from tenancy.selectors import api_token_authenticate
    from tenancy.services import api_token_create

    token, raw = api_token_create(tenant=world.tenant_a, user=world.alice)
    for _ in range(6):
        assert api_token_authenticate(raw=raw) is not None
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
                       ['%"qorven_apitoken"."digest"%'])
        prepared = [row[0] for row in cursor.fetchall()]
    assert len(prepared) == 1, prepared

    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    assert api_token_authenticate(raw=raw) is None
