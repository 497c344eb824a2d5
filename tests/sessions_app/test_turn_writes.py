"""A turn's own writes: the lease it lets go only when nothing is left to answer, and the
answered marks stored with its reply only while the lease is still its own."""
from __future__ import annotations

import pytest
from django.db import transaction

from sessions_app.errors import LeaseLost, SenderLeft, SessionClosed
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from sessions_app.turn_writes import reply_store, turn_answer_record, turn_lease_acquire, turn_lease_end

LEASE = 300


def canonical(world):
    return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)


def ask(session, text, **metadata):
    return message_append(session=session, role="user", content=text, channel="web", awaits_answer=True,
                          notify=False, metadata=metadata).message


def holder(session):
    return Session.objects.values_list("turn_owner", flat=True).get(pk=session.pk)


def end(session, owner="turn-1"):
    return turn_lease_end(tenant_id=session.tenant_id, session_id=session.pk, owner=owner)


def test_the_lease_is_let_go_only_when_nothing_waits_for_an_answer(world):
    session = canonical(world)
    question = ask(session, "first")
    assert turn_lease_acquire(session_id=session.pk, owner="turn-1", seconds=LEASE)

    assert end(session) is False  # "first" still waits: the turn goes on and answers it
    assert holder(session) == "turn-1"

    turn_answer_record(message=question, owner="turn-1")
    assert end(session) is True
    assert holder(session) == ""


def test_a_message_stored_before_the_end_keeps_the_session_held(world):
    session = canonical(world)
    question = ask(session, "first")
    assert turn_lease_acquire(session_id=session.pk, owner="turn-1", seconds=LEASE)
    turn_answer_record(message=question, owner="turn-1")
    ask(session, "and one more")  # arrives while the turn is answering "first"

    assert end(session) is False
    assert holder(session) == "turn-1"


def test_a_voice_note_still_being_transcribed_does_not_keep_the_session_held(world):
    session = canonical(world)
    ask(session, "(voice note)", voice="pending")
    assert turn_lease_acquire(session_id=session.pk, owner="turn-1", seconds=LEASE)

    assert end(session) is True


def test_another_turns_lease_or_a_rotated_session_is_not_let_go(world):
    session = canonical(world)
    assert turn_lease_acquire(session_id=session.pk, owner="turn-2", seconds=LEASE)
    assert end(session, owner="turn-1") is False
    assert holder(session) == "turn-2"

    Session.objects.filter(pk=session.pk).update(state=Session.State.ARCHIVED)
    assert end(session, owner="turn-2") is False  # the turn follows the session's successor
    assert holder(session) == "turn-2"


def test_another_tenants_session_is_not_let_go(world):
    session = canonical(world)
    assert turn_lease_acquire(session_id=session.pk, owner="turn-1", seconds=LEASE)
    assert turn_lease_end(tenant_id=world.tenant_b.pk, session_id=session.pk, owner="turn-1") is False
    assert holder(session) == "turn-1"


def test_an_answer_is_recorded_with_the_lease_and_the_progress_never_moves_back(world):
    session = canonical(world)
    first, second = ask(session, "first"), ask(session, "second")
    assert turn_lease_acquire(session_id=session.pk, owner="turn-1", seconds=LEASE)

    turn_answer_record(message=second, owner="turn-1")
    turn_answer_record(message=first, owner="turn-1")

    session.refresh_from_db()
    assert session.replied_through_seq == second.seq
    assert session.turn_lease_until is not None
    states = dict(Message.objects.filter(session=session).values_list("seq", "answer_state"))
    assert states == {first.seq: Message.Answer.ANSWERED, second.seq: Message.Answer.ANSWERED}
    assert first.answer_state == Message.Answer.ANSWERED


@pytest.mark.django_db(transaction=True)
def test_a_turn_that_lost_its_lease_records_nothing(world):
    session = canonical(world)
    question = ask(session, "first")
    assert turn_lease_acquire(session_id=session.pk, owner="turn-2", seconds=LEASE)  # took it from turn-1

    with pytest.raises(LeaseLost), transaction.atomic():
        turn_answer_record(message=question, owner="turn-1")

    session.refresh_from_db()
    question.refresh_from_db()
    assert question.answer_state == Message.Answer.PENDING
    assert session.replied_through_seq == 0


def reply(session, question, owner="turn-1", text="Here you are.", member=False):
    return reply_store(session=session, answers=question, owner=owner, content=text, channel="web",
                       sender_name="Aria", metadata={"reply_to": question.seq}, member=member)


@pytest.mark.django_db(transaction=True)  # committed as a turn commits it
def test_a_reply_is_stored_with_the_lease_confirmed_and_its_question_answered(world):
    session = canonical(world)
    question = ask(session, "first")
    assert turn_lease_acquire(session_id=session.pk, owner="turn-1", seconds=LEASE)

    answer = reply(session, question)

    assert (answer.seq, answer.role, answer.content) == (question.seq + 1, "assistant", "Here you are.")
    stored = Message.objects.get(pk=answer.pk)
    assert (stored.seq, stored.content, stored.metadata) == (answer.seq, "Here you are.", {"reply_to": question.seq})
    question.refresh_from_db()
    session.refresh_from_db()
    assert question.answer_state == Message.Answer.ANSWERED
    assert (session.replied_through_seq, session.last_seq, session.turn_owner) == (question.seq, answer.seq, "turn-1")


@pytest.mark.django_db(transaction=True)
def test_a_turn_that_lost_its_lease_stores_no_reply(world):
    session = canonical(world)
    question = ask(session, "first")
    assert turn_lease_acquire(session_id=session.pk, owner="turn-2", seconds=LEASE)

    with pytest.raises(LeaseLost):
        reply(session, question, owner="turn-1")

    question.refresh_from_db()
    session.refresh_from_db()
    assert list(Message.objects.filter(session=session).values_list("role", flat=True)) == ["user"]
    assert question.answer_state == Message.Answer.PENDING
    assert (session.replied_through_seq, session.last_seq) == (0, question.seq)


@pytest.mark.django_db(transaction=True)
def test_a_reply_to_a_person_removed_meanwhile_is_not_stored(world):
    from tenancy.models import Membership

    session = canonical(world)
    question = ask(session, "first")
    assert turn_lease_acquire(session_id=session.pk, owner="turn-1", seconds=LEASE)
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete()

    with pytest.raises(SenderLeft):
        reply(session, question, member=True)

    question.refresh_from_db()
    session.refresh_from_db()
    assert list(Message.objects.filter(session=session).values_list("role", flat=True)) == ["user"]
    assert question.answer_state == Message.Answer.PENDING  # the turn marks it failed (qorven.agent.turn_endings)
    assert (session.replied_through_seq, session.turn_owner) == (0, "turn-1")
    # A turn that lost its lease as well hears that first: the message is the other turn's to settle.
    Session.objects.filter(pk=session.pk).update(turn_owner="turn-2")  # taken over after a stall
    with pytest.raises(LeaseLost):
        reply(session, question, member=True)


@pytest.mark.django_db(transaction=True)
def test_a_reply_to_a_session_archived_meanwhile_is_not_stored(world):
    session = canonical(world)
    question = ask(session, "first")
    assert turn_lease_acquire(session_id=session.pk, owner="turn-1", seconds=LEASE)
    Session.objects.filter(pk=session.pk).update(state=Session.State.ARCHIVED)

    with pytest.raises(SessionClosed):
        reply(session, question)

    question.refresh_from_db()
    assert Message.objects.filter(session=session).count() == 1
    assert question.answer_state == Message.Answer.PENDING


def test_a_lease_let_go_while_the_keeper_renews_it_is_not_reported_lost(world, caplog):
    """The keeper copies the leases it holds, then renews them: a turn that lets go of its
    lease in between is not reported as having lost it; a lease another turn took is."""
    from sessions_app.leases import _keeper, lease_kept

    session, other = canonical(world), session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web",
                                                       user=world.charlie)
    assert turn_lease_acquire(session_id=session.pk, owner="turn-1", seconds=LEASE)
    assert turn_lease_acquire(session_id=other.pk, owner="turn-2", seconds=LEASE)
    with lease_kept(session_id=session.pk, owner="turn-1") as kept, lease_kept(session_id=other.pk, owner="turn-2"):
        held = _keeper.held()
        kept.letting_go()
        assert end(session) is True  # nothing waits: let go
        Session.objects.filter(pk=other.pk).update(turn_owner="turn-3")  # taken over after a stall
        with caplog.at_level("WARNING", logger="sessions_app.leases"):
            _keeper.renew(held)
    assert [r.getMessage() for r in caplog.records] == [
        f"the lease turn-2 on session {other.pk} ran out before it was renewed"]
