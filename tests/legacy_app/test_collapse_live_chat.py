"""collapse-sessions beside a chat in use: the canonical chat's own questions still waiting
for an answer stay questions, and a reply being written keeps the collapse away."""
from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from legacy_app.collapse import collapse_sessions
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.trust import Trust

from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


def at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def chat_of(world) -> Session:
    return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)


def telegram_of(world, settings) -> Session:
    """Alice's legacy Telegram chat, left from a per-channel install."""
    settings.QORVEN_LEGACY_SESSIONS = True
    try:
        return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice,
                               sender_id="telegram-alice")
    finally:
        settings.QORVEN_LEGACY_SESSIONS = False


def say(session: Session, minute: int, content: str, *, role: str = "user", channel: str = "", **extra) -> Message:
    return message_append(session=session, role=role, content=content, channel=channel or session.channel or "web",
                          created_at=at(minute), notify=False, **extra).message


class HeldModel:
    """Answers the first call only once `release` is set (`arrived` says the turn is
    waiting on it), with `answer` every time."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.arrived, self.release = threading.Event(), threading.Event()
        self.calls = 0

    def __call__(self, body):
        self.calls += 1
        if self.calls == 1:
            self.arrived.set()
            assert self.release.wait(30), "the test never let the model answer"
        return self.answer


def test_the_chats_own_waiting_question_stays_waiting_and_is_answered_after_the_collapse(
    world, settings, model_server, drain
):
    """The collapse marked every waiting message of the canonical chat answered: a question
    Alice had just asked on the page was never answered."""
    model_server.default = reply("Dentist at ten.")
    chat = chat_of(world)
    telegram = telegram_of(world, settings)
    say(telegram, 0, "morning from the train")
    say(telegram, 1, "morning!", role="assistant")
    say(telegram, 5, "old telegram question", awaits_answer=True)  # merged history: not asked again
    question = say(chat, 10, "what's on today?", awaits_answer=True, sender_name="Alice",
                   metadata={"trust": Trust.OWNER})
    say(telegram, 12, "later on telegram")

    (outcome,) = list(collapse_sessions())
    assert outcome.applied and outcome.canonical_id == chat.pk
    question.refresh_from_db()
    chat.refresh_from_db()
    assert (question.session_id, question.seq, question.answer_state) == (chat.pk, 4, "pending")
    assert chat.replied_through_seq == 3  # just below it
    old = Message.objects.get(session=chat, content="old telegram question")
    assert old.answer_state == "answered"

    drain()  # the turn queued by the collapse: no sweeper runs here
    question.refresh_from_db()
    assert question.answer_state == "answered"
    (answer,) = Message.objects.filter(session=chat, role="assistant", content="Dentist at ten.")
    assert (answer.channel, answer.metadata["reply_to"]) == ("web", question.seq)
    assert len(model_server.requests) == 1  # the old telegram question was not answered


def test_a_chat_whose_reply_is_being_written_is_left_for_the_next_run(world, settings, model_server, drain):
    """The collapse renumbered the chat under a running turn, whose reply then pointed at
    another message (and its question was marked answered by the collapse)."""
    held = HeldModel(reply("It is sunny."))
    model_server.default = held
    chat = chat_of(world)
    telegram = telegram_of(world, settings)
    say(telegram, 0, "hello from telegram")
    question = inbound_accept(session=chat, content="weather?", channel="web", sender_name="Alice",
                              trust=Trust.OWNER).message
    assert held.arrived.wait(30), "the turn never called the model"

    (busy,) = list(collapse_sessions())
    assert not busy.applied and "run again" in busy.error
    telegram.refresh_from_db()
    assert telegram.state == "active"
    assert list(Message.objects.filter(session=chat).values_list("seq", "content")) == [(1, "weather?")]

    held.release.set()
    drain()
    (done,) = list(collapse_sessions())
    assert done.applied
    question.refresh_from_db()
    answer = Message.objects.get(session=chat, role="assistant")
    assert question.answer_state == "answered"
    assert [m.content for m in Message.objects.filter(session=chat).order_by("seq")] == [
        "hello from telegram", "weather?", "It is sunny."]
    assert answer.metadata["reply_to"] == question.seq == 2


def test_the_command_says_a_busy_chat_was_left_untouched_and_to_run_again(world, settings, model_server, drain):
    held = HeldModel(reply("It is sunny."))
    model_server.default = held
    chat = chat_of(world)
    say(telegram_of(world, settings), 0, "hello from telegram")
    inbound_accept(session=chat, content="weather?", channel="web", sender_name="Alice", trust=Trust.OWNER)
    assert held.arrived.wait(30), "the turn never called the model"
    out = StringIO()
    try:
        with pytest.raises(CommandError, match="left untouched"):
            call_command("collapse_sessions", stdout=out)
    finally:
        held.release.set()
        drain()
    printed = " ".join(out.getvalue().split())
    assert "acme/aria alice" in printed and "run again" in printed
    assert "users collapsed 0" in printed.replace("│", "").replace("  ", " ")
