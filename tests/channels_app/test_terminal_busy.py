"""A message `qorven chat --server` sends, answered 503 (or 429) with Retry-After: the
terminal says when it sends it again, does so itself a few times, and the server stores it
once, whichever 503 it met. The server is a fake over real HTTP standing as a proxy in
front of the real message API (Django's test client, on the test database): it answers
for the server (the database away), or passes the request on and answers 503 in place of
the server's answer (a proxy's timeout after the message was stored)."""
from __future__ import annotations

import io
import json

import pytest
from django.test import Client

from channels_app.management.commands.chat import SEND_TIMEOUT
from channels_app.chat import chat_owner
from channels_app.terminal import _send
from channels_app.terminal_chat import TerminalChat
from channels_app.terminal_client import ServerLink
from qorven.runtime.database import DATABASE_DOWN_CODE, DATABASE_DOWN_NOTICE
from sessions_app.models import Message

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned, Recorded

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = r"/v1/qors/aria/messages$"
DATABASE_AWAY = Canned(503, {"error": DATABASE_DOWN_NOTICE, "code": DATABASE_DOWN_CODE}, {"Retry-After": "1"})
PROXY_PAGE = b"<html>503 Service Temporarily Unavailable</html>"


def passed_on(*, then: Canned | None = None) -> Canned:
    """The request passed on to the real API; its answer given back, or `then` in its place."""
    answer = Canned()

    def forward(request: Recorded) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        response = Client().post(request.path, data=request.body, content_type="application/json",
                                 HTTP_AUTHORIZATION=headers["authorization"],
                                 HTTP_IDEMPOTENCY_KEY=headers.get("idempotency-key", ""))
        if then is None:
            answer.status, answer.body = response.status_code, response.json()
        else:
            answer.status, answer.body, answer.raw, answer.headers = then.status, then.body, then.raw, then.headers
            answer.reset = then.reset

    answer.meanwhile = forward
    return answer


def _typed(world, platform, text: str) -> tuple[str, object]:
    """`text` sent as the terminal sends what is typed: what it showed, and what came of it
    (the sent message's (seq, expects_reply), or the error it put back on the prompt)."""
    out = io.StringIO()
    owner = chat_owner(user=world.alice, tenant_slug="acme", qor_slug="aria", surface="tui")
    link = ServerLink(owner, platform.url, timeout=SEND_TIMEOUT)
    try:
        chat = TerminalChat(owner, link, out, on_screen=False, color=False)
        try:
            came: object = _send(owner, link, text, waiting=chat.notice)
        except ValueError as exc:
            came = exc
    finally:
        link.close()
    return out.getvalue(), came


def test_a_message_met_by_503s_is_sent_again_when_told_and_stored_once(world, platform, model_server, drain):
    """The database away (503, Retry-After: 1), then stored but answered 503 by a proxy,
    then answered. Before, the first 503 put the line back on the prompt with "the
    database is unavailable"; and the POST carried no Idempotency-Key, so a line sent again
    after the proxy's 503 was stored twice."""
    model_server.default = reply("Milk is on the list.")
    platform.script(MESSAGES, DATABASE_AWAY,
                    passed_on(then=Canned(503, raw=PROXY_PAGE, headers={"Retry-After": "1"})), passed_on())
    shown, came = _typed(world, platform, "add milk")

    assert shown.count("The server is busy; sending again in 1 s.") == 2, shown
    assert not isinstance(came, Exception), came
    stored = list(Message.objects.filter(role="user").values_list("content", "seq"))
    assert stored == [("add milk", came[0])]
    posts = platform.sent(MESSAGES)
    assert [json.loads(p.body)["content"] for p in posts] == ["add milk"] * 3
    keys = {p.headers.get("Idempotency-Key") or p.headers.get("idempotency-key") for p in posts}
    assert len(keys) == 1 and None not in keys  # one message, sent again
    drain()
    assert len(model_server.requests) == 1  # answered once


def test_a_server_still_busy_after_the_tries_puts_the_line_back(world, platform):
    """Four 503s: the message was sent four times in all and nothing was stored; the line
    goes back to the prompt with the server's words, as a 503 always did."""
    platform.default(MESSAGES, DATABASE_AWAY)
    shown, came = _typed(world, platform, "add milk")
    assert isinstance(came, ValueError) and str(came) == DATABASE_DOWN_NOTICE
    assert shown.count("The server is busy; sending again in 1 s.") == 3, shown
    assert len(platform.sent(MESSAGES)) == 4
    assert not Message.objects.filter(role="user").exists()


def test_a_wait_longer_than_a_minute_puts_the_line_back_at_once(world, platform):
    platform.default(MESSAGES, Canned(429, {"error": "Too many messages at once: try again in 120 seconds."},
                                      {"Retry-After": "120"}))
    shown, came = _typed(world, platform, "add milk")
    # Our message API never answers 429: the words are a proxy's, the notice is ours.
    assert isinstance(came, ValueError) and str(came) == "the server is busy just now (HTTP 429): try again in 120 s"
    assert "sending again" not in shown
    assert len(platform.sent(MESSAGES)) == 1


@pytest.mark.parametrize("canned, said", [
    (Canned(400, {"error": "Request blocked by the firewall: write to security@evil.example"}),
     "the server refused the message (HTTP 400)"),
    (Canned(403, {"error": "Visit evil.example to go on"}), None),  # read as access lost, never shown
    (Canned(413, raw=b"<html>413 Request Entity Too Large</html>"), "the server refused the message (HTTP 413)"),
    (Canned(422, {"error": "Sign in again at evil.example\nthen resend"}), "the server refused the message (HTTP 422)"),
    (Canned(429, {"error": "Slow down, see evil.example"}), "the server is busy just now (HTTP 429)"),
])
def test_a_proxys_refusal_is_read_as_our_notice_and_never_sent_again(world, platform, canned, said):
    """A 4xx from something in front of the server (a firewall, a gateway): before, the
    "error" of its JSON body was shown as it came (its first line, 200 characters). Only
    our message API's own refusals are shown now; anything else is our notice with the
    status. A 4xx is never sent again (a 429 without a Retry-After to honour neither)."""
    from tenancy.errors import NotFound

    platform.default(MESSAGES, canned)
    try:
        shown, came = _typed(world, platform, "add milk")
    except NotFound:
        shown, came = "", None
    assert "evil.example" not in shown + str(came)
    if said is not None:
        assert isinstance(came, ValueError) and str(came) == said
    assert len(platform.sent(MESSAGES)) == 1
    assert not Message.objects.filter(role="user").exists()


@pytest.mark.parametrize("typed, said", [
    ("   ", '"content" must be a non-empty string'),
    ("x" * 100_001, '"content" is longer than 100000 characters'),
])
def test_our_apis_own_refusal_is_shown_as_it_says(world, platform, typed, said):
    platform.default(MESSAGES, passed_on())
    shown, came = _typed(world, platform, typed)
    assert isinstance(came, ValueError) and str(came) == said
    assert len(platform.sent(MESSAGES)) == 1
    assert not Message.objects.filter(role="user").exists()


def test_json_mode_writes_when_it_sends_again_then_the_error(world, platform, model_server):
    """`qorven chat --json` given four 503s: a notice line for each wait, then the error
    line a 503 always had, and it goes on to the next line."""
    import subprocess
    import sys
    from pathlib import Path

    from .test_terminal import ROOT, qorven_env

    platform.default(MESSAGES, DATABASE_AWAY)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("qorven")), "chat", "--json", "--tenant", "acme", "--qor", "aria",
         "--user", "alice", "--server", platform.url],
        input=json.dumps({"content": "add milk"}) + "\n", capture_output=True, text=True, cwd=ROOT,
        env=qorven_env(model_server), timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(line["type"], line.get("content") or line.get("error")) for line in lines] == [
        ("notice", "The server is busy; sending again in 1 s."),
    ] * 3 + [("error", DATABASE_DOWN_NOTICE)]
    assert len(platform.sent(MESSAGES)) == 4


PROXY_JSON = {"error": "upstream connect error or disconnect/reset before headers. reset reason: overflow " + "x" * 4000}


@pytest.mark.parametrize("canned, said", [
    (Canned(503, PROXY_JSON, {"Retry-After": "1"}), "the server is unavailable just now"),
    (Canned(503, {"error": "Ask the admin at evil.example", "code": "not_ours"}, {"Retry-After": "1"}),
     "the server is unavailable just now"),
    (Canned(502, PROXY_JSON), "the server is unavailable just now (HTTP 502)"),
    (Canned(504, raw=PROXY_PAGE), "the server is unavailable just now (HTTP 504)"),
])
def test_a_proxys_error_is_read_as_our_notice_never_its_words(world, platform, canned, said):
    """A 5xx whose body is not one of ours (no "code", one we do not know, a proxy's JSON or
    HTML page): the line goes back with our notice. Before, the "error" of any JSON body was
    shown as the server gave it, however long (4,000 characters here)."""
    platform.default(MESSAGES, canned)
    shown, came = _typed(world, platform, "add milk")
    assert isinstance(came, ValueError) and str(came) == said
    assert "upstream" not in shown and "evil.example" not in shown


def test_a_message_whose_answer_was_lost_is_sent_again_and_stored_once(world, platform, model_server, drain):
    """The connection drops once the server stored the message, before its answer: the
    terminal says so, sends it again under the same Idempotency-Key, and the server answers
    with the message it stored. Before, the line went back to the prompt ("may not have been
    sent"), to be sent again by hand: stored twice."""
    model_server.default = reply("Milk is on the list.")
    platform.script(MESSAGES, passed_on(then=Canned(reset=True)), passed_on())
    shown, came = _typed(world, platform, "add milk")

    assert "The connection was lost before the server answered; sending again in 2 s." in shown, shown
    assert not isinstance(came, Exception), came
    assert list(Message.objects.filter(role="user").values_list("content", "seq")) == [("add milk", came[0])]
    posts = platform.sent(MESSAGES)
    assert len(posts) == 2 and len({p.headers.get("Idempotency-Key") for p in posts}) == 1
    drain()
    assert len(model_server.requests) == 1


def test_a_connection_lost_every_time_puts_the_line_back_after_the_tries(world, platform):
    platform.default(MESSAGES, Canned(reset=True))
    shown, came = _typed(world, platform, "add milk")
    assert isinstance(came, ValueError) and "may not have been sent" in str(came)
    assert shown.count("sending again in 2 s") == 3
    assert len(platform.sent(MESSAGES)) == 4
