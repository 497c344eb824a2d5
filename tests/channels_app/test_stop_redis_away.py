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
from qorven.agent.stop import STOP_UNAVAILABLE, STOP_UNAVAILABLE_CODE
from sessions_app.models import Message

from ..agent.test_turns import _until, alice_token, ask  # noqa: F401
from ..fakes.model_server import reply
from ..processes import needs_postgres_and_redis

pytestmark = [pytest.mark.django_db(transaction=True), needs_postgres_and_redis]

STOP = "/chat/api/acme/aria/stop"
# What the terminal says when its Stop was refused for the cache away, the server's Retry-After in it.
TERMINAL_REFUSED = "The reply could not be stopped just now. Press Ctrl-C to try again in 2 s; Ctrl-D or /quit leaves."


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
    assert (response.status_code, response.json()) == (503, {"error": STOP_UNAVAILABLE, "code": STOP_UNAVAILABLE_CODE})
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
    assert (response.status_code, response.json()) == (503, {"error": STOP_UNAVAILABLE, "code": STOP_UNAVAILABLE_CODE})
    assert response["Retry-After"] == "2"
    drain()
    assert _answers(world) == ["The whole answer."]


def test_stop_through_the_api_while_the_cache_hangs_says_it_could_not_be_passed_on_within_the_timeout(
    client, world, alice_token, model_server, drain, hung_redis  # noqa: F811
):
    """A Redis that takes the flag's write and never answers (stopped with SIGSTOP) is the
    cache away after QORVEN_REDIS_TIMEOUT (0.5 s here): the same 503, not a request held
    for as long as Redis hangs; the reply goes on and is kept in full once it answers."""
    import time

    client.raise_request_exception = False
    with _writing(client, alice_token, model_server):
        hung_redis.hang()
        started = time.monotonic()
        response = client.post("/v1/qors/aria/stop", data=json.dumps({"reply_to": 1}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {alice_token}")
        took = time.monotonic() - started
        hung_redis.answer()
    assert (response.status_code, response.json()) == (503, {"error": STOP_UNAVAILABLE, "code": STOP_UNAVAILABLE_CODE})
    assert took < 2
    drain()
    assert _answers(world) == ["The whole answer."]


def test_ctrl_c_in_the_terminal_while_the_cache_is_away_says_it_could_not_be_passed_on(
    world, alice_token, client, model_server, drain, cache_redis  # noqa: F811
):
    """The terminal on the server's own machine asks `chat_stop` itself. Before, it said
    the server did not answer, though it had; then it said to try again in a moment, and
    the Ctrl-C pressed for that within 1.5 s of the first left the chat."""
    import io

    from channels_app.terminal_chat import TerminalChat

    from ..processes import wait_for

    stop, _ = cache_redis
    out = io.StringIO()
    chat = TerminalChat(chat_owner(user=world.alice, tenant_slug="acme", qor_slug="aria", surface="web"), None, out,
                        on_screen=False, color=False)
    with _writing(client, alice_token, model_server):
        stop()
        chat.replies.expect(1)
        assert chat.interrupt("") == "stop"
        assert wait_for(lambda: TERMINAL_REFUSED in out.getvalue(), 10), out.getvalue()
        assert chat.interrupt("") == "stop"  # pressed again as told: Stop again, not leave
        assert wait_for(lambda: out.getvalue().count(TERMINAL_REFUSED) == 2, 10), out.getvalue()
    assert "did not answer" not in out.getvalue()
    drain()
    assert _answers(world) == ["The whole answer."]
    assert not Message.objects.get(session__user=world.alice, role="assistant").metadata.get("stopped")


def test_two_quick_ctrl_c_in_the_terminal_leave_when_the_stop_went_through(
    world, alice_token, client, model_server, drain  # noqa: F811
):
    """Only a refused Stop makes the next Ctrl-C a Stop again: one that went through
    leaves the second press its meaning (leave), and the reply ends stopped."""
    import io

    from channels_app.terminal_chat import TerminalChat

    from ..processes import wait_for

    out = io.StringIO()
    chat = TerminalChat(chat_owner(user=world.alice, tenant_slug="acme", qor_slug="aria", surface="web"), None, out,
                        on_screen=False, color=False)
    with _writing(client, alice_token, model_server):
        chat.replies.expect(1)
        assert chat.interrupt("") == "stop"
        assert wait_for(lambda: not any(t.name == "qorven-chat-stop" for t in threading.enumerate()), 10)
        assert chat.interrupt("") == "leave"
    assert "could not be stopped" not in out.getvalue()
    drain()


def test_ctrl_c_in_a_terminal_talking_to_a_server_whose_cache_is_away_says_it_could_not_be_passed_on(
    world, model_server, cache_redis, tmp_path
):
    """`qorven chat` talking to a `qorven serve` over HTTP, the server's cache (its
    REDIS_URL) a Redis of the test's own, stopped while the model writes: Ctrl-C's Stop is
    answered 503 with Retry-After, and the person reads our notice, not that the server
    did not answer, with Retry-After's wait; pressed again at once, as it says, Ctrl-C
    stops again (before, the second press within 1.5 s left the chat); the reply goes on
    and is kept in full, and Ctrl-D leaves."""
    import signal
    import subprocess
    import time

    from django.conf import settings as django_settings

    from ..processes import wait_for
    from .conftest import served
    from .test_terminal import ROOT, qorven_env
    from .test_terminal_server import CTRL_C_HEEDED, QORVEN

    stop, _ = cache_redis
    held = threading.Event()
    model_server.add(reply("The whole answer.", hold=held))
    with served({**qorven_env(model_server), "REDIS_URL": django_settings.REDIS_URL}, tmp_path) as env:
        chat = subprocess.Popen([*CTRL_C_HEEDED, QORVEN, "chat", "--tenant", "acme", "--qor", "aria", "--user",
                                 "alice", "--history", "0", "--wait", "10"], cwd=ROOT, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(iter(chat.stdout.readline, "")), daemon=True).start()
        try:
            assert wait_for(lambda: any("Connected to the server" in line for line in lines), 60), lines
            chat.stdin.write("count slowly\n")
            chat.stdin.flush()
            assert wait_for(lambda: model_server.in_flight == 1, 30), lines
            stop()
            time.sleep(0.3)  # the terminal is back waiting for what the person types
            chat.send_signal(signal.SIGINT)
            assert wait_for(lambda: any(TERMINAL_REFUSED in line for line in lines), 30), lines
            chat.send_signal(signal.SIGINT)  # at once, as the notice says: Stop again, not leave
            assert wait_for(lambda: sum(TERMINAL_REFUSED in line for line in lines) == 2, 30), lines
            assert chat.poll() is None, lines
        finally:
            held.set()
        assert wait_for(lambda: _answers(world) == ["The whole answer."], 30)
        chat.stdin.close()  # Ctrl-D, as the notice says: leaves
        assert chat.wait(30) == 0
    out = "".join(lines)
    assert "did not answer" not in out
    assert "Traceback" not in out
    assert not Message.objects.get(session__user=world.alice, role="assistant").metadata.get("stopped")
