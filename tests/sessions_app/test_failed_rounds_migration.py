"""sessions_app 0021: the tool rounds of messages that failed before the version that marks
them are marked too, and so left out of later prompts with their message."""
from __future__ import annotations

import pytest

from sessions_app.context_reads import context_read
from sessions_app.models import Message, Session
from sessions_app.services import message_append, session_resolve

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
