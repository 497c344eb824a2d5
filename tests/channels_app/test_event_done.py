"""An inbound event is marked done by the statement that stores its message (on PostgreSQL:
channels_app.event_done), and only when that statement really stores it."""
from __future__ import annotations

import pytest

from channels_app.event_done import event_done_riding, event_result_if_stored
from channels_app.inbound import InboundMessage
from channels_app.models import InboundEvent
from sessions_app.errors import SessionClosed
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.lifecycle import session_rotate
from sessions_app.services.resolve import session_resolve

from ..fakes.model_server import reply
from .conftest import pair

pytestmark = pytest.mark.django_db(transaction=True)


def _claimed_event(world, telegram, n: int, text: str) -> InboundEvent:
    """An event as a webhook stores it, claimed by a task (processing)."""
    message = InboundMessage(channel="telegram", external_id=f"42:{n}", sender_id="42", sender_name="Alice",
                             text=text, reply_target="42")
    return InboundEvent.objects.create(tenant=world.tenant_a, binding=telegram, external_id=message.external_id,
                                       sender_id="42", payload=message.model_dump(mode="json"),
                                       state=InboundEvent.State.PROCESSING)


def test_an_event_whose_chat_was_rotated_under_its_append_is_taken_again_after_a_crash(
    world, telegram, platform, model_server
):
    """The append that finds the chat rotated (/clear meanwhile) stores nothing, so the event
    is not marked done with it: a worker dying right there leaves the event claimed, and
    the task that takes it again stores and answers the message in the new chat."""
    from channels_app.tasks import inbound_process_task

    pair(world, "telegram", "42", world.alice)
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    session_rotate(session=chat)  # the chat resolved by the rules is archived before the append
    event = _claimed_event(world, telegram, 1, "what is up?")
    scope = f"telegram:{telegram.pk}"
    with event_done_riding(tenant_id=world.tenant_a.pk, event_id=event.pk), pytest.raises(SessionClosed):
        event_result_if_stored("accepted", external_scope=scope, external_id="42:1")
        message_append(session=chat, role=Message.Role.USER, content="what is up?", channel="telegram",
                       sender_name="Alice", external_scope=scope, external_id="42:1", awaits_answer=True)
    # The worker died here, before appending to the successor.
    event.refresh_from_db()
    assert (event.state, event.payload["text"]) == (InboundEvent.State.PROCESSING, "what is up?")

    model_server.add(reply("Not much."))
    assert inbound_process_task.apply(args=(world.tenant_a.pk, event.pk), kwargs={"reclaim": event.pk}
                                      ).result == "accepted"
    event.refresh_from_db()
    assert (event.state, event.result, event.payload) == (InboundEvent.State.DONE, "accepted", {})
    active = Session.objects.get(tenant=world.tenant_a, user=world.alice, state=Session.State.ACTIVE)
    assert list(active.messages.order_by("seq").values_list("role", "content")) == [
        ("user", "what is up?"), ("assistant", "Not much.")]
    assert [sent.json["text"] for sent in platform.sent(r"/telegram/bot111:AAA/sendMessage")] == ["Not much."]


def test_an_event_whose_message_was_stored_before_is_done_as_a_duplicate(world, telegram, model_server):
    """The unique index refuses the append of a message stored before, and with it the
    event's done: the event is still done, as a duplicate, and nothing is answered twice."""
    from channels_app.tasks import inbound_process_task

    pair(world, "telegram", "42", world.alice)
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    message_append(session=chat, role=Message.Role.USER, content="what is up?", channel="telegram",
                   sender_name="Alice", external_scope=f"telegram:{telegram.pk}", external_id="42:1", notify=False)
    event = _claimed_event(world, telegram, 1, "what is up?")
    event.state = InboundEvent.State.PENDING
    event.save(update_fields=["state"])
    assert inbound_process_task.apply(args=(world.tenant_a.pk, event.pk)).result == "duplicate"
    event.refresh_from_db()
    assert (event.state, event.result, event.payload) == (InboundEvent.State.DONE, "duplicate", {})
    assert chat.messages.count() == 1
    assert model_server.requests == []


def test_a_group_s_chatter_is_done_with_its_result(world, telegram, model_server):
    """A group message kept for context: the event's result is written with the message."""
    from channels_app.tasks import inbound_process_task

    message = InboundMessage(channel="telegram", external_id="-1009:1", sender_id="77", sender_name="Carol",
                             text="chatter", reply_target="-1009", group=True, thread_id="-1009",
                             addressed=False)
    event = InboundEvent.objects.create(tenant=world.tenant_a, binding=telegram, external_id=message.external_id,
                                        sender_id="77", payload=message.model_dump(mode="json"))
    assert inbound_process_task.apply(args=(world.tenant_a.pk, event.pk)).result == "group-context"
    event.refresh_from_db()
    assert (event.state, event.result, event.payload) == (InboundEvent.State.DONE, "group-context", {})
    group = Session.objects.get(tenant=world.tenant_a, kind=Session.Kind.GROUP)
    assert list(group.messages.values_list("content", flat=True)) == ["chatter"]
    assert model_server.requests == []
