"""The prompt's window: what it holds, and what reading it costs."""
from __future__ import annotations

import pytest
from django.db import connection

from qorven.agent.held_windows import held_windows_clear
from qorven.agent.prompt import PromptParts, message_tokens, prompt_build, window_hints_clear
from sessions_app.models import Message, Session
from sessions_app.selectors import messages_read
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

pytestmark = pytest.mark.django_db(transaction=True)

FILLER = "Tell me about the harbour, item {i}: its tides, boats, nets and the old market beside it."
PARTS = PromptParts(system_prompt="Be brief.")


@pytest.fixture
def long_chat(world):
    """A chat of `exchanges` answered exchanges, and the budget of a window of ~`window`
    of its newest messages."""

    def make(exchanges: int, window: int, trust: str = "owner") -> tuple[Session, int]:
        session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
        for i in range(exchanges):
            message_append(session=session, role="user", content=FILLER.format(i=i), channel="web",
                           metadata={"trust": trust})
            message_append(session=session, role="assistant", content=f"About item {i}.", channel="web",
                           metadata={"reply_to": 2 * i + 1})
        budget = sum(message_tokens(m) for m in messages_read(session=session, limit=window)) + 200
        return session, budget

    return make


def ask(session: Session, text: str) -> Message:
    pending = message_append(session=session, role="user", content=text, channel="web", awaits_answer=True).message
    session.refresh_from_db()
    return pending


def answer(session: Session, pending: Message) -> None:
    message_append(session=session, role="assistant", content="Hourly.", channel="web",
                   metadata={"reply_to": pending.seq})
    Message.objects.filter(pk=pending.pk).update(answer_state=Message.Answer.ANSWERED)


def build(session: Session, pending: Message, budget: int):
    return prompt_build(session=session, parts=PARTS, tools=[], current=pending, num_ctx=budget, reserve=0)


def afresh(session: Session, pending: Message, budget: int):
    """The prompt reading from scratch gives: nothing held, no read size remembered."""
    held_windows_clear()
    window_hints_clear()
    return build(session, pending, budget)


def test_a_session_s_full_window_read_again_is_read_at_once_and_is_the_window_a_fresh_read_gives(
    long_chat, django_assert_num_queries
):
    """A full window of ~250 of 700 messages takes reads of 64, 128 and 256 rows; when the
    session's next window cannot start from a held one, it takes one read of about its size."""
    session, budget = long_chat(350, 250)
    pending = ask(session, "And the ferries?")
    with django_assert_num_queries(3):
        first = build(session, pending, budget)
    assert first.history_tokens is None and 240 <= len(first.window) <= 270  # full
    answer(session, pending)
    pending = ask(session, "And the lighthouse?")
    held_windows_clear()
    with django_assert_num_queries(1):
        prompt = build(session, pending, budget)
    assert prompt.messages == afresh(session, pending, budget).messages


def test_a_session_s_next_window_reads_only_what_came_after_the_window_it_holds(long_chat, django_assert_num_queries):
    session, budget = long_chat(350, 250)
    pending = ask(session, "And the ferries?")
    build(session, pending, budget)
    answer(session, pending)
    pending = ask(session, "And the lighthouse?")
    with django_assert_num_queries(2) as captured:  # the messages after it, and the held ones' revisions
        prompt = build(session, pending, budget)
    assert all("content" not in q["sql"] for q in captured.captured_queries[1:])
    assert prompt.history_tokens is None
    assert [m.seq for m in prompt.window] == [m.seq for m in afresh(session, pending, budget).window]
    assert prompt.messages == afresh(session, pending, budget).messages
    assert prompt.window[-1].seq == pending.seq and prompt.window[-2].content == "Hourly."



def test_a_short_conversation_s_next_window_reads_nothing_older_than_the_window_it_holds(
    long_chat, django_assert_num_queries
):
    """A conversation the budget takes whole: its held window reaches the compaction point,
    so the next turn reads what came after it and checks the held ones from that point,
    and reads nothing older (a third read for older messages there are none of, before)."""
    session, budget = long_chat(5, 10)
    budget *= 4  # room for all of it, and more
    pending = ask(session, "And the ferries?")
    first = build(session, pending, budget)
    assert first.history_tokens is not None and len(first.window) == 11  # whole
    answer(session, pending)
    pending = ask(session, "And the lighthouse?")
    with django_assert_num_queries(2) as captured:  # the messages after it, and the held ones' revisions
        prompt = build(session, pending, budget)
    assert "content" not in captured.captured_queries[1]["sql"]
    fresh = afresh(session, pending, budget)
    assert [m.seq for m in prompt.window] == [m.seq for m in fresh.window] == list(range(1, 14))
    assert prompt.messages == fresh.messages
    assert (prompt.window_tokens, prompt.history_tokens) == (fresh.window_tokens, fresh.history_tokens)

def _update(session: Session, seq: int, **fields) -> None:
    Message.objects.filter(session=session, seq=seq).update(**fields)


CHANGES = {
    # A held message whose text changed (a transcript arrived, say), through the ORM or raw SQL.
    "text": lambda s, seq: _update(s, seq, content="A different question altogether, much longer than before."),
    "raw SQL": lambda s, seq: _raw(f"UPDATE sessions_app_message SET content = 'raw' WHERE session_id = {s.pk}"
                                   f" AND seq = {seq}"),
    # One that left what the model sees: written again, refused, made a notice.
    "superseded": lambda s, seq: _update(s, seq + 1, metadata={"superseded": True}),
    "failed": lambda s, seq: _update(s, seq, answer_state=Message.Answer.FAILED),
    "notice": lambda s, seq: _update(s, seq + 1, metadata={"notice": "x"}),
    # One that joined it (failed when the window was read, answered since), or was deleted.
    "joined": lambda s, seq: _update(s, seq, answer_state=Message.Answer.ANSWERED),
    "deleted": lambda s, seq: Message.objects.filter(session=s, seq=seq).delete(),
    # A compaction point reached into it.
    "compacted": lambda s, seq: Session.objects.filter(pk=s.pk).update(compacted_through_seq=seq),
    # Trust marks and tokens the prompt reads from metadata.
    "metadata": lambda s, seq: _update(s, seq, metadata={"trust": "public", "tokens": 900}),
}


def _raw(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_held_window_whose_messages_changed_is_read_again_and_the_prompt_is_what_a_fresh_read_gives(
    long_chat, change
):
    session, budget = long_chat(120, 100)
    target = 211  # a user message of the window, 30 from its newest end (users have odd seqs)
    if change == "joined":
        _update(session, target, answer_state=Message.Answer.FAILED)
    pending = ask(session, "And the ferries?")
    held = build(session, pending, budget)
    assert held.window[0].seq < target - 1
    answer(session, pending)
    CHANGES[change](session, target)
    pending = ask(session, "And the lighthouse?")
    prompt = build(session, pending, budget)
    fresh = afresh(session, pending, budget)
    assert prompt.messages == fresh.messages
    assert (prompt.window_tokens, prompt.history_tokens) == (fresh.window_tokens, fresh.history_tokens)
    assert [m.seq for m in prompt.window] != [m.seq for m in held.window[:-1]]  # it did move on



@pytest.mark.parametrize("change", list(CHANGES))
def test_a_whole_held_window_whose_oldest_messages_changed_is_read_again_as_a_fresh_read_gives(long_chat, change):
    """The held window of a conversation the budget took whole, checked from the compaction
    point: a change at its oldest end — a failed first message answered since (it joins
    what the model sees, older than any message held) among them — is read again."""
    session, budget = long_chat(5, 10)
    budget *= 4
    target = 1
    if change == "joined":
        _update(session, target, answer_state=Message.Answer.FAILED)
    pending = ask(session, "And the ferries?")
    held = build(session, pending, budget)
    assert held.history_tokens is not None  # whole
    answer(session, pending)
    CHANGES[change](session, target)
    pending = ask(session, "And the lighthouse?")
    prompt = build(session, pending, budget)
    fresh = afresh(session, pending, budget)
    assert [m.seq for m in prompt.window] == [m.seq for m in fresh.window]
    assert prompt.messages == fresh.messages
    assert (prompt.window_tokens, prompt.history_tokens) == (fresh.window_tokens, fresh.history_tokens)

def test_a_held_window_answering_a_message_of_another_trust_marks_its_lines_as_a_fresh_read_does(long_chat):
    """The same held messages read differently when the message answered carries more
    trust than they do ("lower trust"): what was made for one answer is not reused for
    the other."""
    session, budget = long_chat(120, 100, trust="paired")
    pending = ask(session, "And the ferries?")
    paired = prompt_build(session=session, parts=PARTS, tools=[], current=pending, num_ctx=budget, reserve=0,
                          trust="paired")
    assert "lower trust" not in str(paired.messages)
    answer(session, pending)
    pending = ask(session, "And the lighthouse?")
    owner = prompt_build(session=session, parts=PARTS, tools=[], current=pending, num_ctx=budget, reserve=0,
                         trust="owner")
    held_windows_clear()
    fresh = prompt_build(session=session, parts=PARTS, tools=[], current=pending, num_ctx=budget, reserve=0,
                         trust="owner")
    assert owner.messages == fresh.messages
    assert sum("[web · lower trust]" in m["content"] for m in owner.messages if m["role"] == "user") >= 40
