"""sessions_app 0021: the tool rounds of messages that failed before the version that marks
them are marked too, and so left out of later prompts with their message."""
from __future__ import annotations

import pytest

from sessions_app.context_reads import context_read
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("sessions_app", "0020_message_search_arabic_hebrew")]


def test_the_rounds_of_a_message_failed_before_the_upgrade_leave_later_prompts(world, schema):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    schema.to(BEFORE)
    failed = message_append(session=session, role="user", content="what time is it?", channel="web",
                            awaits_answer=True).message
    call = {"id": "call_0", "type": "function", "function": {"name": "current_time", "arguments": "{}"}}
    message_append(session=session, role="assistant", content="", channel="web", tool_calls=[call],
                   metadata={"reply_to": failed.seq})
    message_append(session=session, role="tool", content="{}", channel="web", tool_call_id="call_0",
                   metadata={"reply_to": failed.seq, "tool": "current_time"})
    message_append(session=session, role="system", content="The model isn't answering right now.", channel="web",
                   metadata={"notice": "unreachable", "reply_to": failed.seq})
    # Failed as the version before marked it: the message alone.
    Message.objects.filter(pk=failed.pk).update(answer_state="failed")
    hello = message_append(session=session, role="user", content="hello", channel="web", awaits_answer=True).message
    schema.latest()

    session = Session.objects.get(pk=session.pk)
    read = context_read(session=session, floor_seq=0, answering_seq=hello.seq)
    assert [m.content for m in read] == ["hello"]
    marked = Message.objects.filter(session=session, metadata__has_key="failed_round")
    assert sorted(marked.values_list("role", flat=True)) == ["assistant", "tool"]


# (seq, role, metadata, answer_state) of one conversation, as versions before 0021 stored it.
CRAFTED = [
    (1, "user", {}, "failed"),
    (2, "assistant", {"reply_to": 1}, None),  # its tool call: marked
    (3, "tool", {"reply_to": 1, "tool": "current_time"}, None),  # its result: marked, keys kept
    (4, "system", {"notice": "unreachable", "reply_to": 1}, None),
    (5, "assistant", {"notice": "busy", "reply_to": 1}, None),
    (6, "tool", {"reply_to": 1, "superseded": True}, None),
    (7, "assistant", {"reply_to": 1, "failed_round": "already"}, None),
    (8, "user", {}, "answered"),
    (9, "assistant", {"reply_to": 8}, None),
    (10, "tool", {"reply_to": 11}, None),  # names a failed message said after it
    (11, "user", {"reply_to": 1}, "failed"),  # a person's message is never a round
    (12, "assistant", {"reply_to": 11}, None),  # marked
    (13, "tool", {"reply_to": 1}, None),  # the first failure's, later: marked
    (14, "assistant", {"reply_to": "11"}, None),  # not the number 11
    (15, "user", {"reply_to": 11}, None),
    (16, "tool", {"reply_to": 8}, None),
]
MARKED = {2, 3, 12, 13}


def test_the_migration_marks_exactly_the_rounds_of_failed_messages_and_touches_no_other_row(world, schema):
    schema.to(BEFORE)
    acme = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    globex = session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=world.charlie)
    # Another conversation: its rows name seqs that failed in acme's, not in its own.
    other = [(1, "user", {}, "answered"), (2, "assistant", {"reply_to": 1}, None),
             (3, "tool", {"reply_to": 11}, None), (12, "assistant", {"reply_to": 11}, None)]
    for session, rows in ((acme, CRAFTED), (globex, other)):
        Message.objects.bulk_create(
            Message(tenant_id=session.tenant_id, session=session, seq=seq, role=role, content=f"row {seq}",
                    channel="web", metadata=metadata, answer_state=state)
            for seq, role, metadata, state in rows)
    before = {(m.session_id, m.seq): (m.metadata, m.revision) for m in Message.objects.all()}
    schema.latest()

    after = {(m.session_id, m.seq): (m.metadata, m.revision) for m in Message.objects.all()}
    expected = dict(before)
    for seq in MARKED:
        metadata, revision = before[(acme.pk, seq)]
        expected[(acme.pk, seq)] = ({**metadata, "failed_round": True}, (revision or 0) + 1)
    assert after == expected
