"""The JSON API through the server: Django's own handler on a few long-lived threads that
keep their database connections, answering exactly as through Django's request cycle."""
from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from django.db.backends.signals import connection_created

from sessions_app.models import Message
from tenancy.services import api_token_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server():
    from qorven.asgi import application, steady_threads

    yield application
    steady_threads.connections_close()  # the test database goes after the test


def _requests(application, *calls: tuple[str, str, dict | None, str]) -> list[httpx.Response]:
    """(method, path, JSON body, token) one after another, through the ASGI application."""
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://testserver") as client:
            return [await client.request(method, path, json=body,
                                         headers={"Authorization": f"Bearer {token}"} if token else {})
                    for method, path, body, token in calls]

    return asyncio.run(run())


def test_the_api_answers_through_the_server_as_through_djangos_request_cycle(world, server):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    charlie = api_token_create(tenant=world.tenant_b, user=world.charlie)[1]
    posted, listed, anonymous, foreign, bad = _requests(
        server,
        ("POST", "/v1/qors/aria/messages", {"content": "through the server"}, token),
        ("GET", "/v1/qors/aria/messages", None, token),
        ("GET", "/v1/qors/aria/messages", None, ""),
        ("GET", "/v1/qors/nope/messages", None, charlie),
        ("POST", "/v1/qors/aria/messages", {"content": ""}, token),
    )
    assert posted.status_code == 201 and posted.json()["message"]["content"] == "through the server"
    assert posted.headers["x-content-type-options"] == "nosniff"  # Django's middleware ran
    assert posted.headers["x-frame-options"] == "DENY"
    assert listed.json()["messages"][0]["content"] == "through the server"  # (its answer may follow)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Bearer")
    assert foreign.status_code == 404
    assert bad.status_code == 400 and "content" in bad.json()["error"]
    assert list(Message.objects.filter(role="user").values_list("tenant_id", "content")) == [
        (world.tenant_a.pk, "through the server")]


def test_api_requests_reuse_their_threads_database_connections(world, server):
    from qorven.runtime.steady_threads import THREADS

    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    requests = [("GET", "/v1/qors/aria/messages", None, token)] * (4 * THREADS)
    opened = []

    def count(**kwargs) -> None:
        opened.append(threading.current_thread().name)

    connection_created.connect(count)
    try:
        answers = _requests(server, *requests)
    finally:
        connection_created.disconnect(count)
    assert [a.status_code for a in answers] == [200] * len(requests)
    # Through Django's own cycle each request opens (or borrows) one: 16. The API's threads
    # (how many the executor starts depends on timing, at most THREADS) open one each, once.
    api = [name for name in opened if name.startswith("qorven-api")]
    assert api and len(api) == len(set(api)) <= THREADS, opened
    # The embedded worker's threads of this process may open one meanwhile.
    assert len(opened) - len(api) <= 2, opened
