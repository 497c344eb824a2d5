"""A message a compaction carried into the fresh conversation is answered there: its
original, kept in the archived conversation, no longer waits for an answer."""
from __future__ import annotations

import pytest

from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services.append import message_append
from sessions_app.services.lifecycle import session_rotate
from sessions_app.services.resolve import session_resolve
from tenancy.trust import Trust

from ..fakes.summarizer import FakeModel

pytestmark = pytest.mark.django_db(transaction=True)


def canonical(world):
    return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)


def send(world, text):
    return inbound_accept(session=canonical(world), content=text, channel="web", sender_name="Alice",
                          trust=Trust.OWNER).message


def test_a_carried_originals_archive_shows_it_as_no_longer_waiting_once_its_copy_is_answered(
    client, world, model_server, drain
):
    """The original stayed `pending` in the archive for good: the earlier conversation
    showed a question waiting that had its answer in the next one, and it counted among
    the messages waiting for an answer (the unanswered metric) forever."""
    model_server.default = FakeModel()
    send(world, "remember my dentist is Dr Okafor")
    drain()
    old = canonical(world)
    send(world, "/compact")
    question = send(world, "what's next?")
    drain()

    new = canonical(world)
    assert new.pk != old.pk
    copy = Message.objects.get(session=new, content="what's next?")
    assert copy.answer_state == Message.Answer.ANSWERED
    original = Message.objects.get(pk=question.pk)
    assert original.metadata["carried_to"] == {"session": new.pk, "seq": copy.seq}
    assert original.answer_state is None
    assert not Message.objects.filter(answer_state=Message.Answer.PENDING).exists()

    client.force_login(world.alice)
    shown = client.get("/chat/api/acme/aria/messages", {"session": old.pk}).json()["messages"]
    (carried,) = [m for m in shown if m.get("content") == "what's next?"]
    assert carried["answer_state"] is None


def test_an_original_carried_before_this_version_stops_waiting_with_the_migration(world, schema):
    old = canonical(world)
    message_append(session=old, role="user", content="still there?", channel="web", awaits_answer=True, notify=False)
    new = session_rotate(session=old, carry_unanswered=True).session
    # As a rotation before this version left it.
    Message.objects.filter(session=old, seq=1).update(answer_state=Message.Answer.PENDING, answer_attempts=0)

    schema.to([("sessions_app", "0013_moved_thread")])
    schema.latest()

    assert Message.objects.get(session=old, seq=1).answer_state is None
    assert Message.objects.get(session=new, seq=1).answer_state == Message.Answer.PENDING
