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
