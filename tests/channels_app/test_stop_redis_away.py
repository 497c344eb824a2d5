"""Stop pressed while the cache (Redis) is away: the stop flag is a cache key, so the
turn cannot be told. The person is told so, in our words, on the page, the API and the
terminal; the reply goes on and is answered in full. The cache is a Redis server of the
test's own, really stopped."""
from __future__ import annotations

import json
import threading
from contextlib import contextmanager

import pytest

from channels_app.chat import chat_owner
from qorven.agent.stop import STOP_UNAVAILABLE
from sessions_app.models import Message

from ..agent.test_turns import _until, alice_token, ask  # noqa: F401
from ..fakes.model_server import reply
from ..processes import needs_postgres_and_redis

pytestmark = [pytest.mark.django_db(transaction=True), needs_postgres_and_redis]

STOP = "/chat/api/acme/aria/stop"


@contextmanager
def _writing(client, token, model_server):
    """A question whose reply the model is writing (held until the block ends)."""
    held = threading.Event()
    model_server.add(reply("The whole answer.", hold=held))
    try:
        ask(client, token, "count slowly")
        _until(lambda: model_server.in_flight == 1)
        yield
    finally:
        held.set()


def _answers(world) -> list[str]:
    return list(Message.objects.filter(session__user=world.alice, role="assistant").values_list("content", flat=True))


def test_stop_on_the_chat_page_while_the_cache_is_away_says_it_could_not_be_passed_on(
    client, world, alice_token, model_server, drain, cache_redis  # noqa: F811
):
    """Before, the stop flag's write raised Redis' ConnectionError out of the view: a 500."""
    stop, _ = cache_redis
    client.force_login(world.alice)
    client.raise_request_exception = False
    with _writing(client, alice_token, model_server):
        stop()
        response = client.post(STOP, data=json.dumps({"reply_to": 1}), content_type="application/json")
    assert (response.status_code, response.json()) == (503, {"error": STOP_UNAVAILABLE})
    assert response["Retry-After"] == "2"
    drain()
    assert _answers(world) == ["The whole answer."]


def test_stop_through_the_api_while_the_cache_is_away_says_it_could_not_be_passed_on(
    client, world, alice_token, model_server, drain, cache_redis  # noqa: F811
):
    stop, _ = cache_redis
    client.raise_request_exception = False
    with _writing(client, alice_token, model_server):
        stop()
        response = client.post("/v1/qors/aria/stop", data=json.dumps({"reply_to": 1}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {alice_token}")
    assert (response.status_code, response.json()["error"]) == (503, STOP_UNAVAILABLE)
    drain()
    assert _answers(world) == ["The whole answer."]


def test_ctrl_c_in_the_terminal_while_the_cache_is_away_says_it_could_not_be_passed_on(
    world, alice_token, client, model_server, drain, cache_redis  # noqa: F811
):
    """The terminal on the server's own machine asks `chat_stop` itself. Before, it said
    the server did not answer, though it had."""
    import io

    from channels_app.terminal_chat import TerminalChat

    stop, _ = cache_redis
    out = io.StringIO()
    chat = TerminalChat(chat_owner(user=world.alice, tenant_slug="acme", qor_slug="aria", surface="web"), None, out,
                        on_screen=False, color=False)
    with _writing(client, alice_token, model_server):
        stop()
        chat._stop(1)
    assert STOP_UNAVAILABLE in out.getvalue()
    assert "did not answer" not in out.getvalue()
    drain()
    assert _answers(world) == ["The whole answer."]
