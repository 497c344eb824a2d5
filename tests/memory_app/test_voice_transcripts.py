"""Voice call transcripts posted to the API: a voice session of their own, condensed into
a conversation digest of the person on the call, which later turns find through memory."""
from __future__ import annotations

import json

import pytest

from memory_app.models import Memory
from memory_app.selectors import memory_search
from sessions_app.models import Message, Session
from tenancy.services import api_token_create

from ..fakes.model_server import reply
from ..fakes.summarizer import FakeModel, kind_of

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/v1/qors/aria/voice-transcripts"
CALL = {
    "call_id": "call-2026-12-02-0930",
    "turns": [
        {"speaker": "Alice", "text": "Can you book the dentist for Friday at nine?", "at": "2026-12-02T09:30:00Z"},
        {"speaker": "Aria", "text": "Booked: dentist, Friday 9:00.", "role": "assistant",
         "at": "2026-12-02T09:30:20Z"},
        {"speaker": "Alice", "text": "And remind me to bring the insurance card.", "at": "2026-12-02T09:31:00Z"},
    ],
}


def summarizing(model_server, main=()):
    """The summarizer's two calls answered as a good model would; main replies scripted."""
    fake = FakeModel(main=list(main))

    def answer(body):
        if kind_of(body) == "summary":
            fake.calls["summary"] += 1
            return reply(json.dumps({"digest": "Alice had the dentist booked for Friday at nine.",
                                     "note": "Dentist: Friday 9:00."}))
        return fake(body)

    model_server.default = answer
    return fake


def post(client, token, body):
    return client.post(URL, data=json.dumps(body), content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {token}")


def test_a_call_becomes_a_voice_session_and_a_digest_later_turns_find(client, world, model_server, drain):
    fake = summarizing(model_server, main=[reply("Friday at nine.")])
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    response = post(client, token, CALL)
    assert response.status_code == 201 and response.json()["stored"] == 3
    session = Session.objects.get(kind="voice")
    assert (session.user, session.channel, session.external_thread_id) == (world.alice, "voice", CALL["call_id"])
    turns = list(Message.objects.filter(session=session, channel="voice").exclude(role="system").order_by("seq"))
    assert [(m.role, m.sender_name) for m in turns] == [("user", "Alice"), ("assistant", "Aria"), ("user", "Alice")]
    assert turns[0].created_at.isoformat() == "2026-12-02T09:30:00+00:00"
    drain()

    session.refresh_from_db()
    assert session.state == "archived"
    digest = Memory.objects.get(type="conversation_digest")
    assert (digest.user, digest.qor, digest.channels) == (world.alice, world.qor_a, ["voice"])
    assert "dentist" in digest.content.lower()
    found = memory_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="dentist")
    assert digest.pk in [m.pk for m in found]
    assert Memory.objects.get(type="summary", user=world.alice).content == "Dentist: Friday 9:00."
    assert memory_search(tenant=world.tenant_a, qor=world.qor_a, user=world.bob, query="dentist") == []

    assert fake.calls["summary"] == 1
    client.post("/v1/qors/aria/messages", data=json.dumps({"content": "when is my dentist?"}),
                content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    drain()
    system = model_server.requests[-1]["messages"][0]["content"]
    assert "dentist" in system.lower() and " · conversation digest · " in system


def test_the_same_call_posted_again_stores_nothing(client, world, model_server, drain):
    summarizing(model_server)
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    assert post(client, token, CALL).status_code == 201
    drain()
    again = post(client, token, CALL)
    assert (again.status_code, again.json()["stored"]) == (200, 0)
    assert Session.objects.filter(kind="voice").count() == 1
    assert Memory.objects.filter(type="conversation_digest").count() == 1


def test_the_same_call_posted_to_another_qor_stores_nothing_and_opens_no_session(client, world, model_server,
                                                                                   drain):
    # A call's turns are the person's, once (their ids are unique per person): posted again
    # to another Qor it is the call stored before, not an empty session with a digest queued.
    from ..factories.tenancy import QorFactory

    summarizing(model_server)
    QorFactory(tenant=world.tenant_a, slug="beta", is_default=False)
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    first = post(client, token, CALL)
    assert first.status_code == 201
    drain()
    again = client.post("/v1/qors/beta/voice-transcripts", data=json.dumps(CALL), content_type="application/json",
                        HTTP_AUTHORIZATION=f"Bearer {token}")
    assert (again.status_code, again.json()["stored"]) == (200, 0)
    assert again.json()["session"]["id"] == first.json()["session"]["id"]
    assert list(Session.objects.filter(kind="voice").values_list("qor__slug", flat=True)) == ["aria"]
    drain()
    assert Memory.objects.filter(type="conversation_digest").count() == 1


def test_a_turn_needs_only_its_text_a_person_speaking_now_by_default(client, world, model_server, drain):
    summarizing(model_server)
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    response = post(client, token, {"call_id": "bare", "turns": [{"text": "Call me back at five."}]})
    assert response.status_code == 201 and response.json()["stored"] == 1
    (turn,) = Message.objects.filter(session__kind="voice", channel="voice").exclude(role="system")
    assert (turn.role, turn.sender_name, turn.content) == ("user", "", "Call me back at five.")
    drain()


@pytest.mark.parametrize("body, says", [
    ({"turns": CALL["turns"]}, "call_id"),
    ({"call_id": "c", "turns": []}, "turns"),
    ({"call_id": "c", "turns": [{"speaker": "A"}]}, "text"),
    ({"call_id": "c", "turns": [{"text": "hi", "role": "system"}]}, "role"),
    ({"call_id": "c", "turns": [{"text": "hi", "at": "yesterday"}]}, "ISO 8601"),
    ({"call_id": "c", "turns": [{"text": "hi", "at": "2026-12-02T09:30:00"}]}, "offset"),
    ({"call_id": "c", "turns": [{"text": "hi", "at": "9999-12-31T23:59:59-14:00"}]}, "out of range"),
    ({"call_id": "c", "turns": [{"text": "hi", "at": "0001-01-01T00:00:00+14:00"}]}, "out of range"),
    # Storable in UTC, but no date in a timezone east (west) of it: /memories, the export
    # and the digest date what was said in the person's own.
    ({"call_id": "c", "turns": [{"text": "hi", "at": "9999-12-31T23:59:59Z"}]}, "out of range"),
    ({"call_id": "c", "turns": [{"text": "hi", "at": "0001-01-01T00:00:00Z"}]}, "out of range"),
    # No database takes a NUL in text (PostgreSQL refuses it, JSON's \u0000 too): an id
    # with one names no call of anyone's.
    ({"call_id": "call\u00007", "turns": [{"text": "hi"}]}, "call_id"),
    ({"call_id": "\u0000", "turns": [{"text": "hi"}]}, "call_id"),
])
def test_a_bad_transcript_is_refused_with_what_is_wrong_and_nothing_stored(client, world, body, says):
    client.raise_request_exception = False  # a failure of ours is the 500 the caller sees
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    response = post(client, token, body)
    assert response.status_code == 400 and says in response.json()["error"]
    assert not Session.objects.filter(kind="voice").exists()


def test_transcripts_need_a_token_and_stay_in_its_tenant(client, world, model_server, drain):
    summarizing(model_server)
    assert client.post(URL, data=json.dumps(CALL), content_type="application/json").status_code == 401
    charlie = api_token_create(tenant=world.tenant_b, user=world.charlie)[1]
    assert post(client, charlie, {**CALL, "call_id": "x"}).status_code == 201  # globex's own aria
    assert Session.objects.get(kind="voice").tenant == world.tenant_b
    drain()
