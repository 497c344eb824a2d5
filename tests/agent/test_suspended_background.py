"""Background work queued before the host suspended a workspace — the summarizer, a
/compact, a voice call's digest — makes no model call while it is suspended, and keeps
what it was to do for after resume, losing nothing. A person's message waiting for its
answer, a voice note's included, is not answered after the fact."""
from __future__ import annotations

import base64

import pytest

from channels_app.sweep import sweep
from memory_app.compact_requests import compact_request_record, compact_requests_recover
from memory_app.models import Memory
from memory_app.tasks import session_compact, session_summarize
from memory_app.voice import SpokenTurn, voice_transcript_store
from qorven.agent.tasks import voice_transcribe_task
from sessions_app.models import Image, Message, Session
from sessions_app.services.append import message_append
from tenancy.services import tenant_resume, tenant_suspend

from ..fakes.model_server import reply
from ..memory_app.test_voice_transcripts import summarizing
from .test_compaction import canonical, chat, compaction_notes, fake, seed_history, small_window  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

OGG = b"OggS\x00\x02" + b"\x01" * 200


def test_a_summarizer_queued_before_the_suspension_waits_for_the_first_exchange_after_resume(
        world, small_window, fake, model_server, drain, chat):  # noqa: F811
    session = canonical(world)
    seed_history(session, 14)
    tenant_suspend(tenant=world.tenant_a)
    session_summarize.delay(world.tenant_a.pk, session.pk, 8)
    drain()

    assert model_server.requests == []
    session.refresh_from_db()
    assert session.compacted_through_seq == 0 and compaction_notes(session) == []

    tenant_resume(tenant=world.tenant_a)
    chat("and one more thing")
    session.refresh_from_db()
    assert session.compacted_through_seq >= 8 and fake.calls["summary"] >= 1


def test_a_compact_asked_before_the_suspension_is_done_after_resume_and_not_reported_failed_meanwhile(
        world, fake, model_server, drain, chat):  # noqa: F811
    chat("remember my bike is a blue Brompton")
    session = canonical(world)
    compact_request_record(tenant_id=world.tenant_a.pk, session_id=session.pk, channel="web")
    tenant_suspend(tenant=world.tenant_a)
    before = len(model_server.requests)
    session_compact.delay(world.tenant_a.pk, session.pk, "web")
    drain()
    for _ in range(5):  # sweeps while it is suspended: none queues it, none gives up on it
        assert compact_requests_recover(restart=True) == []

    assert len(model_server.requests) == before
    session.refresh_from_db()
    assert session.state == "active"
    assert not Message.objects.filter(session=session, metadata__notice__startswith="compact").exists()

    tenant_resume(tenant=world.tenant_a)
    sweep(restart=True)
    drain()
    session.refresh_from_db()
    assert session.state == "archived"
    assert Message.objects.filter(session=canonical(world), metadata__notice="compacted").exists()
    assert Memory.objects.filter(user=world.alice, type="fact").exists()


def test_a_text_message_and_a_voice_note_waiting_as_the_workspace_is_suspended_end_alike(
        client, world, model_server, drain):
    """Both were sent while the workspace was served and both wait at the suspension: the
    text for its turn, the voice note for its transcript. The text ended unanswered while
    the voice note was answered after resume, out of the blue (as a reply held back then is
    not sent: channels_app.sending). Now neither is answered, nothing is said while it is
    suspended, nor on resume; each shows as not answered, and /retry after resume answers
    both — the voice note heard then."""
    from qorven.agent.tasks import agent_turn

    world.qor_a.transcriber_model = "whisper-1"
    world.qor_a.save(update_fields=["transcriber_model"])
    session = canonical(world)
    text = message_append(session=session, role="user", content="What is on tomorrow?", channel="web",
                          sender_name="Alice", metadata={"trust": "owner"}, awaits_answer=True, notify=False).message
    note = message_append(session=session, role="user", content="[voice note]", channel="web", sender_name="Alice",
                          metadata={"voice": "pending", "trust": "owner"}, awaits_answer=True, notify=False).message
    Image.objects.create(tenant=world.tenant_a, message=note, mime_type="audio/ogg",
                         data=base64.b64encode(OGG).decode(), size=len(OGG))
    tenant_suspend(tenant=world.tenant_a)
    agent_turn.delay(world.tenant_a.pk, session.pk)
    voice_transcribe_task.delay(world.tenant_a.pk, note.pk)
    drain()
    sweep(restart=True)  # a sweep while it is suspended does not take them up either
    drain()
    tenant_resume(tenant=world.tenant_a)
    sweep(restart=True)
    drain()

    assert model_server.transcriptions == [] and model_server.requests == []
    for message in (text, note):
        message.refresh_from_db()
        assert (message.answer_state, message.answer_error) == ("failed", "the workspace is suspended")
    assert (note.content, note.metadata["voice"]) == ("[voice note]", "pending")
    assert not Message.objects.filter(session=session).exclude(role="user").exists()

    model_server.transcripts.append("Remind me to water the orchid tonight.")
    model_server.add(reply("A dentist appointment at 10."))
    model_server.add(reply("I'll remind you at 8 pm."))
    client.force_login(world.alice)
    assert client.post("/chat/api/acme/aria/messages", data='{"content": "/retry"}',
                       content_type="application/json").status_code in (200, 201)
    drain()
    note.refresh_from_db()
    assert (note.content, note.metadata["voice"]) == ("Remind me to water the orchid tonight.", "transcript")
    replies = Message.objects.filter(session=session, role="assistant").exclude(metadata__has_key="command")
    assert sorted(m.content for m in replies) == ["A dentist appointment at 10.", "I'll remind you at 8 pm."]
    assert {m.metadata["reply_to"] for m in replies} == {text.seq, note.seq}


def test_a_voice_calls_digest_queued_before_the_suspension_is_made_after_resume(world, model_server, drain):
    summarizing(model_server)
    tenant_suspend(tenant=world.tenant_a)
    call = voice_transcript_store(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, call_id="call-1",
                                  turns=[SpokenTurn("Alice", "Book the dentist for Friday."),
                                         SpokenTurn("Aria", "Booked.", qor=True)])
    drain()

    assert model_server.requests == []
    assert Session.objects.get(pk=call.session.pk).state == "active"

    tenant_resume(tenant=world.tenant_a)
    drain()
    assert Session.objects.get(pk=call.session.pk).state == "archived"
    assert Memory.objects.filter(user=world.alice, type="conversation_digest").exists()
