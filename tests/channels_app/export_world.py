"""Alice's life in acme, beside bob's (acme too) and charlie's (globex): what the export
tests read, and what must never reach alice's export."""
from __future__ import annotations

import json

import pytest

from channels_app.data_export import PersonExport
from channels_app.models import Identity
from sessions_app.models import Image, Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from sessions_app.thread_moves import group_thread_move

from ..factories.heartbeats_app import beat
from ..factories.memory_app import remember


def records(text: str) -> list[dict]:
    # splitlines() also breaks on U+2028 and friends: a line holding one raw would show here
    return [json.loads(line) for line in text.splitlines()]


def of(lines: list[dict], kind: str) -> list[dict]:
    return [line for line in lines if line["kind"] == kind]


def say(session: Session, content: str, channel: str, *, role: str = "user", **extra) -> Message:
    return message_append(session=session, role=role, content=content, channel=channel, notify=False,
                          **extra).message


@pytest.fixture
def lives(world, telegram):
    """Alice's life in acme, beside bob's (acme too) and charlie's (globex)."""
    alice, bob, charlie = world.alice, world.bob, world.charlie
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=alice)
    say(chat, "Remind me to water the ferns", "web", sender_name="Alice")
    say(chat, "I will, on Sunday.", "web", role="assistant", sender_name="Aria")
    say(chat, "Sent from\u2028my phone", "telegram", sender_name="Alice",
        metadata={"binding": telegram.pk, "sender_id": "42", "reply_target": "42", "trust": "owner"})
    say(chat, "", "telegram", role="assistant", tool_calls=[{"id": "c1", "function": {"name": "memory_search"}}])
    say(chat, "ferns: Sundays", "telegram", role="tool", tool_call_id="c1")
    say(chat, "Watering is on Sundays.", "telegram", role="assistant", sender_name="Aria",
        metadata={"reply_to": 3, "model": "host-model-name", "route": "main"})
    mail = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="email", user=alice,
                           thread_id="thread-ferns")
    say(mail, "Fern invoice attached", "email", sender_name="Alice")
    group = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", thread_id="-100",
                            group=True)
    say(group, "bob in the group", "telegram", sender_name="Bob")
    # Upgraded to a supergroup: the move is the group's, everyone's in it, like its messages.
    group_thread_move(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", old_thread="-100",
                      new_thread="-1009100")
    bobs = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=bob)
    say(bobs, "bob's secret plan", "web", sender_name="Bob")
    charlies = session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=charlie)
    say(charlies, "charlie's globex note", "web", sender_name="Charlie")

    remember(world.tenant_a, world.qor_a, alice, "Alice waters ferns on Sundays", channels=["web", "telegram"])
    remember(world.tenant_a, world.qor_a, bob, "Bob hates ferns")
    remember(world.tenant_a, world.qor_a, None, "Aria speaks for acme")  # the Qor's, nobody's own
    remember(world.tenant_b, world.qor_b, charlie, "Charlie lives at globex")
    beat(world.qor_a, name="ferns", cron="0 9 * * 0", prompt="Remind Alice about the ferns", owner=alice,
         deliver_to=alice, deliver_channel="telegram", timezone="Europe/Berlin")
    beat(world.qor_a, name="bobs-beat", prompt="Bob's reminder", owner=bob)
    beat(world.qor_b, name="charlies-beat", prompt="Charlie's reminder", owner=charlie)
    for external_id, person in (("42", alice), ("43", bob)):
        Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id=external_id, user=person,
                                approval=Identity.Approval.APPROVED, display_name=person.first_name)
    return chat


def export_text(world, user=None, **kw) -> str:
    return "".join(PersonExport(tenant=world.tenant_a, user=user or world.alice, **kw).lines())


@pytest.fixture
def photo(world, lives):
    message = say(lives, "look at my fern", "web", sender_name="Alice",
                  metadata={"attachments": [{"type": "image", "mime_type": "image/png", "size": 5}]})
    Image.objects.create(tenant=world.tenant_a, message=message, mime_type="image/png", data="RkVSTlM=", size=6)
    return message
