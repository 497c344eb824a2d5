"""What a collapse does to what the model is sent: a merged legacy chat whose summarizer had
condensed its older messages (their summary in its compaction note, SPEC §4) reaches the
first turn after the collapse as a summary, not as those messages again, and the summary is
not lost."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from legacy_app.collapse import collapse_sessions
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.trust import Trust

from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
GARDEN = "On Telegram Alice planned her garden: tomatoes along the fence, basil by the door."
DENTIST = "On the page Alice booked the dentist for the 14th."


def say(session: Session, minute: int, content: str, *, role: str = "user") -> Message:
    return message_append(session=session, role=role, content=content, channel=session.channel or "web",
                          created_at=T0 + timedelta(minutes=minute), notify=False).message


def condensed(session: Session, *, through_seq: int, note: str) -> None:
    """What the session's auto summarizer leaves behind (memory_app.compaction)."""
    Session.objects.filter(pk=session.pk).update(compacted_through_seq=through_seq, compaction_note=note,
                                                 replied_through_seq=session.messages.count())


def legacy_telegram(world, settings) -> Session:
    settings.QORVEN_LEGACY_SESSIONS = True
    try:
        return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice,
                               sender_id="telegram-alice")
    finally:
        settings.QORVEN_LEGACY_SESSIONS = False


def first_turn_after_collapse(world, model_server, drain) -> tuple[str, list[str]]:
    (outcome,) = list(collapse_sessions())
    assert outcome.applied
    chat = Session.objects.get(pk=outcome.canonical_id)
    model_server.add(reply("Noted."))
    inbound_accept(session=chat, content="what did we plan?", channel="web", sender_name="Alice",
                   trust=Trust.OWNER)
    drain()
    system, *history = model_server.requests[0]["messages"]
    return system["content"], [m["content"] for m in history]


def test_a_merged_legacy_chats_condensed_messages_reach_the_next_turn_as_its_summary(world, settings,
                                                                                    model_server, drain):
    """The legacy chat's summary was lost from the prompt and the messages it held were
    sent to the model as they were, as if never condensed."""
    telegram = legacy_telegram(world, settings)
    for n in range(6):
        say(telegram, n, f"garden detail {n}", role="user" if n % 2 == 0 else "assistant")
    say(telegram, 6, "and the shed?")
    say(telegram, 7, "Blue, you said.", role="assistant")
    condensed(telegram, through_seq=6, note=GARDEN)  # details 0-5 condensed, the shed not yet
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    say(chat, 20, "hello from the page")
    say(chat, 21, "Hello!", role="assistant")

    system, history = first_turn_after_collapse(world, model_server, drain)

    assert GARDEN in system
    assert not [line for line in history if "garden detail" in line]
    assert [line.rsplit(": ", 1)[-1] for line in history] == [
        "and the shed?", "Blue, you said.", "hello from the page", "Hello!", "what did we plan?"]


def test_both_chats_summaries_reach_the_next_turn_and_nothing_left_uncondensed_is_dropped(world, settings,
                                                                                         model_server, drain):
    """Both chats had condensed their oldest exchange: the page's summary stayed and
    Telegram's was lost, its condensed messages sent again as they were. The messages up
    to the first one no summary holds are left out; from it on, all are sent."""
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    say(chat, 0, "dentist details")
    say(chat, 1, "Booked.", role="assistant")
    say(chat, 30, "anything else?")
    say(chat, 31, "All set.", role="assistant")
    condensed(chat, through_seq=2, note=DENTIST)
    telegram = legacy_telegram(world, settings)
    say(telegram, 10, "garden detail")
    say(telegram, 11, "Tomatoes then.", role="assistant")
    say(telegram, 12, "shed colour?")
    say(telegram, 13, "Blue.", role="assistant")
    condensed(telegram, through_seq=2, note=GARDEN)

    system, history = first_turn_after_collapse(world, model_server, drain)

    assert DENTIST in system and GARDEN in system
    assert [line.rsplit(": ", 1)[-1] for line in history] == [
        "shed colour?", "Blue.", "anything else?", "All set.", "what did we plan?"]


def test_the_summary_a_legacy_chat_was_started_with_reaches_the_next_turn(world, settings, model_server, drain):
    """A legacy chat rotated by /compact starts from its predecessor's summary (its seed):
    that chat stays archived and is not merged, so the seed was the only place the model
    could read it from, and the collapse dropped it."""
    telegram = legacy_telegram(world, settings)
    Session.objects.filter(pk=telegram.pk).update(seed_summary=GARDEN)
    say(telegram, 0, "and the shed?")
    say(telegram, 1, "Blue, you said.", role="assistant")
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    say(chat, 20, "hello from the page")

    system, history = first_turn_after_collapse(world, model_server, drain)

    assert GARDEN in system
    assert [line.rsplit(": ", 1)[-1] for line in history] == [
        "and the shed?", "Blue, you said.", "hello from the page", "what did we plan?"]
