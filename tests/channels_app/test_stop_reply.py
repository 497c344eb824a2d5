"""Stopping a reply while it is written (the chat page's Stop button): the part written so
far is kept as the answer, marked stopped, and the next message is answered in full."""
from __future__ import annotations

import json
import time

import pytest

from qorven.runtime.streams import stream_snapshot
from sessions_app.models import Message, Session

from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)

SEND, STOP = "/chat/api/acme/aria/messages", "/chat/api/acme/aria/stop"
LONG = "One, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, thirteen."


def post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_stop_keeps_what_was_written_and_the_next_message_is_answered_in_full(client, world, model_server, drain):
    model_server.add(reply(LONG, chunk_delay=0.15), reply("All of it."))
    client.force_login(world.alice)
    assert post(client, SEND, {"content": "count slowly"}).status_code == 201
    session = Session.objects.get(user=world.alice, kind="canonical")
    wait_for(lambda: len((stream_snapshot(session.pk) or {}).get("text", "")) >= 10)

    assert post(client, STOP, {"reply_to": 1}).status_code == 202
    drain()

    answer = Message.objects.get(session=session, role="assistant")
    assert LONG.startswith(answer.content) and 0 < len(answer.content) < len(LONG)
    assert answer.metadata["stopped"] is True and answer.metadata["reply_to"] == 1
    assert Message.objects.get(session=session, seq=1).answer_state == "answered"
    assert post(client, STOP, {"reply_to": 1}).status_code == 409  # nothing is being written now

    assert post(client, SEND, {"content": "now all of it"}).status_code == 201
    drain()
    last = Message.objects.filter(session=session, role="assistant").order_by("-seq").first()
    assert (last.content, last.metadata.get("stopped")) == ("All of it.", None)


def test_stopped_before_the_first_word_says_so(client, world, model_server, drain):
    model_server.add(reply("Too late.", delay=1.0))
    client.force_login(world.alice)
    post(client, SEND, {"content": "think first"})
    assert post(client, STOP, {"reply_to": 1}).status_code == 202
    drain()
    answer = Message.objects.get(role="assistant")
    assert (answer.content, answer.metadata["notice"]) == ("Stopped before any answer was written.", "stopped")


def test_only_the_person_stops_their_own_replies(client, world, model_server, drain):
    model_server.add(reply(LONG, chunk_delay=0.1))
    client.force_login(world.alice)
    post(client, SEND, {"content": "count slowly"})
    client.force_login(world.bob)  # same tenant, their own chat: alice's message 1 is not theirs
    assert post(client, STOP, {"reply_to": 1}).status_code == 409
    client.force_login(world.charlie)
    assert post(client, STOP, {"reply_to": 1}).status_code == 404  # not a member of acme
    assert post(client, STOP, {"reply_to": "1"}).status_code in (400, 404)
    drain()
    assert Message.objects.get(role="assistant").content == LONG


def test_the_stop_and_conversations_endpoints_answer_a_wrong_method_in_json(client, world):
    client.force_login(world.alice)
    for url, method in ((STOP, client.get), ("/chat/api/acme/aria/conversations", client.post)):
        response = method(url)
        assert response.status_code == 405 and response["Content-Type"].startswith("application/json")
