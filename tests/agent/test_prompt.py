"""The prompt's window: what it holds, and what reading it costs."""
from __future__ import annotations

import pytest

from qorven.agent.prompt import PromptParts, message_tokens, prompt_build, window_hints_clear
from sessions_app.models import Message
from sessions_app.selectors import messages_read
from sessions_app.services import message_append, session_resolve

pytestmark = pytest.mark.django_db(transaction=True)

FILLER = "Tell me about the harbour, item {i}: its tides, boats, nets and the old market beside it."


def test_a_session_s_next_full_window_is_read_at_once_and_is_the_window_a_fresh_read_gives(
    world, django_assert_num_queries
):
    """A full window of ~250 of 700 messages takes reads of 64, 128 and 256 rows; a turn
    later (two messages more) the same session's window takes one read of about its size,
    and holds exactly the messages reading from scratch picks."""
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    for i in range(350):
        message_append(session=session, role="user", content=FILLER.format(i=i), channel="web")
        message_append(session=session, role="assistant", content=f"About item {i}.", channel="web")
    parts = PromptParts(system_prompt="Be brief.")
    budget = sum(message_tokens(m) for m in messages_read(session=session, limit=250)) + 200

    def turn(text: str, reads: int):
        pending = message_append(session=session, role="user", content=text, channel="web",
                                 awaits_answer=True).message
        session.refresh_from_db()
        with django_assert_num_queries(reads):
            prompt = prompt_build(session=session, parts=parts, tools=[], current=pending, num_ctx=budget, reserve=0)
        assert prompt.history_tokens is None  # full
        window_hints_clear()  # what reading from scratch picks (and a hint again for the next turn)
        fresh = prompt_build(session=session, parts=parts, tools=[], current=pending, num_ctx=budget, reserve=0)
        assert [m.seq for m in prompt.window] == [m.seq for m in fresh.window]
        assert prompt.messages == fresh.messages
        message_append(session=session, role="assistant", content="Hourly.", channel="web",
                       metadata={"reply_to": pending.seq})
        Message.objects.filter(pk=pending.pk).update(answer_state=Message.Answer.ANSWERED)
        return prompt

    turn("And the ferries?", reads=3)
    prompt = turn("And the lighthouse?", reads=1)
    assert 240 <= len(prompt.window) <= 270
